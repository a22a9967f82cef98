"""attn_core.teach.exercises.ch13: each check passes a right answer and fails plausible wrong ones."""

from __future__ import annotations

import math

import torch

from attn_core.teach.exercises import check_merge_stats


def _stub(*args):
    raise NotImplementedError


def test_merge_stats_check(capsys):
    def merge(m1, l1, m2, l2):
        m = torch.maximum(m1, m2)
        safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        return m, l1 * torch.exp(m1 - safe) + l2 * torch.exp(m2 - safe)

    def no_rescale(m1, l1, m2, l2):
        return torch.maximum(m1, m2), l1 + l2

    assert check_merge_stats(merge)
    assert not check_merge_stats(no_rescale)
    assert "rescale" in capsys.readouterr().out


# Exercise 13.1: FlashAttention-1's traffic (key/value blocks outside, query blocks inside).
def _fa1(T, d, block_q, block_k):
    n_k = -(-T // block_k)  # key/value blocks; the query block size cancels out
    return T * (d + 2) + 2 * T * d + n_k * T * (3 * d + 4)


def test_fa1_traffic_right_answer_passes(capsys):
    from attn_core.teach.exercises.ch13 import check_fa1_traffic

    assert check_fa1_traffic(_fa1)
    assert "correct" in capsys.readouterr().out


def test_fa1_traffic_reference_is_the_closed_form():
    from attn_core.teach.exercises.ch13 import fa1_traffic_elements

    for T, d, b_q, b_k in ((512, 64, 64, 128), (1000, 16, 33, 7), (5, 4, 8, 8)):
        assert fa1_traffic_elements(T, d, b_q, b_k) == _fa1(T, d, b_q, b_k)


def test_fa1_traffic_wrong_answers_fail(capsys):
    from attn_core.teach.exercises.ch13 import check_fa1_traffic

    def no_init(T, d, b_q, b_k):
        return _fa1(T, d, b_q, b_k) - T * (d + 2)

    def no_write_back(T, d, b_q, b_k):
        return _fa1(T, d, b_q, b_k) - (-(-T // b_k)) * T * (d + 2)

    def fa2_order(T, d, b_q, b_k):  # K and V re-read per query block, Q and O once
        return 2 * T * d + 2 * d * T * (-(-T // b_q))

    def floor_blocks(T, d, b_q, b_k):  # forgets the ragged last block
        return T * (d + 2) + 2 * T * d + (T // b_k) * T * (3 * d + 4)

    for wrong, hint in ((no_init, "line 2"), (no_write_back, "writes O_i")):
        assert not check_fa1_traffic(wrong)
        assert hint in capsys.readouterr().out
    for wrong in (fa2_order, floor_blocks, _stub):
        assert not check_fa1_traffic(wrong)
        assert "not yet" in capsys.readouterr().out


# Exercise 13.2: the backward pass from O and the log-sum-exp.
def _backward(q, k, v, o, lse, do):
    scale = 1 / math.sqrt(q.shape[-1])
    p = torch.exp(q @ k.T * scale - lse[:, None])  # (T_q, T_k), recomputed
    dv = p.T @ do
    dp = do @ v.T
    ds = p * (dp - (do * o).sum(-1, keepdim=True))
    return ds @ k * scale, ds.T @ q * scale, dv


def test_backward_right_answer_passes(capsys):
    from attn_core.teach.exercises.ch13 import check_backward_from_lse

    assert check_backward_from_lse(_backward)
    assert "correct" in capsys.readouterr().out


def test_backward_wrong_answers_fail(capsys):
    from attn_core.teach.exercises.ch13 import check_backward_from_lse

    def no_scale(q, k, v, o, lse, do):
        dq, dk, dv = _backward(q, k, v, o, lse, do)
        return dq * math.sqrt(q.shape[-1]), dk * math.sqrt(q.shape[-1]), dv

    def no_rowsum(q, k, v, o, lse, do):  # forgets the softmax's coupling term
        scale = 1 / math.sqrt(q.shape[-1])
        p = torch.exp(q @ k.T * scale - lse[:, None])
        ds = p * (do @ v.T)
        return ds @ k * scale, ds.T @ q * scale, p.T @ do

    def without_lse(q, k, v, o, lse, do):  # unnormalised P
        return _backward(q, k, v, o, torch.zeros_like(lse), do)

    assert not check_backward_from_lse(no_scale)
    assert "1/√D" in capsys.readouterr().out
    assert not check_backward_from_lse(no_rowsum)
    assert "rowsum" in capsys.readouterr().out
    for wrong in (without_lse, _stub, lambda *a: _backward(*a)[:2]):
        assert not check_backward_from_lse(wrong)
        assert "not yet" in capsys.readouterr().out
