"""Checks for the exercises of chapter 1 (self-attention)."""

from __future__ import annotations

import math
from typing import Callable

import torch

from ...ops.attention import attention
from ._common import mismatch, report

# The exercises: a derivation checked by measurement (a token's score with itself), the
# softmax Jacobian's norm derived in closed form and checked against autograd, a test to
# write, and one row of a map worked by hand.
__all__ = ["check_self_score", "check_jacobian_norm", "check_scale_test", "check_by_hand"]


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


def _jacobian_norm_by_autograd(s: torch.Tensor) -> torch.Tensor:
    """``‖∂a/∂s‖_F`` of ``a = softmax(s)`` for each row of ``s`` ``(..., n)`` -> ``(...)``."""
    s = s.clone().requires_grad_(True)
    a = torch.softmax(s, dim=-1)
    squares = torch.zeros(s.shape[:-1], dtype=s.dtype)
    for i in range(a.shape[-1]):  # row i of every Jacobian at once: the rows are independent
        (row,) = torch.autograd.grad(a[..., i].sum(), s, retain_graph=True)
        squares += row.pow(2).sum(-1)
    return squares.sqrt()


def check_jacobian_norm(fn: Callable[[torch.Tensor], torch.Tensor]) -> bool:
    """Exercise 1.2: ``fn(a)`` is the Frobenius norm of the softmax's Jacobian, from the weights.

    ``a`` holds rows of softmax weights; the answer, derived by hand from
    ``J = diag(a) - a aᵀ``, is compared in float64 with autograd's ``‖∂a/∂s‖_F`` on flat,
    peaked and one-hot rows of 5 and 16 weights, batched. An answer equal to the square
    of the norm gets a hint. Then it prints the norm at three rows of 16 weights.

    Shapes:
        a: ``(..., n)``; fn's output: ``(...)``
    """
    name = "1.2 ‖∂a/∂s‖"
    g = torch.Generator().manual_seed(12)
    for n, spread in ((5, 1.0), (16, 3.0), (16, 30.0)):
        s = torch.randn(3, 4, n, generator=g, dtype=torch.float64) * spread  # (3, 4, n)
        want = _jacobian_norm_by_autograd(s)  # (3, 4)
        try:
            got = fn(torch.softmax(s, dim=-1))
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        # 1e-6: near a one-hot row the closed form takes the root of a difference of
        # numbers near 1, and loses digits that autograd keeps
        problem = mismatch(got, want, atol=1e-6)
        if problem and mismatch(got, want.square(), atol=1e-6) is None:
            problem = f"{problem}: that is ‖J‖_F², not ‖J‖_F"
        if problem:
            return report(name, False, f"{n} weights per row, scores of size {spread:g}: {problem}")
    rows = {"uniform": [0.0] * 16, "2-way tie": [0.0, 0.0] + [-1e9] * 14, "one-hot": [0.0] + [-1e9] * 15}
    norms = _jacobian_norm_by_autograd(torch.tensor(list(rows.values()), dtype=torch.float64))
    shown = ", ".join(f"{k} {v:.2f}" for k, v in zip(rows, norms.tolist()))
    return report(name, True, f"= autograd; 16 keys: {shown}")


# Exercise 1.4: "dogs chase cats", width 4; the row of "chase" is worked by hand.
BY_HAND_TOKENS = ("dogs", "chase", "cats")
BY_HAND_QUERY = (2.0, 0.0, 2.0, 0.0)  # q of "chase"
BY_HAND_KEYS = ((1.0, 1.0, 1.0, 1.0), (0.0, 1.0, 0.0, 1.0), (1.0, 0.0, 0.0, -1.0))


def check_by_hand(fn: Callable[[], tuple]) -> bool:
    """Exercise 1.4: ``fn()`` is ``(weights, token)``: the row of "chase", worked by hand.

    ``weights`` are the three attention weights of the query of "chase" over the keys of
    ``BY_HAND_TOKENS`` (``BY_HAND_QUERY``, ``BY_HAND_KEYS``, ``d_k = 4``), to two decimals;
    ``token`` is the token whose value weighs most in the output of "chase". Weights equal
    to an unscaled softmax, one scaled by ``1/d_k``, or scores divided by their sum get a hint.
    """
    name = "1.4 a row by hand"
    q, k = torch.tensor(BY_HAND_QUERY), torch.tensor(BY_HAND_KEYS)  # (4,), (3, 4)
    s = k @ q  # (3,) scores of "chase"
    right = torch.softmax(s / 2, dim=-1)  # √d_k = 2
    wrong = {
        "not divided by √d_k": torch.softmax(s, dim=-1),
        "divided by d_k, not √d_k": torch.softmax(s / 4, dim=-1),
        "scores over their sum, not a softmax": s / s.sum(),
    }
    try:
        weights, token = fn()
        got = torch.tensor([float(w) for w in weights])
    except Exception as e:  # a learner's bug should print, not stop the notebook
        return report(name, False, f"return (three weights, a token): {type(e).__name__}: {e}")
    if got.shape != right.shape or not (got - right).abs().max() <= 0.01:
        hint = next((f" ({why})" for why, w in wrong.items() if (got - w).abs().max() <= 0.01), "")
        if got.shape == right.shape and not hint:
            hint = f" (they sum to {got.sum():.2f})" if abs(got.sum() - 1) > 0.02 else ""
        return report(name, False, f"weights {[round(w, 3) for w in got.tolist()]} are off{hint}")
    if token != BY_HAND_TOKENS[int(right.argmax())]:
        return report(name, False, f"the weights are right, but {token!r} is not the token that weighs most")
    shown = " ".join(f"{t}={w:.2f}" for t, w in zip(BY_HAND_TOKENS, right.tolist()))
    return report(name, True, f"scores {', '.join(f'{v:g}' for v in s.tolist())}; weights {shown}")


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
