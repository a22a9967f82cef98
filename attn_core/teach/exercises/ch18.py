"""Checks for the exercises of chapter 18 (learned sparse attention, DeepSeek Sparse Attention).

* 18.1 NSA's selection of whole blocks, ranked by the attention mass they get
  (``check_block_selection``);
* 18.2 a sliding window plus a top-k selection *outside* the window, the pattern of NSA's
  window and selection branches and DeepSeek-V4's window plus selection;
* 18.3 the gradient of the indexer's distillation loss, derived by hand
  (``check_indexer_grad``).

"""

from __future__ import annotations

from typing import Callable

import torch

from ...layers.indexer import indexer_loss, topk_selection
from ...ops.masks import causal_mask
from ._common import describe, report

__all__ = [
    "check_window_plus_topk",
    "check_block_selection",
    "check_indexer_grad",
]

F64 = torch.float64


_RAISED = object()  # what _call returns when the learner's function raised (None may be an answer)


def _call(name: str, fn: Callable, *args):
    """The learner's result, or ``_RAISED`` after printing the exception (a bug should print, not stop the notebook)."""
    try:
        return fn(*args)
    except Exception as e:
        report(name, False, f"{type(e).__name__}: {e}")
        return _RAISED


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
        if got is _RAISED:
            return False
        if not isinstance(got, torch.Tensor) or got.dtype != torch.bool or got.shape != want.shape:
            return report(name, False, f"return a boolean tensor of shape {tuple(want.shape)}, got {describe(got)}")
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


