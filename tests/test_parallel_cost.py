"""attn_core.parallel.cost: the per-rank record of bytes and scores, filled while a count_cost block is open."""

from __future__ import annotations

from attn_core.parallel.cost import count_cost, record_bytes, record_scores


def test_counts_only_inside_the_block_and_nested_blocks_both_count():
    record_bytes("ring_shift", 10, 20)  # no block open: nothing is kept
    with count_cost() as outer:
        record_bytes("ring_shift", 8, 8)
        with count_cost() as inner:
            record_bytes("all_to_all", 3, 5)
            record_scores(4, 6)
        record_scores(2, 2)
    record_scores(100, 100)
    assert (outer.bytes_sent, outer.bytes_received, outer.scores, outer.blocks) == (11, 13, 28, 2)
    assert (inner.bytes_sent, inner.bytes_received, inner.scores, inner.blocks) == (3, 5, 24, 1)
    assert outer.calls == {"ring_shift": 1, "all_to_all": 1} and inner.calls == {"all_to_all": 1}


def test_a_block_left_by_an_exception_stops_counting():
    try:
        with count_cost() as cost:
            raise RuntimeError("stop")
    except RuntimeError:
        pass
    record_bytes("all_gather", 1, 1)
    assert cost.bytes_sent == 0
