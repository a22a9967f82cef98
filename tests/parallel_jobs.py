"""The spawned jobs behind the tests of attn_core.parallel: one job per world size runs every case.

Starting W processes costs seconds (each imports torch), so the tests do not spawn per
case: :func:`results` runs :func:`every_case` once per world size in this pytest process
(cached) and the test files assert on its report. The worker functions live in this
importable module because spawn imports them by name.
"""

from __future__ import annotations

import fcntl
import functools
import os
import pickle
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

from attn_core import attention
from attn_core.parallel.allgather import allgather_attention
from attn_core.parallel.comm import all_gather, all_to_all, ring_shift
from attn_core.parallel.launch import run_on_ranks
from attn_core.parallel.measure import SCHEMES, scheme_costs
from attn_core.parallel.ring import ring_attention
from attn_core.parallel.sharding import all_gather_sequence, shard_sequence
from attn_core.parallel.ulysses import ulysses_attention
from conftest import F64, qkv, randn

SHAPE = {"batch": 2, "heads": 4, "T": 16, "head_dim": 8}  # T = 16 splits into 2W chunks for W = 2 and 4
KV_HEADS = (4, 2, 1)  # MHA, GQA, MQA


def config(is_causal: bool, kv_heads: int, **changes) -> dict:
    """A configuration of attn_core.parallel.measure.scheme_costs: every scheme, float64, with gradients."""
    base = dict(SHAPE, kv_heads=kv_heads, is_causal=is_causal, backward=True, dtype="float64", seed=0)
    return dict(base, schemes=list(SCHEMES), **changes)


def full_inputs(kv_heads: int, seed: int = 0):
    """q, k, v and an output cotangent for the whole sequence in float64, the same on every rank."""
    B, H, T, D = SHAPE["batch"], SHAPE["heads"], SHAPE["T"], SHAPE["head_dim"]
    q, k, v = qkv(B, H, T, D, H_kv=kv_heads, dtype=F64, seed=seed)
    return q, k, v, randn(B, H, T, D, seed=seed + 1)


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
    x = randn(2, 3, 4 * W, 5)
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
    """Every scheme on two halves of the world at once (group= given), and a call from outside the group."""
    halves = [dist.new_group(list(range(h * W // 2, (h + 1) * W // 2))) for h in range(2)]
    report = {"schemes": scheme_costs(config(True, 2), group=halves[rank * 2 // W])}
    q, k, v, _ = full_inputs(4)
    local = [shard_sequence(t, rank % (W // 2), W // 2) for t in (q, k, v)]
    # Every rank passes the first half's group: the second half is not in it.
    report["outsider"] = _error_of(lambda: ring_attention(*local, group=halves[0]))
    return report


def every_case(W: int) -> dict:
    """Run in each rank: every scheme causal or not with each head count, bad inputs, communication, subgroups."""
    rank = dist.get_rank()
    report = {(c, h, None): scheme_costs(config(c, h)) for c in (False, True) for h in KV_HEADS}
    # Every scheme on zig-zag shards too (Ulysses and the all-gather put the sequence back in order).
    report |= {(c, h, "zigzag"): scheme_costs(config(c, h, layout="zigzag")) for c in (False, True) for h in (4, 2)}
    report["bad"] = _bad_inputs(rank, W)
    report["comm"] = _communication(rank, W)
    if W == 4:
        report["subgroups"] = _subgroups(rank, W)
    return report


def equality_failures(W: int, schemes, tolerance: float = 1e-10) -> list[str]:
    """The cases of ``schemes`` whose output or gradients differ from one-device attention by ``tolerance`` or more."""
    failures = []
    for rank, report in enumerate(results(W)):
        cases = [key for key in report if isinstance(key, tuple)]
        assert {c for c, _, _ in cases} == {False, True} and {h for _, h, _ in cases} == set(KV_HEADS)
        for key in cases:
            for name in schemes:
                row = report[key][name]
                if not max(row["output_error"], row["grad_error"]) < tolerance:
                    failures.append(f"W={W} rank {rank} {name} (causal, H_kv, layout)={key}: {row}")
    return failures


@functools.cache
def results(W: int) -> tuple:
    """Each rank's report of :func:`every_case`, from one spawned job per world size and test run.

    Under pytest-xdist the workers share one job: the first to ask runs it and leaves the
    reports in a file named by the run's id (``PYTEST_XDIST_TESTRUNUID``, the same in every
    worker of a run); the others wait on a lock and read it.
    """
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:
        return tuple(run_on_ranks(every_case, W, W, timeout=120.0))
    path = Path(tempfile.gettempdir()) / f"attn_core_parallel_{run}_W{W}.pkl"
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not path.exists():
            path.write_bytes(pickle.dumps(tuple(run_on_ranks(every_case, W, W, timeout=120.0))))
        return pickle.loads(path.read_bytes())


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
