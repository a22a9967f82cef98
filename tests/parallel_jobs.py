"""The spawned jobs behind the tests of attn_core.parallel: one job per world size runs every case.

Starting W processes costs seconds (each imports torch), so the tests do not spawn per
case: :func:`results` runs :func:`every_case` once per world size in this pytest process
(cached) and the test files assert on its report. The worker functions live in this
importable module because spawn imports them by name.
"""

from __future__ import annotations

import functools
import time

import torch
import torch.distributed as dist

from attn_core import attention
from attn_core.parallel.allgather import allgather_attention
from attn_core.parallel.comm import all_gather, all_to_all, ring_shift
from attn_core.parallel.cost import count_cost
from attn_core.parallel.launch import run_on_ranks
from attn_core.parallel.ring import ring_attention
from attn_core.parallel.sharding import all_gather_sequence, shard_sequence
from attn_core.parallel.ulysses import ulysses_attention
from conftest import F64, qkv, randn

SCHEMES = {"ring": ring_attention, "ulysses": ulysses_attention, "allgather": allgather_attention}
SHAPE = {"B": 2, "H": 4, "T": 16, "D": 8}  # T = 16 splits into 2W chunks for W = 2 and 4


def equality_cases(world_size: int) -> list[dict]:
    """Every (scheme, causal, layout, key/value heads) case run in the job."""
    cases = []
    for scheme in SCHEMES:
        for is_causal in (False, True):
            for layout in ("contiguous", "zigzag"):
                for H_kv in (4, 2, 1) if scheme == "ulysses" else (4, 2):
                    cases.append({"scheme": scheme, "is_causal": is_causal, "layout": layout, "H_kv": H_kv})
    return cases


def case_name(case: dict) -> str:
    causal = "causal" if case["is_causal"] else "full"
    return f"{case['scheme']}-{causal}-{case['layout']}-Hkv{case['H_kv']}"


def full_inputs(H_kv: int, seed: int = 0):
    """q, k, v and an output cotangent for the whole sequence in float64, the same on every rank."""
    B, H, T, D = SHAPE["B"], SHAPE["H"], SHAPE["T"], SHAPE["D"]
    q, k, v = qkv(B, H, T, D, H_kv=H_kv, dtype=F64, seed=seed)
    return q, k, v, randn(B, H, T, D, seed=seed + 1)


def _run_case(case, rank, W, group=None):
    """Max abs differences (output, dq, dk, dv) against one-device attention, and the counted cost."""
    q, k, v, d_out = full_inputs(case["H_kv"])
    qf, kf, vf = (t.clone().requires_grad_() for t in (q, k, v))
    ref = attention(qf, kf, vf, is_causal=case["is_causal"])
    ref_grads = torch.autograd.grad(ref, (qf, kf, vf), d_out)
    layout = case["layout"]
    local = [shard_sequence(t, rank, W, layout=layout).requires_grad_() for t in (q, k, v)]
    with count_cost() as forward:
        out = SCHEMES[case["scheme"]](*local, group=group, is_causal=case["is_causal"], layout=layout)
    with count_cost() as backward:
        grads = torch.autograd.grad(out, local, shard_sequence(d_out, rank, W, layout=layout))
    errors = [(out - shard_sequence(ref, rank, W, layout=layout)).abs().max().item()]
    errors += [(a - shard_sequence(b, rank, W, layout=layout)).abs().max().item() for a, b in zip(grads, ref_grads)]
    cost = {
        "forward": (forward.bytes_sent, forward.bytes_received, forward.scores),
        "backward": (backward.bytes_sent, backward.bytes_received),
    }
    return errors, cost


def _error_of(fn):
    try:
        fn()
    except (TypeError, ValueError) as error:
        return type(error).__name__, str(error)
    return None


