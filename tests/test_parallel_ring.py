"""attn_core.parallel.ring: ring attention in spawned gloo processes equals one-device attention, with gradients."""

from __future__ import annotations

import pytest
from parallel_jobs import equality_failures, results

from attn_core.parallel.ring import block_plan

TOLERANCE = 1e-10  # float64; the merge reorders sums, so not bit-equal


@pytest.mark.parametrize("W", [2, 4])
def test_every_case_equals_one_device_attention(W):
    # Causal and not, contiguous and zig-zag, MHA, GQA and MQA, output and dQ, dK, dV.
    assert equality_failures(W, ("ring", "ring-zigzag"), TOLERANCE) == []


def test_on_a_subgroup():
    # W = 4 split into two rings of 2 (group= given): each equals one-device attention.
    for rank, report in enumerate(results(4)):
        for name in ("ring", "ring-zigzag"):
            row = report["subgroups"]["schemes"][name]
            assert max(row["output_error"], row["grad_error"]) < TOLERANCE, (rank, name, row)


def test_block_plan_skips_the_future_and_masks_only_the_diagonal():
    # Contiguous, rank 1 of 2: its own block causal, rank 0's block in full.
    assert block_plan(1, 1, 2, 4, layout="contiguous", is_causal=True) == [(slice(0, 4), slice(0, 4), True)]
    assert block_plan(1, 0, 2, 4, layout="contiguous", is_causal=True) == [(slice(0, 4), slice(0, 4), False)]
    assert block_plan(0, 1, 2, 4, layout="contiguous", is_causal=True) == []
    # Zig-zag, W = 2: rank 0 holds chunks (0, 3), rank 1 holds (1, 2).
    assert block_plan(0, 1, 2, 4, layout="zigzag", is_causal=True) == [
        (slice(2, 4), slice(0, 2), False),  # chunk 3 sees chunk 1
        (slice(2, 4), slice(2, 4), False),  # and chunk 2; chunk 0 sees neither
    ]
    assert block_plan(1, 0, 2, 4, layout="zigzag", is_causal=True) == [
        (slice(0, 2), slice(0, 2), False),  # chunk 1 sees chunk 0
        (slice(2, 4), slice(0, 2), False),  # chunk 2 sees chunk 0, not chunk 3
    ]
    assert block_plan(0, 1, 2, 4, layout="zigzag", is_causal=False) == [(slice(0, 4), slice(0, 4), False)]


def test_bad_input_raises_on_every_rank_and_leaves_the_ranks_in_step():
    for W in (2, 4):
        for rank, report in enumerate(results(W)):
            bad = report["bad"]
            assert bad["different_lengths"][0] == "ValueError"
            assert "needs the same q (shape, dtype, device) on every rank" in bad["different_lengths"][1]
            assert f"rank 1: ((2, 4, {16 // W - 2}, 8)" in bad["different_lengths"][1]
            misspelled = "layout must be one of ('contiguous', 'zigzag'), got layout='zig-zag'"
            assert bad["misspelled_layout"] == ("ValueError", misspelled)
            assert bad["misspelled_on_rank_1"][0] == "ValueError"
            assert ("layout='zigzag '" in bad["misspelled_on_rank_1"][1]) and (
                rank == 1 or "rank 1 refused its arguments" in bad["misspelled_on_rank_1"][1]
            )
            assert bad["zigzag_odd_length"][0] == "ValueError" and f"T_l={16 // W - 1}" in bad["zigzag_odd_length"][1]
            assert bad["after"] < TOLERANCE


def test_a_rank_outside_the_group_is_refused():
    for rank, report in enumerate(results(4)):
        outsider = report["subgroups"]["outsider"]
        if rank < 2:
            assert outsider is None
        else:
            assert outsider[0] == "ValueError" and f"global rank {rank}) is not a member" in outsider[1]
