"""Checks for the exercises of chapter 6 (grouped-query attention)."""

from __future__ import annotations

from typing import Callable

import torch

from ..cache import KVCache
from ._common import check_counts, compare, report

__all__ = ["check_repeat_kv", "check_mean_pool_kv", "check_kv_cache_bytes"]


def check_repeat_kv(fn: Callable[[torch.Tensor, int], torch.Tensor]) -> bool:
    """Exercise 6.1: ``fn(k, n_rep)`` repeats each key/value head for the ``n_rep`` *adjacent*
    query heads of its group: heads ``[a, b]`` become ``[a, a, a, b, b, b]``.

    Shapes:
        k: ``(B, H_kv, T, D)``; fn's output: ``(B, H_kv·n_rep, T, D)``
    """
    name = "6.1 repeat K/V"
    g = torch.Generator().manual_seed(60)
    k = torch.randn(2, 3, 4, 5, generator=g, dtype=torch.float64)
    try:
        got = fn(k, 4)
    except Exception as e:  # a learner's bug should print, not stop the notebook
        return report(name, False, f"{type(e).__name__}: {e}")
    expected = k.repeat_interleave(4, dim=1)  # (B, 12, T, D)
    if isinstance(got, torch.Tensor) and got.shape == expected.shape and torch.equal(got, k.repeat(1, 4, 1, 1)):
        return report(
            name,
            False,
            "tiled [a, b, c, a, b, c, ...]: query heads 0-3 must share head a (repeat_interleave, not repeat)",
        )
    return compare(name, got, expected, atol=0.0)


def check_mean_pool_kv(fn: Callable[[torch.Tensor, int, int], torch.Tensor]) -> bool:
    """Exercise 6.2: ``fn(weight, n_heads, n_kv_heads)`` mean-pools a key (or value) projection
    of ``n_heads`` heads into ``n_kv_heads`` heads, averaging *adjacent* heads (Ainslie et al., 2023).

    Shapes:
        weight: ``(n_heads·D, d_model)`` (an ``nn.Linear`` weight); fn's output: ``(n_kv_heads·D, d_model)``
    """
    name = "6.2 mean-pool K/V"
    g = torch.Generator().manual_seed(61)
    H, D, d = 8, 3, 10
    w = torch.randn(H * D, d, generator=g, dtype=torch.float64)
    for n_kv in (4, 2, 1, 8):
        try:
            got = fn(w.clone(), H, n_kv)
        except Exception as e:
            return report(name, False, f"{type(e).__name__}: {e}")
        expected = w.view(n_kv, H // n_kv, D, d).mean(1).reshape(n_kv * D, d)
        if isinstance(got, torch.Tensor) and got.shape == expected.shape and not torch.allclose(got, expected):
            strided = w.view(H // n_kv, n_kv, D, d).mean(0).reshape(n_kv * D, d)
            if torch.allclose(got, strided):
                return report(
                    name,
                    False,
                    f"n_kv_heads={n_kv}: averaged heads h, h+{n_kv}, ... (strided); "
                    "group g holds the adjacent heads g·G .. g·G+G-1",
                )
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape or not torch.allclose(got, expected):
            return compare(f"{name} (n_kv_heads={n_kv})", got, expected, atol=1e-12)
    return report(name, True, "n_kv_heads = 4, 2, 1 and 8 all match")


def check_kv_cache_bytes(fn: Callable[..., int]) -> bool:
    """Exercise 6.3: ``fn(n_layers, n_kv_heads, head_dim, seq_len, batch_size, dtype)``: bytes of
    the key/value caches of a whole model, measured from :class:`~attn_core.KVCache` objects.
    """
    name = "6.3 KV-cache bytes"
    cases = [
        (
            dict(n_layers=L, n_kv_heads=n_kv, head_dim=D, seq_len=T, batch_size=B, dtype=dtype),
            L * KVCache(B, n_kv, D, T, dtype=dtype).nbytes(),
        )
        for L, n_kv, D, T, B, dtype in [
            (2, 4, 8, 16, 1, torch.float32),
            (3, 1, 16, 10, 2, torch.float16),
            (4, 2, 4, 7, 3, torch.bfloat16),
        ]
    ]
    return check_counts(name, fn, cases, f"all {len(cases)} models match their caches")
