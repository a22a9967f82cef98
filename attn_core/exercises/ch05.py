"""Checks for the exercises of chapter 5 (multi-query attention)."""

from __future__ import annotations

from typing import Callable

import torch

from ..attention import MultiHeadAttention, MultiQueryAttention
from ..mla import kv_cache_elements_per_token
from ._common import check_counts, compare, report

__all__ = ["check_broadcast_kv", "check_mqa_parameters", "check_kv_cache_per_token"]


def check_broadcast_kv(fn: Callable[[torch.Tensor, int], torch.Tensor]) -> bool:
    """Exercise 5.1: ``fn(k, n_heads)`` gives every query head the one key head, *without a copy*.

    The result must be a view of ``k`` (same storage, stride 0 along the head axis).

    Shapes:
        k: ``(B, 1, T, D)``; fn's output: ``(B, H, T, D)``
    """
    name = "5.1 broadcast K/V"
    g = torch.Generator().manual_seed(50)
    k = torch.randn(2, 1, 5, 4, generator=g, dtype=torch.float64)
    try:
        got = fn(k, 6)
    except Exception as e:  # a learner's bug should print, not stop the notebook
        return report(name, False, f"{type(e).__name__}: {e}")
    expected = k.expand(2, 6, 5, 4)  # (B, H, T, D)
    if not (isinstance(got, torch.Tensor) and got.shape == expected.shape and torch.equal(got, expected)):
        return compare(name, got, expected, atol=0.0)
    if got.untyped_storage().data_ptr() != k.untyped_storage().data_ptr() or got.stride(1) != 0:
        copied = got.untyped_storage().nbytes()
        return report(
            name,
            False,
            f"the result is a copy ({copied} bytes, {copied // k.untyped_storage().nbytes()}× "
            "the key head): use expand, not repeat",
        )
    return report(name, True, "a view with stride 0 along the heads: no bytes copied")


def check_mqa_parameters(fn: Callable[[int, int], int]) -> bool:
    """Exercise 5.2: ``fn(d_model, n_heads)`` is the parameter count of a multi-query layer (no biases).

    The reference is counted from :class:`~attn_core.MultiQueryAttention` modules.
    """
    name = "5.2 MQA parameters"
    cases = [(16, 4), (64, 8), (48, 12), (32, 1)]
    for d_model, n_heads in cases:
        with torch.random.fork_rng(devices=[]):  # building a layer must not move the notebook's RNG
            want = sum(p.numel() for p in MultiQueryAttention(d_model, n_heads).parameters())
        try:
            got = fn(d_model, n_heads)
        except Exception as e:
            return report(name, False, f"{type(e).__name__}: {e}")
        if got != want:
            return report(name, False, f"d_model={d_model}, n_heads={n_heads}: got {got!r}, the module has {want}")
    return report(name, True, f"all {len(cases)} layers match their modules")


def check_kv_cache_per_token(fn: Callable[..., int]) -> bool:
    """Exercise 5.3: ``fn(n_layers, n_heads, n_kv_heads, head_dim)``: KV-cache elements one token
    occupies in a whole model (every layer), measured from the caches real layers fill.
    """
    name = "5.3 KV cache per token"
    cases = []
    for n_layers, n_heads, n_kv_heads, head_dim in [(2, 4, 4, 8), (2, 4, 1, 8), (6, 8, 2, 16), (3, 6, 3, 4)]:
        with torch.random.fork_rng(devices=[]):
            layer = MultiHeadAttention(n_heads * head_dim, n_heads, n_kv_heads=n_kv_heads)
            want = n_layers * kv_cache_elements_per_token(layer)
        cases.append((dict(n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads, head_dim=head_dim), want))
    return check_counts(name, fn, cases, f"all {len(cases)} models match their measured caches")
