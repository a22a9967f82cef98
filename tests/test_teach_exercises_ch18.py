"""attn_core.teach.exercises.ch18.

Each check passes a correct answer and fails wrong ones (printing why, never raising).
"""

from __future__ import annotations

import torch

from attn_core.layers.indexer import topk_selection
from attn_core.teach.exercises.ch18 import (
    check_block_selection,
    check_indexer_grad,
    check_window_plus_topk,
)


def _topk(scores, k):
    top = scores.topk(min(k, scores.shape[-1]), dim=-1).indices
    return torch.zeros_like(scores, dtype=torch.bool).scatter(-1, top, True) & (scores > float("-inf"))


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


# --------------------------------------------------------------------------- 18.1 block selection
def _blocks(scores, block, n, rank="mass"):
    """A learner's answer: block importance per query, top-n blocks, their visible tokens."""
    T = scores.shape[-1]
    visible = scores > float("-inf")
    n_blocks = -(-T // block)
    probs = torch.softmax(scores, -1)
    chosen = torch.zeros(T, T, dtype=torch.bool)
    for t in range(T):
        values = []
        for b in range(n_blocks):
            cols = slice(b * block, min(T, (b + 1) * block))
            if not visible[t, cols].any():
                continue
            finite = scores[t, cols][visible[t, cols]]
            value = {"mass": probs[t, cols].sum(), "max": finite.max(), "sum": finite.sum()}[rank]
            values.append((float(value), b))
        for _, b in sorted(values, reverse=True)[:n]:
            chosen[t, b * block : (b + 1) * block] = True
    return chosen & visible


def test_block_selection_passes_a_right_answer(capsys):
    assert check_block_selection(_blocks)
    assert "correct" in capsys.readouterr().out


def test_block_selection_fails_ranking_by_the_best_token(capsys):
    assert not check_block_selection(lambda s, b, n: _blocks(s, b, n, rank="max"))
    assert "its best token's score" in capsys.readouterr().out


def test_block_selection_fails_ranking_by_raw_sums(capsys):
    assert not check_block_selection(lambda s, b, n: _blocks(s, b, n, rank="sum"))
    assert "raw scores' sum" in capsys.readouterr().out


def test_block_selection_fails_future_tokens_of_the_own_block(capsys):
    def leaky(scores, block, n):  # whole blocks, future tokens of the query's block included
        chosen = _blocks(scores, block, n)
        T = scores.shape[-1]
        for b in range(0, T, block):
            any_in_block = chosen[:, b : b + block].any(-1, keepdim=True)
            chosen[:, b : b + block] |= any_in_block
        return chosen

    assert not check_block_selection(leaky)
    assert "future token" in capsys.readouterr().out


def test_block_selection_fails_token_level_top_k(capsys):
    def tokens(scores, block, n):  # the n·block best tokens, not whole blocks
        return topk_selection(scores, n * block)

    assert not check_block_selection(tokens)
    assert "expected" in capsys.readouterr().out


def test_block_selection_fails_one_block_too_few():
    assert not check_block_selection(lambda s, b, n: _blocks(s, b, max(n - 1, 0)))


def test_block_selection_reports_errors_and_wrong_types(capsys):
    assert not check_block_selection(lambda *a: 1 / 0)
    assert "ZeroDivisionError" in capsys.readouterr().out
    assert not check_block_selection(lambda s, b, n: _blocks(s, b, n).int())  # not boolean


# --------------------------------------------------------------------------- 18.3 the indexer's gradient
def _grad(index_scores, attn_weights, *, sign=1.0, mean=True, renormalise=True):
    """∂L/∂I = (softmax(I) - p) / T, zero on future tokens."""
    T = index_scores.shape[-1]
    p = attn_weights.sum(0)  # (T, T)
    if renormalise:
        p = p / p.sum(-1, keepdim=True)
    g = sign * (torch.softmax(index_scores, -1) - p)
    return g / T if mean else g


def test_indexer_grad_passes_a_right_answer(capsys):
    assert check_indexer_grad(_grad)
    assert "correct" in capsys.readouterr().out


def test_indexer_grad_fails_the_flipped_sign(capsys):
    assert not check_indexer_grad(lambda i, w: _grad(i, w, sign=-1.0))
    assert "sign is flipped" in capsys.readouterr().out


def test_indexer_grad_fails_the_sum_over_queries(capsys):
    assert not check_indexer_grad(lambda i, w: _grad(i, w, mean=False))
    assert "mean over the" in capsys.readouterr().out


def test_indexer_grad_fails_an_unnormalised_target(capsys):
    assert not check_indexer_grad(lambda i, w: _grad(i, w, renormalise=False))
    assert "max |Δ|" in capsys.readouterr().out


def test_indexer_grad_fails_nan_and_future_gradients(capsys):
    def nan_future(i, w):
        g = _grad(i, w)
        return g.masked_fill(torch.isinf(i), float("nan"))

    assert not check_indexer_grad(nan_future)
    assert "NaN" in capsys.readouterr().out

    def softmax_over_the_future(i, w):  # -inf replaced by 0 before the softmax
        T = i.shape[-1]
        p = w.sum(0) / w.sum(0).sum(-1, keepdim=True)
        return (torch.softmax(i.nan_to_num(neginf=0.0), -1) - p) / T

    assert not check_indexer_grad(softmax_over_the_future)
    assert "future tokens" in capsys.readouterr().out
    assert not check_indexer_grad(lambda *a: 1 / 0)
