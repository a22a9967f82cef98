"""attn_core.exercises.ch18: each check passes a correct answer and fails wrong ones (printing why, never raising)."""

from __future__ import annotations

import torch

from attn_core.exercises.ch18 import check_index_scores, check_indexer_kl, check_window_plus_topk


def _scores(q, k, w):
    T = k.shape[0]
    per_head = torch.relu(q @ k.T / k.shape[-1] ** 0.5)  # (H, T, T)
    s = torch.einsum("th,hts->ts", w, per_head)
    return s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))


def test_index_scores(capsys):
    assert check_index_scores(_scores)
    assert "correct" in capsys.readouterr().out
    no_relu = lambda q, k, w: torch.einsum("th,hts->ts", w, q @ k.T / k.shape[-1] ** 0.5).masked_fill(  # noqa: E731
        ~torch.ones(k.shape[0], k.shape[0], dtype=torch.bool).tril(), float("-inf")
    )
    assert not check_index_scores(no_relu)
    assert not check_index_scores(lambda q, k, w: _scores(q, k, w).nan_to_num(neginf=0.0))  # not causal
    assert not check_index_scores(lambda q, k, w: _scores(q, k, w) * 2)  # a wrong scale
    assert not check_index_scores(lambda q, k, w: _scores(q, k, w)[:-1])
    assert not check_index_scores(lambda *a: 1 / 0)
    assert "ZeroDivisionError" in capsys.readouterr().out


def _topk(scores, k):
    top = scores.topk(min(k, scores.shape[-1]), dim=-1).indices
    return torch.zeros_like(scores, dtype=torch.bool).scatter(-1, top, True) & (scores > float("-inf"))


def _kl(scores, weights):
    p = weights.sum(0)
    p = p / p.sum(-1, keepdim=True)
    log_q = torch.log_softmax(scores, -1).masked_fill(torch.isinf(scores), 0.0)
    return (torch.xlogy(p, p) - p * log_q).sum(-1).mean()


def test_indexer_kl(capsys):
    assert check_indexer_kl(_kl)
    assert "correct" in capsys.readouterr().out
    naive = lambda s, w: (
        (w.sum(0) / w.shape[0] * (torch.log(w.sum(0) / w.shape[0]) - torch.log_softmax(s, -1))).sum(-1).mean()
    )  # noqa: E731,E501
    assert not check_indexer_kl(naive)  # 0 · log 0 and -inf give NaN
    assert "NaN" in capsys.readouterr().out
    reverse = lambda s, w: _kl(torch.log(w.sum(0) / w.shape[0]), torch.softmax(s, -1)[None])  # noqa: E731
    assert not check_indexer_kl(reverse)  # KL(q ‖ p), the other direction
    assert not check_indexer_kl(lambda s, w: _kl(s, w[:1]))  # one head, not their sum
    assert not check_indexer_kl(lambda *a: 1 / 0)


def _window_topk(scores, k, window):
    T = scores.shape[-1]
    t, s = torch.arange(T)[:, None], torch.arange(T)[None]
    in_window = (s <= t) & (t - s < window)
    far = scores.masked_fill(in_window, float("-inf"))
    return in_window | _topk(far, k)


def test_window_plus_topk(capsys):
    assert check_window_plus_topk(_window_topk)
    assert "correct" in capsys.readouterr().out
    # top-k over every visible token, then the window: picks wasted inside the window
    assert not check_window_plus_topk(lambda s, k, w: _topk(s, k) | _window_topk(s, 0, w))
    # window off by one (t - s <= window)
    assert not check_window_plus_topk(lambda s, k, w: _window_topk(s, k, w + 1))
    # the raw topk bug: -inf (future) picks kept in short rows
    raw = lambda s, k, w: (
        _window_topk(s, 0, w)
        | torch.zeros_like(s, dtype=torch.bool).scatter(  # noqa: E731
            -1, s.masked_fill(_window_topk(s, 0, w), float("-inf")).topk(k, -1).indices, True
        )
    )
    assert not check_window_plus_topk(raw)
    assert "future token" in capsys.readouterr().out
    # the window alone, or the selection alone
    assert not check_window_plus_topk(lambda s, k, w: _window_topk(s, 0, w))
    assert not check_window_plus_topk(lambda s, k, w: _topk(s.masked_fill(_window_topk(s, 0, w), float("-inf")), k))
    assert not check_window_plus_topk(lambda s, k, w: _window_topk(s, k, w).int())  # not boolean
    assert not check_window_plus_topk(lambda *a: 1 / 0)
    assert "ZeroDivisionError" in capsys.readouterr().out
