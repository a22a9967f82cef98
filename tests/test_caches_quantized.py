"""attn_core.caches.quantized: int8 min-max quantization (error within scale/2, KIVI's per-channel
keys against an outlier channel, bad input) and the quantized cache."""

from __future__ import annotations

import pytest
import torch

from attn_core import DecoderConfig, KVCache, generate
from attn_core.caches.quantized import (
    QuantizedKVCache,
    WithQuantizedCache,
    dequantize_int8,
    make_quantized_caches,
    quantize_int8,
)
from conftest import decoder, randn


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


def _held(chunks: list[torch.Tensor], group: int, dim: int) -> torch.Tensor:
    """What a quantized cache should hold after the writes ``chunks``: full blocks dequantized, the rest exact."""
    x = torch.cat(chunks, dim=2)  # (B, H, T, D)
    n = x.shape[2] // group * group
    blocks = [x[:, :, i : i + group] for i in range(0, n, group)]
    back = [dequantize_int8(*quantize_int8(b, dim), dtype=x.dtype) for b in blocks]
    return torch.cat([*back, x[:, :, n:]], dim=2)


def test_cache_reads_equal_the_dequantized_writes():
    """Keys per channel within each block of G tokens, values per token, the newest < G tokens exact."""
    B, H, D, G = 2, 3, 5, 4
    cache = QuantizedKVCache(B, H, D, max_len=15, group=G, dtype=torch.float64)
    ks, vs = [], []
    for i, T_new in enumerate([3, 1, 6, 1, 1, 2]):  # 14 positions: blocks fill inside and across updates
        ks.append(randn(B, H, T_new, D, seed=2 * i))
        vs.append(randn(B, H, T_new, D, seed=2 * i + 1))
        k, v = cache.update(ks[-1], vs[-1])
        size = sum(t.shape[2] for t in ks)
        assert cache.size == cache.offset == size and cache.quantized == size // G * G
        torch.testing.assert_close(k, _held(ks, G, dim=2), rtol=0, atol=0)  # per channel: over tokens
        torch.testing.assert_close(v, _held(vs, G, dim=-1), rtol=0, atol=0)  # per token: over channels
    assert not torch.equal(k, torch.cat(ks, dim=2)), "the quantized blocks differ from the originals"
    cache.reset()
    assert cache.size == 0 and cache.update(ks[0], vs[0])[0].shape == (B, H, 3, D)


def test_cache_truncates_only_its_residual():
    cache = QuantizedKVCache(1, 1, 2, max_len=10, group=4, dtype=torch.float64)
    k = randn(1, 1, 6, 2)
    cache.update(k, k)
    cache.truncate(5)
    assert cache.size == 5 and cache.quantized == 4
    torch.testing.assert_close(cache.read()[0][:, :, 4:], k[:, :, 4:5], rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"size must be in \[4, 5\].*got size=3"):
        cache.truncate(3)


def test_cache_bytes_per_token_counts_codes_and_scales():
    H, D, G = 3, 64, 32  # SmolLM2's key/value heads and head width
    cache = QuantizedKVCache(1, H, D, max_len=64, group=G)
    assert cache.bytes_per_token() == 2 * H * D + 4 * (2 * H * D / G + 2 * H)  # 384 + 48 + 24
    assert cache.numel_per_token() == 2 * H * D
    codes, key_stats, value_stats, residual = 2 * 64 * H * D, 2 * 4 * 2 * H * D, 2 * 4 * 64 * H, 2 * 4 * G * H * D
    assert cache.nbytes() == codes + key_stats + value_stats + residual
    bf16_per_token = KVCache(1, H, D, max_len=1, dtype=torch.bfloat16).nbytes()  # 768 bytes
    assert cache.bytes_per_token() / bf16_per_token == 456 / 768  # 0.59: the scales cost 72 of the 456


def _tiny(name: str):
    configs = {
        "llama_like": DecoderConfig.llama_like(vocab_size=20, d_model=32, n_heads=4, n_kv_heads=2, max_len=40),
        "gpt2_like": DecoderConfig.gpt2_like(vocab_size=20, d_model=32, n_heads=4, max_len=40),
    }
    model = decoder(configs[name]).double()
    with torch.no_grad():  # sharpen the logits so that greedy decoding has clear winners
        model.lm_head.weight.mul_(20.0)
    return model.eval()


@pytest.mark.parametrize("name", ["llama_like", "gpt2_like"])
def test_a_decoder_decodes_with_the_int8_cache(name):
    model = _tiny(name)
    prompt = torch.randint(0, 20, (2, 9), generator=torch.Generator().manual_seed(1))
    plain, plain_logits = generate(model, prompt, 12, temperature=0, return_logits=True)
    # a group longer than the sequence quantizes nothing: the same tokens and logits as the float cache
    kept, kept_logits = generate(WithQuantizedCache(model, group=64), prompt, 12, temperature=0, return_logits=True)
    assert torch.equal(kept, plain)
    torch.testing.assert_close(kept_logits, plain_logits, rtol=0, atol=1e-12)
    # group=4: most of the history is int8; the logits move by a little, not by nothing
    _, q_logits = generate(WithQuantizedCache(model, group=4), prompt, 12, temperature=0, return_logits=True)
    gap = (q_logits - plain_logits).abs().max() / plain_logits.abs().max()
    assert 1e-6 < gap < 0.05, gap
    caches = WithQuantizedCache(model, group=4).make_caches(2, 21)
    assert all(type(c) is QuantizedKVCache and c.max_len == 21 and c.group == 4 for c in caches)


def test_make_quantized_caches_refuses_caches_it_cannot_quantize():
    mla = DecoderConfig.llama_like(vocab_size=20, d_model=32, n_heads=4, n_kv_heads=None, attention="mla", d_latent=16)
    with pytest.raises(ValueError, match="layer 0's cache is a LatentKVCache"):
        make_quantized_caches(decoder(mla).make_caches(1, 1), 8, dtype=torch.float32)
    assert make_quantized_caches([None], 8, dtype=torch.float32) == [None]
    with pytest.raises(TypeError, match="make_caches"):
        WithQuantizedCache(torch.nn.Linear(2, 2))


def test_quantized_cache_refuses_bad_input():
    cache = QuantizedKVCache(1, 2, 4, max_len=5, group=2)
    with pytest.raises(ValueError, match="group must be >= 1"):
        QuantizedKVCache(1, 2, 4, max_len=5, group=0)
    with pytest.raises(TypeError, match="dtype must be a floating-point"):
        QuantizedKVCache(1, 2, 4, max_len=5, dtype=torch.int8)
    with pytest.raises(ValueError, match=r"k must have shape \(B=1, H_kv=2, T_new, D=4\)"):
        cache.update(torch.zeros(1, 3, 1, 4), torch.zeros(1, 3, 1, 4))
    with pytest.raises(TypeError, match="floating-point"):
        cache.update(torch.zeros(1, 2, 1, 4, dtype=torch.long), torch.zeros(1, 2, 1, 4))
    with pytest.raises(ValueError, match="k and v must have the same shape"):
        cache.update(torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 2, 4))
    with pytest.raises(ValueError, match=r"cache overflow: 0 stored \+ 6 new > max_len=5"):
        cache.update(torch.zeros(1, 2, 6, 4), torch.zeros(1, 2, 6, 4))
