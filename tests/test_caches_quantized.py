"""attn_core.caches.quantized: int8 min-max quantization (error within scale/2, KIVI's per-channel
keys against an outlier channel, bad input) and the quantized cache."""

from __future__ import annotations

import pytest
import torch

from attn_core.caches.quantized import dequantize_int8, quantize_int8
from conftest import randn


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_round_trip_error_is_within_half_a_step(dim):
    x = randn(3, 5, 7, seed=dim + 10) * 4 + 1
    q, scale, zero = quantize_int8(x, dim)
    assert q.dtype == torch.int8 and q.shape == x.shape
    kept = list(x.shape)
    kept[dim] = 1
    assert scale.shape == zero.shape == tuple(kept) and scale.dtype == torch.float64
    err = (dequantize_int8(q, scale, zero, dtype=torch.float64) - x).abs()
    assert (err <= scale / 2 * (1 + 1e-9)).all(), (err / scale).max()
    # min-max: each slice's smallest and largest entries take the end codes
    assert (q.amin(dim=dim) == -128).all() and (q.amax(dim=dim) == 127).all()


def test_scale_is_the_range_over_255_and_the_error_is_not_zero():
    x = torch.tensor([[0.0, 0.3, 2.55]])
    q, scale, zero = quantize_int8(x, -1)
    torch.testing.assert_close(scale, torch.tensor([[0.01]]))
    assert q.tolist() == [[-128, -98, 127]]
    err = (dequantize_int8(q, scale, zero) - x).abs()
    assert 0 <= err.max() <= 0.005 + 1e-6


def test_a_constant_slice_comes_back_exactly():
    x = torch.full((2, 4), 3.25, dtype=torch.float64)
    q, scale, zero = quantize_int8(x, 1)
    assert (scale == 1).all(), "a zero range gets scale 1, not a division by zero"
    torch.testing.assert_close(dequantize_int8(q, scale, zero, torch.float64), x, rtol=0, atol=0)


def test_half_precision_input_keeps_float32_scales_and_returns_the_asked_dtype():
    x = randn(2, 16, 8, dtype=torch.float32).to(torch.bfloat16)
    q, scale, zero = quantize_int8(x, 1)
    assert scale.dtype == zero.dtype == torch.float32
    back = dequantize_int8(q, scale, zero, dtype=torch.bfloat16)
    assert back.dtype == torch.bfloat16
    # the float32 round trip is within scale/2 of the bf16 input; the bf16 cast adds its own rounding
    err = (dequantize_int8(q, scale, zero) - x.float()).abs()
    assert (err <= scale / 2 * (1 + 1e-5)).all()


def test_keys_per_channel_beat_keys_per_token_when_one_channel_is_an_outlier():
    """KIVI's reason: one large channel sets a per-token scale and crushes the other channels."""
    B, H, G, D = 1, 2, 32, 16
    keys = randn(B, H, G, D, seed=3)
    keys[..., 5] = keys[..., 5] * 0.5 + 20.0  # an outlier channel: large at every token
    per_channel = dequantize_int8(*quantize_int8(keys, dim=2), dtype=torch.float64)  # over the tokens
    per_token = dequantize_int8(*quantize_int8(keys, dim=-1), dtype=torch.float64)  # over the channels
    normal = [c for c in range(D) if c != 5]
    err_channel = (per_channel - keys)[..., normal].pow(2).mean().sqrt()
    err_token = (per_token - keys)[..., normal].pow(2).mean().sqrt()
    assert err_token > 5 * err_channel, (err_token, err_channel)
    # without the outlier, per token is no worse than per channel within a factor 2
    plain = randn(B, H, G, D, seed=3)
    e_c = (dequantize_int8(*quantize_int8(plain, 2), dtype=torch.float64) - plain).pow(2).mean().sqrt()
    e_t = (dequantize_int8(*quantize_int8(plain, -1), dtype=torch.float64) - plain).pow(2).mean().sqrt()
    assert e_t < 2 * e_c


def test_quantize_refuses_bad_input():
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        quantize_int8([1.0, 2.0], 0)
    with pytest.raises(TypeError, match="floating-point"):
        quantize_int8(torch.arange(4), 0)
    with pytest.raises(TypeError, match="dim must be an int"):
        quantize_int8(torch.zeros(2, 3), 1.0)
    with pytest.raises(ValueError, match=r"dim must be in \[-2, 2\).*dim=2"):
        quantize_int8(torch.zeros(2, 3), 2)
    with pytest.raises(ValueError, match="no entry along dim=1"):
        quantize_int8(torch.zeros(2, 0), 1)


def test_dequantize_refuses_bad_input():
    q, scale, zero = quantize_int8(torch.randn(2, 3), 1)
    with pytest.raises(TypeError, match="q must be an int8 tensor"):
        dequantize_int8(q.to(torch.int16), scale, zero)
    with pytest.raises(TypeError, match="scale must be a floating-point"):
        dequantize_int8(q, scale.to(torch.int32), zero)
    with pytest.raises(TypeError, match="dtype must be a floating-point"):
        dequantize_int8(q, scale, zero, dtype=torch.int8)
    with pytest.raises(ValueError, match=r"same shape, got \(2, 1\) and \(1, 3\)"):
        dequantize_int8(q, scale, zero.new_zeros(1, 3))
    with pytest.raises(ValueError, match="do not broadcast"):
        dequantize_int8(q, scale[:, 0], zero[:, 0])
