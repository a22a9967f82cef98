"""attn_core.teach.exercises.ch02: the right and wrong answers of exercises 2.1-2.4 (ANSWERS, held to the
standard by tests/test_teach_exercises_standard.py)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attn_core import attention, causal_mask
from attn_core.teach.exercises.ch02 import (
    check_alignment_test,
    check_decode_step_test,
    check_dropout_variance,
    check_packed_documents,
    check_packed_prediction,
    padded_equals_alone,
)


# 2.1 ------------------------------------------------------------------------------
def _packed_mask(doc_ids):
    T = len(doc_ids)
    pos = torch.arange(T)
    return (pos[None, :] <= pos[:, None]) & (doc_ids[:, None] == doc_ids[None, :])  # (T, T)


def _restarting(doc_ids):  # (T,): tokens of the same document before t
    T = len(doc_ids)
    same = doc_ids[:, None] == doc_ids[None, :]  # (T, T)
    return (same & (torch.arange(T)[None, :] < torch.arange(T)[:, None])).sum(-1)


def _packed(doc_ids):
    return _packed_mask(doc_ids), _restarting(doc_ids)


def _packed_by_boundaries(doc_ids):  # another right way: a new document where the id changes
    starts = torch.cat([torch.tensor([True]), doc_ids[1:] != doc_ids[:-1]])  # (T,)
    first = torch.cummax(torch.where(starts, torch.arange(len(doc_ids)), 0), 0).values
    return _packed_mask(doc_ids), torch.arange(len(doc_ids)) - first


def _mask_with(make_mask):  # a wrong mask beside the right positions
    return lambda doc_ids: (make_mask(doc_ids), _restarting(doc_ids))


def _positions_with(make_positions):  # the right mask beside wrong positions
    return lambda doc_ids: (_packed_mask(doc_ids), make_positions(doc_ids))


def _causal_only(doc_ids):  # leaks across documents
    return torch.ones(len(doc_ids), len(doc_ids), dtype=torch.bool).tril()


def _same_document_only(doc_ids):
    return doc_ids[:, None] == doc_ids[None, :]


def _strict(doc_ids):  # j < i: a token does not see itself
    return _packed_mask(doc_ids) & ~torch.eye(len(doc_ids), dtype=torch.bool)


def _later_or_same_id(doc_ids):  # right only while the ids ascend: [2, 2, 0] sees document 2
    T = len(doc_ids)
    return causal_mask(T) & (doc_ids[None, :] >= doc_ids[:, None])


def _by_position_in_document(doc_ids):  # compares restarted positions, forgets the document
    pos = _restarting(doc_ids)
    return pos[None, :] <= pos[:, None]


def _restart_where_id_grows(doc_ids):  # right only while the ids ascend: [4, 4, 1] never restarts
    starts = torch.cat([torch.tensor([True]), doc_ids[1:] > doc_ids[:-1]])  # (T,)
    first = torch.cummax(torch.where(starts, torch.arange(len(doc_ids)), 0), 0).values
    return torch.arange(len(doc_ids)) - first


# 2.2 ------------------------------------------------------------------------------
def _seen(attend, T_q, T_k):
    """Which keys each query sees: equal scores (q = k = 0) and one-hot values show the weights."""
    q = torch.zeros(1, 1, T_q, 4)
    k = torch.zeros(1, 1, T_k, 4)
    v = torch.eye(T_k)[None, None]  # (1, 1, T_k, T_k): output row i = the weights of query i
    return attend(q, k, v)[0, 0] > 0  # (T_q, T_k)


def _name(seen, T_q, T_k):
    ones = torch.ones(T_q, T_k, dtype=torch.bool)
    if torch.equal(seen, ones.tril()):
        return "top-left"
    if torch.equal(seen, ones.tril(T_k - T_q)):
        return "bottom-right"
    return "neither"


def _alignment(attend):
    return _name(_seen(attend, 3, 7), 3, 7)


def _alignment_by_perturbing(attend):  # another right design: move one key, see which outputs move
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, n, 4, generator=g) for n in (3, 7, 7))
    seen = torch.zeros(3, 7, dtype=torch.bool)
    for j in range(7):
        v2 = v.clone()
        v2[..., j, :] += 1.0
        seen[:, j] = (attend(q, k, v2) - attend(q, k, v))[0, 0].abs().amax(-1) > 1e-6
    return _name(seen, 3, 7)


def _square(attend):  # T_q == T_k: both alignments give the same mask
    return _name(_seen(attend, 5, 5), 5, 5)


def _one_query(attend):  # T_q = 1: the last query sees every key, leaks and all
    return _name(_seen(attend, 1, 6), 1, 6)


def _first_query_only(attend):  # reads query 0 only, and only whether it sees key T_k - T_q
    seen = _seen(attend, 3, 7)
    if not seen[0, 1]:
        return "top-left"
    return "bottom-right" if seen[0, 4] else "neither"


def _query_zero_only(attend):  # T_q = 2 < T_k, but reads the keys of query 0 alone
    row = _seen(attend, 2, 5)[0]  # (T_k,)
    if torch.equal(row, torch.tensor([True, False, False, False, False])):
        return "top-left"
    return "bottom-right" if torch.equal(row, torch.tensor([True] * 4 + [False])) else "neither"


def _counts_only(attend):  # compares how many keys each query sees, not which
    counts = _seen(attend, 3, 7).sum(-1).tolist()
    return {(1, 2, 3): "top-left", (5, 6, 7): "bottom-right"}.get(tuple(counts), "neither")


def _compare_outputs(attend):  # compares with two references: another scale looks like neither
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, n, 4, generator=g) for n in (3, 7, 7))
    out = attend(q, k, v)
    if torch.allclose(out, F.scaled_dot_product_attention(q, k, v, is_causal=True)):
        return "top-left"
    if torch.allclose(out, attention(q, k, v, is_causal=True)):
        return "bottom-right"
    return "neither"


# 2.3 ------------------------------------------------------------------------------
def _padded_vs_alone(decode_step, cases):  # the chapter's test: each row as if alone
    return all(padded_equals_alone(decode_step, *case) for case in cases)


def _is_right(decode_step):
    return _padded_vs_alone(decode_step, ((1, 6, [6, 4, 2]), (3, 6, [6, 4]), (4, 4, [4, 2])))


def _by_reference(decode_step):  # another right test: the mask, and the real queries' positions
    T_q, T_k, lengths = 2, 6, [6, 3, 1]
    mask, pos = decode_step(T_q, T_k, lengths)
    start = T_k - torch.tensor(lengths)[:, None]  # (B, 1)
    cols = torch.arange(T_k)
    want = (cols[None, :] <= cols[T_k - T_q :, None])[None] & (cols >= start)[:, None, :]
    want_pos = cols[T_k - T_q :] - start  # (B, T_q)
    real = want_pos >= 0
    return torch.equal(mask, want) and torch.equal(pos[real], want_pos[real])


def _prefill_only(decode_step):  # T_q = T_k: top-left and bottom-right agree
    return _padded_vs_alone(decode_step, ((4, 4, [4, 2]), (6, 6, [6, 3])))


def _no_padding(decode_step):  # every row full: positions from column 0 are right there
    return _padded_vs_alone(decode_step, ((1, 6, [6, 6]), (3, 6, [6])))


def _one_query_only(decode_step):  # T_q = 1: a mask without its causal part passes
    return _padded_vs_alone(decode_step, ((1, 6, [6, 4, 2]), (1, 3, [3, 1])))


def _pads_at_zero(decode_step):  # also pins the padded queries' positions to 0
    _, pos = decode_step(4, 4, [4, 2])
    return _is_right(decode_step) and int(pos[1, :2].abs().sum()) == 0


ANSWERS = {
    check_packed_prediction: (
        [(10, [0, 1, 2, 0, 1, 0]), (10, (0, 1, 2, 0, 1, 0))],
        [
            ((21, [0, 1, 2, 0, 1, 0]), "causal mask alone"),
            ((14, [0, 1, 2, 0, 1, 0]), "future"),
            ((4, [0, 1, 2, 0, 1, 0]), "sees itself"),
            ((9, [0, 1, 2, 0, 1, 0]), "triangle"),
            ((10, [0, 1, 2, 3, 4, 5]), "do not restart"),
            ((10, [1, 2, 3, 1, 2, 1]), "first token is at 0"),
            (("10", [0, 1, 2, 0, 1, 0]), "an int"),
            ((10, None), "list of ints"),
            (10, "pair"),
        ],
    ),
    check_packed_documents: (
        [_packed, _packed_by_boundaries],
        [
            (_mask_with(_causal_only), "earlier documents"),
            (_mask_with(_same_document_only), "future"),
            (_mask_with(_strict), "see itself"),
            (_mask_with(_by_position_in_document), "query"),
            (_mask_with(_later_or_same_id), "may attend"),
            (_positions_with(lambda doc_ids: torch.arange(len(doc_ids))), "do not restart"),
            (_positions_with(lambda doc_ids: _restarting(doc_ids) + 1), "one too high"),
            (_positions_with(_restart_where_id_grows), "expected"),
            (_positions_with(lambda doc_ids: _restarting(doc_ids) - 1), "outside the table"),
            (lambda doc_ids: (_packed_mask(doc_ids).float(), _restarting(doc_ids)), "boolean"),
            (lambda doc_ids: (_packed_mask(doc_ids), _restarting(doc_ids).float()), "integer"),
            (_packed_mask, "pair"),
        ],
    ),
    check_alignment_test: (
        [_alignment, _alignment_by_perturbing],
        [
            (_square, "bottom-right"),
            (_one_query, "one key of its future"),
            (_first_query_only, "one key of its future"),
            (_query_zero_only, "every later query"),
            (_counts_only, "shifted by one key"),
            (_compare_outputs, "another score scale"),
            (lambda attend: _alignment(attend).replace("-", " "), "returned 'bottom right'"),
        ],
    ),
    check_decode_step_test: (
        [_is_right, _by_reference],
        [
            (_prefill_only, "top-left"),
            (_no_padding, "column 0"),
            (_one_query_only, "no causal part"),
            (_pads_at_zero, "position 1"),
            (lambda decode_step: False, "is right"),
            (lambda decode_step: 1, "expected a bool"),
        ],
    ),
    check_dropout_variance: (
        [lambda w, p: w * w * p / (1 - p), lambda w, p: torch.tensor(w) ** 2 * p / (1 - p)],
        [
            (lambda w, p: w * w * p * (1 - p), "without the 1/(1 - p) rescaling"),
            (lambda w, p: w * w / (1 - p), "subtract the squared mean"),
            (lambda w, p: w * w * (1 - p) / p, "probability to keep"),
            (lambda w, p: w * p / (1 - p), "squared"),
            (lambda w, p: w * w * p / (1 - p) ** 2, "too many"),
            (lambda w, p: w * w * p, "F.dropout draws give"),
        ],
    ),
}
