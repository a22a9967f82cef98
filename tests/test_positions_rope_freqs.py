"""attn_core.positions.rope_freqs: the frequency formulas of RoPE context extension, by their defining properties.

Parity with Hugging Face's ROPE_INIT_FUNCTIONS, through the scaling dataclasses, is in
tests/test_positions_rope_scaling.py.
"""

from __future__ import annotations

import math

import pytest
import torch

from attn_core.positions.rope import RotaryEmbedding
from attn_core.positions.rope_freqs import (
    check_llama3_freq_factors,
    check_pair_factors,
    check_scaling_factor,
    check_yarn_betas,
    default_inv_freq,
    dynamic_ntk_inv_freq,
    llama3_inv_freq,
    longrope_inv_freq,
    ntk_inv_freq,
    yarn_inv_freq,
    yarn_mscale,
)
from attn_core.positions.rope_scaling import (
    DynamicNTKScaling,
    LongRopeScaling,
)
from conftest import F64


@pytest.mark.parametrize("D", [4, 16, 128])
def test_ntk_changes_the_base_and_slows_the_slowest_pair_by_factor(D):
    base, f = 10000.0, 8.0
    got, factor = ntk_inv_freq(base, D, f)
    assert factor == 1.0
    assert torch.equal(got, default_inv_freq(base * f ** (D / (D - 2)), D))
    plain = default_inv_freq(base, D)
    assert got[0].item() == 1.0  # the fastest pair keeps speed 1
    assert got[-1].item() == pytest.approx(plain[-1].item() / f, rel=1e-13)  # the slowest is interpolated by f
    assert (got <= plain).all() and (got[1:] < plain[1:]).all()


def test_dynamic_ntk_is_plain_within_max_position_and_ntk_beyond():
    base, D, f, L = 10000.0, 16, 2.0, 64
    plain = default_inv_freq(base, D)
    for seq_len in (None, 1, 63, 64):
        assert torch.equal(dynamic_ntk_inv_freq(base, D, f, L, seq_len)[0], plain)
    # scale s = f·seq_len/L - (f - 1): seq_len = L·(s + f - 1)/f gives NTK-aware with factor s.
    for s in (2.0, 3.0, 5.0):
        seq_len = int(L * (s + f - 1) / f)
        torch.testing.assert_close(
            dynamic_ntk_inv_freq(base, D, f, L, seq_len)[0], ntk_inv_freq(base, D, s)[0], rtol=1e-14, atol=0
        )
    assert DynamicNTKScaling(f, L).frequencies(base, D, 160)[0].equal(dynamic_ntk_inv_freq(base, D, f, L, 160)[0])


