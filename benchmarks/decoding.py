"""Suite ``decoding``: greedy generation with and without the key/value cache; cache bytes per token.

The model is the chapter-10 LLaMA-like preset (GQA, RoPE, SwiGLU, RMSNorm, 2 layers) with
its width scaled up to a few million parameters. Its weights are random: speed does not
depend on training. At batch 1 a cached step is bound by reading the weights and by the
fixed cost of each small operator, while an uncached one recomputes the whole context, so
the speed-up grows with the context: the prompt has 128 tokens.
Without a cache every step runs the model over the whole sequence so far; with one, the
prompt is prefilled once and every step feeds one token. Both must produce the same
tokens, and the logits of *every* position (the prompt's included: a prefill that lost
its causal mask would change them) must agree to float rounding; this is checked before
the timing and reported.

Where ``torch.compile`` can build (a C++ compiler on a CPU), the cached path also runs
with static caches and one compiled step (``generate(..., compile=True)``), timed after a
compiling call per length, and its tokens are checked against the eager cache's.

Also: the KV-cache bytes per token of MHA, GQA, MQA and MLA decoders of the same width,
measured from the cache tensors the models allocate.
"""

from __future__ import annotations

import shutil

import torch

from attn_core import DecoderConfig, DecoderLM, generate

from .common import time_interleaved

# The chapter-10 LLaMA-like preset (2 layers, GQA with 2 KV heads, RoPE, SwiGLU, RMSNorm) with
# its width scaled up to 5.8M parameters; a 128-token prompt, then up to 256 new tokens.
FULL = dict(
    model=dict(vocab_size=256, n_layers=2, d_model=512, n_heads=8, n_kv_heads=2, max_len=512),
    prompt=128,
    lengths=[32, 64, 128, 256],
    rounds=3,
)
QUICK = dict(
    model=dict(vocab_size=32, n_layers=2, d_model=32, n_heads=4, n_kv_heads=2, max_len=64),
    prompt=4,
    lengths=[4, 8],
    rounds=2,
)
TARGET_LENGTH = 256


def make_model(overrides: dict, device: str, *, seed: int = 0, **more) -> DecoderLM:
    """A seeded ``DecoderLM(DecoderConfig.llama_like(**overrides, **more))`` in eval mode."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return DecoderLM(DecoderConfig.llama_like(**{**overrides, **more})).to(device).eval()


def cache_bytes_per_token(model: DecoderLM) -> int:
    """KV-cache bytes one token occupies, summed over the layers, from the allocated cache tensors."""
    caches = model.make_caches(1, 8)
    return sum(c.nbytes() // 8 for c in caches)  # batch 1, 8 positions preallocated


def can_compile(device: str) -> bool:
    """Whether ``torch.compile``'s default backend can build here: on a CPU it compiles C++."""
    return device != "cpu" or any(shutil.which(cxx) for cxx in ("g++", "clang++", "c++"))


def check_equal(model: DecoderLM, prompt: torch.Tensor, n: int) -> dict:
    """Greedy tokens and all logits (prompt positions included) with and without the cache."""
    tok_c, log_c = generate(model, prompt, n, use_cache=True, temperature=0, return_logits=True)
    tok_n, log_n = generate(model, prompt, n, use_cache=False, temperature=0, return_logits=True)
    T = prompt.shape[1]
    return dict(
        identical_tokens=bool(torch.equal(tok_c, tok_n)),
        max_abs_logit_diff=(log_c - log_n).abs().max().item(),
        max_abs_prompt_logit_diff=(log_c[:, :T] - log_n[:, :T]).abs().max().item(),
    )


