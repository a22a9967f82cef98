"""attn_core on a CUDA GPU against PyTorch's SDPA and Hugging Face: the table of issue 30.

``python -m benchmarks`` on a machine with CUDA runs this suite (``--suite gpu``), in one
process, bfloat16, every pair measured side by side:

- the attention core (``attn_core.attention``) vs SDPA, causal, at (8, 16, 1024, 64) and
  (4, 16, 4096, 128) (B, H, T, D);
- a sliding window of 512 at T = 4096 vs full causal SDPA: ``attention()`` as it is (on
  CUDA the Triton FlashAttention kernel, :mod:`attn_core.ops.backends`), FlexAttention's
  block mask (``use(flash="never")``) and the dense mask (both kernels ``"never"``);
- gpt-oss sinks vs causal SDPA: ``attention()`` as it is (the Triton kernel), FlexAttention +
  its log-sum-exp, and the explicit path;
- greedy decoding (batch 1 and 16, a 128-token prompt + 128 new tokens) of a ~0.85 B
  LLaMA-shaped model built from a ``transformers`` ``LlamaConfig`` with random weights (no
  download), converted with ``attn_core.hf.convert.from_hf``, vs Hugging Face's eager
  ``generate`` in the same process: our eager path, our static caches, the static caches
  with ``torch.compile`` (``generate(..., compile=True)``) and with CUDA graphs
  (``compile="reduce-overhead"``);
- a training step (forward + backward, bf16) of the same model vs Hugging Face's;
- the host's share of the attention rows (:func:`host_entries`): each call timed alone and
  20 back to back, the host's microseconds per call at a tiny shape, and the CUDA kernels
  that causal SDPA and ``attention()`` launch.

Each time is the median over rounds of CUDA-event timings after warm-up (warm-ups are
part of the run time); ``ratio`` is the median of per-round ratios ours / baseline, where
the two run one after the other in every round, with the 95% bootstrap interval of the
book's timing rule (:func:`attn_core.teach.measure.ratio_summary`). :func:`target_verdicts`
holds each ratio to issue 30's target: "met" when the whole interval is within it, "not
met" when the whole interval is beyond it, "within noise" otherwise. An entry that fails
is recorded with its error and the run goes on. Results:
``benchmarks/results/gpu-<device>-<time>.json`` and ``.md``. ``--quick`` shrinks every
size (a smoke test, not a measurement).

Shape legend:
    B, H, T, D   batch, heads, sequence length, head width
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import statistics
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

from attn_core.teach.measure import Timing, paired_ratios, ratio_summary

RESULTS = Path(__file__).resolve().parent / "results"
PIPELINED = 20  # calls back to back in host_entries' second timing
# Where the tensors and models go, and their dtype (a CPU test stands in with "cpu", float32)
DEVICE, DTYPE = "cuda", torch.bfloat16


# --------------------------------------------------------------------------- timing
def _cuda_seconds(fn) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3


def side_by_side(fns: dict, *, rounds: int, warmup: int = 1, baseline: str) -> dict:
    """Time every function of ``fns`` once per round, in turn; medians and per-round ratios to ``baseline``.

    Returns:
        ``{name: {"median_s", "ratio", "ratio_low", "ratio_high", "ci_low", "ci_high", "rounds"}}``:
        the ratio is the median over rounds of ``t_name / t_baseline``, ``ratio_low``/``ratio_high``
        the smallest and largest round's, ``ci_low``/``ci_high`` the 95% bootstrap interval on the
        median (:func:`attn_core.teach.measure.ratio_summary`, the rule of the book's timed chapters).
    """
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    torch.cuda.synchronize()
    times = {name: Timing(name) for name in fns}
    for r in range(rounds):
        order = list(fns) if r % 2 == 0 else list(reversed(fns))  # no name always first
        for name in order:
            times[name].seconds.append(_cuda_seconds(fns[name]))
    out = {}
    for name, timing in times.items():
        ratios = paired_ratios(timing, times[baseline])
        summary = ratio_summary(timing, times[baseline])
        out[name] = {
            "median_s": timing.median,
            "ratio": summary.median,
            "ratio_low": min(ratios),
            "ratio_high": max(ratios),
            "ci_low": summary.ci_low,
            "ci_high": summary.ci_high,
            "rounds": summary.rounds,
        }
    return out


# --------------------------------------------------------------------------- entries
def _qkv(B, H, T, D, H_kv=None, seed=0):
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    H_kv = H if H_kv is None else H_kv
    kw = dict(device=DEVICE, dtype=DTYPE, generator=g)
    return torch.randn(B, H, T, D, **kw), torch.randn(B, H_kv, T, D, **kw), torch.randn(B, H_kv, T, D, **kw)


def attention_entries(quick: bool) -> list[dict]:
    from attn_core.ops import backends
    from attn_core.ops.attention import attention

    # A call takes 0.1-12 ms: 100 rounds cost seconds and narrow the interval on each ratio
    # (30 rounds at (8, 16, 1024, 64) on an H200 gave per-round ratios from 0.86 to 1.24).
    rounds = 5 if quick else 100
    shapes = [(2, 4, 256, 64)] if quick else [(8, 16, 1024, 64), (4, 16, 4096, 128)]
    rows = []
    for B, H, T, D in shapes:
        q, k, v = _qkv(B, H, T, D)
        res = side_by_side(
            {
                "sdpa": lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                "attn_core": lambda q=q, k=k, v=v: attention(q, k, v, is_causal=True),
            },
            rounds=rounds,
            warmup=3,
            baseline="sdpa",
        )
        rows.append(_row("attention core vs SDPA (causal)", (B, H, T, D), "attn_core", "sdpa", res))
    B, H, T, D = (1, 4, 1024, 64) if quick else (2, 16, 4096, 128)
    window = 128 if quick else 512
    q, k, v = _qkv(B, H, T, D)
    sinks = torch.linspace(-1, 1, q.shape[1], device=q.device, dtype=q.dtype)  # (H,)

    def forced(flash: str, flex: str, **kw):
        """attention() with the kernels' modes set for this call (attn_core.ops.backends)."""

        def run():
            with backends.use(flash=flash, flex=flex):
                return attention(q, k, v, is_causal=True, **kw)

        return run

    fns = {
        "sdpa": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "window_auto": lambda: attention(q, k, v, is_causal=True, window=window),
        "window_flex": forced("never", "auto", window=window),
        "window_dense": forced("never", "never", window=window),
        "sinks_auto": lambda: attention(q, k, v, is_causal=True, sinks=sinks),
        "sinks_flex_lse": forced("never", "auto", sinks=sinks),
        "sinks_explicit": forced("never", "never", sinks=sinks),
    }
    res = side_by_side(fns, rounds=rounds, warmup=3, baseline="sdpa")
    for name, label in (
        ("window_auto", f"window {window} (attention(): Triton kernel) vs full causal SDPA"),
        ("window_flex", f"window {window} (FlexAttention block mask) vs full causal SDPA"),
        ("window_dense", f"window {window} (dense mask to SDPA) vs full causal SDPA"),
        ("sinks_auto", "sinks (attention(): Triton kernel) vs causal SDPA"),
        ("sinks_flex_lse", "sinks (FlexAttention + log-sum-exp) vs causal SDPA"),
        ("sinks_explicit", "sinks (explicit path) vs causal SDPA"),
    ):
        rows.append(_row(label, (B, H, T, D), name, "sdpa", res))
    return rows


def _per_call_us(fn, calls: int) -> float:
    """Microseconds per call of ``calls`` calls of ``fn`` between two CUDA events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / calls


def _host_us(fn, calls: int) -> float:
    """The host's microseconds per call (best of 5 batches): a tiny shape, so the GPU keeps up."""
    best = float("inf")
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    torch.cuda.synchronize()
    return best * 1e6


def _cuda_kernels(fn) -> list[str]:
    """The names of the CUDA kernels one call of ``fn`` runs (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sorted({e.name for e in prof.events() if str(e.device_type).endswith("CUDA")})


def host_entries(quick: bool) -> dict:
    """How much of a one-call timing is the host's: the calls of the attention rows three ways.

    Returns:
        ``{"pipelined", "host_per_call", "kernels"}``:

        * ``pipelined``: per call, one call per timing (the GPU waits for the host's work
          before the launch, as in :func:`side_by_side`) and ``PIPELINED`` calls back to
          back (the host runs ahead, so only the GPU's time is left); the two timings of
          every call alternate in each round, so drift hits them alike;
        * ``host_per_call``: the host's microseconds per call at a tiny shape;
        * ``kernels``: the CUDA kernels of causal SDPA and of ``attention()`` at the first
          core shape, so that a gap between the two can be told from a different kernel.
    """
    from attn_core.ops.attention import attention
    from attn_core.ops.backends.flash import flash_attention, flash_forward

    rounds = 3 if quick else 11
    big = (1, 4, 1024, 64) if quick else (2, 16, 4096, 128)
    window = 128 if quick else 512

    def calls(shape):
        q, k, v = _qkv(*shape)
        sinks = torch.linspace(-1, 1, q.shape[1], device=q.device, dtype=q.dtype)  # (H,)
        return {
            "sdpa causal": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
            "attention causal": lambda: attention(q, k, v, is_causal=True),
            "attention window": lambda: attention(q, k, v, is_causal=True, window=window),
            "flash_attention window": lambda: flash_attention(q, k, v, is_causal=True, window=window),
            "flash_forward window": lambda: flash_forward(q, k, v, is_causal=True, window=window),
            "attention sinks": lambda: attention(q, k, v, is_causal=True, sinks=sinks),
        }

    fns = calls(big)
    for fn in fns.values():  # warm-up: builds the kernels
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    one, many = {name: [] for name in fns}, {name: [] for name in fns}
    for r in range(rounds):
        for name in list(fns) if r % 2 == 0 else list(reversed(fns)):
            one[name].append(_per_call_us(fns[name], 1))
            many[name].append(_per_call_us(fns[name], PIPELINED))
    pipelined = [
        {
            "shape": str(big),
            "call": name,
            "one_call_us": statistics.median(one[name]),
            "twenty_calls_us": statistics.median(many[name]),
        }
        for name in fns
    ]
    tiny = (1, 1, 128, 64)
    host = [
        {"shape": str(tiny), "call": name, "host_us": _host_us(fn, 50 if quick else 400)}
        for name, fn in calls(tiny).items()
    ]
    core_shape = (2, 4, 256, 64) if quick else (8, 16, 1024, 64)
    q, k, v = _qkv(*core_shape)
    try:  # the profiler needs CUPTI: without it, the timings above are still kept
        kernels = {
            "shape": str(core_shape),
            "sdpa causal": _cuda_kernels(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)),
            "attention causal": _cuda_kernels(lambda: attention(q, k, v, is_causal=True)),
        }
    except Exception as exc:
        kernels = {"shape": str(core_shape), "error": f"{type(exc).__name__}: {exc}"}
    return {"pipelined": pipelined, "host_per_call": host, "kernels": kernels}


def _row(entry, shape, ours, baseline, res) -> dict:
    return {
        "entry": entry,
        "shape": str(tuple(shape)),
        "ours": ours,
        "baseline": baseline,
        "ours_ms": 1e3 * res[ours]["median_s"],
        "baseline_ms": 1e3 * res[baseline]["median_s"],
        "ratio": res[ours]["ratio"],
        "ratio_low": res[ours]["ratio_low"],
        "ratio_high": res[ours]["ratio_high"],
        "ci_low": res[ours]["ci_low"],
        "ci_high": res[ours]["ci_high"],
        "rounds": res[ours]["rounds"],
    }


def _llama(quick: bool):
    """A random-weight LLaMA-shaped Hugging Face model (~0.85 B parameters; tiny with ``quick``) and its conversion."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from attn_core.hf.convert import from_hf

    size = (
        dict(hidden_size=256, intermediate_size=704, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
        if quick
        else dict(
            hidden_size=2048,
            intermediate_size=5632,
            num_hidden_layers=16,
            num_attention_heads=32,
            num_key_value_heads=8,
        )
    )
    config = LlamaConfig(
        vocab_size=32000, max_position_embeddings=1024, tie_word_embeddings=False, attn_implementation="eager", **size
    )
    torch.manual_seed(0)
    with torch.device(DEVICE):
        hf = LlamaForCausalLM(config).to(DTYPE).eval()
    hf.generation_config.eos_token_id = None  # random weights: never stop early
    hf.generation_config.pad_token_id = 0
    ours = from_hf(hf).eval()
    params = sum(p.numel() for p in hf.parameters())
    return hf, ours, params


def decoding_entries(quick: bool, models) -> list[dict]:
    from attn_core.model.generation import generate

    hf, ours, params = models
    prompt, new = (16, 16) if quick else (128, 128)
    rows = []
    for B in (1, 16):
        idx = torch.randint(
            0, 32000, (B, prompt), device=DEVICE, generator=torch.Generator(device=DEVICE).manual_seed(B)
        )
        fns = {
            "hf_eager": lambda idx=idx: hf.generate(idx, max_new_tokens=new, min_new_tokens=new, do_sample=False),
            "ours_eager": lambda idx=idx: generate(ours, idx, new, temperature=0.0),
            "ours_static": lambda idx=idx: generate(ours, idx, new, temperature=0.0, static=True),
            "ours_static_compiled": lambda idx=idx: generate(ours, idx, new, temperature=0.0, compile=True),
            "ours_static_cudagraphs": lambda idx=idx: generate(
                ours, idx, new, temperature=0.0, compile="reduce-overhead"
            ),
        }
        # Compiling is slow once: warm each compiled path (two generations each: the step is
        # compiled once, then captured by CUDA graphs after its warm-up runs) before the rounds.
        # A path that fails is recorded with its error; the others are still measured.
        compile_s, errors = {}, {}
        for name in ("ours_static_compiled", "ours_static_cudagraphs"):
            t0 = time.perf_counter()
            try:
                for _ in range(2):
                    fns[name]()
            except Exception as exc:
                errors[name] = f"{type(exc).__name__}: {exc}"
                del fns[name]
            compile_s[name] = time.perf_counter() - t0
        with torch.no_grad():
            res = side_by_side(fns, rounds=2 if quick else 3, warmup=1, baseline="hf_eager")
            tokens = {name: fn()[:, prompt:] for name, fn in fns.items()}  # one more generation each
            same = bool(torch.equal(tokens["hf_eager"], tokens["ours_eager"]))
            same_as_eager = {name: bool(torch.equal(t, tokens["ours_eager"])) for name, t in tokens.items()}
        entry = f"greedy decoding B={B}, {prompt}+{new} tokens, {params / 1e9:.2f} B params"
        for name in ("ours_eager", "ours_static", "ours_static_compiled", "ours_static_cudagraphs", "hf_eager"):
            if name in errors:
                rows.append({"entry": f"{entry}: {name}", "error": errors[name]})
                continue
            row = _row(entry, (B, prompt + new), name, "hf_eager", res)
            row["tokens_per_s"] = B * new / res[name]["median_s"]
            row["speedup_vs_hf"] = 1.0 / res[name]["ratio"]
            row["same_tokens_as_hf"] = same
            row["same_tokens_as_ours_eager"] = same_as_eager[name]
            if name in compile_s:
                row["compile_warmup_s"] = compile_s[name]
            rows.append(row)
    return rows


def training_entries(quick: bool, models) -> list[dict]:
    hf, ours, params = models
    B, T = (2, 64) if quick else (4, 512)
    idx = torch.randint(0, 32000, (B, T), device=DEVICE, generator=torch.Generator(device=DEVICE).manual_seed(7))

    def hf_step():
        hf.zero_grad(set_to_none=True)
        hf(input_ids=idx, labels=idx).loss.backward()

    def our_step():
        ours.zero_grad(set_to_none=True)
        logits = ours(idx[:, :-1])  # (B, T - 1, V)
        F.cross_entropy(logits.flatten(0, 1).float(), idx[:, 1:].flatten()).backward()

    hf.train(), ours.train()
    try:
        res = side_by_side({"hf": hf_step, "ours": our_step}, rounds=3 if quick else 10, warmup=2, baseline="hf")
    finally:
        hf.eval(), ours.eval()
        hf.zero_grad(set_to_none=True), ours.zero_grad(set_to_none=True)
    return [_row(f"training step fwd+bwd bf16, B={B}, T={T}", (B, T), "ours", "hf", res)]


# --------------------------------------------------------------------------- targets
# Issue 30's targets, each a bound on a ratio of times (ours / baseline, bf16) at the full
# sizes (a --quick run measures none of them): a row is found by the start of its entry,
# its shape and its ``ours``. A speed-up of at least s is a time ratio of at most 1/s.
TARGETS = (
    ("attention core ≤ 1.05× SDPA", "attention core vs SDPA", "(8, 16, 1024, 64)", "attn_core", 1.05),
    ("attention core ≤ 1.05× SDPA", "attention core vs SDPA", "(4, 16, 4096, 128)", "attn_core", 1.05),
    ("window 512 ≤ 0.85× full causal SDPA", "window 512 ", "(2, 16, 4096, 128)", "window_auto", 0.85),
    ("sinks ≤ 2.1× causal SDPA", "sinks ", "(2, 16, 4096, 128)", "sinks_auto", 2.1),
    ("B=1 decoding, eager: ≥ 1.0× HF's speed", "greedy decoding B=1,", "(1, 256)", "ours_eager", 1.0),
    ("B=1 decoding, CUDA graphs: ≥ 5× HF's speed", "greedy decoding B=1,", "(1, 256)", "ours_static_cudagraphs", 0.2),
    ("training step ≤ 1.05× HF's", "training step", "(4, 512)", "ours", 1.05),
)


def target_verdicts(rows: list[dict]) -> list[dict]:
    """Each target of :data:`TARGETS` against its row: the median ratio, its interval and a verdict.

    The verdict follows the interval, not the median alone: ``"met"`` when the whole 95%
    interval is at or below the bound, ``"not met"`` when the whole interval is above it,
    ``"within noise"`` when the bound falls inside it, and ``"not measured"`` when no row
    matches (the entry failed, or the run was cut short). A row of an older run without an
    interval is judged on its median alone.
    """
    out = []
    for label, entry, shape, ours, bound in TARGETS:
        found = [
            r
            for r in rows
            if "error" not in r and r["entry"].startswith(entry) and r["ours"] == ours and r["shape"] == shape
        ]
        verdict = dict(target=label, entry=entry, shape=shape, ours=ours, bound=bound)
        if not found:
            out.append(dict(verdict, verdict="not measured"))
            continue
        r = found[0]
        low, high = r.get("ci_low", r["ratio"]), r.get("ci_high", r["ratio"])
        judged = "met" if high <= bound else "not met" if low > bound else "within noise"
        out.append(dict(verdict, ratio=r["ratio"], ci_low=low, ci_high=high, verdict=judged))
    return out


# --------------------------------------------------------------------------- the run
def _safe(name: str, fn, rows: list, log) -> object:
    t0 = time.perf_counter()
    try:
        out = fn()
    except Exception as exc:  # one failing entry must not lose the others
        log(f"  {name}: FAILED {type(exc).__name__}: {exc}")
        rows.append(
            {"entry": name, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-2000:]}
        )
        return None
    log(f"  {name}: done in {time.perf_counter() - t0:.0f} s")
    return out


def markdown(result: dict) -> str:
    """The table as Markdown: one line per measured pair, the errors after it."""
    lines = [
        f"# attn_core on {result['device']} (torch {result['torch']}, transformers {result['transformers']})",
        "",
        "bf16; medians of CUDA-event timings; ratio = median per-round ours / baseline (min–max over rounds); "
        + ("QUICK smoke-test sizes, not a measurement; " if result["quick"] else "")
        + f"run took {result['seconds']:.0f} s.",
        "",
        "| entry | shape | ours | baseline | ours ms | baseline ms | ratio (min–max) | 95% CI | tokens/s |",
        "|---|---|---|---|---:|---:|---|---|---:|",
    ]
    for r in result["rows"]:
        if "error" in r:
            continue
        tps = f"{r['tokens_per_s']:.0f}" if "tokens_per_s" in r else ""
        ci = f"{r['ci_low']:.3f}–{r['ci_high']:.3f} ({r['rounds']} rounds)" if "ci_low" in r else ""
        lines.append(
            f"| {r['entry']} | {r['shape']} | {r['ours']} | {r['baseline']} | {r['ours_ms']:.3f} | "
            f"{r['baseline_ms']:.3f} | {r['ratio']:.3f} ({r['ratio_low']:.2f}–{r['ratio_high']:.2f}) | {ci} | {tps} |"
        )
    lines += ["", "Issue 30's targets (a ratio of times; met: the whole 95% interval within the bound):", ""]
    lines += ["| target | shape | ratio (95% CI) | bound | verdict |", "|---|---|---|---:|---|"]
    for t in target_verdicts(result["rows"]):
        measured = f"{t['ratio']:.3f} ({t['ci_low']:.3f}–{t['ci_high']:.3f})" if "ratio" in t else ""
        lines.append(f"| {t['target']} | {t['shape']} | {measured} | {t['bound']:g} | {t['verdict']} |")
    if result.get("pipelined"):
        shape = result["pipelined"][0]["shape"]
        lines += ["", f"At {shape}, µs per call: one call per timing, {PIPELINED} back to back.", ""]
        lines += ["| call | one call | back to back |", "|---|---:|---:|"]
        lines += [f"| {p['call']} | {p['one_call_us']:.1f} | {p['twenty_calls_us']:.1f} |" for p in result["pipelined"]]
    if result.get("host_per_call"):
        shape = result["host_per_call"][0]["shape"]
        lines += ["", f"The host's µs per call at {shape}:", ""]
        lines += ["| call | host µs |", "|---|---:|"]
        lines += [f"| {h['call']} | {h['host_us']:.1f} |" for h in result["host_per_call"]]
    if result.get("kernels"):
        kernels = result["kernels"]
        lines += ["", f"CUDA kernels of one call at {kernels['shape']}:", ""]
        if "error" in kernels:
            lines += [f"- not recorded: `{kernels['error'][:300]}`"]
        else:
            for name in ("sdpa causal", "attention causal"):
                lines.append(f"- {name}: {', '.join(f'`{k}`' for k in kernels[name])}")
    errors = [r for r in result["rows"] if "error" in r]
    if errors:
        lines += ["", "Entries that failed:", ""] + [f"- {r['entry']}: `{r['error'][:300]}`" for r in errors]
    return "\n".join(lines) + "\n"


def run(quick: bool = False, log=print, out_dir: Path = RESULTS) -> dict:
    """Run every entry on the current CUDA device; write ``gpu-<device>-<time>.json`` and ``.md``; return the result."""
    if not torch.cuda.is_available():
        raise RuntimeError("the gpu suite needs CUDA")
    start = time.perf_counter()
    try:
        import transformers

        tf_version = transformers.__version__
    except ImportError:
        tf_version = None
    device = torch.cuda.get_device_name(0)
    rows: list[dict] = []
    result = {
        "suite": "gpu",
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "quick": quick,
        "device": device,
        "torch": torch.__version__,
        "transformers": tf_version,
        "rows": rows,
        "seconds": 0.0,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^A-Za-z0-9]+", "-", device).strip("-").lower()
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    stem = out_dir / f"gpu-{slug}-{'quick-' if quick else ''}{stamp}"

    def save():  # after every part: a run cut short (a time limit) keeps what it measured
        result["seconds"] = time.perf_counter() - start
        result["targets"] = target_verdicts(rows)
        stem.with_suffix(".json").write_text(json.dumps(result, indent=1))
        stem.with_suffix(".md").write_text(markdown(result))

    log(f"gpu suite on {device} ({'quick' if quick else 'full'})")
    rows += _safe("attention", lambda: attention_entries(quick), rows, log) or []
    save()
    result.update(_safe("host time per call", lambda: host_entries(quick), rows, log) or {})
    save()
    models = _safe("build + convert the LLaMA-shaped model", lambda: _llama(quick), rows, log)
    if models is not None:
        rows += _safe("decoding", lambda: decoding_entries(quick, models), rows, log) or []
        save()
        rows += _safe("training step", lambda: training_entries(quick, models), rows, log) or []
    save()
    log(markdown(result))
    log(f"wrote {stem}.json and .md ({result['seconds']:.0f} s)")
    return result
