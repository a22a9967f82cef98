"""Checks for the exercises of chapter 22 (serving attention).

* :func:`check_prefix_hits` (predict, then run): the prompt tokens each request finds in
  the prefix cache when requests run one after another, held against
  ``Engine.stats.cached_prefix_tokens`` measured on a tiny model, on prompts chosen so
  that each slip shows (a match that ends inside a block, an equal block after a
  different past, a prompt that is cached whole).
* :func:`check_block_gather` (find the bug): a request's keys gathered from a pool of
  blocks through its table; the fixed gather is run with several heads, tables out of
  order and lengths that end inside a block, against the keys stored contiguously.
* :func:`check_tokens_per_call` (derive, then check): the expected tokens one target
  call yields with ``k`` proposals accepted independently with probability ``alpha``,
  held against the library's accept/reject rule
  (:func:`attn_core.serving.speculative.accept_drafts`) sampled round after round with
  target and draft laws that do not depend on the context (so that every proposal is
  kept with the same probability, ``sum(min(p, q))``).
"""

from __future__ import annotations

import torch

from ...config import DecoderConfig
from ...model.decoder import DecoderLM
from ...serving.engine import Engine
from ...serving.speculative import accept_drafts
from ._common import report

__all__ = ["check_prefix_hits", "check_block_gather", "check_tokens_per_call"]

# Exercise 22.1: prompts run one after another through one engine (blocks of 4 tokens).
# 0: a fresh prompt. 1: shares 6 tokens with 0 (one full block and half of the next).
# 2: prompt 0 whole (8 tokens, two full blocks; the last token is always computed).
# 3: starts with the tokens of prompt 0's second block (equal tokens, another past).
# 4: prompt 0 and one more token (two full blocks found, then the rest).
PREFIX_BLOCK = 4
PREFIX_PROMPTS = (
    (1, 2, 3, 4, 5, 6, 7, 8),
    (1, 2, 3, 4, 5, 6, 20, 21, 22),
    (1, 2, 3, 4, 5, 6, 7, 8),
    (5, 6, 7, 8, 9, 10),
    (1, 2, 3, 4, 5, 6, 7, 8, 11, 12),
)


def _tiny_lm(vocab: int = 32) -> DecoderLM:
    config = DecoderConfig.llama_like(vocab_size=vocab, d_model=16, n_heads=2, n_kv_heads=1, n_layers=1, max_len=64)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return DecoderLM(config).double().eval()


def measured_prefix_hits(prompts=PREFIX_PROMPTS, block_size: int = PREFIX_BLOCK) -> list[int]:
    """Prompt tokens each request found in the prefix cache, run one after another (measured)."""
    engine = Engine(_tiny_lm(), block_size=block_size, num_blocks=32, max_batch_tokens=64)
    hits = []
    for p in prompts:
        before = engine.stats.cached_prefix_tokens
        engine.add(list(p), 1)
        engine.run()
        hits.append(engine.stats.cached_prefix_tokens - before)
    return hits


def check_prefix_hits(fn) -> bool:
    """Exercise 22.1: ``fn(prompts, block_size)`` -> the cached prompt tokens of each request, in order."""
    name = "22.1 prefix-cache hits"
    prompts = [list(p) for p in PREFIX_PROMPTS]
    try:
        got = fn(prompts, PREFIX_BLOCK)
    except Exception as e:  # a learner's bug prints, it does not stop the notebook
        return report(name, False, f"{type(e).__name__}: {e}")
    want = measured_prefix_hits()
    if not isinstance(got, (list, tuple)) or len(got) != len(want):
        return report(name, False, f"expected a list of {len(want)} counts, got {type(got).__name__}")
    why = {
        1: "only whole blocks are shared",
        2: "its last token is computed anyway",
        3: "a block's hash includes its past",
    }
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            return report(name, False, f"request {i} (got {g!r}): {why.get(i, f'measured {w}')}")
    return report(name, True, f"measured hits {want} at block_size={PREFIX_BLOCK}")


