"""Checks for the exercises of chapter 2 (causal attention and masks)."""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from ...layers.multihead import MultiHeadAttention
from ...ops.attention import attention
from ...ops.masks import causal_mask
from ._ch02_candidates import alignment_candidates
from ._common import describe, report

__all__ = [
    "alignment_candidates",
    "check_alignment_test",
    "check_decode_step_test",
    "check_dropout_variance",
    "check_packed_documents",
    "check_packed_prediction",
    "decode_step_candidates",
    "padded_equals_alone",
]


def _raised(e: Exception) -> str:
    """An exception in words: its type, and its message when it has one."""
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def _is_bool_tensor(name: str, got: object, shape: tuple[int, ...]) -> bool:
    """Report (and return False) unless ``got`` is a boolean tensor of ``shape``."""
    if not isinstance(got, torch.Tensor):
        return report(name, False, f"expected a torch.Tensor, got {type(got).__name__}")
    if got.dtype != torch.bool:
        return report(name, False, f"expected a boolean mask (True = may attend), got dtype={got.dtype}")
    if tuple(got.shape) != shape:
        return report(name, False, f"shape {tuple(got.shape)}, expected {shape}")
    return True


def check_alignment_test(alignment: Callable[[Callable[..., torch.Tensor]], str]) -> bool:
    """Exercise 2.2: ``alignment(attend)`` tells how a causal ``attend(q, k, v)`` aligns its mask.

    It returns ``"top-left"`` (query ``i`` sees keys ``0..i``, PyTorch's ``is_causal``),
    ``"bottom-right"`` (the queries are the last ``T_q`` of ``T_k`` positions, attn_core's
    and FlashAttention's) or ``"neither"``. It is run on nine functions that look alike
    from outside (the same name, code and signature, in a mixed order): two top-left, two
    bottom-right (one of each with another score scale, which a test comparing outputs
    with a reference would misread) and five that are neither: no mask, a mask that lets
    each query see one future key (a test that reads only the last query, or only
    whether a key is seen and not which, misses it), a mask applied only when
    ``T_q == T_k`` (a test with one query misses it), a mask right in query 0 that leaks
    in the later queries (a test that reads query 0 alone misses it) and one that gives
    query ``i`` keys ``1..i+1`` (a test that counts each query's keys misses it). Only a
    test with several queries, fewer than the keys, that reads exactly which keys each
    query sees gets all nine.

    Shapes:
        the inputs ``alignment`` passes to ``attend``: q ``(B, H, T_q, D)``, k and v
        ``(B, H, T_k, D)`` with ``T_q <= T_k`` (D may differ between k and v)
    """
    name = "2.2 alignment test"
    candidates = alignment_candidates()
    for i, (attend, expected, what) in enumerate(candidates, start=1):
        try:
            with torch.random.fork_rng():  # the learner's draws leave the notebook's state alone
                got = alignment(attend)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"candidate {i} of {len(candidates)} raised {_raised(e)}")
        if got != expected:
            return report(
                name,
                False,
                f"alignment(candidate {i} of {len(candidates)}) returned {got!r}, expected "
                f"{expected!r}: that candidate {what}",
            )
    counts = {
        kind: sum(expected == kind for _, expected, _ in candidates) for kind in ("top-left", "bottom-right", "neither")
    }
    tally = ", ".join(f"{n} {kind}" for kind, n in counts.items())
    return report(name, True, f"{len(candidates)} of {len(candidates)} right: {tally}")


# The exercises of the revised chapter (issue 25): a packed mask and a decoding step the chapter did not build.


def _first_difference(got: torch.Tensor, want: torch.Tensor) -> str:
    """Where two masks first differ, in words (``got`` and ``want`` differ somewhere)."""
    index = tuple(int(n) for n in (got != want).nonzero()[0])
    verdict = "may attend" if bool(got[index]) else "is blocked"
    return f"query {index[-2]}, key {index[-1]} {verdict} in yours"


