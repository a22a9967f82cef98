"""attn_core.teach.exercises.ch01: the right and wrong answers of exercises 1.1-1.3 (ANSWERS, held to the
standard by tests/test_teach_exercises_standard.py) and what the checks' candidates must be."""

from __future__ import annotations

import math

import torch

from attn_core.teach.exercises.ch01 import check_query_jacobian, check_scale_test, check_self_score, scale_candidates


def _jacobian(q, K, scale):
    a = torch.softmax(scale * (K @ q), dim=-1)  # (T_k,)
    return scale * (torch.diag(a) - torch.outer(a, a)) @ K  # (T_k, d)


def _no_scale_factor(q, K, scale):  # the chain rule's last factor forgotten
    a = torch.softmax(scale * (K @ q), dim=-1)
    return (torch.diag(a) - torch.outer(a, a)) @ K


def _diagonal_only(q, K, scale):  # ∂a_i/∂s_i only: a_i (1 - a_i)
    a = torch.softmax(scale * (K @ q), dim=-1)
    return scale * torch.diag(a * (1 - a)) @ K


def _unscaled_weights(q, K, scale):  # the softmax of the raw scores
    a = torch.softmax(K @ q, dim=-1)
    return scale * (torch.diag(a) - torch.outer(a, a)) @ K


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
    check_query_jacobian: (
        [_jacobian],
        [
            (_no_scale_factor, "max abs difference"),
            (_diagonal_only, "max abs difference"),
            (_unscaled_weights, "max abs difference"),
            (lambda q, K, scale: _jacobian(q, K, scale).T, "shape"),
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