def run(device: str, *, quick: bool, log=print) -> dict:
    """Run the suite on ``device``; return ``{"rows": [...], "targets": [...]}``."""
    cfg = QUICK if quick else FULL
    model = make_model(cfg["model"], device)
    n_params = model.num_parameters()
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, cfg["model"]["vocab_size"], (1, cfg["prompt"]), generator=g).to(device)
    rows, targets = [], []
    longest = max(cfg["lengths"])
    eq = check_equal(model, prompt, longest)
    compiled = can_compile(device)
    if compiled:
        eager_tokens = generate(model, prompt, longest, temperature=0)
        compiled_tokens = generate(model, prompt, longest, temperature=0, compile=True)
        eq["compiled_identical_tokens"] = bool(torch.equal(compiled_tokens, eager_tokens))
    for n in cfg["lengths"]:
        log(f"  decoding [{device}]: {n} new tokens ({n_params:,} parameters)")
        fns = {
            "with cache": lambda n=n: generate(model, prompt, n, use_cache=True, temperature=0),
            "without cache": lambda n=n: generate(model, prompt, n, use_cache=False, temperature=0),
        }
        if compiled:  # static caches, one compiled step (attn_core.caches.static)
            fns["with cache, compiled"] = lambda n=n: generate(model, prompt, n, temperature=0, compile=True)
            fns["with cache, compiled"]()  # compiles the step for this length (not timed)
        # No other warm-up call: check_equal above already ran both eager paths.
        t = time_interleaved(fns, rounds=cfg["rounds"], warmup=0, device=device)
        base = t["without cache"]
        for name, timing in t.items():
            rows.append(
                dict(
                    suite="decoding",
                    device=device,
                    name=name,
                    new_tokens=n,
                    prompt=cfg["prompt"],
                    parameters=n_params,
                    median_s=timing.median,
                    spread=timing.spread,
                    rounds=len(timing.seconds),
                    tokens_per_s=n / timing.median,
                    baseline="without cache",
                    ratio_to_baseline=timing.median / base.median,
                    speedup=base.median / timing.median,
                    **(eq if n == longest else {}),
                )
            )
    top = [r for r in rows if r["new_tokens"] == longest and r["name"] == "with cache"][0]
    threshold = 6.0 if not quick else 1.0
    targets.append(
        dict(
            name=f"decoding speed-up with cache at {longest} new tokens [{device}]",
            value=top["speedup"],
            threshold=threshold,
            comparison=">=",
            passed=top["speedup"] >= threshold,
        )
    )
    targets.append(
        dict(
            name=f"identical greedy tokens with and without cache [{device}]",
            value=float(eq["identical_tokens"]),
            threshold=1.0,
            comparison=">=",
            passed=eq["identical_tokens"],
        )
    )
    targets.append(
        dict(
            name=f"logits with and without cache, prompt included [{device}] (max abs diff)",
            value=eq["max_abs_logit_diff"],
            threshold=1e-4,
            comparison="<=",
            passed=eq["max_abs_logit_diff"] <= 1e-4,
        )
    )

    if compiled:
        targets.append(
            dict(
                name=f"identical greedy tokens, compiled static step and eager cache [{device}]",
                value=float(eq["compiled_identical_tokens"]),
                threshold=1.0,
                comparison=">=",
                passed=eq["compiled_identical_tokens"],
            )
        )

    # Cache bytes per token by attention variant (same width, heads and depth).
    base_cfg = cfg["model"]
    D = base_cfg["d_model"] // base_cfg["n_heads"]
    variants = {
        "MHA": dict(n_kv_heads=base_cfg["n_heads"]),
        "GQA": dict(n_kv_heads=base_cfg["n_kv_heads"]),
        "MQA": dict(n_kv_heads=1),
        "MLA": dict(n_kv_heads=None, attention="mla", d_latent=4 * D, rope_dim=D // 2),  # DeepSeek-V2: d_c = 4·d_h,
    }
    per_token = {}
    for name, over in variants.items():
        m = make_model(base_cfg, "cpu", **over)
        per_token[name] = cache_bytes_per_token(m)
    for name, b in per_token.items():
        rows.append(
            dict(
                suite="decoding",
                part="cache",
                device="cpu",
                name=name,
                cache_bytes_per_token=b,
                baseline="MHA",
                ratio_to_baseline=b / per_token["MHA"],
            )
        )
    if device == "cpu":
        host = host_rows()
        rows, targets = rows + host, targets + host_targets(host)
    return {"rows": rows, "targets": targets}


def host_rows() -> list[dict]:
    """The host's work in one cached step, ours vs Hugging Face's LLaMA (:mod:`benchmarks.host_work`).

    Empty without ``transformers``.
    """
    try:
        import transformers  # noqa: F401
    except ImportError:
        return []
    from .host_work import run as host_work

    return [
        dict(
            r,
            suite="decoding",
            part="host",
            device="cpu",
            name=f"one cached step, {r['dtype']}",
            baseline="Hugging Face",
            ratio_to_baseline=r["ours_launches"] / r["hf_launches"],  # kernel launches
        )
        for r in host_work()
    ]


def host_targets(rows: list[dict]) -> list[dict]:
    """One target per dtype: no more kernel launches per decoding step than Hugging Face's."""
    return [
        dict(
            name=f"kernel launches per decoding step vs Hugging Face's LLaMA, {r['dtype']} (ratio)",
            value=r["ours_launches"] / r["hf_launches"],
            threshold=1.0,
            comparison="<=",
            passed=r["ours_launches"] <= r["hf_launches"],
        )
        for r in rows
        if r.get("part") == "host"
    ]
