"""Floors for trained results: what a model achieves with no attention, or no learning.

A trained language model's loss means little on its own: 2.4 bits per character is good
against the 4.8 bits of each character's frequency and poor against the 2.1 bits of a
table of which character follows which. The book prints such a floor beside every trained
comparison (:func:`attn_core.teach.evidence.compare_variants` requires one), computed on
the same data: chance (``log2`` of the vocabulary), a unigram table (the symbols'
frequencies: the entropy of the data's symbol distribution) or a bigram/trigram table.
"""

from __future__ import annotations

import math

import torch

__all__ = ["ngram_cross_entropy"]


def ngram_cross_entropy(
    train: torch.Tensor, test: torch.Tensor, *, order: int, vocab_size: int, alpha: float = 0.1, unit: str = "bits"
) -> float:
    """Cross-entropy on ``test`` of an additively smoothed n-gram table counted on ``train``.

    The floor a trained language model must beat to have learned anything beyond
    symbol frequencies: ``order=0`` is a unigram table (each symbol's frequency),
    ``order=1`` a bigram table (the next symbol given the previous one), ``order=2`` a
    trigram. Counts get ``alpha`` added, so an unseen pair keeps some probability.

    Args:
        train, test: 1-D integer token ids in ``[0, vocab_size)``.
        order: How many previous symbols the table conditions on (0, 1 or 2).
        vocab_size: The number of symbols.
        alpha: Additive smoothing (> 0).
        unit: ``"bits"`` or ``"nats"``.

    Returns:
        The mean negative log-probability per test symbol (its first ``order`` symbols
        have no full context and are not scored).

    Shapes:
        train: (N,); test: (M,) with M > order
    """
    for name, ids in (("train", train), ("test", test)):
        if not isinstance(ids, torch.Tensor) or ids.dim() != 1 or ids.dtype.is_floating_point:
            raise TypeError(
                f"{name} must be a 1-D integer tensor, got {type(ids).__name__} {getattr(ids, 'shape', '')}"
            )
        if ids.numel() and (ids.min() < 0 or ids.max() >= vocab_size):
            raise ValueError(
                f"{name} has ids outside [0, {vocab_size}): min {ids.min().item()}, max {ids.max().item()}"
            )
    if order not in (0, 1, 2):
        raise ValueError(f"order must be 0, 1 or 2, got order={order!r}")
    if vocab_size ** (order + 1) > 2**26:
        raise ValueError(f"a table of vocab_size**{order + 1} = {vocab_size ** (order + 1)} cells is too large")
    if not alpha > 0 or unit not in ("bits", "nats"):
        raise ValueError(f"alpha must be > 0 and unit 'bits' or 'nats', got alpha={alpha}, unit={unit!r}")
    if train.numel() <= order or test.numel() <= order:
        raise ValueError(f"train and test need more than order={order} ids, got {train.numel()} and {test.numel()}")

    def cells(ids: torch.Tensor) -> torch.Tensor:
        # (len - order,): the index of each (context, next symbol) cell, context first
        index = torch.zeros(ids.numel() - order, dtype=torch.long)
        for k in range(order + 1):
            index = index * vocab_size + ids[k : ids.numel() - order + k].long()
        return index

    counts = torch.bincount(cells(train), minlength=vocab_size ** (order + 1)).double() + alpha
    table = counts.view(-1, vocab_size)  # (contexts, vocab_size): one row per context
    log_p = (table / table.sum(-1, keepdim=True)).log().flatten()
    nats = -log_p[cells(test)].mean().item()
    return nats / math.log(2) if unit == "bits" else nats
