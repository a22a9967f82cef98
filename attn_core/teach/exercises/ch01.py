"""Checks for the exercises of chapter 1 (self-attention)."""

from __future__ import annotations

import math
from typing import Callable

import torch

from ...ops.attention import attention
from ._common import mismatch, report

# The exercises: a derivation checked by measurement (a token's score with itself), a
# weight's gradient derived by the chain rule and checked against autograd, and a test
# to write.
__all__ = ["check_self_score", "check_query_weight_grad", "check_scale_test"]


def check_self_score(fn: Callable[[int], tuple[float, float]]) -> bool:
    """Exercise 1.1: ``fn(d_k)`` is ``(mean, variance)`` of a token's scaled score with itself.

    The token is its own query and key (``q = k``, entries independent standard normal), and
    its score is ``q·q / √d_k``. The check measures both moments on 20,000 draws at four
    widths: the answer must lie within 3% of the measured mean (0.05 below a mean of 5/3)
    and 8% of the measured variance (the sampling errors are about 1% and 2%). Then it prints
    what they imply: the mean weight a token gives itself among 16 keys, itself and 15
    independent ones, at three widths.
    """
    name = "1.1 self-score"
    g = torch.Generator().manual_seed(11)
    for d_k in (2, 4, 64, 256):
        try:
            mean, var = (float(x) for x in fn(d_k))
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        q = torch.randn(20_000, d_k, generator=g, dtype=torch.float64)
        s = (q * q).sum(-1) / math.sqrt(d_k)  # (20000,) scaled self-scores
        m, v = s.mean().item(), s.var().item()
        if not abs(mean - m) <= 0.03 * max(m, 5 / 3):
            hint = " (a sum of squares cannot average 0)" if abs(mean) < 0.05 else ""
            return report(name, False, f"d_k={d_k}: measured mean {m:.3g}, yours {mean:.3g}{hint}")
        if not abs(var - v) <= 0.08 * v:
            hint = " (the variance of q_i² is E[q_i⁴] - 1, and E[q_i⁴] = 3)" if var in (1, 3) else ""
            return report(name, False, f"d_k={d_k}: measured variance {v:.3g}, yours {var:.3g}{hint}")
    weights = []
    for d_k in (4, 64, 1024):
        q = torch.randn(500, d_k, generator=g, dtype=torch.float64)
        others = torch.randn(500, 15, d_k, generator=g, dtype=torch.float64)
        keys = torch.cat([q[:, None], others], dim=1)  # (500, 16, d_k): key 0 is q itself
        a = torch.softmax(torch.einsum("nd,nkd->nk", q, keys) / math.sqrt(d_k), dim=-1)
        weights.append(f"{a[:, 0].mean().item():.2f}")
    return report(name, True, f"weight on itself at d_k 4, 64, 1024: {', '.join(weights)}")


def _attention_loss(x, W_q, W_k, W_v, grad_out):
    """``L = Σ (Z ⊙ G)`` for ``Z = softmax(X W_q (X W_k)ᵀ / √d_k) X W_v``: its gradient in ``Z`` is ``G``."""
    q, k, v = x @ W_q, x @ W_k, x @ W_v  # (T, d_k), (T, d_k), (T, d_v)
    a = torch.softmax(q @ k.T / math.sqrt(W_q.shape[-1]), dim=-1)  # (T, T)
    return ((a @ v) * grad_out).sum()


