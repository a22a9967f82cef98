"""Suite ``attention``: implementations of one causal multi-head self-attention layer, same inputs.

The setting of Sebastian Raschka's well-known comparison of multi-head attention
implementations (batch 8, context 1024, width 768, 12 heads, forward pass), then a sweep
over the context length. Every implementation uses the same weights and input; the
outputs are checked equal before anything is timed. Inference is timed (under
``torch.no_grad()``), as a serving system would run the layer.

Reported per implementation: median seconds per forward pass, the ratio to the baseline
("fused QKV + SDPA": one fused QKV projection, ``scaled_dot_product_attention`` with
``is_causal=True``, the output projection; the leanest composition of PyTorch primitives
for this layer), and the achieved GFLOP/s (:func:`attn_core.teach.measure.attention_layer_flops`,
causal pairs only) as a fraction of this machine's measured matmul throughput.

The performance targets (the fast path against ``nn.MultiheadAttention`` and against the
baseline) are read from a second group, in the same run, that times only those three
implementations, with more rounds: the explicit variants allocate gigabytes, and a round in
which one of them ran just before can be slower for whoever follows.
"""

from __future__ import annotations

import torch

from attn_core import MultiHeadAttention
from attn_core.teach.measure import attention_implementations, attention_layer_flops

from .common import paired_ratio, ratio_summary, time_interleaved

BASELINE = "fused QKV + SDPA"
FAST = "attn_core fast path"
TORCH_NO_WEIGHTS = "nn.MultiheadAttention (need_weights=False)"
# The sweep keeps the implementations that a reader would choose between; the explicit
# path stops at 2048 (at 4096 its score tensors alone are several GB for 12 heads).
SWEEP_IMPLS = ["attn_core explicit", BASELINE, TORCH_NO_WEIGHTS, FAST, "attn_core tiled"]
EXPLICIT_MAX_T = 2048

# The performance targets compare three implementations; they are timed again in a group of
# their own with more rounds, so that the multi-GB allocations of the explicit variants
# (which run in the same rounds of the main table) cannot disturb the comparison.
TARGET_IMPLS = [BASELINE, FAST, TORCH_NO_WEIGHTS]

FULL = dict(
    main=dict(batch=8, T=1024, d_model=768, n_heads=12),
    rounds=7,
    target_rounds=15,
    sweep=dict(batch=1, d_model=768, n_heads=12, Ts=[256, 512, 1024, 2048, 4096]),
    sweep_rounds=5,
)
QUICK = dict(
    main=dict(batch=2, T=64, d_model=64, n_heads=4),
    rounds=3,
    target_rounds=3,
    sweep=dict(batch=1, d_model=64, n_heads=4, Ts=[32]),
    sweep_rounds=2,
)


def _layer(d_model: int, n_heads: int, device: str) -> MultiHeadAttention:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return MultiHeadAttention(d_model, n_heads, causal=True).to(device).eval()


def _measure(
    setting: dict, names: list[str] | None, rounds: int, device: str, matmul_gflops: float, tag: str
) -> list[dict]:
    B, T, d, H = setting["batch"], setting["T"], setting["d_model"], setting["n_heads"]
    layer = _layer(d, H, device)
    impls = attention_implementations(layer, include_tiled=True)
    if names is not None:
        impls = {n: impls[n] for n in names}
    g = torch.Generator().manual_seed(1)
    x = torch.randn(B, T, d, generator=g).to(device)
    rows = []
    with torch.no_grad():
        reference = impls[BASELINE](x)
        diffs = {name: (fn(x) - reference).abs().max().item() for name, fn in impls.items()}
        timings = time_interleaved({n: (lambda f=f: f(x)) for n, f in impls.items()}, rounds=rounds, device=device)
    flops = attention_layer_flops(B, T, d, causal=True)
    base = timings[BASELINE]
    for name, t in timings.items():
        gflops = flops / t.median / 1e9
        vs_base = ratio_summary(t, base)  # the per-round ratios' quartiles: the noise of the comparison
        rows.append(
            dict(
                suite="attention",
                part=tag,
                device=device,
                batch=B,
                T=T,
                d_model=d,
                n_heads=H,
                name=name,
                median_s=t.median,
                spread=t.spread,
                rounds=len(t.seconds),
                baseline=BASELINE,
                ratio_to_baseline=t.median / base.median,
                paired_ratio_to_baseline=paired_ratio(t, base),
                paired_ratio_low=vs_base.low,
                paired_ratio_high=vs_base.high,
                verdict="baseline" if name == BASELINE else vs_base.verdict,
                gflops=gflops,
                fraction_of_matmul=gflops / matmul_gflops,
                max_abs_diff=diffs[name],
            )
        )
    return rows


def run(device: str, *, quick: bool, matmul_gflops: float, log=print) -> dict:
    """Run the suite on ``device``; return ``{"rows": [...], "targets": [...]}``."""
    cfg = QUICK if quick else FULL
    m = cfg["main"]
    shape = f"B={m['batch']}, T={m['T']}, d={m['d_model']}, H={m['n_heads']}"
    log(f"  attention [{device}]: {shape}, {cfg['rounds']} rounds")
    rows = _measure(m, None, cfg["rounds"], device, matmul_gflops, "main")
    log(f"  attention [{device}]: the three implementations of the targets, {cfg['target_rounds']} rounds")
    target_rows = _measure(m, TARGET_IMPLS, cfg["target_rounds"], device, matmul_gflops, "target")
    rows += target_rows
    by_name = {r["name"]: r for r in target_rows}
    fast, nn_mha = by_name[FAST], by_name[TORCH_NO_WEIGHTS]
    targets = []
    if device == "cpu":  # the performance targets are stated for the CPU
        vs_torch = fast["median_s"] / nn_mha["median_s"]
        targets.append(
            dict(
                name="attn_core fast path / nn.MultiheadAttention(need_weights=False), causal",
                value=vs_torch,
                paired_value=fast["paired_ratio_to_baseline"] / nn_mha["paired_ratio_to_baseline"],
                threshold=1.0,
                comparison="<",
                passed=vs_torch < 1.0,
            )
        )
        targets.append(
            dict(
                name="attn_core fast path / fused QKV + SDPA (leanest composition)",
                value=fast["ratio_to_baseline"],
                paired_value=fast["paired_ratio_to_baseline"],
                threshold=1.05,
                comparison="<=",
                passed=fast["ratio_to_baseline"] <= 1.05,
            )
        )
    worst = max(r["max_abs_diff"] for r in rows)
    targets.append(
        dict(
            name=f"all implementations equal the baseline [{device}] (max abs diff)",
            value=worst,
            threshold=1e-3,
            comparison="<=",
            passed=worst <= 1e-3,
        )
    )
    s = cfg["sweep"]
    for T in s["Ts"]:
        names = [n for n in SWEEP_IMPLS if not (n == "attn_core explicit" and T > EXPLICIT_MAX_T)]
        log(f"  attention sweep [{device}]: T={T}")
        rows += _measure(dict(s, T=T), names, cfg["sweep_rounds"], device, matmul_gflops, "sweep")
    return {"rows": rows, "targets": targets}
