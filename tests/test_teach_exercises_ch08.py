"""attn_core.teach.exercises.ch08: the right and wrong answers of its exercises (ANSWERS, held to the
standard by tests/test_teach_exercises_standard.py), and that the closed form of the ALiBi reach
agrees with ALiBi's own weights."""

from __future__ import annotations

import math

import torch

from attn_core import ALiBi, RotaryEmbedding, SinusoidalPositionalEncoding
from attn_core.teach.exercises.ch08 import (
    check_alibi_reach,
    check_alibi_slopes,
    check_rope_per_head,
    check_rope_relative_score,
    check_rope_rotation,
    check_sinusoidal,
    check_sinusoidal_shift,
)


# ---- 8.1 (the older exercises: sinusoids, interleaved RoPE, ALiBi's slopes) ----
def _sinusoidal(T, d, *, halves=False):
    pos = torch.arange(T, dtype=torch.float64)[:, None]  # (T, 1)
    freq = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    angles = pos * freq  # (T, d/2)
    if halves:  # sines in the first half, cosines in the second
        return torch.cat([angles.sin(), angles.cos()], -1)
    return torch.stack([angles.sin(), angles.cos()], -1).flatten(-2)  # sin in 2i, cos in 2i+1


def _slopes_power_of_two_formula(n):  # right for 8 or 16 heads only
    return [2 ** (-8 * (h + 1) / n) for h in range(n)]


# ---- 8.1: the ALiBi reach ----
def right(slope, share):
    return math.ceil(math.log(1 / (1 - share)) / slope)


def test_alibi_reach_matches_alibi_weights():
    # The closed form agrees with the softmax of ALiBi's own bias over a long past.
    alibi = ALiBi(8)
    T = 8000
    w = torch.softmax(alibi.bias(1, T)[:, 0].double(), dim=-1).flip(-1)  # (H, T): distance 0 first
    for h, m in enumerate(alibi.slopes.tolist()):
        for share in (0.5, 0.9):
            k = right(m, share)
            assert w[h, :k].sum() >= share > w[h, : k - 1].sum()


# ---- 8.2: the RoPE score from the distance alone ----
def rope_terms(q, k, *, pairs="half", sign=1.0):
    D = q.shape[-1]
    if pairs == "half":
        q1, q2, k1, k2 = q[: D // 2], q[D // 2 :], k[: D // 2], k[D // 2 :]
    else:
        q1, q2, k1, k2 = q[0::2], q[1::2], k[0::2], k[1::2]
    return q1 * k1 + q2 * k2, sign * (q2 * k1 - q1 * k2)


def _fitted(q, k):
    # the coefficients fitted to measured scores (least squares over 12 distances): a
    # different route to the same (a, b), and accepted
    rope = RotaryEmbedding(8)
    deltas = torch.tensor([0, 1, 2, 3, -3, 5, 17, -40, 100, -250, 1000, -3000], dtype=torch.float64)
    angles = deltas[:, None] * rope.inv_freq  # (12, 4)
    basis = torch.cat([angles.cos(), angles.sin()], dim=1)  # (12, 8)
    scores = torch.stack(
        [rope(q[None], offset=5000)[0] @ rope(k[None], offset=5000 + int(d))[0] for d in deltas]
    )  # (12,)
    coef = torch.linalg.lstsq(basis, scores[:, None]).solution[:, 0]  # (8,)
    return coef[:4], coef[4:]


# ---- 8.3: the sinusoids shifted by a matrix ----
def shift(d, k, *, sign=1.0, order="sin_cos"):
    M = torch.zeros(d, d, dtype=torch.float64)
    for i in range(d // 2):
        w = 10000.0 ** (-2 * i / d)
        c, s = math.cos(k * w), sign * math.sin(k * w)
        if order == "sin_cos":  # (sin, cos) in (2i, 2i+1), as the encoding stores them
            M[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, s], [-s, c]], dtype=torch.float64)
        else:  # the RoPE-style block, as if the pair were (cos, sin)
            M[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, -s], [s, c]], dtype=torch.float64)
    return M


def _rope_by_hand(x, offset, *, sign=1.0):
    """The scaffold's solution: interleaved pairs turned by ``sign * position * theta_i``."""
    T, D = x.shape[-2:]
    theta = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)  # (D/2,)
    angle = sign * torch.arange(offset, offset + T, dtype=torch.float64)[:, None] * theta
    x1, x2 = x[..., 0::2], x[..., 1::2]  # (..., T, D/2) each
    return torch.stack((x1 * angle.cos() - x2 * angle.sin(), x1 * angle.sin() + x2 * angle.cos()), -1).flatten(-2)


def _per_head(q, k, n_heads, *, layout="half", before_split=False):
    """Every head's RoPE scores: the head split first (right), or the rotation first (the bug)."""
    T, d_model = q.shape
    D = d_model // n_heads
    if before_split:
        rope = RotaryEmbedding(d_model, layout=layout)
        q, k = rope(q), rope(k)
    qh, kh = (x.view(T, n_heads, D).transpose(0, 1) for x in (q, k))  # (H, T, D) each
    if not before_split:
        rope = RotaryEmbedding(D, layout=layout)
        qh, kh = rope(qh), rope(kh)
    return qh @ kh.transpose(-1, -2)  # (H, T, T)


