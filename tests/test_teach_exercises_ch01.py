"""attn_core.teach.exercises.ch01 (the exercises of issue 25): each check passes a right answer and
fails the plausible wrong ones, printing why and never raising."""

from __future__ import annotations

import math

import torch

from attn_core.teach.exercises.ch01 import check_query_jacobian, check_scale_test, check_score_scale, scale_candidates


def test_score_scale(capsys):
    assert check_score_scale(lambda d_k, var_q, var_k: 1 / math.sqrt(d_k * var_q * var_k))
    assert "correct" in capsys.readouterr().out
    assert not check_score_scale(lambda d_k, var_q, var_k: 1 / math.sqrt(d_k))
    assert "assumes unit variances" in capsys.readouterr().out
    assert not check_score_scale(lambda d_k, var_q, var_k: 1 / (d_k * var_q * var_k))
    assert "square root" in capsys.readouterr().out
    assert not check_score_scale(lambda d_k, var_q, var_k: 1 / math.sqrt(d_k * (var_q + var_k)))
    assert not check_score_scale(lambda d_k, var_q, var_k: 1 / d_k)
    assert not check_score_scale(lambda d_k, var_q, var_k: 1 / 0)
    assert "ZeroDivisionError" in capsys.readouterr().out


def _jacobian(q, K, scale):
    a = torch.softmax(scale * (K @ q), dim=-1)  # (T_k,)
    return scale * (torch.diag(a) - torch.outer(a, a)) @ K  # (T_k, d)


def test_query_jacobian(capsys):
    assert check_query_jacobian(_jacobian)
    assert "correct" in capsys.readouterr().out

    def no_scale_factor(q, K, scale):  # the chain rule's last factor forgotten
        a = torch.softmax(scale * (K @ q), dim=-1)
        return (torch.diag(a) - torch.outer(a, a)) @ K

    def diagonal_only(q, K, scale):  # ∂a_i/∂s_i only: a_i (1 - a_i)
        a = torch.softmax(scale * (K @ q), dim=-1)
        return scale * torch.diag(a * (1 - a)) @ K

    def unscaled_weights(q, K, scale):  # the softmax of the raw scores
        a = torch.softmax(K @ q, dim=-1)
        return scale * (torch.diag(a) - torch.outer(a, a)) @ K

    def transposed(q, K, scale):
        return _jacobian(q, K, scale).T

    for wrong in (no_scale_factor, diagonal_only, unscaled_weights, transposed):
        assert not check_query_jacobian(wrong), wrong.__name__
    assert "not yet" in capsys.readouterr().out


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


def _rows_sum_to_one(attn):  # a property that holds for every scale: tests nothing about it
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(4, 6, generator=g, dtype=torch.float64) for _ in range(2))
    return bool(torch.allclose(attn(q, k, torch.eye(4, dtype=torch.float64)[:, :4]).sum(-1), torch.ones(4)))


def test_scale_test(capsys):
    assert check_scale_test(_scaled_correctly)
    assert "correct: right on all 7" in capsys.readouterr().out
    assert not check_scale_test(_scaled_correctly_square)
    assert "√d_v" in capsys.readouterr().out
    assert not check_scale_test(_rows_sum_to_one)
    assert not check_scale_test(lambda attn: True)
    assert not check_scale_test(lambda attn: attn.__name__ == "attn")
    assert not check_scale_test(lambda attn: 1.0)  # not a bool
    assert "True or False" in capsys.readouterr().out


def test_candidates_look_alike_from_outside():
    candidates = [fn for fn, _, _ in scale_candidates()]
    assert len({fn.__name__ for fn in candidates}) == 1
    assert sum(right for _, right, _ in scale_candidates()) == 3
