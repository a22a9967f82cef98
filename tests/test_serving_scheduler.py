"""attn_core.serving.scheduler: the step's tokens within the budget, blocks never leaked, no request starved.

The scheduler is driven here without a model: each step "computes" the tokens it was
given and appends a made-up next token, as the engine does with the model's.
"""

from __future__ import annotations

import random

import pytest

from attn_core.caches.paged import BlockPool
from attn_core.serving.prefix import PrefixCache
from attn_core.serving.scheduler import Scheduler, Sequence


def _scheduler(num_blocks: int, block_size: int, max_batch_tokens: int, prefix: bool = True) -> Scheduler:
    return Scheduler(PrefixCache(BlockPool(num_blocks, block_size), enabled=prefix), max_batch_tokens)


def _advance(sched: Scheduler, chosen: list[tuple[Sequence, int]]) -> list[Sequence]:
    """What the engine does after a step: count the tokens computed, append a token, finish."""
    done = []
    for seq, n in chosen:
        seq.computed += n
        sched.blocks.register(seq.table, seq.tokens, seq.computed)
        if seq.computed == len(seq.tokens):
            seq.tokens.append(len(seq.tokens) % 7)
            if seq.finished:
                sched.finish(seq)
                done.append(seq)
    return done


def _run(sched: Scheduler, seqs: list[Sequence], check=None) -> list[list[int]]:
    for seq in seqs:
        sched.add(seq)
    steps = []
    while sched.has_work():
        chosen = sched.schedule()
        assert chosen, "a step with work left scheduled nothing"
        assert sum(n for _, n in chosen) <= sched.max_batch_tokens
        for seq, n in chosen:
            assert seq.table and len(seq.table) * sched.blocks.block_size >= seq.computed + n
        if check:
            check(sched, chosen)
        steps.append([seq.rid for seq, _ in chosen])
        _advance(sched, chosen)
        assert len(steps) < 10_000
    return steps


def _mix(n: int, seed: int, block_size: int = 4) -> list[Sequence]:
    rng = random.Random(seed)
    seqs = []
    for rid in range(n):
        prompt = [rng.randrange(5) for _ in range(rng.randint(1, 20))]
        seqs.append(Sequence(rid, prompt, len(prompt), rng.randint(1, 12)))
    return seqs


@pytest.mark.parametrize("num_blocks, max_batch_tokens", [(64, 32), (10, 8), (8, 3), (8, 1)])
def test_every_request_finishes_and_every_block_comes_back(num_blocks, max_batch_tokens):
    sched = _scheduler(num_blocks, 4, max_batch_tokens)
    seqs = _mix(12, seed=num_blocks + max_batch_tokens)
    pool = sched.blocks.pool

    def held_blocks_are_counted(sched, chosen):
        holders = {}
        for seq in sched.running:
            for block in seq.table:
                holders[block] = holders.get(block, 0) + 1
        assert all(pool.refcount(b) == n for b, n in holders.items())
        assert pool.num_used == len(holders)

    _run(sched, seqs, held_blocks_are_counted)
    assert all(seq.finished and len(seq.generated) == seq.max_new_tokens for seq in seqs)
    assert pool.num_used == 0 and all(pool.refcount(b) == 0 for b in range(pool.num_blocks))


def test_requests_join_and_leave_at_every_step():
    sched = _scheduler(64, 4, 64)
    short = Sequence(0, [1, 2, 3], 3, 2)
    long = Sequence(1, [1, 2], 2, 8)
    late = Sequence(2, [4, 4, 4], 3, 2)
    sched.add(short)
    sched.add(long)
    steps = []
    for step in range(10):
        if step == 2:
            sched.add(late)  # arrives while the others decode: joins at the next step
        chosen = sched.schedule()
        steps.append([s.rid for s, _ in chosen])
        _advance(sched, chosen)
    assert steps[:4] == [[0, 1], [0, 1], [1, 2], [1, 2]]  # 0 leaves after its 2 tokens, 2 joins at once
    assert steps[4:] == [[1]] * 4 + [[]] * 2  # 1 leaves after its 8 tokens


def test_prefill_is_chunked_under_the_budget_and_chunks_end_on_block_boundaries():
    sched = _scheduler(64, 4, 6)
    decoding = Sequence(0, [1], 1, 10)
    prompt = Sequence(1, list(range(5)) * 3, 15, 1)
    sched.add(decoding)
    _advance(sched, sched.schedule())
    sched.add(prompt)
    sizes = []
    while not prompt.finished:
        chosen = dict(sched.schedule())
        assert chosen[decoding] == 1  # the decoding request is never stalled by the long prompt
        sizes.append(chosen.get(prompt))
        _advance(sched, list(chosen.items()))
    assert sizes == [4, 4, 4, 3]  # 5 tokens of budget left each step, cut to the block boundary


def test_the_newest_request_is_preempted_and_recomputed_when_blocks_run_out():
    sched = _scheduler(4, 2, 16, prefix=False)
    old, new = Sequence(0, [1, 2, 3], 3, 5), Sequence(1, [4, 5, 6], 3, 5)
    steps = _run(sched, [old, new])
    assert sched.preemptions >= 1
    assert steps[0] == [0, 1]
    first_alone = next(i for i, s in enumerate(steps) if s == [0])
    assert all(0 in s for s in steps[: first_alone + 1])  # the oldest runs at every step until it is done
    assert old.finished and new.finished and sched.blocks.pool.num_used == 0


def test_a_waiting_request_waits_for_blocks_and_none_is_skipped():
    sched = _scheduler(3, 2, 16)
    seqs = [Sequence(0, [1, 2, 3, 4], 4, 3), Sequence(1, [5, 6, 7, 8], 4, 1), Sequence(2, [9], 1, 1)]
    order = []

    def admitted_in_order(sched, chosen):
        for seq, _ in chosen:
            if seq.rid not in order:
                order.append(seq.rid)

    _run(sched, seqs, admitted_in_order)
    assert order == [0, 1, 2]  # 2 fits before 1 would, but is not admitted ahead of it


def test_a_shared_prefix_is_computed_once():
    sched = _scheduler(32, 4, 64)
    system = [3, 1, 4, 1, 5, 9, 2, 6]
    first = Sequence(0, system + [7], 9, 1)
    _run(sched, [first])
    later = [Sequence(i, system + [i], 9, 2) for i in (1, 2)]
    for seq in later:
        sched.add(seq)
    chosen = sched.schedule()
    assert [n for _, n in chosen] == [1, 1] and all(seq.cached == 8 for seq in later)