def _packed_vs_alone(ids: list[int], mask: torch.Tensor, pos: torch.Tensor) -> float:
    """Largest |packed - alone| over the tokens, with a learned position table (float64).

    The layer has no causal mask of its own: ``mask`` must bring causality too.
    """
    with torch.random.fork_rng():  # the check's draws leave the notebook's state alone
        torch.manual_seed(0)
        layer = MultiHeadAttention(16, 2).double().eval()
        table = torch.nn.Embedding(len(ids), 16).double()  # learned absolute positions
        x = torch.randn(1, len(ids), 16, dtype=torch.float64)  # (1, T, d_model)
    doc = torch.tensor(ids)
    with torch.no_grad():
        packed = layer(x + table(pos), mask=mask)[0]  # (T, d_model)
        gap = 0.0
        for d in dict.fromkeys(ids):  # each document alone, its positions from 0
            rows = (doc == d).nonzero()[:, 0]  # (n,)
            n = len(rows)
            alone = layer(x[:, rows] + table(torch.arange(n)), mask=causal_mask(n))[0]
            gap = max(gap, (packed[rows] - alone).abs().max().item())
    return gap


def check_packed_prediction(prediction: object) -> bool:
    """Exercise 2.1, the prediction: ``(predicted_true, predicted_positions)`` for the
    packed row ``doc_ids = [0, 0, 0, 1, 1, 2]``, committed before the function is written.

    ``predicted_true`` is the number of ``True`` entries of its ``(6, 6)`` mask (``j <= i``,
    same document), ``predicted_positions`` the list of its 6 position ids (restarting at 0
    at each document's first token). The reference is computed, not typed: the mask from
    ``causal_mask`` and the ids, the positions from each document's first token.
    """
    name = "2.1 prediction"
    ids = [0, 0, 0, 1, 1, 2]
    doc, T = torch.tensor(ids), len(ids)
    want_true = int((causal_mask(T) & (doc[:, None] == doc[None, :])).sum())
    want_pos = [t - ids.index(d) for t, d in enumerate(ids)]
    if not (isinstance(prediction, tuple) and len(prediction) == 2):
        return report(name, False, f"expected a pair (predicted_true, predicted_positions), got {describe(prediction)}")
    got_true, got_pos = prediction
    if not isinstance(got_true, int) or isinstance(got_true, bool):
        return report(name, False, f"predicted_true should be an int, got {describe(got_true)}")
    if got_true == T * (T + 1) // 2:
        return report(name, False, f"{got_true} True entries is the causal mask alone: the documents block more")
    if got_true == int((doc[:, None] == doc[None, :]).sum()):
        return report(name, False, f"{got_true} True entries lets a token see the future of its document")
    if got_true == want_true - T:
        return report(name, False, f"{got_true} True entries leaves out the diagonal: a token sees itself")
    if got_true != want_true:
        return report(name, False, f"predicted {got_true} True entries; count each document's triangle")
    if not isinstance(got_pos, (list, tuple)) or [int(p) for p in got_pos if isinstance(p, int)] != list(got_pos):
        return report(name, False, f"predicted_positions should be a list of ints, got {describe(got_pos)}")
    if list(got_pos) == list(range(T)):
        return report(name, False, f"positions {list(got_pos)} do not restart at each document")
    if list(got_pos) != want_pos:
        return report(name, False, f"positions {list(got_pos)}: a document's first token is at 0")
    return report(name, True, f"{want_true} True entries, positions {want_pos}")


