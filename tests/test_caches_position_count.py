"""attn_core.caches.position_count: a cache's count, on the host and on the device, and what torch.compile sees."""

from __future__ import annotations

import pytest
import torch

from attn_core.caches.position_count import PositionCount


def test_the_two_counts_agree_and_the_device_one_is_a_copy():
    count = PositionCount()
    before = count.device
    count.advance(3)
    count.advance(1)
    assert count.host == 4 and int(count.device) == 4
    assert int(before) == 0  # a copy: later updates leave it alone
    assert before.dtype == torch.long and before.dim() == 0
    count.host = 7
    assert count.host == 7 and int(count.device) == 7
    assert getattr(count._device, "_dynamo_static_input_type", None) is not None  # a static address


def test_compiled_updates_move_the_device_count_and_the_host_reads_it_back_once():
    from torch._dynamo.utils import counters

    count = PositionCount()
    count.advance(2)

    def step(x):
        count.advance(1)
        return x + count.device

    compiled = torch.compile(step, backend="eager", dynamic=False)
    torch._dynamo.reset()
    counters.clear()
    outs = [compiled(torch.zeros(())) for _ in range(5)]
    assert counters["stats"]["unique_graphs"] == 1  # the host count is never part of the graph
    assert [int(o) for o in outs] == [3, 4, 5, 6, 7]
    assert count._host_behind and count.host == 7 and not count._host_behind
    count.advance(1)  # eager again: both move
    assert count.host == 8 and int(count.device) == 8
    torch._dynamo.reset()


def test_bad_input():
    count = PositionCount()
    with pytest.raises(ValueError, match="size must be >= 0, got size=-1"):
        count.host = -1
    with pytest.raises(TypeError, match="size must be an int"):
        count.host = 2.5
