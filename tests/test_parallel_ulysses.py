"""attn_core.parallel.ulysses: Ulysses attention in spawned gloo processes equals one-device attention."""

from __future__ import annotations

import pytest
from parallel_jobs import equality_failures, results

from attn_core.parallel.ulysses import kv_head_repeats

TOLERANCE = 1e-10


@pytest.mark.parametrize("W", [2, 4])
def test_every_case_equals_one_device_attention(W):
    # Causal and not, contiguous and zig-zag shards, MHA, GQA and MQA (repeated key/value heads).
    assert equality_failures(W, ("ulysses",), TOLERANCE) == []


def test_on_a_subgroup():
    for rank, report in enumerate(results(4)):
        row = report["subgroups"]["schemes"]["ulysses"]
        assert max(row["output_error"], row["grad_error"]) < TOLERANCE, (rank, row)


def test_key_value_heads_are_repeated_only_as_far_as_the_split_needs():
    assert kv_head_repeats(4, 4) == 1 and kv_head_repeats(8, 4) == 1
    assert kv_head_repeats(1, 4) == 4  # MQA: every rank gets a copy of the one head
    assert kv_head_repeats(2, 4) == 2
    assert kv_head_repeats(6, 4) == 2  # lcm(6, 4) = 12 heads, 3 per rank


def test_heads_that_do_not_divide_and_disagreeing_ranks_fail_on_every_rank():
    for W in (2, 4):
        for report in results(W):
            kind, message = report["bad"]["ulysses_heads"]
            assert kind == "ValueError"
            assert f"H=3 query heads are not divisible by the group's {W} ranks" in message
            kind, message = report["bad"]["causal_disagrees"]
            assert kind == "ValueError" and "needs the same is_causal value on every rank" in message