def _keys(T: int, H: int, D: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(T, H, D, generator=g, dtype=torch.float64)  # (T, H, D)


def _pool_with(keys: torch.Tensor, table: list[int], num_blocks: int, S: int) -> torch.Tensor:
    """A pool ``(N, H, S, D)`` (heads before positions, as many kernels store it) holding ``keys`` through ``table``."""
    T, H, D = keys.shape
    pool = torch.full((num_blocks, H, S, D), float("nan"), dtype=keys.dtype)  # unused slots: NaN
    for p in range(T):
        pool[table[p // S], :, p % S] = keys[p]
    return pool


# (length, heads, table): one head in order (the obvious test), then the cases a slip shows in
GATHER_CASES = (
    (8, 1, [0, 1]),
    (11, 3, [5, 2, 7]),
    (16, 2, [3, 0, 6, 1]),
    (5, 4, [1, 4]),
)


def check_block_gather(fn) -> bool:
    """Exercise 22.2: ``fn(pool, table, length)`` -> the request's keys ``(length, H, D)`` in order.

    ``pool`` is ``(num_blocks, H, block_size, D)``; ``table`` the request's block ids.
    """
    name = "22.2 block gather"
    S, D, N = 4, 3, 8
    for i, (T, H, table) in enumerate(GATHER_CASES):
        keys = _keys(T, H, D, seed=i)
        pool = _pool_with(keys, table, N, S)
        try:
            got = fn(pool.clone(), list(table), T)
        except Exception as e:
            return report(name, False, f"length {T}, {H} heads: {type(e).__name__}: {e}")
        if not isinstance(got, torch.Tensor) or got.shape != keys.shape:
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            return report(name, False, f"length {T}, {H} heads: got {shape}, expected {tuple(keys.shape)}")
        if torch.equal(got, keys):
            continue
        # Name the failing case and what differs, not the cause: finding it is the exercise.
        wrong = int((got != keys).flatten(1).any(1).sum())  # NaN differs from everything
        why = f"{wrong} of {T} positions wrong" + (" (NaN)" if torch.isnan(got).any() else "")
        return report(name, False, f"H={H}, table {table}, T={T}: {why}")
    return report(name, True, "the stored keys (1-4 heads, shuffled tables, part blocks)")


# (p, q, k): target and draft laws over 4 tokens, proposals per call; alpha = sum(min(p, q))
TOKENS_CASES = (
    ((0.4, 0.3, 0.2, 0.1), (0.1, 0.2, 0.3, 0.4), 2),  # alpha = 0.6
    ((0.7, 0.1, 0.1, 0.1), (0.85, 0.05, 0.05, 0.05), 4),  # alpha = 0.85
)


def measured_tokens_per_call(p, q, k: int, rounds: int = 1000, seed: int = 0) -> float:
    """Mean tokens one target call yields under the library's accept/reject rule (measured, sampled).

    Each round draws ``k`` proposals from ``q`` and lets
    :func:`~attn_core.serving.speculative.accept_drafts` keep some of them and add one
    token: ``p`` and ``q`` are the same at every position, as if neither model looked at
    the context, so every proposal is kept with the same probability ``sum(min(p, q))``.
    """
    p, q = torch.tensor(p, dtype=torch.float64), torch.tensor(q, dtype=torch.float64)
    logits_p = p.log().expand(k + 1, -1)  # (k + 1, V): the target at each proposal and after
    probs_q = q.expand(k, -1)  # (k, V)
    g = torch.Generator().manual_seed(seed)
    total = 0
    for _ in range(rounds):
        drafts = torch.multinomial(q, k, replacement=True, generator=g).tolist()
        kept, _ = accept_drafts(drafts, logits_p, probs_q, 1.0, g)
        total += kept + 1  # the kept proposals and the target's own token
    return total / rounds


def check_tokens_per_call(fn) -> bool:
    """Exercise 22.3: ``fn(alpha, k)`` -> expected tokens per target call, each proposal kept with probability alpha."""
    name = "22.3 tokens per call"
    for p, q, k in TOKENS_CASES:
        alpha = sum(min(a, b) for a, b in zip(p, q))
        try:
            got = fn(alpha, k)
        except Exception as e:
            return report(name, False, f"α={alpha:.2f}, k={k}: {type(e).__name__}: {e}")
        if not isinstance(got, (int, float)) or isinstance(got, bool):
            return report(name, False, f"expected a number, got {type(got).__name__}")
        with torch.random.fork_rng():
            measured = measured_tokens_per_call(p, q, k)
        # 1000 rounds: the mean's standard error is 0.028 (alpha=0.6, k=2) and 0.049
        # (alpha=0.85, k=4); 0.12 is 2.4 of the larger, and the seed fixes the draw.
        if abs(got - measured) > 0.12:
            typical = {  # the typical slips, recognised by their values
                (1 - alpha**k) / (1 - alpha): "the target's own token is missing",
                1 + k * alpha: "proposal i needs all before it kept",
                1 / (1 - alpha): "at most k proposals per call",
            }
            hint = next((h for v, h in typical.items() if abs(got - v) < 1e-9), f"measured {measured:.3f}")
            hint = "more than k + 1 tokens per call" if got > k + 1 else hint
            return report(name, False, f"α={alpha:.2f}, k={k}: {got:.3f}, {hint}")
    return report(name, True, "within 0.12 of the sampled accept/reject rule (2 cases)")