ANSWERS = {
    check_sinusoidal: (
        [_sinusoidal, lambda T, d: SinusoidalPositionalEncoding(d).encodings(T).tolist()],  # lists are accepted
        [
            (lambda T, d: _sinusoidal(T, d, halves=True), "max abs difference"),
            (lambda T, d: _sinusoidal(T + 1, d)[1:], "max abs difference"),  # positions from 1
            (lambda T, d: torch.zeros(T, d), "max abs difference"),
        ],
    ),
    check_rope_per_head: (
        [_per_head, lambda q, k, h: _per_head(q.float(), k.float(), h)],  # float32 is accepted
        [
            (lambda q, k, h: _per_head(q, k, h, before_split=True), "joins two heads"),  # the colleague's
            (lambda q, k, h: _per_head(q, k, h, layout="interleaved", before_split=True), "d_model's speeds"),
            (lambda q, k, h: _per_head(q, k, h, layout="interleaved"), "interleaved layout"),
            (
                lambda q, k, h: (lambda x, y: x @ y.transpose(-1, -2))(
                    *(z.view(7, h, -1).transpose(0, 1) for z in (q, k))
                ),
                "not rotated",
            ),
            (lambda q, k, h: _per_head(q, k, h) / math.sqrt(q.shape[-1] // h), "max abs difference"),  # scaled
            (lambda q, k, h: _per_head(q, k, h)[0], "not ("),  # one head only
        ],
    ),
    check_rope_rotation: (
        [lambda x, offset: RotaryEmbedding(8, layout="interleaved")(x, offset), _rope_by_hand],
        [
            (lambda x, offset: _rope_by_hand(x, offset, sign=-1.0), "max abs"),  # turned backwards
            (lambda x, offset: _rope_by_hand(x, offset + 1), "max abs"),  # positions from 1
            (lambda x, offset: RotaryEmbedding(8, layout="half")(x, offset), "split-halves layout"),
            (lambda x, offset: RotaryEmbedding(8, layout="interleaved")(x), "offset=7"),  # the offset ignored
            (lambda x, offset: RotaryEmbedding(8, layout="interleaved", base=500.0)(x, offset), "max abs"),
        ],
    ),
    check_alibi_slopes: (
        [ALiBi.slopes_for],
        [
            (_slopes_power_of_two_formula, "n_heads=6"),  # fails on 6 heads
            (lambda n: [2 ** (-(h + 1)) for h in range(n)], "n_heads=4"),  # 8 heads' ratio for every count
            (lambda n: ALiBi.slopes_for(n)[::-1], "n_heads=8"),  # steepest last
        ],
    ),
    check_alibi_reach: (
        [right],
        [
            (lambda m, s: math.floor(math.log(1 / (1 - s)) / m), "rounded down"),
            (lambda m, s: math.ceil(math.log(2) / m), "half-weight"),
            (lambda m, s: math.ceil(math.log2(1 / (1 - s)) / m), "expected"),  # base-2 log
            (lambda m, s: math.ceil(math.log(1 / (1 - s)) * m), "expected"),  # times the slope
            (lambda m, s: math.ceil(-math.log(s) / m), "expected"),  # share of the far keys
            (lambda m, s: math.log(1 / (1 - s)) / m, "must be an int"),
        ],
    ),
    check_rope_relative_score: (
        [rope_terms, lambda q, k: [x.tolist() for x in rope_terms(q, k)], _fitted],  # lists are accepted
        [
            (lambda q, k: rope_terms(q, k, sign=-1.0), "score for -delta"),
            (lambda q, k: rope_terms(q, k)[::-1], "swapped"),
            (lambda q, k: rope_terms(q, k, pairs="interleaved"), "pairs neighbours"),
            (lambda q, k: (rope_terms(q, k)[0], torch.zeros(4, dtype=torch.float64)), "no sine term"),
            (lambda q, k: ((q * k)[:4], (q * k)[4:]), "measured"),
            (lambda q, k: rope_terms(q, k)[0], "expected a pair"),
            (lambda q, k: (q * k, q * k), "shape (4,)"),
        ],
    ),
    check_sinusoidal_shift: (
        [shift, lambda d, k: shift(d, k).tolist()],  # lists are accepted
        [
            (lambda d, k: shift(d, k, sign=-1.0), "shifts by -k"),
            (lambda d, k: shift(d, k, order="cos_sin"), "shifts by -k"),
            (lambda d, k: shift(d, k).T.contiguous(), "shifts by -k"),
            (lambda d, k: torch.eye(d, dtype=torch.float64), "off PE[p + k]"),
            (lambda d, k: shift(d, 1), "off PE[p + k]"),  # ignores k
            (lambda d, k: shift(d, k)[:, :2], "expected a"),
        ],
    ),
}
