"""Checks for the exercises of chapter 1 (self-attention)."""

from __future__ import annotations

import math
from typing import Callable

import torch

from ...ops.attention import attention
from ._common import mismatch, report

# The exercises of the rewritten chapter (issue 25): a derivation checked by measurement,
# a gradient derived by the chain rule and checked against autograd, and a test to write.
__all__ = ["check_score_scale", "check_query_jacobian", "check_scale_test"]


def check_score_scale(fn: Callable[[int, float, float], float]) -> bool:
    """Exercise 1.1: ``fn(d_k, var_q, var_k)`` is the factor that gives the scores unit variance.

    The entries of ``q`` and ``k`` are independent, mean 0, with variances ``var_q`` and
    ``var_k``. The check compares the answer with the derivation (``1/√(d_k var_q var_k)``)
    and measures it: 10,000 scaled scores drawn with those variances must have a variance
    within 5% of 1.
    """
    name = "1.1 score scale"
    g = torch.Generator().manual_seed(11)
    cases = ((64, 1.0, 1.0), (256, 1 / 3, 1 / 3), (16, 4.0, 0.5), (512, 0.02, 2.0))
    for d_k, var_q, var_k in cases:
        try:
            got = float(fn(d_k, var_q, var_k))
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        want = 1 / math.sqrt(d_k * var_q * var_k)
        q = torch.randn(10_000, d_k, generator=g, dtype=torch.float64) * math.sqrt(var_q)
        k = torch.randn(10_000, d_k, generator=g, dtype=torch.float64) * math.sqrt(var_k)
        measured = ((q * k).sum(-1) * got).var().item() if math.isfinite(got) else math.inf
        if not abs(got - want) <= 1e-9 * want:
            hint = ""
            if math.isclose(got, 1 / math.sqrt(d_k)):
                hint = " (1/√d_k assumes unit variances)"
            elif math.isclose(got, want**2):
                hint = " (that makes the *standard deviation* 1/std: take a square root)"
            return report(
                name,
                False,
                f"d_k={d_k}, var_q={var_q:.3g}, var_k={var_k:.3g}: "
                f"scaled scores have variance {measured:.3g}, not 1{hint}",
            )
        if not abs(measured - 1) < 0.05:  # 10,000 draws: the sampling error is about 1.5%
            return report(name, False, f"measured variance {measured:.3g}")
    return report(name, True, "the scaled scores have unit variance (measured) in 4 settings")


def _weights_of_query(q: torch.Tensor, K: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.softmax(scale * (K @ q), dim=-1)  # (T_k,)


def check_query_jacobian(fn: Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]) -> bool:
    """Exercise 1.2: ``fn(q, K, scale)`` is ``∂a/∂q`` for ``a = softmax(scale · K q)``, without autograd.

    Compared with ``torch.autograd.functional.jacobian`` in float64, for a peaked and a
    flat softmax and two scales.

    Shapes:
        q: ``(d,)``; K: ``(T_k, d)``; fn's output: ``(T_k, d)`` (row i is ``∂a_i/∂q``)
    """
    name = "1.2 ∂a/∂q"
    g = torch.Generator().manual_seed(12)
    for T_k, d, scale, spread in ((5, 8, 1 / math.sqrt(8), 1.0), (7, 16, 1.0, 0.5), (4, 3, 0.3, 3.0)):
        q = torch.randn(d, generator=g, dtype=torch.float64) * spread
        K = torch.randn(T_k, d, generator=g, dtype=torch.float64)
        want = torch.autograd.functional.jacobian(lambda q_, K=K, scale=scale: _weights_of_query(q_, K, scale), q)
        try:
            got = fn(q.clone(), K.clone(), scale)
        except Exception as e:
            return report(name, False, f"{type(e).__name__}: {e}")
        problem = mismatch(got, want, atol=1e-10)
        if problem:
            return report(name, False, f"T_k={T_k}, d={d}, scale={scale:.3g}: {problem}")
    return report(name, True, "equal to autograd's Jacobian in 3 settings")


def scale_candidates() -> list[tuple[Callable, bool, str]]:
    """Seven attention functions that look alike from outside, each ``attn(q, k, v)``."""

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
        (make(lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v)), True, "PyTorch's SDPA"),
        (make(lambda q, k, v: by_hand(q, k, v, 1 / q.shape[-1])), False, "scales by 1/d_k"),
        (make(lambda q, k, v: by_hand(q, k, v, 1 / math.sqrt(q.shape[-1]))), True, "written by hand"),
        (make(lambda q, k, v: by_hand(q, k, v, 1.0, 1 / math.sqrt(q.shape[-1]))), False, "scales after the softmax"),
    ]


def check_scale_test(scaled_correctly: Callable[[Callable[..., torch.Tensor]], bool]) -> bool:
    """Exercise 1.3: ``scaled_correctly(attn)`` says whether ``attn(q, k, v)`` divides by √d_k.

    It is run on seven functions with the same name and signature: three right (attn_core,
    PyTorch's SDPA, by hand) and four wrong (no scale, ``1/d_k``, ``1/√d_v``, and the
    scale applied to the output instead of the scores). A test with ``d_v = d_k`` cannot
    tell ``√d_v`` from ``√d_k``.

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
    return report(name, True, "right on all 7 implementations (3 right, 4 wrong)")
