"""attn_core.parallel.launch: run_on_ranks returns every rank's value and re-raises a worker's error with its rank."""

from __future__ import annotations

import pytest
import torch
from parallel_jobs import fails_on, results, returns_rank, sleeps

from attn_core.parallel.launch import RemoteTraceback, exception_with_rank, free_port, run_on_ranks


def test_returns_each_ranks_value_by_rank():
    # The spawned job of tests/parallel_jobs.py (shared with the other tests) returned one report per rank,
    # in rank order: rank r's ring shift brought rank r - 1's tensor.
    for W in (2, 4):
        reports = results(W)
        assert len(reports) == W
        assert [report["comm"]["shifted"][0] for report in reports] == [10.0 * ((r - 1) % W) for r in range(W)]


def test_a_workers_error_is_raised_here_with_its_rank_while_the_others_wait_in_a_collective():
    # Rank 1 raises; rank 0 waits in a barrier that rank 1 never joins (it then fails too, later).
    with pytest.raises(ValueError, match=r"^rank 1: bad shard on purpose( \(rank 0 failed too\))?$") as info:
        run_on_ranks(fails_on, 2, 1, timeout=60.0)
    assert info.value.rank == 1
    assert isinstance(info.value.__cause__, RemoteTraceback)
    assert "fails_on" in str(info.value.__cause__) and "ValueError: bad shard on purpose" in str(info.value.__cause__)


def test_a_run_past_its_timeout_is_stopped_and_named():
    # One second is less than the processes take to start: they are terminated, not waited for.
    with pytest.raises(TimeoutError, match=r"ranks \[0, 1\] were still running after timeout=1 s"):
        run_on_ranks(sleeps, 2, 60.0, timeout=1.0)


def test_exception_with_rank_keeps_the_type_where_it_can():
    error = exception_with_rank(ValueError("T=10 is not divisible"), 3, [0, 1])
    assert type(error) is ValueError and error.rank == 3
    assert str(error) == "rank 3: T=10 is not divisible (ranks 0, 1 failed too)"
    # KeyError's str() quotes its argument: it comes back as a RuntimeError naming its type.
    error = exception_with_rank(KeyError("a key"), 0)
    assert type(error) is RuntimeError and str(error) == "rank 0 raised KeyError: 'a key'"


def test_functions_spawn_cannot_import_are_refused_before_starting():
    with pytest.raises(TypeError, match="cannot be imported by the spawned processes"):
        run_on_ranks(lambda: 1, 2)

    def nested():
        return 1

    with pytest.raises(TypeError, match="define it at the top level of a .py module"):
        run_on_ranks(nested, 2)


def test_bad_arguments():
    with pytest.raises(ValueError, match="backend must be one of"):
        run_on_ranks(returns_rank, 2, backend="mpi")
    with pytest.raises(ValueError, match="world_size must be >= 1"):
        run_on_ranks(returns_rank, 0)
    with pytest.raises(ValueError, match="timeout"):
        run_on_ranks(returns_rank, 2, timeout=0)
    if torch.cuda.device_count() < 64:
        with pytest.raises(ValueError, match="needs one GPU per rank: world_size=64"):
            run_on_ranks(returns_rank, 64, backend="nccl")


def test_free_port_is_a_port_number():
    assert 1024 <= free_port() < 65536
