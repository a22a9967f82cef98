"""attn_core.parallel.checks: bad input on any rank is an error on every rank (the spawned cases), never a hang."""

from __future__ import annotations

import pytest
import torch
from parallel_jobs import results

from attn_core.parallel.checks import agree_across_ranks, group_size_and_rank


def test_without_a_process_group_the_error_says_how_to_start_one():
    with pytest.raises(RuntimeError, match="torch.distributed is not initialised.*run_on_ranks"):
        group_size_and_rank()
    with pytest.raises(RuntimeError, match="not initialised"):
        agree_across_ranks("f", {"x": torch.zeros(1)})


@pytest.mark.parametrize("W", [2, 4])
def test_every_rank_raises_the_same_kind_of_error(W):
    reports = [report["bad"] for report in results(W)]
    for case in ("different_lengths", "misspelled_layout", "misspelled_on_rank_1", "ulysses_heads", "causal_disagrees"):
        kinds = {bad[case][0] if bad[case] else None for bad in reports}
        assert kinds == {"ValueError"}, (case, kinds)
    # A rank whose own check failed raises its own error; the others name that rank.
    assert "rank 1 refused" not in reports[1]["misspelled_on_rank_1"][1]
    others = [bad["misspelled_on_rank_1"][1] for r, bad in enumerate(reports) if r != 1]
    assert all("rank 1 refused its arguments" in message for message in others)
    # The disagreement lists every rank's value.
    assert all(f"rank {W - 1}: False" in bad["causal_disagrees"][1] for bad in reports)
