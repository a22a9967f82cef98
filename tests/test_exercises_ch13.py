"""attn_core.exercises.ch13: exercise 13.2's check sees the *online* property.

The keys and values arrive one block at a time through one reused buffer, and the
learner's function may not hold as many bytes as one row of scores: an ordinary softmax
over collected blocks (views or copies) or over scores set aside must fail.
"""

from __future__ import annotations

import math

import torch

from attn_core.exercises import check_merge_stats, check_online_attention_row


def _online(q, blocks):
    m = torch.tensor(float("-inf"), dtype=q.dtype)
    l, acc = torch.zeros((), dtype=q.dtype), torch.zeros((), dtype=q.dtype)
    for k_b, v_b in blocks:  # (b, D), (b, D_v)
        s = k_b @ q / math.sqrt(q.shape[0])  # (b,)
        m_new = torch.maximum(m, s.max())
        p, correction = torch.exp(s - m_new), torch.exp(m - m_new)
        l = l * correction + p.sum()
        acc = acc * correction + p @ v_b  # (D_v,)
        m = m_new
    return acc / l


def _collect_views(q, blocks):  # keeps the blocks (views of the reused buffer), then a plain softmax
    ks, vs = zip(*blocks)
    return torch.softmax(torch.cat(ks) @ q / math.sqrt(q.shape[0]), 0) @ torch.cat(vs)


def _collect_copies(q, blocks):  # copies every block aside: right values, not online
    ks, vs = zip(*[(k_b.clone(), v_b.clone()) for k_b, v_b in blocks])
    return torch.softmax(torch.cat(ks) @ q / math.sqrt(q.shape[0]), 0) @ torch.cat(vs)


def _scores_aside(q, blocks):  # keeps all T scores, then a plain softmax
    scores, values = [], []
    for k_b, v_b in blocks:
        scores.append(k_b @ q / math.sqrt(q.shape[0]))
        values.append(v_b.clone())
    return torch.softmax(torch.cat(scores), 0) @ torch.cat(values)


def _first_block_only(q, blocks):
    k_b, v_b = next(iter(blocks))
    return torch.softmax(k_b @ q / math.sqrt(q.shape[0]), 0) @ v_b


def _unscaled(q, blocks):
    return _online(q * math.sqrt(q.shape[0]), blocks)


def _stub(*args):
    raise NotImplementedError


def test_online_solution_passes(capsys):
    assert check_online_attention_row(_online)
    assert "correct" in capsys.readouterr().out


def test_non_online_solutions_fail(capsys):
    assert not check_online_attention_row(_collect_views)
    assert "overwritten" in capsys.readouterr().out
    for fn in (_collect_copies, _scores_aside):
        assert not check_online_attention_row(fn)
        out = capsys.readouterr().out
        assert "not yet" in out and "bytes of tensors at once" in out, out


def test_wrong_solutions_fail_with_their_hint(capsys):
    assert not check_online_attention_row(_first_block_only)
    assert "iterate over every block" in capsys.readouterr().out
    assert not check_online_attention_row(_unscaled)
    assert "1/√D" in capsys.readouterr().out
    assert not check_online_attention_row(_stub)
    assert "NotImplementedError" in capsys.readouterr().out


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
    from attn_core.exercises.ch13 import check_fa1_traffic

    assert check_fa1_traffic(_fa1)
    assert "correct" in capsys.readouterr().out


def test_fa1_traffic_reference_is_the_closed_form():
    from attn_core.exercises.ch13 import fa1_traffic_elements

    for T, d, b_q, b_k in ((512, 64, 64, 128), (1000, 16, 33, 7), (5, 4, 8, 8)):
        assert fa1_traffic_elements(T, d, b_q, b_k) == _fa1(T, d, b_q, b_k)


def test_fa1_traffic_wrong_answers_fail(capsys):
    from attn_core.exercises.ch13 import check_fa1_traffic

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
    from attn_core.exercises.ch13 import check_backward_from_lse

    assert check_backward_from_lse(_backward)
    assert "correct" in capsys.readouterr().out


def test_backward_wrong_answers_fail(capsys):
    from attn_core.exercises.ch13 import check_backward_from_lse

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
