"""attn_core.teach.exercises.ch20: each check passes a right answer and fails plausible wrong ones."""

from __future__ import annotations

import math

import pytest
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


def test_yarn_ramp_passes_the_derivation(capsys):
    assert check_yarn_ramp(_ramp)
    assert "correct" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrong",
    [
        lambda b, d, L: _ramp(b, d, L, two_pi=False),  # turns confused with radians
        lambda b, d, L: _ramp(b, d, L, fast=1.0, slow=32.0),  # the betas swapped
        lambda b, d, L: (_ramp(b, d, L)[0] - 1, _ramp(b, d, L)[1]),  # kept = low: pair `low` itself forgotten
        lambda b, d, L: _ramp(b, d, L)[::-1],  # kept and interpolated swapped
        lambda b, d, L: (0, d // 2),  # PI: every pair interpolated
    ],
)
def test_yarn_ramp_fails_wrong_derivations(wrong, capsys):
    assert not check_yarn_ramp(wrong)
    assert "not yet" in capsys.readouterr().out


def test_yarn_ramp_reports_an_exception(capsys):
    def broken(base, dim, L):
        raise NotImplementedError

    assert not check_yarn_ramp(broken)
    assert "NotImplementedError" in capsys.readouterr().out


# ----------------------------------------------------------------------------- 20.2 NTK base
def test_ntk_base_passes_the_formula(capsys):
    assert check_ntk_base(lambda base, dim, factor: base * factor ** (dim / (dim - 2)))
    assert "correct" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrong",
    [
        lambda b, d, s: b * s,  # the exponent forgotten
        lambda b, d, s: b * s ** ((d - 2) / d),  # the exponent upside down
        lambda b, d, s: b * s ** (d / (d - 1)),  # solved for a pair that does not exist
        lambda b, d, s: b / s,  # faster, not slower
        lambda b, d, s: "10000",  # not a number
    ],
)
def test_ntk_base_fails_wrong_bases(wrong, capsys):
    assert not check_ntk_base(wrong)
    assert "not yet" in capsys.readouterr().out


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


def test_partial_rope_passes_a_right_rotation(capsys):
    assert check_partial_rope(_partial)
    assert "correct" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrong",
    [
        lambda x, R, b: _partial(x, R, b, start=x.shape[1] - R),  # the wrong half: the last R dimensions
        lambda x, R, b: _partial(x, R, b, pair_span=lambda D: D // 2),  # pairs i, i + D/2
        lambda x, R, b: _partial(x, R, b, exponent_width=lambda D: D),  # D in the speeds' exponent
        lambda x, R, b: _partial(x, R, b, cos_sign=-1.0),  # rotation the other way
        lambda x, R, b: x,  # nothing rotated
    ],
)
def test_partial_rope_fails_wrong_rotations(wrong, capsys):
    assert not check_partial_rope(wrong)
    assert "not yet" in capsys.readouterr().out


def test_partial_rope_names_a_changed_tail(capsys):
    def rotates_the_tail_too(x, R, b):
        out = _partial(x, R, b)
        out[:, R:] = out[:, R:] * 2
        return out

    assert not check_partial_rope(rotates_the_tail_too)
    assert "must pass unchanged" in capsys.readouterr().out


# ----------------------------------------------------------------------------- 20.4 YaRN logit scale
def test_yarn_logit_scale_passes_the_square(capsys):
    assert check_yarn_logit_scale(lambda s: (0.1 * math.log(s) + 1) ** 2)
    assert "correct" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrong",
    [
        lambda s: 0.1 * math.log(s) + 1,  # the factor on cos and sin, not squared
        lambda s: 1 / (0.1 * math.log(s) + 1) ** 2,  # inverted
        lambda s: (0.1 * math.log10(s) + 1) ** 2,  # log base 10
        lambda s: math.sqrt(1 + math.log(s) / math.log(4096)),  # LongRoPE's factor
    ],
)
def test_yarn_logit_scale_fails_wrong_scales(wrong, capsys):
    assert not check_yarn_logit_scale(wrong)
    assert "not yet" in capsys.readouterr().out
