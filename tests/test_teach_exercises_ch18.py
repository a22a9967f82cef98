"""attn_core.teach.exercises.ch18: the right and wrong answers of exercises 18.1-18.3 (ANSWERS, held to
the standard by tests/test_teach_exercises_standard.py)."""

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


def _raw_topk(s, k, w):  # the raw topk bug: -inf (future) picks kept in short rows
    window = _window_topk(s, 0, w)
    picks = s.masked_fill(window, float("-inf")).topk(k, -1).indices
    return window | torch.zeros_like(s, dtype=torch.bool).scatter(-1, picks, True)


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


def _leaky_blocks(scores, block, n):  # whole blocks, future tokens of the query's block included
    chosen = _blocks(scores, block, n)
    T = scores.shape[-1]
    for b in range(0, T, block):
        any_in_block = chosen[:, b : b + block].any(-1, keepdim=True)
        chosen[:, b : b + block] |= any_in_block
    return chosen


# --------------------------------------------------------------------------- 18.3 the indexer's gradient
def _grad(index_scores, attn_weights, *, sign=1.0, mean=True, renormalise=True):
    """∂L/∂I = (softmax(I) - p) / T, zero on future tokens."""
    T = index_scores.shape[-1]
    p = attn_weights.sum(0)  # (T, T)
    if renormalise:
        p = p / p.sum(-1, keepdim=True)
    g = sign * (torch.softmax(index_scores, -1) - p)
    return g / T if mean else g


def _nan_future(i, w):
    return _grad(i, w).masked_fill(torch.isinf(i), float("nan"))


def _softmax_over_the_future(i, w):  # -inf replaced by 0 before the softmax
    T = i.shape[-1]
    p = w.sum(0) / w.sum(0).sum(-1, keepdim=True)
    return (torch.softmax(i.nan_to_num(neginf=0.0), -1) - p) / T


ANSWERS = {
    check_window_plus_topk: (
        [_window_topk],
        [
            # top-k over every visible token, then the window: picks wasted inside the window
            (lambda s, k, w: _topk(s, k) | _window_topk(s, 0, w), "expected"),
            (lambda s, k, w: _window_topk(s, k, w + 1), "expected"),  # window off by one (t - s <= window)
            (_raw_topk, "future token"),
            (lambda s, k, w: _window_topk(s, 0, w), "expected"),  # the window alone
            (lambda s, k, w: _topk(s.masked_fill(_window_topk(s, 0, w), float("-inf")), k), "expected"),  # no window
            (lambda s, k, w: _window_topk(s, k, w).int(), "boolean"),
        ],
    ),
    check_block_selection: (
        [_blocks],
        [
            (lambda s, b, n: _blocks(s, b, n, rank="max"), "its best token's score"),
            (lambda s, b, n: _blocks(s, b, n, rank="sum"), "raw scores' sum"),
            (_leaky_blocks, "future token"),
            (lambda s, b, n: topk_selection(s, n * b), "expected"),  # the n·block best tokens, not whole blocks
            (lambda s, b, n: _blocks(s, b, max(n - 1, 0)), "expected"),  # one block too few
            (lambda s, b, n: _blocks(s, b, n).int(), "boolean"),
        ],
    ),
    check_indexer_grad: (
        [_grad],
        [
            (lambda i, w: _grad(i, w, sign=-1.0), "sign is flipped"),
            (lambda i, w: _grad(i, w, mean=False), "mean over the"),
            (lambda i, w: _grad(i, w, renormalise=False), "max |Δ|"),
            (_nan_future, "NaN"),
            (_softmax_over_the_future, "future tokens"),
        ],
    ),
}