def check_packed_documents(fn: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]) -> bool:
    """Exercise 2.1: ``fn(doc_ids)`` returns the mask *and* the position ids of several
    documents packed into one row.

    ``doc_ids[t]`` names the document of token ``t`` (contiguous runs, named by any
    integers, not necessarily ascending). The mask: token ``i`` may attend to token ``j``
    only if ``j <= i`` *and* both belong to the same document, ``True`` = may attend. The
    position ids restart at 0 at each document's first token. The test: through a layer
    with a learned position table, every document of the packed row gives the output it
    gives alone; when it does not, the message says which part is off.

    Shapes:
        doc_ids: ``(T,)``, integers; fn's output: ``(mask, position_ids)``, ``(T, T)``
        boolean and ``(T,)`` integer
    """
    name = "2.1 packed documents"
    # The last case's ids are not in ascending order: a test ``doc[j] >= doc[i]`` passes the others.
    cases = ([3, 3, 7, 7, 7, 7], [0, 0, 0, 1, 1, 2, 2, 2, 2], [5], [0, 1, 2, 3], [4, 4, 1, 1, 1, 9])
    for ids in cases:
        doc, T = torch.tensor(ids), len(ids)
        try:
            got = fn(doc.clone())
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"fn({ids}) raised {_raised(e)}")
        if not (isinstance(got, tuple) and len(got) == 2):
            return report(name, False, f"doc_ids={ids}: expected a pair (mask, position_ids), got {describe(got)}")
        mask, pos = got
        if not _is_bool_tensor(f"{name} (doc_ids={ids}), mask", mask, (T, T)):
            return False
        if not _is_int_tensor(f"{name} (doc_ids={ids}), position_ids", pos, (T,)):
            return False
        if bool((pos < 0).any()) or bool((pos >= T).any()):
            return report(name, False, f"doc_ids={ids}: position ids {pos.tolist()} are outside the table (0..{T - 1})")
        if _packed_vs_alone(ids, mask, pos.long()) < 1e-10:
            continue
        causal, same_doc = causal_mask(T), doc[:, None] == doc[None, :]  # (T, T) each
        want = causal & same_doc
        first = torch.tensor([ids.index(d) for d in ids])  # (T,): each document's first token
        want_pos = torch.arange(T) - first  # (T,)
        if not torch.equal(mask, want):
            if torch.equal(mask, causal):
                return report(name, False, f"doc_ids={ids}: a token sees the earlier documents (causal only)")
            if torch.equal(mask, same_doc):
                return report(name, False, f"doc_ids={ids}: a token sees the future of its document")
            if torch.equal(mask, want & ~torch.eye(T, dtype=torch.bool)):
                return report(name, False, f"doc_ids={ids}: a token must see itself (j <= i)")
            return report(name, False, f"doc_ids={ids}: {_first_difference(mask, want)}")
        if torch.equal(pos, torch.arange(T)):
            return report(name, False, f"doc_ids={ids}: positions do not restart at each document")
        if torch.equal(pos, want_pos + 1):
            return report(name, False, f"doc_ids={ids}: positions one too high; a document starts at 0")
        return report(name, False, f"doc_ids={ids}: position ids {pos.tolist()}, expected {want_pos.tolist()}")
    return report(name, True, f"{len(cases)} packings, each document as alone (unsorted ids too)")


def _is_int_tensor(name: str, got: object, shape: tuple[int, ...]) -> bool:
    """Report (and return False) unless ``got`` is an integer tensor of ``shape``."""
    if not isinstance(got, torch.Tensor):
        return report(name, False, f"expected a torch.Tensor, got {type(got).__name__}")
    if got.dtype == torch.bool or got.is_floating_point() or got.is_complex():
        return report(name, False, f"expected integer position ids, got dtype={got.dtype}")
    if tuple(got.shape) != shape:
        return report(name, False, f"shape {tuple(got.shape)}, expected {shape}")
    return True


