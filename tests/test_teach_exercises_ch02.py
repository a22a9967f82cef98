"""attn_core.teach.exercises.ch02: the right and wrong answers of exercises 2.1-2.3 (ANSWERS, held to the
standard by tests/test_teach_exercises_standard.py)."""

from __future__ import annotations

import torch

from attn_core.teach.exercises.ch02 import check_decode_mask, check_packed_causal_mask, check_padding_mask


# 2.1 ------------------------------------------------------------------------------
def _packed(doc_ids):
    T = len(doc_ids)
    pos = torch.arange(T)
    return (pos[None, :] <= pos[:, None]) & (doc_ids[:, None] == doc_ids[None, :])  # (T, T)


def _causal_only(doc_ids):
    return torch.ones(len(doc_ids), len(doc_ids), dtype=torch.bool).tril()


def _same_document_only(doc_ids):
    return doc_ids[:, None] == doc_ids[None, :]


def _strict(doc_ids):  # j < i: a token does not see itself
    return _packed(doc_ids) & ~torch.eye(len(doc_ids), dtype=torch.bool)


def _by_position_in_document(doc_ids):  # resets positions but forgets the document test
    starts = torch.tensor([int((doc_ids[: t + 1] == doc_ids[t]).sum()) - 1 for t in range(len(doc_ids))])
    return starts[None, :] <= starts[:, None]


# 2.2 ------------------------------------------------------------------------------
def _padding(lengths, T):
    return (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None])[:, None, :]  # (B, 1, T)


# 2.3 ------------------------------------------------------------------------------
def _decode(T_q, T_k, lengths):
    q_pos = torch.arange(T_k - T_q, T_k)  # (T_q,): the queries are the last positions
    k_pos = torch.arange(T_k)
    real = k_pos[None, :] >= T_k - torch.tensor(lengths)[:, None]  # (B, T_k)
    return (k_pos[None, :] <= q_pos[:, None])[None] & real[:, None, :]  # (B, T_q, T_k)


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


ANSWERS = {
    check_packed_causal_mask: (
        [_packed],
        [
            (_causal_only, "earlier documents"),
            (_same_document_only, "future"),
            (_strict, "see itself"),
            (_by_position_in_document, "query"),
            (lambda doc_ids: _packed(doc_ids).float(), "boolean"),
        ],
    ),
    check_padding_mask: (
        [_padding],
        [
            (lambda lengths, T: ~_padding(lengths, T), "inverted"),
            (lambda lengths, T: _padding(lengths, T)[:, 0], "add the query axis"),
            (lambda lengths, T: _padding([n - 1 for n in lengths], T), "entries differ"),  # off by one
            (lambda lengths, T: _padding(lengths, T).float(), "boolean"),
        ],
    ),
    check_decode_mask: (
        [_decode],
        [
            (_top_left, "top-left"),
            (_right_padded, "padded on the right"),
            (_no_padding, "padding is not masked"),
            (_off_by_one, "may attend"),
            (lambda T_q, T_k, lengths: _decode(T_q, T_k, lengths)[0], "shape"),
        ],
    ),
}
