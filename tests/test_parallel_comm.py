"""attn_core.parallel.comm: the ring shift, all-to-all (native and point-to-point) and all-gather deliver."""

from __future__ import annotations

import pytest
import torch
from parallel_jobs import results

from attn_core.parallel.comm import nbytes


@pytest.mark.parametrize("W", [2, 4])
def test_what_each_rank_receives(W):
    for rank, report in enumerate(results(W)):
        comm = report["comm"]
        previous = (rank - 1) % W
        assert comm["shifted"] == [10.0 * previous + i for i in range(3)], "a ring shift brings rank r - 1's tensor"
        # Rank j sent chunk `rank` (filled with 10 j + rank) here.
        expected = [[10.0 * j + rank] * 2 for j in range(W)]
        assert comm["all_to_all"] == expected
        assert comm["fallback"] == expected, "the point-to-point all-to-all equals torch.distributed.all_to_all"
        assert comm["all_gather"] == [[10.0 * j + i for i in range(3)] for j in range(W)]


def test_nbytes_counts_elements_times_their_size():
    assert nbytes([torch.zeros(2, 3, dtype=torch.float64), torch.zeros(5, dtype=torch.bfloat16)]) == 48 + 10
