"""Tests for attn_core.positions.positional: sinusoidal, learned and ALiBi positions."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attn_core import (
    ALiBi,
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    attention,
    causal_mask,
)

F64 = torch.float64


# ---------------------------------------------------------------- RoPE


# ---------------------------------------------------------------- partial RoPE


# ---------------------------------------------------------------- sinusoidal


def test_sinusoidal_known_values():
    pe = SinusoidalPositionalEncoding(4).encodings(3, dtype=F64)
    want = torch.tensor(
        [
            [0.0, 1.0, 0.0, 1.0],
            [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)],
            [math.sin(2), math.cos(2), math.sin(0.02), math.cos(0.02)],
        ],
        dtype=F64,
    )
    torch.testing.assert_close(pe, want, atol=1e-15, rtol=0)
    big = SinusoidalPositionalEncoding(512).encodings(1, offset=100, dtype=F64)[0]
    i = 37
    assert big[2 * i].item() == pytest.approx(math.sin(100 / 10000 ** (2 * i / 512)), abs=1e-12)
    assert big[2 * i + 1].item() == pytest.approx(math.cos(100 / 10000 ** (2 * i / 512)), abs=1e-12)


def test_sinusoidal_forward_adds_any_length_and_offset():
    torch.manual_seed(7)
    enc = SinusoidalPositionalEncoding(16)
    assert len(list(enc.buffers())) == 0 and len(list(enc.parameters())) == 0
    x = torch.randn(2, 5000, 16)  # no maximum length
    y = enc(x)
    torch.testing.assert_close(y - x, enc.encodings(5000).expand(2, -1, -1), atol=1e-6, rtol=0)
    torch.testing.assert_close(enc(x[:, 10:20], offset=10), y[:, 10:20])
    assert enc(x.double()).dtype == F64


def test_sinusoidal_bad_input():
    with pytest.raises(ValueError, match="d_model=7"):
        SinusoidalPositionalEncoding(7)
    with pytest.raises(ValueError, match=r"d_model=8.*\(2, 3, 4\)"):
        SinusoidalPositionalEncoding(8)(torch.randn(2, 3, 4))
    with pytest.raises(ValueError, match="offset=-2"):
        SinusoidalPositionalEncoding(8).encodings(3, offset=-2)


# ---------------------------------------------------------------- learned


def test_learned_adds_rows_and_trains():
    torch.manual_seed(8)
    emb = LearnedPositionalEmbedding(10, 6)
    x = torch.zeros(2, 4, 6, requires_grad=True)
    y = emb(x, offset=3)
    torch.testing.assert_close(y[0], emb.embedding.weight[3:7])
    y.sum().backward()
    grad = emb.embedding.weight.grad
    assert grad[3:7].abs().sum() > 0 and grad[:3].abs().sum() == 0 and grad[7:].abs().sum() == 0
    assert emb(torch.zeros(1, 10, 6)).shape == (1, 10, 6)  # exactly max_len is fine


def test_learned_past_max_len_raises():
    emb = LearnedPositionalEmbedding(8, 4)
    with pytest.raises(ValueError, match=r"max_len=8"):
        emb(torch.zeros(1, 9, 4))
    with pytest.raises(ValueError, match=r"positions 6\.\.8"):
        emb(torch.zeros(1, 3, 4), offset=6)
    with pytest.raises(ValueError, match="max_len=0"):
        LearnedPositionalEmbedding(0, 4)


# ---------------------------------------------------------------- ALiBi


def test_alibi_slopes_power_of_two():
    assert ALiBi(8).slopes_for(8) == [2.0**-k for k in range(1, 9)]  # 1/2 .. 1/256, exactly
    assert ALiBi(8).slopes.tolist() == [2.0**-k for k in range(1, 9)]
    assert ALiBi.slopes_for(16) == [2.0 ** (-k / 2) for k in range(1, 17)]
    assert ALiBi.slopes_for(1) == [2.0**-8]


def test_alibi_slopes_not_power_of_two():
    # The paper's recipe: the 4-head slopes, then every other slope of 8 heads.
    assert ALiBi.slopes_for(6) == [1 / 4, 1 / 16, 1 / 64, 1 / 256, 1 / 2, 1 / 8]
    twelve = ALiBi.slopes_for(12)
    assert twelve[:8] == [2.0**-k for k in range(1, 9)]
    assert twelve[8:] == [2.0**-0.5, 2.0**-1.5, 2.0**-2.5, 2.0**-3.5]
    assert len(set(ALiBi.slopes_for(12))) == 12


@settings(max_examples=10, deadline=None)
@given(n_heads=st.integers(1, 24), T_q=st.integers(1, 5), extra=st.integers(0, 4))
def test_alibi_bias_shape_values_and_alignment(n_heads, T_q, extra):
    alibi = ALiBi(n_heads)
    T_k = T_q + extra
    b = alibi.bias(T_q, T_k)
    assert b.shape == (n_heads, T_q, T_k) and b.dtype == torch.float32
    assert torch.equal(b, alibi.bias(T_k)[:, -T_q:])  # bottom-right aligned, like causal_mask
    i = torch.arange(T_k - T_q, T_k)[:, None]
    j = torch.arange(T_k)[None, :]
    want = -alibi.slopes[:, None, None] * (i - j).abs()
    torch.testing.assert_close(b, want)
    assert (b.diagonal(offset=extra, dim1=-2, dim2=-1) == 0).all()
    assert len(alibi.slopes) == n_heads and (alibi.slopes > 0).all() and (alibi.slopes <= 1).all()


def test_alibi_bias_as_attention_mask():
    torch.manual_seed(9)
    H, T = 4, 6
    alibi = ALiBi(H)
    q, k, v = (torch.randn(2, H, T, 8, dtype=F64) for _ in range(3))
    bias = alibi.bias(T, dtype=F64)
    scores = q @ k.transpose(-2, -1) / math.sqrt(8) + bias
    scores = scores.masked_fill(~causal_mask(T), float("-inf"))
    want = torch.softmax(scores, dim=-1) @ v
    torch.testing.assert_close(attention(q, k, v, mask=bias, is_causal=True), want, atol=1e-12, rtol=0)
    out, w = attention(q, k, v, mask=bias, is_causal=True, return_weights=True)
    torch.testing.assert_close(out, want, atol=1e-12, rtol=0)


def test_alibi_bad_input():
    with pytest.raises(ValueError, match="n_heads=0"):
        ALiBi(0)
    with pytest.raises(ValueError, match="T_q=5, T_k=3"):
        ALiBi(2).bias(5, 3)
