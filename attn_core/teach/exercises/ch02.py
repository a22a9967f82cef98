"""Checks for the exercises of chapter 2 (causal attention and masks)."""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from ...layers.multihead import MultiHeadAttention
from ...ops.attention import attention
from ...ops.masks import causal_mask, padding_mask
from ._common import describe, report

__all__ = [
    "alignment_candidates",
    "check_alignment_test",
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


def _causal_candidate(
    shift: int | None,
    *,
    top_left: bool = False,
    square_only: bool = False,
    scale=None,
    later_leak: bool = False,
    skip_first: bool = False,
):
    """A causal attention ``attend(q, k, v)`` whose mask is chosen (right or wrong).

    ``shift``: query ``i`` sees key ``j`` when ``j <= i + shift``, with ``i`` counted from
    the top-left corner (``top_left``) or as the last ``T_q`` of ``T_k`` positions
    (bottom-right); ``None`` = no mask. ``square_only``: the mask is applied only when
    ``T_q == T_k`` (code that skips it for a decoding step). ``scale``: another score
    scale than ``1/sqrt(D)``, which changes the weights but not which keys are seen.
    ``later_leak``: every query but the first also sees the key just after it (right in
    row 0, wrong below). ``skip_first``: key 0 is never seen (with ``shift=1``, query
    ``i`` sees keys ``1..i+1``: the right number of keys, the wrong ones).
    """

    def impl(q, k, v):
        T_q, T_k = q.shape[-2], k.shape[-2]
        mask = None
        if shift is not None and not (square_only and T_q != T_k):
            offset = 0 if top_left else T_k - T_q
            q_pos = torch.arange(T_q, device=q.device) + offset  # (T_q,)
            k_pos = torch.arange(T_k, device=q.device)  # (T_k,)
            mask = k_pos[None, :] <= q_pos[:, None] + shift  # (T_q, T_k)
            if later_leak:  # rows 1.. also see their next key
                mask = mask | ((k_pos[None, :] == q_pos[:, None] + 1) & (q_pos[:, None] > offset))
            if skip_first:
                mask = mask & (k_pos[None, :] >= 1)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)

    return impl