# --------------------------------------------------------------------------- 18.1 block selection
def _block_selection_reference(scores: torch.Tensor, block: int, n: int, *, rank_by: str = "mass") -> torch.Tensor:
    """NSA's selected branch, simplified: each query keeps the visible tokens of its top-``n`` blocks.

    Blocks are ``block`` consecutive tokens (the last one may be shorter). A block's
    importance for query ``t`` is the attention mass its visible tokens get,
    ``Σ_s softmax(scores[t])[s]`` (NSA estimates it from its compressed branch). A block with
    no visible token is never kept; a query with fewer than ``n`` visible blocks keeps them
    all. ``rank_by="max"`` or ``"sum"`` rank by the best raw score or the raw scores' sum
    instead: the checks use them to name a learner's mistake.

    Shapes:
        scores: ``(T, T)``, ``-inf`` where not visible; output: ``(T, T)``, boolean
    """
    T = scores.shape[-1]
    n_blocks = -(-T // block)
    pad = n_blocks * block - T
    visible = scores > float("-inf")  # (T, T)
    by_block = torch.nn.functional.pad(visible, (0, pad)).view(T, n_blocks, block)  # (T, n_blocks, block)
    has_visible = by_block.any(-1)  # (T, n_blocks)
    if rank_by == "mass":
        values = torch.nn.functional.pad(torch.softmax(scores, -1), (0, pad)).view(T, n_blocks, block).sum(-1)
    else:
        finite = torch.nn.functional.pad(scores.masked_fill(~visible, 0.0), (0, pad)).view(T, n_blocks, block)
        masked_low = finite.masked_fill(~by_block, float("-inf"))
        values = masked_low.amax(-1) if rank_by == "max" else finite.sum(-1)
    values = values.masked_fill(~has_visible, float("-inf"))  # (T, n_blocks)
    top = values.topk(min(n, n_blocks), dim=-1).indices  # (T, n)
    chosen = torch.zeros(T, n_blocks, dtype=torch.bool).scatter(-1, top, True) & has_visible
    return chosen.repeat_interleave(block, dim=-1)[:, :T] & visible  # (T, T)


def _block_cases() -> list[tuple[torch.Tensor, int, int]]:
    """Random causal scores of three sizes, and one crafted matrix where ranking a block by its
    best token (row 7) or by its raw scores' sum (row 6) picks another block than its mass."""
    g = torch.Generator().manual_seed(1810)
    cases = []
    for T, block, n in ((16, 4, 2), (13, 3, 3), (10, 4, 1)):
        scores = torch.randn(T, T, generator=g, dtype=F64).masked_fill(~_causal(T), float("-inf"))
        cases.append((scores, block, n))
    crafted = torch.randn(8, 8, generator=g, dtype=F64)
    crafted[6] = torch.tensor([0.0, 0.0, 3.0, -20.0, 1.0, 1.0, 0.0, 0.0])  # mass: block 1; sum: block 2
    crafted[7] = torch.tensor([2.5, 2.5, 3.0, -20.0, 0.0, 0.0, 0.0, 0.0])  # mass: block 0; max: block 1
    cases.append((crafted.masked_fill(~_causal(8), float("-inf")), 2, 1))
    return cases


def check_block_selection(fn: Callable) -> bool:
    """Exercise 18.1: ``fn(scores, block, n) -> mask``: NSA-style selection of whole blocks.

    Each query ranks the blocks of ``block`` consecutive tokens by the attention mass their
    visible tokens get (``softmax`` of the query's row, summed over the block), keeps the top
    ``n`` blocks (all of them when fewer have a visible token) and attends to their visible
    tokens: never a future token, even inside its own block.

    Shapes:
        scores: ``(T, T)``, ``-inf`` on future tokens; mask: ``(T, T)``, boolean
    """
    name = "18.1 block selection"
    for scores, block, n in _block_cases():
        T = scores.shape[-1]
        want = _block_selection_reference(scores, block, n)
        got = _call(name, fn, scores.clone(), block, n)
        if got is _RAISED:
            return False
        if not isinstance(got, torch.Tensor) or got.dtype != torch.bool or got.shape != want.shape:
            return report(name, False, f"return a boolean tensor of shape {tuple(want.shape)}, got {describe(got)}")
        if (got & ~_causal(T)).any():
            return report(name, False, f"T={T}, block={block}: a future token is selected (a block ends at the query)")
        if torch.equal(got, want):
            continue
        where = f"T={T}, block={block}, n={n}"
        for rank_by, hint in (("max", "its best token's score"), ("sum", "its raw scores' sum")):
            if torch.equal(got, _block_selection_reference(scores, block, n, rank_by=rank_by)):
                return report(
                    name, False, f"{where}: blocks ranked by {hint}; rank them by attention mass (softmax first)"
                )
        row = int((got != want).any(-1).nonzero()[0])
        return report(
            name,
            False,
            f"{where}: query {row} keeps {got[row].nonzero().flatten().tolist()}, "
            f"expected {want[row].nonzero().flatten().tolist()}",
        )
    return report(name, True, "whole blocks ranked by attention mass, for 4 cases (short rows, a partial block)")


# --------------------------------------------------------------------------- 18.3 the indexer's gradient
def check_indexer_grad(fn: Callable) -> bool:
    """Exercise 18.3: ``fn(index_scores, attn_weights) -> grad``: ∂L/∂I of the distillation loss, by hand.

    ``L`` is :func:`~attn_core.layers.indexer.indexer_loss` for one sequence: ``p`` = the weights summed over
    the heads and renormalised, ``L = mean over the T queries of KL(p_t ‖ softmax(I_t))``.
    The answer is compared with autograd's gradient of ``attn_core.layers.indexer.indexer_loss``; entries
    at ``-inf`` (future tokens) must be 0.

    Shapes:
        index_scores: ``(T, T)``; attn_weights: ``(H, T, T)``; grad: ``(T, T)``
    """
    name = "18.3 the indexer's gradient"
    g = torch.Generator().manual_seed(1830)
    for H, T in ((2, 5), (3, 9)):
        future = ~_causal(T)
        scores = torch.randn(T, T, generator=g, dtype=F64).masked_fill(future, float("-inf"))
        weights = torch.softmax(torch.randn(H, T, T, generator=g, dtype=F64).masked_fill(future, float("-inf")), -1)
        leaf = scores.clone().requires_grad_()
        indexer_loss(leaf[None], weights[None]).backward()
        want = leaf.grad.detach()  # (T, T)
        got = _call(name, fn, scores.clone(), weights.clone())
        if got is _RAISED:
            return False
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            return report(name, False, f"return a tensor of shape {tuple(want.shape)}, got {describe(got)}")
        got = got.detach().double()
        if got.isnan().any():
            return report(name, False, "NaN: future tokens (-inf scores) get a gradient of exactly 0")
        where = f"H={H}, T={T}"
        if (got[future] != 0).any():
            return report(name, False, f"{where}: future tokens (-inf scores) must get a gradient of 0")
        if torch.allclose(got, -want, atol=1e-9):
            return report(name, False, f"{where}: the sign is flipped (a token the indexer over-rates is pushed down)")
        if torch.allclose(got, want * T, atol=1e-9):
            return report(name, False, f"{where}: the loss is the mean over the {T} queries, not their sum")
        if not _close(name, got, want, where):
            return False
    return report(name, True, "equals autograd's gradient of attn_core.layers.indexer.indexer_loss for 2 sizes")
