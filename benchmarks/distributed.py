"""Suite ``distributed``: attention across ``W`` local processes (context parallelism), causal, forward and backward.

Each scheme of :mod:`attn_core.parallel` (ring attention with the contiguous and the
zig-zag layout, Ulysses, the all-gather of keys and values) runs in ``W`` processes
started by :func:`attn_core.parallel.launch.run_on_ranks`: gloo on the CPU, one thread
per process; NCCL, one GPU per rank, on a machine with ``W`` GPUs. A step is one forward
and backward pass of causal attention over the whole sequence, each rank holding ``T / W``
tokens. The baseline is one process computing the same attention over all ``T`` tokens
alone (every rank does it at the same time, in the same rounds).

A distributed step ends when its slowest rank ends: every round's time is the maximum over
the ranks (gathered after timing), and the ratios to the baseline, their 95% bootstrap
intervals and verdicts follow :func:`attn_core.teach.measure.timing.ratio_summary`. Beside
the time, each row gives the bytes a rank sent in the step, measured by
:mod:`attn_core.parallel.cost` and held equal to :mod:`attn_core.parallel.formulas`, and,
for the ring, the scores computed by its busiest and idlest ranks (zig-zag: equal).

The targets: with a causal mask the zig-zag ring is faster than the contiguous one (its
busiest rank computes ``(2W + 1) / 4W`` of the scores of the contiguous layout's busiest
rank, 5/8 for ``W = 2``), the whole 95% interval of the ratio below 1; and every scheme's
bytes equal their formula.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from attn_core import attention
from attn_core.parallel.cost import count_cost
from attn_core.parallel.formulas import ring_scores, scheme_bytes
from attn_core.parallel.launch import run_on_ranks
from attn_core.parallel.measure import SCHEMES
from attn_core.parallel.sharding import shard_sequence

from .common import Timing, ratio_summary, time_interleaved

BASELINE = "one process, all T"
FULL = dict(world_size=2, batch=1, n_heads=8, n_kv_heads=2, T=2048, head_dim=64, rounds=9)
QUICK = dict(world_size=2, batch=1, n_heads=4, n_kv_heads=2, T=64, head_dim=16, rounds=3)


def _formula_bytes(name: str, cfg: dict, element_size: int) -> int:
    """Bytes one rank sends in one forward and backward step of scheme ``name``, by formula."""
    sizes = dict(B=cfg["batch"], H=cfg["n_heads"], H_kv=cfg["n_kv_heads"], T=cfg["T"], D=cfg["head_dim"])
    sizes.update(W=cfg["world_size"], element_size=element_size)
    return sum(scheme_bytes(name, **sizes, backward=backward) for backward in (False, True))


def rank_job(cfg: dict, device_type: str) -> dict:
    """One rank's part: time every scheme and the baseline in interleaved rounds, count bytes and scores."""
    rank, W = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", torch.cuda.current_device()) if device_type == "cuda" else torch.device("cpu")
    g = torch.Generator().manual_seed(0)
    B, H, H_kv, T, D = cfg["batch"], cfg["n_heads"], cfg["n_kv_heads"], cfg["T"], cfg["head_dim"]
    q = torch.randn(B, H, T, D, generator=g).to(device)
    k, v = (torch.randn(B, H_kv, T, D, generator=g).to(device) for _ in range(2))
    d_out = torch.randn(B, H, T, D, generator=g).to(device)

    def full_step():
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        return torch.autograd.grad(attention(*leaves, is_causal=True), leaves, d_out)

    def scheme_step(fn, layout):
        local = [shard_sequence(t, rank, W, layout=layout).requires_grad_() for t in (q, k, v)]
        d_local = shard_sequence(d_out, rank, W, layout=layout)
        return lambda: torch.autograd.grad(fn(*local, is_causal=True, layout=layout), local, d_local)

    fns = {BASELINE: full_step} | {name: scheme_step(fn, layout) for name, (fn, layout) in SCHEMES.items()}
    counted = {}
    for name in SCHEMES:
        with count_cost() as cost:
            fns[name]()
        counted[name] = (cost.bytes_sent, cost.bytes_received, cost.scores)
    timings = time_interleaved(fns, rounds=cfg["rounds"], warmup=1, device=device)
    report = {"seconds": {name: t.seconds for name, t in timings.items()}, "counted": counted}
    everyone: list = [None] * W
    dist.all_gather_object(everyone, report)
    return everyone


def run(device: str, *, quick: bool, log=print) -> dict:
    """Run the suite on ``device`` (``"cpu"``: gloo; ``"cuda"``: NCCL, when there are enough GPUs)."""
    cfg = dict(QUICK if quick else FULL)
    W = cfg["world_size"]
    if device == "cuda" and torch.cuda.device_count() < W:
        log(f"  distributed [cuda]: {torch.cuda.device_count()} GPU(s), {W} needed; skipped")
        return {"rows": [], "targets": []}
    log(f"  distributed [{device}]: {W} processes, T={cfg['T']}")
    backend = "nccl" if device == "cuda" else "gloo"
    reports = run_on_ranks(rank_job, W, cfg, device, backend=backend, timeout=600.0)[0]
    # A step ends when its slowest rank ends: the round's time is the maximum over ranks.
    slowest = {
        name: Timing(name, [max(r["seconds"][name][i] for r in reports) for i in range(cfg["rounds"])])
        for name in reports[0]["seconds"]
    }
    rows, targets = [], []
    for name, timing in slowest.items():
        summary = ratio_summary(timing, slowest[BASELINE])
        row = dict(
            suite="distributed",
            device=device,
            world_size=W,
            batch=cfg["batch"],
            n_heads=cfg["n_heads"],
            n_kv_heads=cfg["n_kv_heads"],
            T=cfg["T"],
            head_dim=cfg["head_dim"],
            name=name,
            rounds=cfg["rounds"],
            median_s=timing.median,
            spread=timing.spread,
            baseline=BASELINE,
            ratio_to_baseline=summary.median,
            ci_low=summary.ci_low,
            ci_high=summary.ci_high,
            verdict=summary.verdict,
        )
        if name in SCHEMES:
            sent = [r["counted"][name][0] for r in reports]
            row.update(bytes_sent=max(sent), bytes_formula=_formula_bytes(name, cfg, element_size=4))
            if name.startswith("ring"):  # the ring's work per rank: the zig-zag layout balances it
                scores = [r["counted"][name][2] for r in reports]
                layout = SCHEMES[name][1]
                row.update(
                    scores_max=max(scores),
                    scores_min=min(scores),
                    scores_formula=ring_scores(cfg["T"], W, layout=layout, is_causal=True),
                )
        rows.append(row)
    zigzag = ratio_summary(slowest["ring-zigzag"], slowest["ring"])
    targets.append(
        dict(
            name=f"zig-zag / contiguous ring step time, causal, W={W} [{device}]",
            value=zigzag.median,
            threshold=1.0,
            comparison="<",
            passed=zigzag.ci_high < 1.0,
        )
    )
    bytes_ok = all(r["bytes_sent"] == r["bytes_formula"] for r in rows if "bytes_sent" in r)
    targets.append(
        dict(
            name=f"bytes sent per rank equal the formulas [{device}]",
            value=float(bytes_ok),
            threshold=1.0,
            comparison="==",
            passed=bytes_ok,
        )
    )
    return {"rows": rows, "targets": targets}