@pytest.mark.parametrize("truncate", [True, False])
def test_yarn_keeps_fast_pairs_interpolates_slow_ones_and_ramps_between(truncate):
    base, D, f, L = 10000.0, 32, 4.0, 2048
    plain = default_inv_freq(base, D)
    got, factor = yarn_inv_freq(base, D, f, L, truncate=truncate)
    turns = L * plain / (2 * math.pi)  # turns of each pair over the original context
    fast, slow = turns > 32, turns < 1
    assert fast.any() and slow.any() and (~fast & ~slow).sum() >= 3  # all three regimes occur here
    assert torch.equal(got[fast], plain[fast])  # extrapolated: unchanged, bit for bit
    torch.testing.assert_close(got[slow], plain[slow] / f, rtol=1e-15, atol=0)  # interpolated like PI
    mid = ~fast & ~slow
    assert (got[mid] <= plain[mid]).all() and (got[mid] >= plain[mid] / f * (1 - 1e-15)).all()
    # The mixing weight (fraction interpolated) rises linearly with the pair index between the ends.
    weight = (plain - got) / (plain - plain / f)  # (R/2,): 0 kept .. 1 interpolated
    i_fast = D * math.log(L / (32 * 2 * math.pi)) / (2 * math.log(base))
    i_slow = D * math.log(L / (1 * 2 * math.pi)) / (2 * math.log(base))
    low, high = (math.floor(i_fast), math.ceil(i_slow)) if truncate else (i_fast, i_slow)
    i = torch.arange(D // 2, dtype=F64)
    torch.testing.assert_close(weight, ((i - low) / (high - low)).clamp(0, 1), rtol=0, atol=1e-12)
    assert factor == 0.1 * math.log(4.0) + 1.0  # the temperature term


def test_yarn_attention_factor_precedence_and_mscale():
    assert yarn_mscale(1.0) == 1.0 and yarn_mscale(0.5) == 1.0
    assert yarn_mscale(math.e) == pytest.approx(1.1)
    assert yarn_mscale(math.e, 2.0) == pytest.approx(1.2)
    args = (10000.0, 16, 40.0, 64)
    assert yarn_inv_freq(*args)[1] == yarn_mscale(40.0)
    assert yarn_inv_freq(*args, mscale=0.707, mscale_all_dim=1.0)[1] == yarn_mscale(40.0, 0.707) / yarn_mscale(
        40.0, 1.0
    )
    assert yarn_inv_freq(*args, mscale=1.0, mscale_all_dim=1.0)[1] == 1.0  # DeepSeek-V3's setting: cancels
    assert yarn_inv_freq(*args, mscale=1.0)[1] == yarn_mscale(40.0)  # one alone is ignored, as in HF
    assert yarn_inv_freq(*args, attention_factor=1.3, mscale=2.0, mscale_all_dim=1.0)[1] == 1.3


def test_llama3_by_wavelength():
    base, D, f, L = 500000.0, 128, 8.0, 8192
    plain = default_inv_freq(base, D)
    got, factor = llama3_inv_freq(base, D, f, L)
    assert factor == 1.0
    wavelen = 2 * math.pi / plain
    short, long = wavelen < L / 4, wavelen > L / 1
    mid = ~short & ~long
    assert short.sum() > 0 and long.sum() > 0 and mid.sum() > 0
    assert torch.equal(got[short], plain[short])
    assert torch.equal(got[long], plain[long] / f)
    # In the band: (1 - s)·θ/f + s·θ with s = (L/λ - 1)/(4 - 1).
    s = (L / wavelen[mid] - 1.0) / 3.0
    torch.testing.assert_close(got[mid], (1 - s) * plain[mid] / f + s * plain[mid], rtol=1e-15, atol=0)
    assert ((s > 0) & (s < 1)).all()


def test_longrope_picks_factor_set_by_length():
    short, long = [1.0, 2.0], [4.0, 8.0]
    plain = default_inv_freq(10000.0, 4)
    assert torch.equal(longrope_inv_freq(10000.0, 4, short, long, 16)[0], plain / torch.tensor(short, dtype=F64))
    assert torch.equal(longrope_inv_freq(10000.0, 4, short, long, 16, 16)[0], plain / torch.tensor(short, dtype=F64))
    assert torch.equal(longrope_inv_freq(10000.0, 4, short, long, 16, 17)[0], plain / torch.tensor(long, dtype=F64))
    assert longrope_inv_freq(10000.0, 4, short, long, 16, factor=4.0)[1] == math.sqrt(1 + math.log(4) / math.log(16))
    assert longrope_inv_freq(10000.0, 4, short, long, 16)[1] == 1.0
    # In a RotaryEmbedding: a call reaching past 16 positions uses the long set.
    rope = RotaryEmbedding(4, scaling=LongRopeScaling(short, long, 16))
    x = torch.randn(1, 1, 4, dtype=F64)
    rope(x, offset=3)
    assert torch.equal(rope.inv_freq, plain / torch.tensor(short, dtype=F64))
    rope(x, offset=16)
    assert torch.equal(rope.inv_freq, plain / torch.tensor(long, dtype=F64))


def test_default_inv_freq_is_the_rope_table():
    assert default_inv_freq(10000.0, 4).tolist() == [1.0, 0.01]  # base^(-2i/R), i = 0, 1
    assert default_inv_freq(10000.0, 4).dtype == F64


def test_shared_argument_checks():
    assert check_scaling_factor(2) == 2.0
    with pytest.raises(ValueError, match="factor"):
        check_scaling_factor(0.5)  # would shorten the context
    check_yarn_betas(32.0, 1.0)
    with pytest.raises(ValueError, match="beta_fast .* must exceed beta_slow, got beta_fast=1, beta_slow=2"):
        check_yarn_betas(1.0, 2.0)
    check_llama3_freq_factors(1.0, 4.0)
    with pytest.raises(ValueError, match="high_freq_factor must be >= low_freq_factor, got high_freq_factor=1"):
        check_llama3_freq_factors(4.0, 1.0)
    assert check_pair_factors("short_factor", [1, 2.5], 4).tolist() == [1.0, 2.5]
    assert check_pair_factors("short_factor", (1.0,), None).dtype == F64
    with pytest.raises(ValueError, match=r"short_factor needs one factor per rotated pair, dim//2=2, got len"):
        check_pair_factors("short_factor", [1.0], 4)
    with pytest.raises(ValueError, match="long_factor"):
        check_pair_factors("long_factor", [1.0, 0.0], 4)
    with pytest.raises(TypeError, match="long_factor"):
        check_pair_factors("long_factor", 1.0, 4)
