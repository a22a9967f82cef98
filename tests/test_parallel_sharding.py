"""attn_core.parallel.sharding: contiguous and zig-zag shards along T, their positions, and joining them again."""

from __future__ import annotations

import pytest
import torch
from parallel_jobs import results

from attn_core.parallel.sharding import (
    chunk_length,
    gather_sequence,
    shard_chunks,
    shard_positions,
    shard_sequence,
)
from conftest import randn


def test_zigzag_gives_rank_r_chunks_r_and_2w_minus_1_minus_r():
    assert [shard_chunks(r, 4, "zigzag") for r in range(4)] == [(0, 7), (1, 6), (2, 5), (3, 4)]
    assert [shard_chunks(r, 3, "contiguous") for r in range(3)] == [(0,), (1,), (2,)]


def test_positions_of_each_layout():
    assert shard_positions(8, 1, 2).tolist() == [4, 5, 6, 7]
    assert shard_positions(8, 0, 2, layout="zigzag").tolist() == [0, 1, 6, 7]
    assert shard_positions(8, 1, 2, layout="zigzag").tolist() == [2, 3, 4, 5]
    # Every position is held by exactly one rank.
    held = torch.cat([shard_positions(24, r, 3, layout="zigzag") for r in range(3)])
    assert sorted(held.tolist()) == list(range(24))


@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
@pytest.mark.parametrize("W", [1, 2, 4])
def test_shards_hold_the_tokens_at_their_positions_and_join_back(layout, W):
    x = randn(2, 3, 16, 5)
    shards = [shard_sequence(x, r, W, layout=layout) for r in range(W)]
    for r, s in enumerate(shards):
        assert s.shape == (2, 3, 16 // W, 5) and s.is_contiguous()
        assert torch.equal(s, x[:, :, shard_positions(16, r, W, layout=layout)])
    assert torch.equal(gather_sequence(shards, layout=layout), x)


def test_another_sequence_axis_and_gradients_flow_through_both_ways():
    x = randn(10, 4).requires_grad_()  # (T, D), T on dim 0
    shards = [shard_sequence(x, r, 5, layout="contiguous", dim=0) for r in range(5)]
    assert torch.equal(gather_sequence(shards, dim=0), x)
    (shard_sequence(x, 1, 5, dim=0) * 3).sum().backward()
    assert x.grad[2:4].eq(3).all() and x.grad[:2].eq(0).all() and x.grad[4:].eq(0).all()


def test_collective_gather_on_every_rank():
    # all_gather_sequence in spawned ranks (tests/parallel_jobs.py) rebuilt the full tensor on each.
    for W in (2, 4):
        assert [report["comm"]["round_trip"] for report in results(W)] == [[True, True]] * W


def test_lengths_that_do_not_divide_are_named():
    with pytest.raises(ValueError, match=r"T=12 is not divisible by the 8 chunks of the 'zigzag' layout for world_s"):
        shard_sequence(randn(1, 1, 12, 2), 0, 4, layout="zigzag")
    with pytest.raises(ValueError, match=r"T=10 is not divisible by the 4 chunks of the 'contiguous' layout"):
        chunk_length(10, 4)
    with pytest.raises(ValueError, match="layout must be one of"):
        shard_sequence(randn(1, 1, 8, 2), 0, 2, layout="zig-zag")
    with pytest.raises(ValueError, match="rank must be in"):
        shard_sequence(randn(1, 1, 8, 2), 2, 2)
    with pytest.raises(ValueError, match="dim=3 is out of range"):
        shard_sequence(randn(4, 2), 0, 2, dim=3)
    with pytest.raises(ValueError, match=r"shards of one shape, got rank 0: \(1, 4\), rank 1: \(1, 3\)"):
        gather_sequence([randn(1, 4), randn(1, 3)], dim=-1)
    with pytest.raises(ValueError, match="T=6 is not divisible by the 4 chunks of the 'zigzag'"):
        gather_sequence([randn(3, 1), randn(3, 1)], layout="zigzag", dim=0)
    with pytest.raises(TypeError, match="x must be a"):
        shard_sequence([1, 2], 0, 2)
