"""attn_core.parallel.allgather: all-gather attention in spawned gloo processes equals one-device attention."""

from __future__ import annotations

import pytest
from parallel_jobs import equality_failures, results

TOLERANCE = 1e-10


@pytest.mark.parametrize("W", [2, 4])
def test_every_case_equals_one_device_attention(W):
    # Causal and not, contiguous and zig-zag shards, MHA, GQA and MQA, output and gradients.
    assert equality_failures(W, ("allgather",), TOLERANCE) == []


def test_on_a_subgroup():
    for rank, report in enumerate(results(4)):
        row = report["subgroups"]["schemes"]["allgather"]
        assert max(row["output_error"], row["grad_error"]) < TOLERANCE, (rank, row)


def test_disagreeing_ranks_fail_on_every_rank():
    for W in (2, 4):
        for report in results(W):
            kind, message = report["bad"]["allgather_lengths"]
            assert kind == "ValueError" and "allgather_attention needs the same q (shape, dtype, device)" in message
