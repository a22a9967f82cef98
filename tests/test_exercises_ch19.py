"""attn_core.exercises.ch19: each check passes a correct answer and fails wrong ones (printing why, never raising)."""

from __future__ import annotations

import torch

from attn_core.exercises.ch19 import check_balancing_loss, check_capacity_keep, check_topk_softmax


def _topk_softmax(logits, k):
    top, experts = logits.topk(k, dim=-1)
    return torch.softmax(top, -1), experts


def _softmax_then_topk(logits, k):  # unnormalised: the kept weights sum to less than 1
    return torch.softmax(logits, -1).topk(k, dim=-1)


def test_topk_softmax(capsys):
    assert check_topk_softmax(_topk_softmax)
    assert "correct" in capsys.readouterr().out
    assert not check_topk_softmax(_softmax_then_topk)
    assert "sum to 1" in capsys.readouterr().out
    assert not check_topk_softmax(lambda logits, k: _topk_softmax(-logits, k))  # the smallest logits
    assert not check_topk_softmax(lambda logits, k: _topk_softmax(logits, k)[0])  # one tensor
    assert not check_topk_softmax(lambda logits, k: 1 / 0)
    assert "ZeroDivisionError" in capsys.readouterr().out


def _balancing(probs, experts, E):
    f = torch.bincount(experts.flatten(), minlength=E).to(probs.dtype) / experts.numel()
    return E * (f * probs.mean(0)).sum()


def test_balancing_loss(capsys):
    assert check_balancing_loss(_balancing)
    assert "correct" in capsys.readouterr().out
    wrong_f = lambda p, e, E: _balancing(p, e, E) * e.shape[1]  # noqa: E731 - f summed to k (HF's convention)
    assert not check_balancing_loss(wrong_f)
    assert "N·k" in capsys.readouterr().out
    assert not check_balancing_loss(lambda p, e, E: _balancing(p, e, E).detach())  # no gradient
    assert not check_balancing_loss(lambda p, e, E: E * (p.mean(0) ** 2).sum())  # P·P, not f·P
    assert not check_balancing_loss(lambda p, e, E: [0.0])


def _keep(experts, E, capacity):
    N, k = experts.shape
    keep = torch.zeros(N, k, dtype=torch.bool)
    used = [0] * E
    for slot in range(k):
        for t in range(N):
            e = int(experts[t, slot])
            if used[e] < capacity:
                keep[t, slot], used[e] = True, used[e] + 1
    return keep


def _keep_token_major(experts, E, capacity):  # token by token: a token's second choice before later first choices
    N, k = experts.shape
    keep = torch.zeros(N, k, dtype=torch.bool)
    used = [0] * E
    for t in range(N):
        for slot in range(k):
            e = int(experts[t, slot])
            if used[e] < capacity:
                keep[t, slot], used[e] = True, used[e] + 1
    return keep


def test_capacity_keep(capsys):
    assert check_capacity_keep(_keep)
    assert "correct" in capsys.readouterr().out
    assert not check_capacity_keep(_keep_token_major)
    assert "first choices come first" in capsys.readouterr().out
    assert not check_capacity_keep(lambda e, E, c: torch.ones_like(e, dtype=torch.bool))
    assert "more than capacity" in capsys.readouterr().out
    assert not check_capacity_keep(lambda e, E, c: None)