def _decode_variant(
    *, top_left=False, from_column=False, right_padded=False, pad_visible=False, no_causal=False, shift=0, pad_id=0
):
    """A ``decode_step(T_q, T_k, lengths) -> (mask, position_ids)`` for exercise 2.3: the right
    one (no flags), or one with the slips the flags name; all look alike from outside.

    Shapes:
        decode_step's output: ``(B, T_q, T_k)`` boolean and ``(B, T_q)`` integer
    """

    def decode_step(T_q, T_k, lengths):
        length = torch.tensor(lengths)[:, None]  # (B, 1)
        columns = torch.arange(T_k)  # (T_k,): the cache's columns
        start = T_k - length  # (B, 1): each row's first real column
        real = (columns < length) if right_padded else (columns >= start)  # (B, T_k)
        real = real | pad_visible
        q_cols = columns[T_k - T_q :]  # (T_q,): the queries are the last columns
        now = torch.arange(T_q) if top_left else q_cols  # (T_q,): the last key a query sees
        causal = (columns[None, :] <= now[:, None]) | no_causal  # (T_q, T_k)
        mask = causal[None] & real[:, None, :]  # (B, T_q, T_k)
        pos = (q_cols[None, :] - (0 if from_column else start) + shift).expand(len(lengths), T_q)
        return mask, pos.masked_fill(q_cols[None, :] < start, pad_id)  # padded queries: pad_id

    return decode_step


def decode_step_candidates() -> list[tuple[Callable, bool, str]]:
    """Exercise 2.3's candidates, ``(decode_step, right, what)``, in a fixed mixed order; the
    first is the one the chapter hands over (both slips)."""
    return [
        (_decode_variant(top_left=True, from_column=True), False, "is the one shown (both slips)"),
        (_decode_variant(), True, "is right"),
        (_decode_variant(from_column=True), False, "counts positions from column 0 (seen only if a row is padded)"),
        (_decode_variant(pad_id=1), True, "is right; its padded queries get position 1 (their output is dropped)"),
        (_decode_variant(top_left=True), False, "aligns the causal part top-left (seen only if T_q < T_k)"),
        (_decode_variant(right_padded=True), False, "masks the padding as if it were on the right"),
        (_decode_variant(shift=1), False, "counts positions from 1"),
        (_decode_variant(pad_visible=True), False, "leaves the padding visible"),
        (_decode_variant(no_causal=True), False, "builds no causal part (one query needs none; seen if T_q > 1)"),
    ]


def padded_equals_alone(decode_step: Callable, T_q: int, T_k: int, lengths: list[int]) -> bool:
    """The padding test of exercise 2.3 for one setting (``T_k <= 64``): every row's real new
    queries give what its prompt gives alone, with learned positions counted from 0.

    Shapes:
        decode_step's output: ``(B, T_q, T_k)`` boolean and ``(B, T_q)`` integer
    """
    g = torch.Generator().manual_seed(0)
    table = torch.randn(64, 4, generator=g, dtype=torch.float64)  # learned positions
    mask, pos = decode_step(T_q, T_k, lengths)
    x = torch.randn(len(lengths), T_k, 4, generator=g, dtype=torch.float64)  # (B, T_k, D)
    for b, n in enumerate(lengths):
        m = min(n, T_q)  # row b's real queries
        seq = x[b, T_k - n :] + table[:n]  # (n, D): the prompt alone
        alone = attention(seq, seq, seq, mask=causal_mask(n))[n - m :]
        cache = x[b] + table[(torch.arange(T_k) - (T_k - n)).clamp(min=0)]  # (T_k, D)
        q = x[b, T_k - T_q :] + table[pos[b]]  # (T_q, D): the new queries
        if not torch.allclose(attention(q, cache, cache, mask=mask[b])[T_q - m :], alone):
            return False
    return True


