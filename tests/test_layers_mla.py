"""Tests for attn_core.layers.mla: multi-head latent attention (DeepSeek-V2)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from attn_core import (
    KVCache,
    LatentKVCache,
    MultiHeadLatentAttention,
    RotaryEmbedding,
    padding_mask,
)
from attn_core.positions.rope import rope_permutation

F64 = torch.float64

CONFIGS = [
    dict(d_latent=16, d_q_latent=12),  # query latent and latent norms (DeepSeek-V2)
    dict(d_latent=16),  # no query latent (DeepSeek-V2-Lite)
    dict(d_latent=8, latent_norm=False, rope_dim=2),
    dict(d_latent=16, rope_dim=0),  # no positions at all
    dict(d_latent=12, d_q_latent=10, bias=True, causal=False),
    dict(d_latent=20, head_dim=6, rope_dim=4),  # head_dim not d_model // n_heads
    dict(d_latent=16, d_q_latent=12, head_dim=8, rope_dim=4, v_head_dim=6, rope_layout="interleaved"),  # DeepSeek-V3
]


def make(d_model=32, n_heads=4, seed=0, **kw) -> MultiHeadLatentAttention:
    torch.manual_seed(seed)
    mla = MultiHeadLatentAttention(d_model, n_heads, **kw).double()
    # Non-trivial norm gains, so that a test would notice a norm that is skipped.
    for norm in (mla.kv_norm, mla.q_norm):
        if norm is not None:
            torch.nn.init.uniform_(norm.weight, 0.5, 1.5)
    return mla


@pytest.mark.parametrize("kw", CONFIGS)
def test_absorbed_equals_naive_float64(kw):
    mla = make(**kw)
    x = torch.randn(2, 7, 32, dtype=F64)
    naive, w_naive = mla(x, return_weights=True)
    absorbed, w_abs = mla(x, absorbed=True, return_weights=True)
    assert naive.shape == (2, 7, 32) and w_naive.shape == (2, 4, 7, 7)
    assert (naive - absorbed).abs().max().item() <= 1e-12
    assert (w_naive - w_abs).abs().max().item() <= 1e-12
    assert (mla(x, absorbed=True) - naive).abs().max().item() <= 1e-12  # fast path too
    torch.testing.assert_close(w_naive.sum(-1), torch.ones(2, 4, 7, dtype=F64))


@settings(max_examples=8, deadline=None)
@given(
    B=st.integers(1, 2),
    T=st.integers(1, 5),
    n_heads=st.integers(1, 3),
    head_dim=st.sampled_from([2, 4, 6]),
    d_latent=st.integers(1, 9),
    rope_half=st.integers(0, 2),
    q_latent=st.sampled_from([None, 5]),
)
def test_shapes_and_absorption_property(B, T, n_heads, head_dim, d_latent, rope_half, q_latent):
    d_model = 10  # deliberately not a multiple of n_heads * head_dim
    mla = make(d_model, n_heads, d_latent=d_latent, head_dim=head_dim, rope_dim=2 * rope_half, d_q_latent=q_latent)
    x = torch.randn(B, T, d_model, dtype=F64)
    out, w = mla(x, return_weights=True)
    assert out.shape == (B, T, d_model) and w.shape == (B, n_heads, T, T)
    assert (mla(x, absorbed=True) - out).abs().max().item() <= 1e-12
    assert mla.cache_elements_per_token() == d_latent + 2 * rope_half


@pytest.mark.parametrize("absorbed", [False, True])
@pytest.mark.parametrize("return_weights", [False, True])
def test_causality_future_tokens_leave_past_bit_identical(absorbed, return_weights):
    mla = make(d_latent=16, d_q_latent=12)
    x = torch.randn(2, 8, 32, dtype=F64)
    y = x.clone()
    y[:, 5:] = torch.randn(2, 3, 32, dtype=F64) * 10
    a = mla(x, absorbed=absorbed, return_weights=return_weights)
    b = mla(y, absorbed=absorbed, return_weights=return_weights)
    a, b = (a[0], b[0]) if return_weights else (a, b)
    assert torch.equal(a[:, :5], b[:, :5])
    assert not torch.allclose(a[:, 5:], b[:, 5:])


@pytest.mark.parametrize("kw", CONFIGS[:4])
@pytest.mark.parametrize("absorbed", [False, True])
def test_incremental_decoding_equals_full_forward(kw, absorbed):
    mla = make(**kw)
    x = torch.randn(2, 9, 32, dtype=F64)
    full = mla(x)
    cache = mla.make_cache(2, 12)
    assert isinstance(cache, LatentKVCache) and cache.size == 0
    parts = [mla(x[:, :3], kv_cache=cache, absorbed=absorbed)]  # prefill
    parts += [mla(x[:, t : t + 1], kv_cache=cache, absorbed=absorbed) for t in range(3, 9)]
    assert cache.size == 9
    assert (torch.cat(parts, dim=1) - full).abs().max().item() <= 1e-12


def test_cache_stores_normalised_latent_and_rotated_key():
    mla = make(d_latent=16, d_q_latent=12)
    x = torch.randn(1, 5, 32, dtype=F64)
    cache = mla.make_cache(1, 5)
    mla(x, kv_cache=cache)
    c_kv, k_r = mla.latents(x)
    c_kv_cached, k_r_cached = cache.update(c_kv[:, :0], k_r[:, :0])  # read back without adding
    torch.testing.assert_close(c_kv_cached, c_kv, atol=0, rtol=0)
    torch.testing.assert_close(k_r_cached, k_r, atol=0, rtol=0)
    torch.testing.assert_close(k_r[:, 0], mla.k_rope(x[:, 0]), atol=1e-15, rtol=0)  # position 0 is not rotated
    rms = c_kv.div(mla.kv_norm.weight).pow(2).mean(-1).sqrt()
    torch.testing.assert_close(rms, torch.ones_like(rms), atol=1e-5, rtol=0)


def test_scale_and_decoupled_rope_are_the_papers():
    mla = make(d_latent=16)
    assert mla.rope_dim == mla.head_dim // 2 == 4
    assert mla.scale == 1 / math.sqrt(8 + 4)
    assert isinstance(mla.rope, RotaryEmbedding) and mla.rope.head_dim == 4
    assert mla.k_rope.out_features == 4  # one RoPE key shared by all heads
    assert mla.q_rope.out_features == 4 * 4  # one RoPE query per head
    assert mla.k_up.bias is None and mla.v_up.bias is None


def test_naive_form_matches_hand_written_mla():
    """Follow the paper's equations (9)-(19) by hand and compare."""
    mla = make(d_latent=16, d_q_latent=12)
    x = torch.randn(2, 6, 32, dtype=F64)
    B, T, H, d_h, d_r = 2, 6, 4, 8, 4
    c_q = mla.q_norm(mla.q_down(x))
    q_c = mla.q_up(c_q).view(B, T, H, d_h)
    q_r = mla.rope(mla.q_rope(c_q).view(B, T, H, d_r).transpose(1, 2)).transpose(1, 2)
    c_kv = mla.kv_norm(mla.kv_down(x))
    k_c = mla.k_up(c_kv).view(B, T, H, d_h)
    v_c = mla.v_up(c_kv).view(B, T, H, d_h)
    k_r = mla.rope(mla.k_rope(x))  # (B, T, d_r)
    scores = torch.einsum("bthd,bshd->bhts", q_c, k_c) + torch.einsum("bthd,bsd->bhts", q_r, k_r)
    scores = (scores / math.sqrt(d_h + d_r)).masked_fill(torch.ones(T, T).triu(1).bool(), float("-inf"))
    o = torch.einsum("bhts,bshd->bthd", scores.softmax(-1), v_c).reshape(B, T, H * d_h)
    torch.testing.assert_close(mla(x), mla.out_proj(o), atol=1e-12, rtol=0)


