"""Checks for the exercises of chapter 18 (learned sparse attention, DeepSeek Sparse Attention).

* 18.1 the lightning indexer's scores from its queries, keys and head weights;
* 18.2 a sliding window plus a top-k selection *outside* the window, the pattern of NSA's
  window and selection branches and DeepSeek-V4's window plus selection;
* 18.3 the indexer's distillation loss for one sequence.
"""

from __future__ import annotations

from typing import Callable

import torch

from ..masks import causal_mask
from ..sparse_attention import indexer_loss, topk_selection
from ._common import report

__all__ = ["check_index_scores", "check_indexer_kl", "check_window_plus_topk"]

F64 = torch.float64


def _call(name: str, fn: Callable, *args):
    """The learner's result, or None after printing the exception (a bug should print, not stop the notebook)."""
    try:
        return fn(*args)
    except Exception as e:
        report(name, False, f"{type(e).__name__}: {e}")
        return None


def _close(name: str, got: object, want: torch.Tensor, what: str) -> bool:
    """Quietly True when equal within 1e-9; otherwise print why and return False."""
    if not isinstance(got, torch.Tensor):
        return report(name, False, f"{what}: expected a torch.Tensor, got {type(got).__name__}")
    if got.shape != want.shape:
        return report(name, False, f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}")
    err = (got.detach().double() - want).abs().max().item()
    if not err < 1e-9:
        return report(name, False, f"{what}: max |Δ| = {err:.2g} from attn_core's")
    return True


def _causal(T: int) -> torch.Tensor:
    return torch.ones(T, T, dtype=torch.bool).tril()  # (T, T), True = visible


def check_index_scores(fn: Callable) -> bool:
    """Exercise 18.1: ``fn(q, k, w) -> scores``, the lightning indexer's causal scores.

    ``scores[t, s] = Σ_j w[t, j] · ReLU(q[j, t] · k[s] / √D)`` for ``s <= t``, ``-inf`` for
    ``s > t``: ``H`` indexer heads ``j``, one key per token shared by the heads.

    Shapes:
        q: ``(H, T, D)``; k: ``(T, D)``; w: ``(T, H)``; scores: ``(T, T)``
    """
    name = "18.1 index scores"
    g = torch.Generator().manual_seed(181)
    for H, T, D in ((2, 5, 4), (4, 7, 8)):
        q, k = torch.randn(H, T, D, generator=g, dtype=F64), torch.randn(T, D, generator=g, dtype=F64)
        w = torch.randn(T, H, generator=g, dtype=F64)
        per_head = torch.relu(q @ k.T / D**0.5)  # (H, T, T)
        want = torch.einsum("th,hts->ts", w, per_head).masked_fill(~_causal(T), float("-inf"))
        got = _call(name, fn, q, k, w)
        if got is None:
            return False
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            return report(name, False, f"return a tensor of shape {tuple(want.shape)}, got {got!r:.60}")
        if not torch.equal(torch.isinf(got) & (got < 0), torch.isinf(want)):
            return report(name, False, "future tokens (s > t) must score -inf, and only they")
        finite = ~torch.isinf(want)
        if not _close(name, got[finite], want[finite], f"H={H}, T={T}, visible entries"):
            return False
    return report(name, True, "equals the indexer's formula (causal, ReLU per head, weighted sum) for 2 sizes")


def check_indexer_kl(fn: Callable) -> bool:
    """Exercise 18.3: ``fn(index_scores, attn_weights) -> loss``, the indexer's distillation loss.

    The target ``p`` is the attention weights summed over heads and renormalised; the loss is
    ``KL(p ‖ softmax(index_scores))`` per query, averaged over the queries. ``-inf`` marks
    future tokens in ``index_scores`` (their weights are 0).

    Shapes:
        index_scores: ``(T, T)``; attn_weights: ``(H, T, T)``; loss: a scalar
    """
    name = "18.3 indexer distillation loss"
    g = torch.Generator().manual_seed(183)
    for H, T in ((2, 5), (3, 8)):
        future = ~_causal(T)
        scores = torch.randn(T, T, generator=g, dtype=F64).masked_fill(future, float("-inf"))
        weights = torch.softmax(torch.randn(H, T, T, generator=g, dtype=F64).masked_fill(future, float("-inf")), -1)
        want = indexer_loss(scores[None], weights[None])
        got = _call(name, fn, scores, weights)
        if got is None:
            return False
        got = torch.as_tensor(got, dtype=F64) if isinstance(got, (float, int)) else got
        if isinstance(got, torch.Tensor) and got.isnan().any():
            return report(name, False, "NaN: 0 · log 0 must count as 0 (torch.xlogy), and -inf never multiply p = 0")
        if not _close(name, got, want, f"H={H}, T={T}"):
            return False
    return report(name, True, "equals attn_core.indexer_loss (dense warm-up form) for 2 sizes")


def check_window_plus_topk(fn: Callable) -> bool:
    """Exercise 18.2: ``fn(scores, k, window) -> mask``: a sliding window plus k far tokens.

    Each query keeps every visible token of its window (itself and the ``window - 1`` before
    it, chapter 15's rule ``t - s < window``) and, *among the visible tokens outside the
    window only*, the ``k`` highest scores (all of them when fewer than ``k`` exist). A top-k
    taken over every token wastes picks on tokens the window already holds.

    Shapes:
        scores: ``(T, T)``, ``-inf`` on future tokens; mask: ``(T, T)``, boolean
    """
    name = "18.2 window + top-k outside it"
    g = torch.Generator().manual_seed(1820)
    for T, k, window in ((9, 2, 3), (12, 3, 4), (7, 5, 2)):
        scores = torch.randn(T, T, generator=g, dtype=F64).masked_fill(~_causal(T), float("-inf"))
        in_window = causal_mask(T, window=window)  # (T, T)
        far = scores.masked_fill(in_window, float("-inf"))  # visible and outside the window
        want = in_window | topk_selection(far, k)
        got = _call(name, fn, scores, k, window)
        if got is None:
            return False
        if not isinstance(got, torch.Tensor) or got.dtype != torch.bool or got.shape != want.shape:
            return report(name, False, f"return a boolean tensor of shape {tuple(want.shape)}, got {got!r:.60}")
        if (got & ~_causal(T)).any():
            return report(name, False, f"T={T}: a future token is selected (drop the -inf picks)")
        if not torch.equal(got, want):
            row = int((got != want).any(-1).nonzero()[0])
            n_got, n_want = int(got[row].sum()), int(want[row].sum())
            return report(
                name,
                False,
                f"T={T}, k={k}, window={window}: row {row} keeps {n_got} tokens "
                f"{got[row].nonzero().flatten().tolist()}, expected {n_want}",
            )
    return report(name, True, "window plus the k best far tokens, for 3 sizes (short rows included)")
