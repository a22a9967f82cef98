"""attn_core.teach.exercises.ch02: the right and wrong answers of exercises 2.1-2.3 (ANSWERS, held to the
standard by tests/test_teach_exercises_standard.py)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attn_core import attention, causal_mask
from attn_core.teach.exercises.ch02 import check_alignment_test, check_decode_mask, check_packed_documents


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
def _decode(T_q, T_k, lengths):
    length = torch.tensor(lengths)[:, None]  # (B, 1)
    k_pos = torch.arange(T_k)
    q_pos = k_pos[T_k - T_q :]  # (T_q,): the queries are the last columns
    real = k_pos[None, :] >= T_k - length  # (B, T_k)
    mask = (k_pos[None, :] <= q_pos[:, None])[None] & real[:, None, :]  # (B, T_q, T_k)
    return mask, (q_pos[None, :] - (T_k - length)).clamp(min=0)  # from the first real token


def _decode_negative(T_q, T_k, lengths):  # right for real queries; padded ones get ids < 0
    mask, _ = _decode(T_q, T_k, lengths)
    q_pos = torch.arange(T_k - T_q, T_k)
    return mask, q_pos[None, :] - (T_k - torch.tensor(lengths)[:, None])


def _decode_cumsum(T_q, T_k, lengths):  # another right way: cumsum of the real columns
    mask, _ = _decode(T_q, T_k, lengths)
    real = torch.arange(T_k)[None, :] >= T_k - torch.tensor(lengths)[:, None]  # (B, T_k)
    positions = (real.long().cumsum(-1) - 1).masked_fill(~real, 1)  # pads: any value
    return mask, positions[:, T_k - T_q :]


def _with_causal_mask(T_q, T_k, lengths):  # right, but retypes attn_core's causal_mask
    real = torch.arange(T_k)[None, :] >= T_k - torch.tensor(lengths)[:, None]  # (B, T_k)
    return causal_mask(T_q, T_k)[None] & real[:, None, :], _decode(T_q, T_k, lengths)[1]


def _with_module_causal_mask(T_q, T_k, lengths):  # the same, through the package attribute
    import attn_core

    real = torch.arange(T_k)[None, :] >= T_k - torch.tensor(lengths)[:, None]  # (B, T_k)
    return attn_core.causal_mask(T_q, T_k)[None] & real[:, None, :], _decode(T_q, T_k, lengths)[1]


def _with_lower_right(T_q, T_k, lengths):  # PyTorch's bottom-right bias, made a tensor
    from torch.nn.attention.bias import causal_lower_right

    real = torch.arange(T_k)[None, :] >= T_k - torch.tensor(lengths)[:, None]  # (B, T_k)
    causal = causal_lower_right(T_q, T_k)._materialize()  # (T_q, T_k)
    return causal[None] & real[:, None, :], _decode(T_q, T_k, lengths)[1]


def _with_mask(make_mask):  # a wrong mask beside the right positions
    return lambda T_q, T_k, lengths: (make_mask(T_q, T_k, lengths), _decode(T_q, T_k, lengths)[1])


def _with_positions(make_positions):  # the right mask beside wrong positions
    return lambda T_q, T_k, lengths: (_decode(T_q, T_k, lengths)[0], make_positions(T_q, T_k, lengths))


def _top_left(T_q, T_k, lengths):
    real = torch.arange(T_k)[None, :] >= T_k - torch.tensor(lengths)[:, None]
    return torch.ones(T_q, T_k, dtype=torch.bool).tril()[None] & real[:, None, :]


def _right_padded(T_q, T_k, lengths):
    real = torch.arange(T_k)[None, :] < torch.tensor(lengths)[:, None]
    q_pos = torch.arange(T_k - T_q, T_k)
    return (torch.arange(T_k)[None, :] <= q_pos[:, None])[None] & real[:, None, :]


def _no_padding(T_q, T_k, lengths):
    q_pos = torch.arange(T_k - T_q, T_k)
    return (torch.arange(T_k)[None, :] <= q_pos[:, None])[None].expand(len(lengths), T_q, T_k)


def _off_by_one(T_q, T_k, lengths):  # one padding position too many stays visible
    real = torch.arange(T_k)[None, :] >= T_k - torch.tensor(lengths)[:, None] - 1
    q_pos = torch.arange(T_k - T_q, T_k)
    return (torch.arange(T_k)[None, :] <= q_pos[:, None])[None] & real[:, None, :]


def _by_column(T_q, T_k, lengths):  # the columns of the cache, as if nothing were padded
    return torch.arange(T_k - T_q, T_k).expand(len(lengths), T_q)


def _cumsum_no_minus_one(T_q, T_k, lengths):  # counts the real tokens up to and including t
    return _decode(T_q, T_k, lengths)[1] + 1


def _step_from_zero(T_q, T_k, lengths):  # numbers the step's own tokens
    return torch.arange(T_q).expand(len(lengths), T_q)


ANSWERS = {
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
    check_decode_mask: (
        [_decode, _decode_cumsum],
        [
            (_with_mask(_top_left), "top-left"),
            (_with_mask(_right_padded), "padded on the right"),
            (_with_mask(_no_padding), "padding is not masked"),
            (_with_mask(_off_by_one), "may attend"),
            (_with_positions(_by_column), "counted from column 0"),
            (_with_positions(_cumsum_no_minus_one), "one too high"),
            (_with_positions(_step_from_zero), "restart at 0"),
            (_with_positions(lambda T_q, T_k, lengths: _decode(T_q, T_k, lengths)[1].float()), "integer"),
            (lambda T_q, T_k, lengths: _decode(T_q, T_k, lengths)[0], "pair"),
            (_with_causal_mask, "causal_mask"),
            (_with_module_causal_mask, "causal_mask"),
            (_with_lower_right, "causal_lower_right"),
            (_decode_negative, "no negative rows"),
        ],
    ),
}