def check_decode_step_test(is_right: Callable[[Callable], bool]) -> bool:
    """Exercise 2.3: ``is_right(decode_step)`` returns True if ``decode_step`` passes the
    learner's test. ``decode_step(T_q, T_k, lengths)`` returns ``(mask, position_ids)`` for a
    decoding step of a left-padded batch (the cache holds ``T_k`` columns, row ``b`` has
    ``lengths[b]`` real tokens at the end, the ``T_q`` queries are the last columns).

    It is run on nine look-alike candidates (:func:`decode_step_candidates`): two right (one
    gives padded queries position 1, which a test pinning them to 0 wrongly rejects) and seven
    with slips; a test passes only if it says True for the right ones and False for the others.
    Catching them all needs fewer queries than keys (top-left equals bottom-right when
    ``T_q = T_k``) but more than one (one query needs no causal part), a padded row
    (positions from column 0 are right in a full row), and learned positions (RoPE's scores
    do not see a shift common to a row).

    Shapes:
        decode_step's output: ``(B, T_q, T_k)`` boolean and ``(B, T_q)`` integer
    """
    name = "2.3 decode-step test"
    candidates = decode_step_candidates()
    for i, (fn, right, what) in enumerate(candidates, start=1):
        try:
            with torch.random.fork_rng():  # the test's draws leave the notebook's state alone
                got = is_right(fn)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"is_right(candidate {i}) raised {_raised(e)}")
        if not isinstance(got, bool):
            return report(name, False, f"is_right(candidate {i}) returned {describe(got)}, expected a bool")
        if got != right:
            return report(
                name, False, f"is_right(candidate {i} of {len(candidates)}) returned {got}, but that candidate {what}"
            )
    n_right = sum(right for _, right, _ in candidates)
    slips = len(candidates) - n_right
    return report(name, True, f"right on all {len(candidates)} candidates ({n_right} right, {slips} with slips)")


def _dropout_draws(w: float, p: float, n: int = 200_000) -> torch.Tensor:
    """``n`` draws of one weight ``w`` through ``F.dropout`` (float64, seeded; RNG left alone)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return F.dropout(torch.full((n,), w, dtype=torch.float64), p=p)


def check_dropout_variance(fn: Callable[[float, float], float]) -> bool:
    """Exercise 2.4: ``fn(w, p)`` is the variance of a weight ``w`` after inverted dropout
    with drop probability ``p`` (kept as ``w / (1 - p)`` with probability ``1 - p``, else 0).

    The value is compared with the closed form on four settings; a wrong one is reported
    beside what 200,000 draws of ``F.dropout`` give, with a hint for the usual slips.
    """
    name = "2.4 dropout variance"
    for w, p in ((0.3, 0.1), (0.5, 0.5), (0.2, 0.25), (1.0, 0.9)):
        try:
            got = fn(w, p)
            value = float(got)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"fn({w}, {p}) gave {_raised(e)}; expected a number")
        want = w * w * p / (1 - p)
        if abs(value - want) <= 1e-6 * want:  # float32 arithmetic is right too
            continue
        hints = {
            w * w * p * (1 - p): "the variance without the 1/(1 - p) rescaling",
            w * w / (1 - p): "the mean of the square; subtract the squared mean",
            w * w * (1 - p) / p: "p read as the probability to keep",
            w * p / (1 - p): "w enters squared",
            w * w * p / (1 - p) ** 2: "one factor 1/(1 - p) too many",
        }
        hint = next((f" ({h})" for v, h in hints.items() if abs(value - v) <= 1e-6 * abs(v)), "")
        simulated = _dropout_draws(w, p).var().item()
        return report(name, False, f"w={w}, p={p}: {value:.4g}{hint}; F.dropout draws give {simulated:.4g}")
    sd = (0.1 / 0.9) ** 0.5  # the noise at p = 0.1, as a fraction of w
    agree = all(
        abs(_dropout_draws(w, p).var().item() - w * w * p / (1 - p)) < 0.02 * w * w * p / (1 - p)
        for w, p in ((0.3, 0.1), (0.5, 0.5))
    )
    detail = f"4 settings, F.dropout {'agrees' if agree else 'disagrees'}; p = 0.1: std {sd:.2f} w"
    return report(name, agree, detail)
