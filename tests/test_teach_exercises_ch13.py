"""attn_core.teach.exercises.ch13: the right and wrong answers of exercises 13.1-13.4 (ANSWERS, held to
the standard by tests/test_teach_exercises_standard.py), and that 13.1's reference is the closed form."""

from __future__ import annotations

import math

import torch

from attn_core.teach.exercises.ch13 import (
    check_backward_from_lse,
    check_fa1_traffic,
    check_tiled_peak_prediction,
    check_unequal_tiles,
    fa1_traffic_elements,
)


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


# Exercise 13.4: a tiled causal loop that treats block indices as positions (the page's bug),
# the fix, a right answer that masks every tile, and the half-fixes.
def _tiles(q, k, v, block_q, block_k, *, key_blocks, crosses):
    T, scale = q.shape[0], 1 / math.sqrt(q.shape[1])
    out = torch.empty(T, v.shape[1], dtype=q.dtype)
    for ib, i0 in enumerate(range(0, T, block_q)):
        qb = q[i0 : i0 + block_q] * scale
        m = torch.full((len(qb), 1), float("-inf"), dtype=q.dtype)
        l = torch.zeros(len(qb), 1, dtype=q.dtype)
        acc = torch.zeros(len(qb), v.shape[1], dtype=q.dtype)
        for jb, j0 in key_blocks(ib, i0, len(qb)):
            s = qb @ k[j0 : j0 + block_k].T
            if crosses(ib, jb, i0, j0, s.shape[1]):
                rows = torch.arange(i0, i0 + len(qb))[:, None]
                cols = torch.arange(j0, j0 + s.shape[1])[None, :]
                s = s.masked_fill(cols > rows, float("-inf"))
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            p, c = torch.exp(s - m_new), torch.exp(m - m_new)
            l = l * c + p.sum(-1, keepdim=True)
            acc = acc * c + p @ v[j0 : j0 + block_k]
            m = m_new
        out[i0 : i0 + block_q] = acc / l
    return out


def _by_index(block_k):  # key blocks 0..ib: right only when block_k == block_q
    return lambda ib, i0, n: [(jb, jb * block_k) for jb in range(ib + 1)]


def _by_position(block_k):  # key blocks holding a key at or before the block's last query
    return lambda ib, i0, n: [(j0 // block_k, j0) for j0 in range(0, i0 + n, block_k)]


def _diagonal_index(ib, jb, i0, j0, n):
    return jb == ib


def _after_first_query(ib, jb, i0, j0, n):
    return j0 + n - 1 > i0


def _bugged(q, k, v, b_q, b_k):
    return _tiles(q, k, v, b_q, b_k, key_blocks=_by_index(b_k), crosses=_diagonal_index)


def _fixed(q, k, v, b_q, b_k):
    return _tiles(q, k, v, b_q, b_k, key_blocks=_by_position(b_k), crosses=_after_first_query)


def _mask_all(q, k, v, b_q, b_k):  # right, only slower: every tile masked
    return _tiles(q, k, v, b_q, b_k, key_blocks=_by_position(b_k), crosses=lambda *a: True)


def _only_bound_fixed(q, k, v, b_q, b_k):
    return _tiles(q, k, v, b_q, b_k, key_blocks=_by_position(b_k), crosses=_diagonal_index)


def _only_mask_fixed(q, k, v, b_q, b_k):
    return _tiles(q, k, v, b_q, b_k, key_blocks=_by_index(b_k), crosses=_after_first_query)


def test_the_bug_passes_equal_blocks():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(10, 4, generator=g, dtype=torch.float64) for _ in range(3))
    want = _fixed(q, k, v, 4, 4)
    assert torch.allclose(_bugged(q, k, v, 4, 4), want, atol=1e-12)
    assert not torch.allclose(_bugged(q, k, v, 4, 2), want, atol=1e-6)


ANSWERS = {
    check_unequal_tiles: (
        [_fixed, _mask_all],
        [
            (_bugged, "skips key"),
            (_only_bound_fixed, "reads key"),
            (_only_mask_fixed, "skips key"),
            # masks the tiles that start at or after the first query: misses one that starts before
            (
                lambda q, k, v, b_q, b_k: _tiles(
                    q, k, v, b_q, b_k, key_blocks=_by_position(b_k), crosses=lambda ib, jb, i0, j0, n: j0 >= i0
                ),
                "reads key",
            ),
        ],
    ),
    check_tiled_peak_prediction: (
        # twice the output (1 MiB) plus three or four float32 tiles of (2, b, b)
        [{64: 1.1, 256: 2.5}, {64: 1.13, 256: 3.0}],
        [
            ({64: 1.0, 256: 1.0}, "block 256"),  # the output alone, the tiles forgotten
            ({64: 1.1, 256: 1.5}, "block 256"),  # one tile alive at a time
            ({64: 1.1, 256: 1.75}, "block 256"),  # tiles of one head, not two
            ({64: 0.6, 256: 2.0}, "block 64"),  # the output held once
            ({64: 8.0, 256: 8.0}, "block 64"),  # one T×T matrix of scores
            ({64: 1.1}, "keys"),
            ({64: 1.1, 256: "2.5"}, "a number"),
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
