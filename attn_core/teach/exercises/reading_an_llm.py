"""Checks for the exercises of the appendix "Reading a real language model" (SmolLM2-135M).

The checks run on seeded random inputs, not on the model, so they are quick and need no
download; what the learner writes is what the appendix computes on SmolLM2.
"""

from __future__ import annotations

from typing import Callable

import torch

from ._common import check_counts, compare, report

__all__ = ["check_sink_mass", "check_logit_difference", "check_gqa_cache_bytes"]


def check_sink_mass(fn: Callable[[torch.Tensor, int], torch.Tensor]) -> bool:
    """Exercise A.1: ``fn(weights, min_query)`` is the mean attention weight on token 0, per layer and head.

    The mean runs over the queries at positions ``min_query`` and later (the first queries
    see few tokens, and query 0 sees only token 0) and over the batch if there is one.

    Shapes:
        weights: ``(L, H, T, T)`` or ``(B, L, H, T, T)`` -> ``(L, H)``
    """
    name = "A.1 sink mass"
    g = torch.Generator().manual_seed(1001)
    for shape, min_query in (((3, 2, 9, 9), 4), ((2, 3, 2, 7, 7), 1), ((1, 1, 5, 5), 0)):
        scores = torch.randn(*shape, generator=g, dtype=torch.float64)
        T = shape[-1]
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        weights = scores.softmax(-1)
        expected = weights[..., min_query:, 0].mean(-1)  # (..., L, H)
        if expected.dim() == 3:
            expected = expected.mean(0)
        try:
            got = fn(weights, min_query)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            if not torch.allclose(got.double(), expected, atol=1e-10):
                all_queries = weights[..., :, 0].mean(-1)
                all_queries = all_queries.mean(0) if all_queries.dim() == 3 else all_queries
                early = torch.allclose(got.double(), all_queries)
                hint = " (the queries before min_query are counted)" if early else ""
                return report(name, False, f"weights {shape}, min_query={min_query}: wrong values{hint}")
        elif not compare(name, got, expected, atol=1e-10):
            return False
    return report(name, True, "one number per layer and head, with and without a batch")


def check_logit_difference(fn: Callable[..., torch.Tensor]) -> bool:
    """Exercise A.2: ``fn(logits, last, io, s)``: per prompt, the logit of the indirect object minus the subject's.

    ``logits`` are the model's for a padded batch; prompt ``b`` ends at position ``last[b]``,
    whose logits predict the next token; ``io[b]`` and ``s[b]`` are the two names' token ids.

    Shapes:
        logits: ``(B, T, V)``; last, io, s: ``(B,)`` int64 -> ``(B,)``
    """
    name = "A.2 logit difference"
    g = torch.Generator().manual_seed(1002)
    B, T, V = 4, 6, 11
    logits = torch.randn(B, T, V, generator=g, dtype=torch.float64)
    last = torch.tensor([5, 3, 4, 2])
    io, s = torch.tensor([1, 7, 3, 0]), torch.tensor([2, 1, 9, 10])
    at_last = logits[torch.arange(B), last]  # (B, V)
    expected = at_last.gather(1, io[:, None])[:, 0] - at_last.gather(1, s[:, None])[:, 0]
    try:
        got = fn(logits, last, io, s)
    except Exception as e:
        return report(name, False, f"{type(e).__name__}: {e}")
    if isinstance(got, torch.Tensor) and got.shape == expected.shape:
        at_end = logits[:, -1]
        if torch.allclose(got.double(), at_end.gather(1, io[:, None])[:, 0] - at_end.gather(1, s[:, None])[:, 0]):
            return report(name, False, "read at each prompt's last token (last[b]), not at the padded end")
        if torch.allclose(got.double(), -expected):
            return report(name, False, "the sign: indirect object minus subject")
    return compare(name, got, expected, atol=1e-10)


def check_gqa_cache_bytes(fn: Callable[..., int]) -> bool:
    """Exercise A.3: ``fn(n_layers, n_kv_heads, head_dim, bytes_per_value)``: K/V cache bytes per token.

    Every layer stores one key and one value vector per key/value head (not per query head).
    """
    cases = [
        (dict(n_layers=30, n_kv_heads=3, head_dim=64, bytes_per_value=2), 2 * 30 * 3 * 64 * 2),
        (dict(n_layers=2, n_kv_heads=1, head_dim=8, bytes_per_value=4), 2 * 2 * 1 * 8 * 4),
        (dict(n_layers=32, n_kv_heads=8, head_dim=128, bytes_per_value=1), 2 * 32 * 8 * 128),
    ]
    return check_counts("A.3 K/V bytes per token", fn, cases, "keys and values, per layer and K/V head")
