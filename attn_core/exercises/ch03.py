"""Checks for the exercises of chapter 3 (multi-head attention)."""

from __future__ import annotations

from typing import Callable

import torch

from ..attention import MultiHeadAttention
from ._common import compare, report

__all__ = ["check_split_heads", "check_merge_heads", "check_mha_parameters"]


def _inputs(seed: int, *shape: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def check_split_heads(fn: Callable[[torch.Tensor, int], torch.Tensor]) -> bool:
    """Exercise 3.1: ``fn(x, n_heads)`` splits the last axis into heads and moves heads before time.

    Head ``h`` owns features ``h·D .. (h+1)·D - 1`` of every token.

    Shapes:
        x: ``(B, T, H·D)``; fn's output: ``(B, H, T, D)``
    """
    name = "3.1 split heads"
    B, T, H, D = 2, 5, 3, 4
    x = _inputs(30, B, T, H * D)
    try:
        got = fn(x, H)
    except Exception as e:  # a learner's bug should print, not stop the notebook
        return report(name, False, f"{type(e).__name__}: {e}")
    expected = x.view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
    if isinstance(got, torch.Tensor) and got.shape == expected.shape and not torch.equal(got, expected):
        if torch.equal(got, x.reshape(B, H, T, D)):
            return report(
                name, False, "x.view(B, H, T, D) mixes tokens into heads: view as (B, T, H, D), then transpose"
            )
    return compare(name, got, expected, atol=0.0)


def check_merge_heads(fn: Callable[[torch.Tensor], torch.Tensor]) -> bool:
    """Exercise 3.2: ``fn(x)`` undoes the split: heads side by side again, for every token.

    Shapes:
        x: ``(B, H, T, D)``; fn's output: ``(B, T, H·D)``
    """
    name = "3.2 merge heads"
    B, H, T, D = 2, 3, 5, 4
    x = _inputs(31, B, H, T, D)
    try:
        got = fn(x)
    except Exception as e:
        return report(name, False, f"{type(e).__name__}: {e}")
    expected = x.transpose(1, 2).reshape(B, T, H * D)  # (B, T, H·D)
    if isinstance(got, torch.Tensor) and got.shape == expected.shape and not torch.equal(got, expected):
        if torch.equal(got, x.reshape(B, T, H * D)):
            return report(name, False, "reshaped without moving the head axis back: transpose(1, 2) first")
    return compare(name, got, expected, atol=0.0)


def check_mha_parameters(fn: Callable[..., int]) -> bool:
    """Exercise 3.3: ``fn(d_model, n_heads, bias)`` is the parameter count of a multi-head attention layer.

    The reference is counted from :class:`~attn_core.MultiHeadAttention` modules.
    """
    name = "3.3 parameter count"
    cases = [(16, 4, False), (16, 4, True), (48, 3, True), (64, 16, False)]
    for d_model, n_heads, bias in cases:
        with torch.random.fork_rng(devices=[]):  # building a layer must not move the notebook's RNG
            layer = MultiHeadAttention(d_model, n_heads, bias=bias)
        want = sum(p.numel() for p in layer.parameters())
        try:
            got = fn(d_model, n_heads, bias)
        except Exception as e:
            return report(name, False, f"{type(e).__name__}: {e}")
        if got != want:
            hint = " (the count does not depend on n_heads)" if not bias else ""
            return report(
                name,
                False,
                f"d_model={d_model}, n_heads={n_heads}, bias={bias}: got {got!r}, the module has {want}{hint}",
            )
    return report(name, True, f"all {len(cases)} layers match their modules")