def _alike(impl: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """Wrap ``impl`` so that every candidate looks the same from outside (name, code, signature)."""

    def attend(q, k, v):
        return impl(q, k, v)

    return attend


def alignment_candidates() -> list[tuple[Callable[..., torch.Tensor], str, str]]:
    """The functions exercise 2.2's test is run on: ``(attend, alignment, what it is)``, mixed order."""

    def sdpa_is_causal(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def attn_core_is_causal(q, k, v):
        return attention(q, k, v, is_causal=True)

    cases = [
        (_causal_candidate(0, scale=1.0), "bottom-right", "is bottom-right with another score scale"),
        (sdpa_is_causal, "top-left", "is PyTorch's is_causal=True"),
        (_causal_candidate(1), "neither", "lets each query see one key of its future"),
        (attn_core_is_causal, "bottom-right", "is attn_core's is_causal=True"),
        (_causal_candidate(None), "neither", "has no mask at all"),
        (
            _causal_candidate(0, top_left=True, later_leak=True),
            "neither",
            "is top-left in query 0, but every later query sees one key of its future",
        ),
        (_causal_candidate(0, top_left=True, scale=0.1), "top-left", "is top-left with another score scale"),
        (_causal_candidate(0, square_only=True), "neither", "applies its mask only when T_q == T_k"),
        (
            _causal_candidate(1, top_left=True, skip_first=True),
            "neither",
            "lets query i see keys 1..i+1: the top-left counts, but shifted by one key",
        ),
    ]
    return [(_alike(fn), expected, what) for fn, expected, what in cases]


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
__all__ += ["check_packed_documents", "check_decode_mask"]


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


class _CausalMaskCalled(RuntimeError):
    """Raised by the stand-ins for ready-made causal masks while exercise 2.3's answer runs."""


def _call_without_causal_mask(fn: Callable, *args):
    """Call ``fn(*args)`` with the ready-made causal masks replaced by stand-ins that raise.

    Replaced: every name bound to attn_core's ``causal_mask`` in ``fn``'s module (a notebook's
    ``from attn_core import causal_mask``) and in ``attn_core`` and ``attn_core.ops.masks``;
    and the methods through which PyTorch's ``CausalBias`` (``causal_lower_right``,
    ``causal_upper_left``) becomes a tensor. All are restored afterwards, whatever ``fn`` does.
    """
    from torch.nn.attention.bias import CausalBias

    import attn_core

    from ...ops import masks

    def stand_in(what):
        def raises(*_args, **_kwargs):
            raise _CausalMaskCalled(what)

        return raises

    namespaces = [attn_core.__dict__, masks.__dict__, getattr(fn, "__globals__", {})]
    saved = [(ns, name) for ns in namespaces for name, value in list(ns.items()) if value is causal_mask]
    methods = [m for m in ("_materialize", "_lower_right", "_upper_left") if m in vars(CausalBias)]
    originals = {m: vars(CausalBias)[m] for m in methods}
    for ns, name in saved:
        ns[name] = stand_in("attn_core's causal_mask")
    for m in methods:
        setattr(CausalBias, m, stand_in("PyTorch's causal_lower_right/causal_upper_left"))
    try:
        return fn(*args)
    finally:
        for ns, name in saved:
            ns[name] = causal_mask
        for m, original in originals.items():
            setattr(CausalBias, m, original)


def check_decode_mask(fn: Callable[[int, int, list], tuple[torch.Tensor, torch.Tensor]]) -> bool:
    """Exercise 2.3: ``fn(T_q, T_k, lengths)`` returns the mask *and* the position ids of a
    decoding step of a *left-padded* batch.

    The cache holds ``T_k`` columns per sequence; sequence ``b`` has ``lengths[b]`` real
    tokens, at the *end* (its first ``T_k - lengths[b]`` columns are padding). The ``T_q``
    queries are the last ``T_q`` columns. The mask: a query may attend to a key that is
    real and not in its future, ``True`` = may attend. The position ids: each real query's
    position counted from its row's first real token (what a learned position table must
    be given); a padded query (a prefill of a short prompt) may get any position a table
    has, that is any id >= 0 (its output is dropped by the loss). The mask must be built
    without the ready-made causal masks (``tril`` on ones or comparing positions is fine):
    ``fn`` runs with attn_core's ``causal_mask`` and PyTorch's causal biases
    (``causal_lower_right``, ``causal_upper_left``) replaced by stand-ins that raise, so
    an answer that calls one is reported.

    Shapes:
        fn's output: ``(mask, position_ids)``, ``(B, T_q, T_k)`` boolean and ``(B, T_q)``
        integer
    """
    name = "2.3 decode step"
    cases = ((1, 6, [6, 4, 2]), (3, 7, [7, 5]), (4, 4, [4, 2]), (2, 9, [3]))
    for T_q, T_k, lengths in cases:
        where = f"T_q={T_q}, T_k={T_k}, lengths={lengths}"
        try:
            got = _call_without_causal_mask(fn, T_q, T_k, list(lengths))
        except _CausalMaskCalled as e:
            return report(name, False, f"{where}: calls {e}; build the mask yourself")
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"fn({T_q}, {T_k}, {lengths}) raised {_raised(e)}")
        if not (isinstance(got, tuple) and len(got) == 2):
            return report(name, False, f"{where}: expected a pair (mask, position_ids), got {describe(got)}")
        got_mask, got_pos = got
        B = len(lengths)
        if not _is_bool_tensor(f"{name} ({where}), mask", got_mask, (B, T_q, T_k)):
            return False
        if not _is_int_tensor(f"{name} ({where}), position_ids", got_pos, (B, T_q)):
            return False
        length = torch.tensor(lengths)[:, None]  # (B, 1)
        columns = torch.arange(T_k)  # (T_k,)
        real = columns >= T_k - length  # (B, T_k): left padding
        bottom_right = causal_mask(T_q, T_k)  # (T_q, T_k)
        want = bottom_right[None] & real[:, None, :]  # (B, T_q, T_k)
        if not torch.equal(got_mask, want):
            top_left = torch.ones(T_q, T_k, dtype=torch.bool).tril()
            right_padded = padding_mask(lengths, T_k)  # (B, 1, T_k): real tokens first
            if torch.equal(got_mask, top_left[None] & real[:, None, :]):
                return report(name, False, f"{where}: causal part aligned top-left; the queries are the *last* columns")
            if torch.equal(got_mask, bottom_right[None] & right_padded):
                return report(name, False, f"{where}: padded on the right; here the padding comes first")
            if torch.equal(got_mask, bottom_right.expand(B, T_q, T_k)):
                return report(name, False, f"{where}: the padding is not masked")
            b = int((got_mask != want).nonzero()[0][0])
            return report(name, False, f"{where}: mask of sequence {b}, {_first_difference(got_mask, want)}")
        q_cols = columns[T_k - T_q :]  # (T_q,)
        want_pos = q_cols[None, :] - (T_k - length)  # (B, T_q): from each row's first real token
        checked = want_pos >= 0  # (B, T_q): a padded query needs only an id >= 0 (above)
        got_pos = got_pos.long()
        if bool((got_pos < 0).any()):  # a learned table (nn.Embedding) has no row -1
            b, i = (int(n) for n in (got_pos < 0).nonzero()[0])
            return report(
                name,
                False,
                f"{where}: sequence {b}, query {i} has position {int(got_pos[b, i])}; a position "
                "table has no negative rows: give padded queries an id >= 0 (e.g. 0)",
            )
        if torch.equal(got_pos[checked], want_pos[checked]):
            continue
        if torch.equal(got_pos[checked], q_cols.expand(B, T_q)[checked]):
            return report(
                name, False, f"{where}: positions counted from column 0; count from each row's first real token"
            )
        if torch.equal(got_pos[checked], (want_pos + 1)[checked]):
            return report(name, False, f"{where}: positions one too high; a row's first real token is position 0")
        if torch.equal(got_pos[checked], torch.arange(T_q).expand(B, T_q)[checked]):
            return report(
                name, False, f"{where}: positions restart at 0 for the step; the new tokens follow the prompt"
            )
        b, i = (int(n) for n in (got_pos != want_pos).logical_and(checked).nonzero()[0])
        return report(
            name,
            False,
            f"{where}: sequence {b}, query {i} has position {int(got_pos[b, i])}, expected {int(want_pos[b, i])}",
        )
    return report(name, True, "4 batches match, a prefill with padded queries included")