def _bad_inputs(rank, W):
    """Each bad call's (exception type, message) on this rank; every case must raise on every rank."""
    q, k, v, _ = full_inputs(4)
    local = [shard_sequence(t, rank, W) for t in (q, k, v)]
    shorter = [t[..., :-2, :] if rank == 1 else t for t in local]
    report = {
        "different_lengths": _error_of(lambda: ring_attention(*shorter, is_causal=True)),
        "misspelled_layout": _error_of(lambda: ring_attention(*local, layout="zig-zag")),
        "misspelled_on_rank_1": _error_of(lambda: ring_attention(*local, layout="zigzag " if rank == 1 else "zigzag")),
        "ulysses_heads": _error_of(lambda: ulysses_attention(local[0][:, :3], local[1][:, :1], local[2][:, :1])),
        "zigzag_odd_length": _error_of(lambda: ring_attention(*(t[..., :-1, :] for t in local), layout="zigzag")),
        "causal_disagrees": _error_of(lambda: ulysses_attention(*local, is_causal=rank == 0)),
        "allgather_lengths": _error_of(lambda: allgather_attention(*shorter)),
    }
    # After every refusal the ranks are still in step: a good call works.
    out = ring_attention(*local)
    report["after"] = (out - shard_sequence(attention(q, k, v), rank, W)).abs().max().item()
    return report


def _communication(rank, W):
    """The wrappers of attn_core.parallel.comm against what they should deliver."""
    mine = torch.arange(3.0) + 10 * rank
    shifted = ring_shift([mine], group=None).wait()[0]
    chunks = [torch.full((2,), float(10 * rank + j)) for j in range(W)]
    native, fallback = all_to_all(chunks), all_to_all(chunks, fallback=True)
    gathered = all_gather(mine)
    x = torch.randn(2, 3, 4 * W, 5, generator=torch.Generator().manual_seed(1))
    return {
        "shifted": shifted.tolist(),
        "all_to_all": [c.tolist() for c in native],
        "fallback": [c.tolist() for c in fallback],
        "all_gather": [t.tolist() for t in gathered],
        "round_trip": [
            torch.equal(all_gather_sequence(shard_sequence(x, rank, W, layout=layout), layout=layout), x)
            for layout in ("contiguous", "zigzag")
        ],
    }


def _subgroups(rank, W):
    """Ring and Ulysses on two halves of the world at once (group= given), and a call from outside the group."""
    halves = [dist.new_group(list(range(h * W // 2, (h + 1) * W // 2))) for h in range(2)]
    mine = halves[rank * 2 // W]
    sub_rank = rank % (W // 2)
    report = {}
    for scheme in ("ring", "ulysses"):
        case = {"scheme": scheme, "is_causal": True, "layout": "zigzag", "H_kv": 2}
        report[scheme] = _run_case(case, sub_rank, W // 2, group=mine)[0]
    q, k, v, _ = full_inputs(4)
    local = [shard_sequence(t, sub_rank, W // 2) for t in (q, k, v)]
    # Every rank passes the first half's group: the second half is not in it.
    report["outsider"] = _error_of(lambda: ring_attention(*local, group=halves[0]))
    return report


def every_case(W: int) -> dict:
    """Run in each rank: every equality case, the bad inputs, the communication and, for W = 4, subgroups."""
    rank = dist.get_rank()
    report = {case_name(c): _run_case(c, rank, W) for c in equality_cases(W)}
    report["bad"] = _bad_inputs(rank, W)
    report["comm"] = _communication(rank, W)
    if W == 4:
        report["subgroups"] = _subgroups(rank, W)
    return report


@functools.cache
def results(W: int) -> tuple:
    """Each rank's report of :func:`every_case`, from one spawned job per world size and pytest process."""
    return tuple(run_on_ranks(every_case, W, W, timeout=120.0))


def fails_on(rank_that_fails: int) -> str:
    """A worker that raises on one rank (the others wait in a collective it never joins)."""
    if dist.get_rank() == rank_that_fails:
        raise ValueError("bad shard on purpose")
    dist.barrier()
    return "unreachable"


def returns_rank() -> int:
    """A worker that returns its rank (never run by the tests: only refused arguments reach it)."""
    return dist.get_rank()


def sleeps(seconds: float) -> None:
    """A worker that outlives any short timeout."""
    time.sleep(seconds)
