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