def test_masks_pass_through_both_forms():
    mla = make(d_latent=16, causal=False)
    x = torch.randn(2, 5, 32, dtype=F64)
    mask = padding_mask(torch.tensor([5, 3]), 5).expand(2, 5, 5)  # (B, 1, T_k) -> (B, T, T_k)
    out = mla(x, mask=mask)
    assert (mla(x, mask=mask, absorbed=True) - out).abs().max().item() <= 1e-12
    # The padded keys of sequence 1 cannot influence it.
    y = x.clone()
    y[1, 3:] += 5.0
    torch.testing.assert_close(mla(y, mask=mask)[1, :3], out[1, :3], atol=1e-12, rtol=0)


@pytest.mark.parametrize("q_latent,v_head_dim", [(None, None), (12, None), (12, 6)])
@pytest.mark.parametrize("absorbed", [False, True])
def test_decode_flops_match_pytorch_flop_counter(q_latent, v_head_dim, absorbed):
    mla = make(d_latent=16, d_q_latent=q_latent, v_head_dim=v_head_dim)
    x = torch.randn(1, 6, 32, dtype=F64)
    cache = mla.make_cache(1, 6)
    mla(x[:, :5], kv_cache=cache)
    with FlopCounterMode(display=False) as counter:
        # return_weights takes the explicit path, whose matmuls the counter sees.
        mla(x[:, 5:], kv_cache=cache, absorbed=absorbed, return_weights=True)
    assert counter.get_total_flops() == mla.decode_flops(6, absorbed=absorbed)


