"""attn_core.teach.exercises.ch22: the right and wrong answers of exercises 22.1-22.3 (ANSWERS, held to
the standard by tests/test_teach_exercises_standard.py)."""

from __future__ import annotations

import torch

from attn_core.teach.exercises.ch22 import (
    PREFIX_PROMPTS,
    check_block_gather,
    check_prefix_hits,
    check_tokens_per_call,
    measured_prefix_hits,
)


# Exercise 22.1: hits of prompts run one after another. Whole blocks of the chained
# prefix, at most up to the prompt's last token, which is always computed.
def _hits(prompts, block_size, *, last_token=True, chained=True, whole_blocks=True):
    seen_chains, seen_blocks, out = set(), set(), []
    for p in prompts:
        limit = (len(p) - 1) if last_token else len(p)
        n, past = 0, ()
        for b in range(limit // block_size if whole_blocks else 1):
            block = tuple(p[b * block_size : (b + 1) * block_size])
            key = (past, block) if chained else block
            if key not in (seen_chains if chained else seen_blocks):
                break
            n += block_size
            past += block
        if not whole_blocks:  # the longest common token prefix with an earlier prompt
            n = max([_common(p, q) for q in prompts[: len(out)]] + [0])
            n = min(n, len(p) - 1) if last_token else n
        out.append(n)
        past = ()
        for b in range(len(p) // block_size):
            block = tuple(p[b * block_size : (b + 1) * block_size])
            seen_chains.add((past, block))
            seen_blocks.add(block)
            past += block
    return out


def _common(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_the_hits_model_matches_the_engine():
    assert _hits([list(p) for p in PREFIX_PROMPTS], 4) == measured_prefix_hits()


# Exercise 22.2: the gather, fixed (positions before heads before flattening) and the bug.
def _gather(pool, table, length):
    N, H, S, D = pool.shape
    blocks = pool[torch.tensor(table)]  # (n, H, S, D)
    return blocks.transpose(1, 2).reshape(-1, H, D)[:length]  # (n * S, H, D) -> (length, H, D)


def _gather_heads_mixed(pool, table, length):  # the page's bug: right for one head only
    N, H, S, D = pool.shape
    return pool[torch.tensor(table)].reshape(-1, H, D)[:length]


def _gather_in_order(pool, table, length):  # ignores the table: right for a table 0, 1, 2, ...
    N, H, S, D = pool.shape
    return pool.transpose(1, 2).reshape(-1, H, D)[:length]


def _gather_whole_blocks(pool, table, length):  # forgets to cut the last block short
    N, H, S, D = pool.shape
    return pool[torch.tensor(table)].transpose(1, 2).reshape(-1, H, D)


# Exercise 22.3: tokens per target call.
def _expected(alpha, k):
    return (1 - alpha ** (k + 1)) / (1 - alpha)


ANSWERS = {
    check_prefix_hits: (
        [_hits],
        [
            (lambda prompts, S: _hits(prompts, S, whole_blocks=False), "only whole blocks are shared"),
            (lambda prompts, S: _hits(prompts, S, last_token=False), "its last token is computed anyway"),
            (lambda prompts, S: _hits(prompts, S, chained=False), "a block's hash includes its past"),
        ],
    ),
    check_block_gather: (
        [_gather],
        [
            (_gather_heads_mixed, "H=3, table [5, 2, 7], T=11: 11 of 11 positions wrong"),
            (_gather_in_order, "positions wrong (NaN)"),
            (_gather_whole_blocks, "expected (11, 3, 3)"),
        ],
    ),
    check_tokens_per_call: (
        [_expected],
        [
            (lambda alpha, k: (1 - alpha**k) / (1 - alpha), "own token is missing"),
            (lambda alpha, k: 1 + k * alpha, "needs all before it kept"),
            (lambda alpha, k: 1 / (1 - alpha), "at most k proposals per call"),
            (lambda alpha, k: k + 1.5, "more than k + 1"),
        ],
    ),
}
