"""Checks for the exercises of chapter 11 (the simplified block)."""

from __future__ import annotations

from typing import Callable

import torch

from ..core import attention
from ..mistakes import leaky_shaped_attention
from ..simplified import centring_matrix
from ._common import compare, report

__all__ = ["check_centring_matrix", "check_shaped_attention", "check_causality_test"]


def check_centring_matrix(fn: Callable[[int], torch.Tensor]) -> bool:
    """Exercise 11.1: ``fn(T)`` is the causal uniform matrix ``C`` (row ``i`` averages positions ``0..i``).

    Shapes:
        fn's output: ``(T, T)``
    """
    for T in (1, 4, 9):
        try:
            got = fn(T)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report("11.1 centring matrix", False, f"{type(e).__name__}: {e}")
        if isinstance(got, torch.Tensor) and got.shape == (T, T) and (got.triu(1) != 0).any():
            return report("11.1 centring matrix", False, f"T={T}: weight above the diagonal: C must be causal")
        if not compare(f"11.1 centring matrix (T={T})", got, centring_matrix(T, dtype=torch.float64), atol=1e-7):
            return False
    return True


def _reference_shaped(q, k, v, alpha, beta, gamma):
    T = q.shape[-2]
    out_softmax = attention(q, k, v, is_causal=True)  # (B, H, T, D)
    a, b, g = (t.view(-1, 1, 1) for t in (alpha, beta, gamma))  # (H,) -> (H, 1, 1)
    return a * v + b * out_softmax - g * (centring_matrix(T, dtype=v.dtype) @ v)


def check_shaped_attention(fn: Callable[..., torch.Tensor]) -> bool:
    """Exercise 11.2: ``fn(q, k, v, alpha, beta, gamma)`` is ``(α I + β softmax(QKᵀ/√D + M) − γ C) V`` per head.

    Shapes:
        q, k, v: ``(B, H, T, D)``; alpha, beta, gamma: ``(H,)``; fn's output: ``(B, H, T, D)``
    """
    g = torch.Generator().manual_seed(110)
    q, k, v = (torch.randn(2, 3, 5, 4, generator=g, dtype=torch.float64) for _ in range(3))
    alpha, beta, gamma = (1 + 0.3 * torch.randn(3, generator=g, dtype=torch.float64) for _ in range(3))
    try:
        got = fn(q, k, v, alpha, beta, gamma)
    except Exception as e:
        return report("11.2 shaped attention", False, f"{type(e).__name__}: {e}")
    leaky, _ = leaky_shaped_attention(q, k, v, alpha, beta, gamma)
    if isinstance(got, torch.Tensor) and got.shape == leaky.shape and torch.allclose(got.double(), leaky, atol=1e-8):
        return report("11.2 shaped attention", False, "this is the leaky version: mask the scores and make C causal")
    return compare("11.2 shaped attention", got, _reference_shaped(q, k, v, alpha, beta, gamma), atol=1e-8)


def check_causality_test(leaks: Callable[[Callable[..., torch.Tensor]], bool]) -> bool:
    """Exercise 11.3: ``leaks(fn)`` returns True if ``fn(q, k, v, alpha, beta, gamma)`` lets a position see its future.

    It is run on the leaky implementation (must return True) and on the correct one
    (must return False). Feed random queries and unequal gains: with ``q = 0`` and
    ``β = γ`` (the initialisation) the two bugs cancel and no test can see them.
    """

    def correct(q, k, v, alpha, beta, gamma):
        return _reference_shaped(q, k, v, alpha, beta, gamma)

    def leaky(q, k, v, alpha, beta, gamma):
        return leaky_shaped_attention(q, k, v, alpha, beta, gamma)[0]

    cases = (("leaky", leaky, True), ("correct", correct, False))
    for name, fn, expected in cases:
        try:
            got = leaks(fn)
        except Exception as e:
            return report("11.3 causality test", False, f"{type(e).__name__}: {e}")
        if bool(got) != expected:
            return report("11.3 causality test", False, f"leaks({name}) returned {got!r}, expected {expected}")
    return report("11.3 causality test", True, "catches the leak and passes the correct version")
