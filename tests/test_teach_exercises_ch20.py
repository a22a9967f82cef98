"""attn_core.teach.exercises.ch20: the right and wrong answers of exercises 20.1-20.4 (ANSWERS, held to
the standard by tests/test_teach_exercises_standard.py)."""

from __future__ import annotations

import math

import torch

from attn_core.teach.exercises.ch20 import check_ntk_base, check_partial_rope, check_yarn_logit_scale, check_yarn_ramp


# ----------------------------------------------------------------------------- 20.1 YaRN's ramp
def _ramp(base, dim, L, *, fast=32.0, slow=1.0, two_pi=True):
    def pair_turning(turns):
        circle = 2 * math.pi if two_pi else 1.0
        return dim * math.log(L / (circle * turns)) / (2 * math.log(base))

    low, high = math.floor(pair_turning(fast)), math.ceil(pair_turning(slow))  # rounded outwards
    low, high = max(low, 0), min(high, dim - 1)
    pairs = dim // 2
    kept = sum(1 for i in range(pairs) if i <= low)
    interpolated = sum(1 for i in range(pairs) if i >= high)
    return kept, interpolated


# ----------------------------------------------------------------------------- 20.3 partial RoPE
def _partial(x, rotary_dim, base, *, start=0, pair_span=None, exponent_width=None, cos_sign=1.0):
    T, D = x.shape
    R = rotary_dim
    half = R // 2
    width = R if exponent_width is None else exponent_width(D)
    span = half if pair_span is None else pair_span(D)
    theta = base ** (-torch.arange(half, dtype=x.dtype) * 2 / width)
    angle = torch.arange(T, dtype=x.dtype)[:, None] * theta
    out = x.clone()
    i1 = torch.arange(start, start + half)
    i2 = i1 + span
    x1, x2 = x[:, i1], x[:, i2]
    out[:, i1] = x1 * angle.cos() - cos_sign * x2 * angle.sin()
    out[:, i2] = cos_sign * x1 * angle.sin() + x2 * angle.cos()
    return out


def _rotates_the_tail_too(x, R, b):
    out = _partial(x, R, b)
    out[:, R:] = out[:, R:] * 2
    return out


ANSWERS = {
    check_yarn_ramp: (
        [_ramp],
        [
            (lambda b, d, L: _ramp(b, d, L, two_pi=False), "expected"),  # turns confused with radians
            (lambda b, d, L: _ramp(b, d, L, fast=1.0, slow=32.0), "expected"),  # the betas swapped
            (lambda b, d, L: (_ramp(b, d, L)[0] - 1, _ramp(b, d, L)[1]), "expected"),  # pair `low` forgotten
            (lambda b, d, L: _ramp(b, d, L)[::-1], "swapped?"),
            (lambda b, d, L: (0, d // 2), "expected"),  # PI: every pair interpolated
        ],
    ),
    check_ntk_base: (
        [lambda base, dim, factor: base * factor ** (dim / (dim - 2))],
        [
            (lambda b, d, s: b * s, "slowest speed"),  # the exponent forgotten
            (lambda b, d, s: b * s ** ((d - 2) / d), "slowest speed"),  # the exponent upside down
            (lambda b, d, s: b * s ** (d / (d - 1)), "slowest speed"),  # solved for a pair that does not exist
            (lambda b, d, s: b / s, "slowest speed"),  # faster, not slower
            (lambda b, d, s: "10000", "expected a number"),
        ],
    ),
    check_partial_rope: (
        [_partial],
        [
            (lambda x, R, b: _partial(x, R, b, start=x.shape[1] - R), "last D - R"),  # the last R dimensions
            (lambda x, R, b: _partial(x, R, b, pair_span=lambda D: D // 2), "max abs difference"),  # pairs i, i + D/2
            (lambda x, R, b: _partial(x, R, b, exponent_width=lambda D: D), "max abs difference"),  # D in the exponent
            (lambda x, R, b: _partial(x, R, b, cos_sign=-1.0), "max abs difference"),  # rotation the other way
            (lambda x, R, b: x, "max abs difference"),  # nothing rotated
            (_rotates_the_tail_too, "must pass unchanged"),
        ],
    ),
    check_yarn_logit_scale: (
        [lambda s: (0.1 * math.log(s) + 1) ** 2],
        [
            (lambda s: 0.1 * math.log(s) + 1, "expected"),  # the factor on cos and sin, not squared
            (lambda s: 1 / (0.1 * math.log(s) + 1) ** 2, "expected"),  # inverted
            (lambda s: (0.1 * math.log10(s) + 1) ** 2, "expected"),  # log base 10
            (lambda s: math.sqrt(1 + math.log(s) / math.log(4096)), "expected"),  # LongRoPE's factor
        ],
    ),
}
