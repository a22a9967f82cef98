"""attn_core.teach.exercises.ch01: the right and wrong answers of exercises 1.1-1.4 (ANSWERS, held to the
standard by tests/test_teach_exercises_standard.py) and what the checks' candidates must be."""

from __future__ import annotations

import math

import torch

from attn_core.teach.exercises.ch01 import (
    check_by_hand,
    check_jacobian_norm,
    check_scale_test,
    check_self_score,
    scale_candidates,
)


def _jacobian_norm(a, *, cross=True, sign=-1, squared=False, dim=-1):
    # ‖diag(a) - a aᵀ‖_F² = Σ a_i² - 2 Σ a_i³ + (Σ a_i²)²
    sq, cube = a.pow(2).sum(dim), a.pow(3).sum(dim)
    norm2 = sq + sign * 2 * cube + (sq.pow(2) if cross else 0)
    return norm2 if squared else norm2.clamp_min(0).sqrt()


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
    check_jacobian_norm: (
        [_jacobian_norm],
        [
            (lambda a: a.pow(2).sum(-1).sqrt(), "max abs difference"),  # ‖diag(a)‖ only
            (lambda a: _jacobian_norm(a, cross=False), "max abs difference"),  # (Σ a_i²)² dropped
            (lambda a: _jacobian_norm(a, sign=+1), "max abs difference"),  # a sign lost
            (lambda a: _jacobian_norm(a, squared=True), "‖J‖_F², not ‖J‖_F"),
            (lambda a: _jacobian_norm(a, dim=0), "shape"),  # summed over the rows
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
    check_by_hand: (
        [lambda: ([0.665, 0.090, 0.245], "dogs"), lambda: (torch.tensor([0.67, 0.09, 0.24]), "dogs")],
        [
            (lambda: ([0.867, 0.016, 0.117], "dogs"), "not divided by √d_k"),
            (lambda: ([0.506, 0.186, 0.307], "dogs"), "divided by d_k"),
            (lambda: ([0.667, 0.0, 0.333], "dogs"), "not a softmax"),
            (lambda: ([0.665, 0.245, 0.090], "dogs"), "are off"),  # the keys' order lost
            (lambda: ([0.665, 0.090, 0.245], "cats"), "not the token that weighs most"),
            (lambda: [0.665, 0.090, 0.245], "return (three weights, a token)"),
        ],
    ),
}


def test_candidates_look_alike_from_outside():
    candidates = [fn for fn, _, _ in scale_candidates()]
    assert len({fn.__name__ for fn in candidates}) == 1
    assert sum(right for _, right, _ in scale_candidates()) == 3
