"""Checks for the exercises of chapter 1 (self-attention)."""

from __future__ import annotations

import math
from typing import Callable

import torch

from ..core import attention
from ._common import compare, report

__all__ = ["check_scaled_scores", "check_self_attention", "check_softmax_temperature"]


def _inputs(seed: int, *shape: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def check_scaled_scores(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> bool:
    """Exercise 1.1: ``fn(q, k)`` returns the scaled scores ``q kᵀ / √d`` for batched inputs.

    Shapes:
        q: ``(B, T_q, d)``; k: ``(B, T_k, d)``; fn's output: ``(B, T_q, T_k)``
    """
    q, k = _inputs(0, 2, 3, 16), _inputs(1, 2, 5, 16)
    try:
        got = fn(q, k)
    except Exception as e:  # a learner's bug should print, not stop the notebook
        return report("1.1 scaled scores", False, f"{type(e).__name__}: {e}")
    return compare("1.1 scaled scores", got, q @ k.transpose(-2, -1) / math.sqrt(16), atol=1e-10)


def check_self_attention(fn: Callable[..., torch.Tensor]) -> bool:
    """Exercise 1.2: ``fn(x, W_q, W_k, W_v)`` computes single-head self-attention.

    Shapes:
        x: ``(B, T, d_in)``; W_*: ``(d_in, d_out)``; fn's output: ``(B, T, d_out)``
    """
    x = _inputs(2, 2, 4, 6)
    W_q, W_k, W_v = _inputs(3, 6, 8), _inputs(4, 6, 8), _inputs(5, 6, 8)
    try:
        got = fn(x, W_q, W_k, W_v)
    except Exception as e:
        return report("1.2 self-attention", False, f"{type(e).__name__}: {e}")
    expected = attention(x @ W_q, x @ W_k, x @ W_v)
    return compare("1.2 self-attention", got, expected, atol=1e-10)


def check_softmax_temperature(fn: Callable[[torch.Tensor, float], torch.Tensor]) -> bool:
    """Exercise 1.3: ``fn(scores, tau)`` is the softmax of ``scores / tau`` over the last axis.

    Shapes:
        scores: ``(T_q, T_k)``; fn's output: ``(T_q, T_k)``
    """
    s = _inputs(6, 4, 7) * 3
    for tau in (0.25, 1.0, 4.0):
        try:
            got = fn(s, tau)
        except Exception as e:
            return report("1.3 temperature", False, f"{type(e).__name__}: {e}")
        if not compare(f"1.3 temperature (tau={tau})", got, torch.softmax(s / tau, dim=-1), atol=1e-10):
            return False
    return True