def check_query_weight_grad(fn: Callable[..., torch.Tensor]) -> bool:
    """Exercise 1.2: ``fn(x, W_q, W_k, W_v, grad_out)`` is ``∂L/∂W_q``, derived by hand.

    The layer is ``Z = softmax(Q Kᵀ / √d_k) V`` with ``Q = X W_q``, ``K = X W_k``,
    ``V = X W_v``, and ``grad_out`` is the upstream gradient ``∂L/∂Z``. The answer is
    compared with autograd in float64 in three settings (a flat and a peaked softmax, two
    widths), with ``T``, ``d_in`` and ``d_k`` all different so that a transposed or a
    missing factor shows in the shape. An answer off by exactly ``√d_k`` gets a hint.

    Shapes:
        x: ``(T, d_in)``; W_q, W_k: ``(d_in, d_k)``; W_v: ``(d_in, d_v)``;
        grad_out: ``(T, d_v)``; fn's output: ``(d_in, d_k)``
    """
    name = "1.2 ∂L/∂W_q"
    g = torch.Generator().manual_seed(12)
    for T, d_in, d_k, d_v, spread in ((5, 6, 4, 3, 1.0), (7, 10, 16, 5, 1.0), (6, 5, 8, 2, 3.0)):
        x = torch.randn(T, d_in, generator=g, dtype=torch.float64) * spread
        W_q, W_k = (torch.randn(d_in, d_k, generator=g, dtype=torch.float64) for _ in range(2))
        W_v = torch.randn(d_in, d_v, generator=g, dtype=torch.float64)
        grad_out = torch.randn(T, d_v, generator=g, dtype=torch.float64)
        leaf = W_q.clone().requires_grad_(True)
        (want,) = torch.autograd.grad(_attention_loss(x, leaf, W_k, W_v, grad_out), leaf)
        try:
            got = fn(x.clone(), W_q.clone(), W_k.clone(), W_v.clone(), grad_out.clone())
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        problem = mismatch(got, want, atol=1e-10)
        if problem and mismatch(got, want * math.sqrt(d_k), atol=1e-9) is None:
            problem = f"{problem}: off by exactly √d_k (the scores' scale)"
        if problem:
            return report(name, False, f"T={T}, d_in={d_in}, d_k={d_k}: {problem}")
    return report(name, True, "equal to autograd's ∂L/∂W_q in 3 settings")


def scale_candidates() -> list[tuple[Callable, bool, str]]:
    """Nine attention functions that look alike from outside, each ``attn(q, k, v)``."""

    def make(body: Callable) -> Callable:
        def attn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return body(q, k, v)

        return attn

    def by_hand(q, k, v, scale, after=1.0):
        return torch.softmax(q @ k.transpose(-2, -1) * scale, dim=-1) @ v * after

    return [
        (make(lambda q, k, v: by_hand(q, k, v, 1 / math.sqrt(v.shape[-1]))), False, "scales by √d_v"),
        (make(lambda q, k, v: attention(q, k, v)), True, "attn_core.attention"),
        (make(lambda q, k, v: by_hand(q, k, v, 1.0)), False, "does not scale"),
        (make(lambda q, k, v: by_hand(q, k, v, math.sqrt(q.shape[-1]))), False, "multiplies by √d_k"),
        (make(lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v)), True, "PyTorch's SDPA"),
        (make(lambda q, k, v: by_hand(q, k, v, 1 / q.shape[-1])), False, "scales by 1/d_k"),
        (make(lambda q, k, v: by_hand(q, k, v, 1 / math.sqrt(k.shape[-2]))), False, "divides by √T_k, not √d_k"),
        (make(lambda q, k, v: by_hand(q, k, v, 1 / math.sqrt(q.shape[-1]))), True, "written by hand"),
        (make(lambda q, k, v: by_hand(q, k, v, 1.0, 1 / math.sqrt(q.shape[-1]))), False, "scales after the softmax"),
    ]


def check_scale_test(scaled_correctly: Callable[[Callable[..., torch.Tensor]], bool]) -> bool:
    """Exercise 1.3: ``scaled_correctly(attn)`` says whether ``attn(q, k, v)`` divides by √d_k.

    It is run on nine functions with the same name and signature: three right (attn_core,
    PyTorch's SDPA, by hand) and six wrong (no scale, ``1/d_k``, ``1/√d_v``, ``1/√T_k``,
    ``√d_k`` instead of ``1/√d_k``, and the scale applied to the output instead of the
    scores). A test with ``d_v = d_k`` cannot tell ``√d_v`` from ``√d_k``, nor one with
    ``T_k = d_k`` tell ``√T_k`` from it.

    Shapes:
        the inputs the test passes to ``attn``: q ``(..., T_q, d_k)``, k ``(..., T_k, d_k)``,
        v ``(..., T_k, d_v)``
    """
    name = "1.3 a test for the scale"
    for fn, right, what in scale_candidates():
        try:
            verdict = scaled_correctly(fn)
        except Exception as e:
            return report(name, False, f"{type(e).__name__}: {e}")
        if not isinstance(verdict, bool):
            return report(name, False, f"return True or False, got {verdict!r:.40}")
        if verdict != right:
            if right:
                return report(name, False, f"rejects a right implementation ({what})")
            return report(name, False, f"accepts a wrong implementation: it {what}")
    return report(name, True, "right on all 9 implementations (3 right, 6 wrong)")
