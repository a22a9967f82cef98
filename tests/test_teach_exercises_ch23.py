"""attn_core.teach.exercises.ch23: the right and wrong answers of exercises 23.1-23.3 (ANSWERS, held to
the standard by tests/test_teach_exercises_standard.py)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from attn_core.parallel.sharding import shard_chunks
from attn_core.teach.exercises.ch23 import (
    LAYOUT_CASES,
    _critical_path,
    _tiles,
    check_balanced_layout,
    check_ring_backward_bytes,
    check_step_plan,
)


# Exercise 23.1: the ring's backward bytes. K, V go W - 1 hops again; dK, dV go W hops.
# dK, dV travel in float32 at least.
def _backward(B, H, H_kv, T, D, W, element_size):
    shard = B * H_kv * (T // W) * 2 * D  # one rank's K and V, in elements
    return (W - 1) * shard * element_size + W * shard * max(element_size, 4)


def _gradients_in_input_dtype(B, H, H_kv, T, D, W, element_size):  # right in float64 only
    return (2 * W - 1) * B * H_kv * (T // W) * 2 * D * element_size


def _forward_only(B, H, H_kv, T, D, W, element_size):
    return (W - 1) * B * H_kv * (T // W) * 2 * D * element_size


def _no_home_hop(B, H, H_kv, T, D, W, element_size):
    return 2 * (W - 1) * B * H_kv * (T // W) * 2 * D * element_size


def _query_heads(B, H, H_kv, T, D, W, element_size):
    return (2 * W - 1) * B * H * (T // W) * 2 * D * element_size


# Exercise 23.2: a balanced layout; mirrored pairs, and a search for an odd count per rank.
def _balanced(W, n):
    if n % 2 == 0:
        pairs = [(i, 2 * W * (n // 2) - 1 - i) for i in range(W * n // 2)]  # work i + 1 and n·W - i
        return [sum((pairs[r + W * j] for j in range(n // 2)), ()) for r in range(W)]
    work = {i: i + 1 for i in range(n * W)}
    target = sum(work.values()) // W

    def search(left, ranks):
        if not left:
            return ranks
        first = min(left)
        for rest in itertools.combinations(sorted(left - {first}), n - 1):
            chunks = (first, *rest)
            if sum(work[i] for i in chunks) == target:
                found = search(left - set(chunks), ranks + [chunks])
                if found:
                    return found
        return None

    return search(set(range(n * W)), [])


def _none_for_odd(W, n):  # gives up on every odd count, some of which have a layout
    return _balanced(W, n) if n % 2 == 0 else None


def _divisible_only(W, n):  # None only where the total does not split: misses n = 1
    total = n * W * (n * W + 1) // 2
    return None if total % W else (_balanced(W, n) or _contiguous(W, n))


def _unsynchronised(W, n):  # equal totals at W = 4, n = 4, unequal steps: path 36, not 34
    if (W, n) == (4, 4):
        return [(2, 3, 12, 13), (1, 4, 10, 15), (0, 7, 9, 14), (5, 6, 8, 11)]
    return _balanced(W, n)


def _contiguous(W, n):
    return [tuple(range(r * n, (r + 1) * n)) for r in range(W)]


def _striped(W, n):  # Striped Attention's round robin: nearly balanced, not exactly
    return [tuple(r + W * j for j in range(n)) for r in range(W)]


def _zigzag_shifted(W, n):  # zig-zag pairs shifted by W: the chunks overlap
    return [tuple(x for j in range(n) for x in (r + W * j, 2 * W - 1 - r + W * j))[:n] for r in range(W)]


# Exercise 23.3: the ring step's plan. The bug: ranks compared instead of chunks.
def _plan(rank, source, W, layout):
    mine, theirs = shard_chunks(rank, W, layout), shard_chunks(source, W, layout)
    return [(a, b, theirs[b] == mine[a]) for a in range(len(mine)) for b in range(len(theirs)) if theirs[b] <= mine[a]]


def _buggy(rank, source, W, layout):
    mine, theirs = shard_chunks(rank, W, layout), shard_chunks(source, W, layout)
    return [
        (a, b, source == rank and a == b)
        for a in range(len(mine))
        for b in range(len(theirs))
        if source < rank or (source == rank and b <= a)
    ]


def _no_diagonal(rank, source, W, layout):
    mine, theirs = shard_chunks(rank, W, layout), shard_chunks(source, W, layout)
    return [(a, b, False) for a in range(len(mine)) for b in range(len(theirs)) if theirs[b] < mine[a]]


def _local_flag(rank, source, W, layout):  # right blocks, causal flag from local indices
    mine, theirs = shard_chunks(rank, W, layout), shard_chunks(source, W, layout)
    return [(a, b, a == b) for a in range(len(mine)) for b in range(len(theirs)) if theirs[b] <= mine[a]]


ANSWERS = {
    check_ring_backward_bytes: (
        [_backward],
        [
            (_forward_only, "forward pass's traffic"),
            (_no_home_hop, "one more hop"),
            (_query_heads, "only the key/value heads travel"),
            (_gradients_in_input_dtype, "travel in float32"),
        ],
    ),
    check_balanced_layout: (
        [_balanced],
        [
            (_contiguous, "max/mean"),
            (_striped, "max/mean"),
            (_zigzag_shifted, "not a partition"),
            (_none_for_odd, "a balanced layout exists"),
            (_divisible_only, "return None"),
            (_unsynchronised, "critical path is 36 blocks, not 34"),
        ],
    ),
    check_step_plan: (
        [_plan],
        [
            (_buggy, "zigzag"),
            (_no_diagonal, "never meets"),
            (_local_flag, "wrong causal flag"),
        ],
    ),
}


def _w_plus_2(B, H, H_kv, T, D, W, element_size):  # right at W = 3 only
    return (W + 2) * B * H_kv * (T // W) * 2 * D * element_size


def test_the_layout_cases_say_rightly_which_have_a_balanced_layout():
    # _balanced searches every partition of equal sums, so None means that none exists.
    for W, n, exists in LAYOUT_CASES:
        assert (_balanced(W, n) is not None) == exists, (W, n)


def test_the_unsynchronised_layout_has_equal_totals():
    # Its only fault is the ring's steps: each rank's total is the mean, 34 blocks.
    layout = _unsynchronised(4, 4)
    work = _tiles(16).sum(dim=1).tolist()
    assert {sum(work[i] for i in chunks) for chunks in layout} == {34}
    assert _critical_path(layout, _tiles(16)) == 36


def test_backward_bytes_checked_at_a_second_world_size(capsys):
    assert not check_ring_backward_bytes(_w_plus_2)
    assert "right at W=3, not at W=2" in capsys.readouterr().out


def test_the_buggy_plan_passes_the_obvious_test():
    # The exercise's premise: the bug hides under the contiguous layout.
    for W in (2, 3, 4):
        for rank in range(W):
            for source in range(W):
                assert _buggy(rank, source, W, "contiguous") == _plan(rank, source, W, "contiguous")


def test_the_page_gives_the_buggy_plan():
    # The notebook's "your turn" cell holds the plan to fix: the one above, bug and all.
    chapter = Path(__file__).parents[1] / "book" / "23_attention_across_devices.ipynb"
    cells = ["".join(c["source"]) for c in json.loads(chapter.read_text())["cells"] if c["cell_type"] == "code"]
    given = next(c for c in cells if "# fix me" in c)
    source = given[given.index("def step_plan") : given.index("\n\n\nok = ")]
    namespace = {"shard_chunks": shard_chunks}
    exec(source, namespace)
    for W, layout in itertools.product((2, 3, 4), ("contiguous", "zigzag")):
        for rank, src in itertools.product(range(W), range(W)):
            assert namespace["step_plan"](rank, src, W, layout) == _buggy(rank, src, W, layout)
