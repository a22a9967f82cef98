"""attn_core.teach.exercises.ch01: the right and wrong answers of exercises 1.1-1.3 (ANSWERS, held to the
standard by tests/test_teach_exercises_standard.py) and what the checks' candidates must be."""

from __future__ import annotations

import math

import torch

from attn_core.teach.exercises.ch01 import check_query_weight_grad, check_scale_test, check_self_score, scale_candidates


def _grad_w_q(x, W_q, W_k, W_v, grad_out, *, scaled=True, row_term=True, transposed_scores=False, through_x=True):
    q, k, v = x @ W_q, x @ W_k, x @ W_v  # (T, d_k), (T, d_k), (T, d_v)
    scale = 1 / math.sqrt(W_q.shape[-1]) if scaled else 1.0
    a = torch.softmax(q @ k.T / math.sqrt(W_q.shape[-1]), dim=-1)  # (T, T)
    grad_a = grad_out @ v.T  # (T, T)
    # softmax backward: a ⊙ (∂L/∂a - Σ_j a_j ∂L/∂a_j), row by row
    grad_s = a * (grad_a - (a * grad_a).sum(-1, keepdim=True) * row_term)
    if transposed_scores:  # the queries' and keys' roles swapped
        grad_s = grad_s.T
    grad_q = grad_s @ k * scale  # (T, d_k)
    return x.T @ grad_q if through_x else grad_q  # (d_in, d_k)


def _scaled_correctly(attn):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 5, 8, generator=g, dtype=torch.float64)
    k = torch.randn(2, 7, 8, generator=g, dtype=torch.float64)
    v = torch.randn(2, 7, 3, generator=g, dtype=torch.float64)  # d_v != d_k
    want = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(8), dim=-1) @ v
    return bool(torch.allclose(attn(q, k, v), want, atol=1e-8))


def _scaled_correctly_square(attn):  # the same test with d_v = d_k: misses the √d_v bug
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 5, 8, generator=g, dtype=torch.float64) for _ in range(3))
    want = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(8), dim=-1) @ v
    return bool(torch.allclose(attn(q, k, v), want, atol=1e-8))


def _scaled_correctly_keys_square(attn):  # T_k = d_k: misses the √T_k bug
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 5, 8, generator=g, dtype=torch.float64)
    k = torch.randn(2, 8, 8, generator=g, dtype=torch.float64)  # 8 keys of width 8
    v = torch.randn(2, 8, 3, generator=g, dtype=torch.float64)
    want = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(8), dim=-1) @ v
    return bool(torch.allclose(attn(q, k, v), want, atol=1e-8))


def _rows_sum_to_one(attn):  # a property that holds for every scale: tests nothing about it
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(4, 6, generator=g, dtype=torch.float64) for _ in range(2))
    return bool(
        torch.allclose(attn(q, k, torch.eye(4, dtype=torch.float64)[:, :4]).sum(-1), torch.ones(4, dtype=torch.float64))
    )


ANSWERS = {
    check_self_score: (
        [lambda d_k: (math.sqrt(d_k), 2.0)],
        [
            (lambda d_k: (0.0, 1.0), "cannot average 0"),  # as if q and k were independent
            (lambda d_k: (math.sqrt(d_k), 1.0), "E[q_i⁴] - 1"),  # q_i² taken as unit-variance
            (lambda d_k: (math.sqrt(d_k), 3.0), "E[q_i⁴] - 1"),  # E[q_i⁴] without the mean's square
            (lambda d_k: (float(d_k), 2.0 * d_k), "mean"),  # the unscaled score
            (lambda d_k: (math.sqrt(d_k), 2.0 * math.sqrt(d_k)), "variance"),  # scaled by 1/√d_k only
        ],
    ),
    check_query_weight_grad: (
        [_grad_w_q],
        [
            (lambda *a: _grad_w_q(*a, scaled=False), "off by exactly √d_k"),  # the scale forgotten
            (lambda *a: _grad_w_q(*a, row_term=False), "max abs difference"),  # ∂a_i/∂s_i only
            (lambda *a: _grad_w_q(*a, transposed_scores=True), "max abs difference"),
            (lambda *a: _grad_w_q(*a).T, "shape"),  # (d_k, d_in)
            (lambda *a: _grad_w_q(*a, through_x=False), "shape"),  # ∂L/∂Q: X forgotten
        ],
    ),
    check_scale_test: (
        [_scaled_correctly],
        [
            (_scaled_correctly_square, "√d_v"),
            (_scaled_correctly_keys_square, "√T_k"),
            (_rows_sum_to_one, "accepts a wrong implementation"),
            (lambda attn: True, "accepts a wrong implementation"),
            (lambda attn: attn.__name__ == "attn", "accepts a wrong implementation"),
            (lambda attn: 1.0, "True or False"),
        ],
    ),
}


def test_candidates_look_alike_from_outside():
    candidates = [fn for fn, _, _ in scale_candidates()]
    assert len({fn.__name__ for fn in candidates}) == 1
    assert sum(right for _, right, _ in scale_candidates()) == 3
