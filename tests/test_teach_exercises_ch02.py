"""attn_core.teach.exercises.ch02 (the exercises of issue 25): each check passes a right answer and
fails the plausible wrong ones, printing why and never raising."""

from __future__ import annotations

import torch

from attn_core.teach.exercises.ch02 import check_decode_mask, check_packed_causal_mask


def _packed(doc_ids):
    T = len(doc_ids)
    pos = torch.arange(T)
    return (pos[None, :] <= pos[:, None]) & (doc_ids[:, None] == doc_ids[None, :])  # (T, T)


def test_packed_causal_mask(capsys):
    assert check_packed_causal_mask(_packed)
    assert "correct" in capsys.readouterr().out

    def causal_only(doc_ids):
        return torch.ones(len(doc_ids), len(doc_ids), dtype=torch.bool).tril()

    def same_document_only(doc_ids):
        return doc_ids[:, None] == doc_ids[None, :]

    def strict(doc_ids):  # j < i: a token does not see itself
        return _packed(doc_ids) & ~torch.eye(len(doc_ids), dtype=torch.bool)

    def by_position_in_document(doc_ids):  # resets positions but forgets the document test
        starts = torch.tensor([int((doc_ids[: t + 1] == doc_ids[t]).sum()) - 1 for t in range(len(doc_ids))])
        return starts[None, :] <= starts[:, None]

    def as_float(doc_ids):
        return _packed(doc_ids).float()

    expected = {
        causal_only: "earlier documents",
        same_document_only: "future",
        strict: "see itself",
        by_position_in_document: "query",
        as_float: "boolean",
    }
    for wrong, words in expected.items():
        assert not check_packed_causal_mask(wrong), wrong.__name__
        assert words in capsys.readouterr().out, wrong.__name__
    assert not check_packed_causal_mask(lambda ids: 1 / 0)
    assert "ZeroDivisionError" in capsys.readouterr().out


def _decode(T_q, T_k, lengths):
    q_pos = torch.arange(T_k - T_q, T_k)  # (T_q,): the queries are the last positions
    k_pos = torch.arange(T_k)
    real = k_pos[None, :] >= T_k - torch.tensor(lengths)[:, None]  # (B, T_k)
    return (k_pos[None, :] <= q_pos[:, None])[None] & real[:, None, :]  # (B, T_q, T_k)


def test_decode_mask(capsys):
    assert check_decode_mask(_decode)
    assert "correct" in capsys.readouterr().out

    def top_left(T_q, T_k, lengths):
        real = torch.arange(T_k)[None, :] >= T_k - torch.tensor(lengths)[:, None]
        return torch.ones(T_q, T_k, dtype=torch.bool).tril()[None] & real[:, None, :]

    def right_padded(T_q, T_k, lengths):
        real = torch.arange(T_k)[None, :] < torch.tensor(lengths)[:, None]
        q_pos = torch.arange(T_k - T_q, T_k)
        return (torch.arange(T_k)[None, :] <= q_pos[:, None])[None] & real[:, None, :]

    def no_padding(T_q, T_k, lengths):
        q_pos = torch.arange(T_k - T_q, T_k)
        return (torch.arange(T_k)[None, :] <= q_pos[:, None])[None].expand(len(lengths), T_q, T_k)

    def off_by_one(T_q, T_k, lengths):  # one padding position too many stays visible
        real = torch.arange(T_k)[None, :] >= T_k - torch.tensor(lengths)[:, None] - 1
        q_pos = torch.arange(T_k - T_q, T_k)
        return (torch.arange(T_k)[None, :] <= q_pos[:, None])[None] & real[:, None, :]

    def without_batch_axis(T_q, T_k, lengths):
        return _decode(T_q, T_k, lengths)[0]

    expected = {
        top_left: "top-left",
        right_padded: "padded on the right",
        no_padding: "padding is not masked",
        off_by_one: "may attend",
        without_batch_axis: "shape",
    }
    for wrong, words in expected.items():
        assert not check_decode_mask(wrong), wrong.__name__
        assert words in capsys.readouterr().out, wrong.__name__
