"""attn_core.teach.exercises.ch13: the right and wrong answers of exercises 13.1-13.3 (ANSWERS, held to
the standard by tests/test_teach_exercises_standard.py), and that 13.1's reference is the closed form."""

from __future__ import annotations

import math

import torch

from attn_core.teach.exercises.ch13 import (
    check_backward_from_lse,
    check_fa1_traffic,
    check_merge_stats,
    fa1_traffic_elements,
)


# Exercise 13.3: merging the statistics of two blocks.
def _merge(m1, l1, m2, l2):
    m = torch.maximum(m1, m2)
    safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    return m, l1 * torch.exp(m1 - safe) + l2 * torch.exp(m2 - safe)


def _merge_unguarded(m1, l1, m2, l2):  # exp(-inf - (-inf)) = NaN for two masked blocks
    m = torch.maximum(m1, m2)
    return m, l1 * torch.exp(m1 - m) + l2 * torch.exp(m2 - m)


# Exercise 13.1: FlashAttention-1's traffic (key/value blocks outside, query blocks inside).
def _fa1(T, d, block_q, block_k):
    n_k = -(-T // block_k)  # key/value blocks; the query block size cancels out
    return T * (d + 2) + 2 * T * d + n_k * T * (3 * d + 4)


def test_fa1_traffic_reference_is_the_closed_form():
    for T, d, b_q, b_k in ((512, 64, 64, 128), (1000, 16, 33, 7), (5, 4, 8, 8)):
        assert fa1_traffic_elements(T, d, b_q, b_k) == _fa1(T, d, b_q, b_k)


# Exercise 13.2: the backward pass from O and the log-sum-exp.
def _backward(q, k, v, o, lse, do):
    scale = 1 / math.sqrt(q.shape[-1])
    p = torch.exp(q @ k.T * scale - lse[:, None])  # (T_q, T_k), recomputed
    dv = p.T @ do
    dp = do @ v.T
    ds = p * (dp - (do * o).sum(-1, keepdim=True))
    return ds @ k * scale, ds.T @ q * scale, dv


def _no_scale(q, k, v, o, lse, do):
    dq, dk, dv = _backward(q, k, v, o, lse, do)
    return dq * math.sqrt(q.shape[-1]), dk * math.sqrt(q.shape[-1]), dv


def _no_rowsum(q, k, v, o, lse, do):  # forgets the softmax's coupling term
    scale = 1 / math.sqrt(q.shape[-1])
    p = torch.exp(q @ k.T * scale - lse[:, None])
    ds = p * (do @ v.T)
    return ds @ k * scale, ds.T @ q * scale, p.T @ do


ANSWERS = {
    check_merge_stats: (
        [_merge],
        [
            (lambda m1, l1, m2, l2: (torch.maximum(m1, m2), l1 + l2), "rescale"),
            (_merge_unguarded, "NaN"),
            (lambda m1, l1, m2, l2: (m1, _merge(m1, l1, m2, l2)[1]), "larger of m1 and m2"),
        ],
    ),
    check_fa1_traffic: (
        [_fa1],
        [
            (lambda T, d, b_q, b_k: _fa1(T, d, b_q, b_k) - T * (d + 2), "line 2"),
            (lambda T, d, b_q, b_k: _fa1(T, d, b_q, b_k) - (-(-T // b_k)) * T * (d + 2), "writes O_i"),
            # FlashAttention-2's order: K and V re-read per query block, Q and O once
            (lambda T, d, b_q, b_k: 2 * T * d + 2 * d * T * (-(-T // b_q)), "want"),
            # the ragged last block forgotten
            (lambda T, d, b_q, b_k: T * (d + 2) + 2 * T * d + (T // b_k) * T * (3 * d + 4), "want"),
        ],
    ),
    check_backward_from_lse: (
        [_backward],
        [
            (_no_scale, "1/√D"),
            (_no_rowsum, "rowsum"),
            (lambda q, k, v, o, lse, do: _backward(q, k, v, o, torch.zeros_like(lse), do), "max abs"),  # P unnormalised
            (lambda *a: _backward(*a)[:2], "triple"),
        ],
    ),
}