def test_absorbed_decoding_is_cheaper_at_long_context():
    mla = MultiHeadLatentAttention(1024, 8, d_latent=512, d_q_latent=384)  # d_h = 128, d_r = 64
    assert mla.decode_flops(4096, absorbed=True) < mla.decode_flops(4096, absorbed=False) / 5


@pytest.mark.parametrize("absorbed", [False, True])
def test_gradcheck_float64(absorbed):
    mla = make(d_model=6, n_heads=2, d_latent=3, d_q_latent=4, head_dim=2, rope_dim=2)
    x = torch.randn(1, 3, 6, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: mla(t, absorbed=absorbed), (x,))


def test_gradients_reach_every_parameter():
    mla = make(d_latent=16, d_q_latent=12)
    mla(torch.randn(2, 4, 32, dtype=F64), absorbed=True).pow(2).sum().backward()
    for name, p in mla.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_half_precision_runs_and_stays_close():
    mla = make(d_latent=16, d_q_latent=12).float()
    x = torch.randn(2, 5, 32)
    want = mla(x)
    got = mla.to(torch.bfloat16)(x.bfloat16(), absorbed=True)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want, atol=0.1, rtol=0.1)


def test_bad_input_errors():
    with pytest.raises(ValueError, match="d_latent=0"):
        MultiHeadLatentAttention(32, 4, d_latent=0)
    with pytest.raises(ValueError, match="rope_dim=3"):
        MultiHeadLatentAttention(32, 4, d_latent=8, rope_dim=3)
    with pytest.raises(ValueError, match="d_model=30 is not divisible by n_heads=4"):
        MultiHeadLatentAttention(30, 4, d_latent=8)
    with pytest.raises(ValueError, match="d_q_latent=0"):
        MultiHeadLatentAttention(32, 4, d_latent=8, d_q_latent=0)
    with pytest.raises(TypeError, match="n_heads"):
        MultiHeadLatentAttention(32, 4.0, d_latent=8)
    mla = make(d_latent=16)
    with pytest.raises(ValueError, match=r"d_model=32.*\(2, 5, 16\)"):
        mla(torch.randn(2, 5, 16, dtype=F64))
    with pytest.raises(ValueError, match=r"\(5, 32\)"):
        mla(torch.randn(5, 32, dtype=F64))
    with pytest.raises(TypeError, match="LatentKVCache"):
        mla(torch.randn(1, 1, 32, dtype=F64), kv_cache=KVCache(1, 4, 8, 4, dtype=F64))
    with pytest.raises(ValueError, match="context_len=0"):
        mla.decode_flops(0)
    cache = mla.make_cache(1, 2)
    with pytest.raises(ValueError, match="max_len=2"):
        mla(torch.randn(1, 3, 32, dtype=F64), kv_cache=cache)


def test_value_width_and_rope_layout():
    """v_head_dim sizes v_up and out_proj; the interleaved layout pairs neighbours (same scores, reordered weights)."""
    mla = make(d_latent=16, head_dim=8, rope_dim=4, v_head_dim=6)
    assert (mla.v_up.out_features, mla.out_proj.in_features, mla.rope.layout) == (24, 24, "half")
    inter = make(d_latent=16, head_dim=8, rope_dim=4, v_head_dim=6, rope_layout="interleaved")
    assert inter.rope.layout == "interleaved"
    x = torch.randn(2, 5, 32, dtype=F64)
    assert (inter(x) - mla(x)).abs().max() > 1e-3  # the same weights, other pairs rotated
    # Reordering the RoPE rows of q_rope and k_rope from half to interleaved gives the half model's output.
    perm = rope_permutation(4, src="half", dst="interleaved")
    with torch.no_grad():
        inter.q_rope.weight.copy_(mla.q_rope.weight.view(4, 4, 32)[:, perm].reshape(16, 32))
        inter.k_rope.weight.copy_(mla.k_rope.weight[perm])
    assert (inter(x) - mla(x)).abs().max() < 1e-12
    with pytest.raises(ValueError, match="rope_layout='pairs'"):
        MultiHeadLatentAttention(32, 4, d_latent=8, rope_layout="pairs")
    with pytest.raises(ValueError, match="v_head_dim=0"):
        MultiHeadLatentAttention(32, 4, d_latent=8, v_head_dim=0)


def test_attention_dropout_only_in_training():
    mla = make(d_latent=16, dropout=0.5)
    x = torch.randn(1, 6, 32, dtype=F64)
    assert torch.equal(mla.eval()(x), mla(x))
    mla.train()
    assert not torch.equal(mla(x), mla(x))
    with pytest.raises(ValueError, match="dropout=1.5"):
        MultiHeadLatentAttention(32, 4, d_latent=8, dropout=1.5)
