"""Checks for the exercises of chapter 2 (causal attention and masks)."""

from __future__ import annotations

from typing import Callable

import torch

from ...ops.masks import causal_mask, padding_mask
from ._common import report

__all__ = [
    "check_padding_mask",
]


def _is_bool_tensor(name: str, got: object, shape: tuple[int, ...]) -> bool:
    """Report (and return False) unless ``got`` is a boolean tensor of ``shape``."""
    if not isinstance(got, torch.Tensor):
        return report(name, False, f"expected a torch.Tensor, got {type(got).__name__}")
    if got.dtype != torch.bool:
        return report(name, False, f"expected a boolean mask (True = may attend), got dtype={got.dtype}")
    if tuple(got.shape) != shape:
        return report(name, False, f"shape {tuple(got.shape)}, expected {shape}")
    return True


def check_padding_mask(fn: Callable[[list, int], torch.Tensor]) -> bool:
    """Exercise 2.2: ``fn(lengths, T)`` is the key padding mask of a batch, ``True`` for real tokens.

    Shapes:
        lengths: ``B`` ints; fn's output: ``(B, 1, T)`` (the middle axis broadcasts over queries)
    """
    name = "2.2 padding mask"
    for lengths, T in (([3, 5, 1], 5), ([0, 2], 4), ([7], 7)):
        try:
            got = fn(list(lengths), T)
        except Exception as e:
            return report(name, False, f"fn({lengths}, {T}) raised {type(e).__name__}: {e}")
        expected = padding_mask(lengths, T)  # (B, 1, T)
        if isinstance(got, torch.Tensor) and tuple(got.shape) == (len(lengths), T):
            return report(
                name,
                False,
                f"shape {tuple(got.shape)}: add the query axis, (B, 1, T), so that "
                "it broadcasts over the queries of (B, T_q, T_k) scores",
            )
        if not _is_bool_tensor(f"{name} (lengths={lengths}, T={T})", got, tuple(expected.shape)):
            return False
        if torch.equal(got, ~expected):
            return report(name, False, "inverted: True must mean a real token (may attend), False padding")
        if not torch.equal(got, expected):
            return report(name, False, f"lengths={lengths}, T={T}: {int((got != expected).sum())} entries differ")
    return report(name, True, "lengths [3, 5, 1], [0, 2] and [7] all match")


# The exercises of the revised chapter (issue 25): two masks the chapter did not build.
__all__ += ["check_packed_causal_mask", "check_decode_mask"]


def _first_difference(got: torch.Tensor, want: torch.Tensor) -> str:
    """Where two masks first differ, in words (``got`` and ``want`` differ somewhere)."""
    index = tuple(int(n) for n in (got != want).nonzero()[0])
    verdict = "may attend" if bool(got[index]) else "is blocked"
    return f"query {index[-2]}, key {index[-1]} {verdict} in yours"


def check_packed_causal_mask(fn: Callable[[torch.Tensor], torch.Tensor]) -> bool:
    """Exercise 2.1: ``fn(doc_ids)`` is the causal mask of several documents packed into one row.

    ``doc_ids[t]`` names the document that token ``t`` belongs to (documents are contiguous
    runs). Token ``i`` may attend to token ``j`` only if ``j <= i`` *and* both belong to
    the same document. ``True`` = may attend.

    Shapes:
        doc_ids: ``(T,)``, integers; fn's output: ``(T, T)``, boolean
    """
    name = "2.1 packed causal mask"
    cases = ([0, 0, 0, 1, 1, 2, 2, 2, 2], [5], [3, 3, 7, 7, 7, 7], [0, 1, 2, 3])
    for ids in cases:
        doc = torch.tensor(ids)
        T = len(ids)
        try:
            got = fn(doc.clone())
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"fn({ids}) raised {type(e).__name__}: {e}")
        if not _is_bool_tensor(f"{name} (doc_ids={ids})", got, (T, T)):
            return False
        causal = causal_mask(T)
        same_doc = doc[:, None] == doc[None, :]  # (T, T)
        want = causal & same_doc
        if torch.equal(got, want):
            continue
        if torch.equal(got, causal):
            return report(name, False, f"doc_ids={ids}: a token sees the earlier documents (causal only)")
        if torch.equal(got, same_doc):
            return report(name, False, f"doc_ids={ids}: a token sees the future of its document")
        if torch.equal(got, want & ~torch.eye(T, dtype=torch.bool)):
            return report(name, False, f"doc_ids={ids}: a token must see itself (j <= i)")
        return report(name, False, f"doc_ids={ids}: {_first_difference(got, want)}")
    return report(name, True, "4 packings match, a one-token document and one-token documents included")


def check_decode_mask(fn: Callable[[int, int, list], torch.Tensor]) -> bool:
    """Exercise 2.3: ``fn(T_q, T_k, lengths)``: the mask of a *left-padded* batch decoding with a cache.

    The cache holds ``T_k`` positions per sequence; sequence ``b`` has ``lengths[b]`` real
    tokens, at the *end* (its first ``T_k - lengths[b]`` positions are padding). The
    ``T_q`` queries are the last ``T_q`` positions. A query may attend to a key that is
    real and not in its future. ``True`` = may attend.

    Shapes:
        fn's output: ``(B, T_q, T_k)``, boolean
    """
    name = "2.3 decode mask"
    cases = ((1, 6, [6, 4, 2]), (3, 7, [7, 5]), (4, 4, [4, 2]), (2, 9, [3]))
    for T_q, T_k, lengths in cases:
        try:
            got = fn(T_q, T_k, list(lengths))
        except Exception as e:
            return report(name, False, f"fn({T_q}, {T_k}, {lengths}) raised {type(e).__name__}: {e}")
        B = len(lengths)
        if not _is_bool_tensor(f"{name} (T_q={T_q}, T_k={T_k}, lengths={lengths})", got, (B, T_q, T_k)):
            return False
        real = torch.arange(T_k) >= T_k - torch.tensor(lengths)[:, None]  # (B, T_k): left padding
        bottom_right = causal_mask(T_q, T_k)  # (T_q, T_k)
        want = bottom_right[None] & real[:, None, :]  # (B, T_q, T_k)
        if torch.equal(got, want):
            continue
        top_left = torch.ones(T_q, T_k, dtype=torch.bool).tril()
        right_padded = padding_mask(lengths, T_k)  # (B, 1, T_k): real tokens first
        where = f"T_q={T_q}, T_k={T_k}, lengths={lengths}"
        if torch.equal(got, top_left[None] & real[:, None, :]):
            return report(name, False, f"{where}: causal part aligned top-left; the queries are the *last* positions")
        if torch.equal(got, bottom_right[None] & right_padded):
            return report(name, False, f"{where}: padded on the right; here the padding comes first")
        if torch.equal(got, bottom_right.expand(B, T_q, T_k)):
            return report(name, False, f"{where}: the padding is not masked")
        return report(
            name, False, f"{where}: in sequence {int((got != want).nonzero()[0][0])}, {_first_difference(got, want)}"
        )
    return report(name, True, "4 batches match (one-token decoding, prefill, short and long prompts)")
