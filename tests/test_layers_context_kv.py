"""Tests for attn_core.layers.context_kv: cross-attention to a context projected once.

``layer.cache_context(context)`` projects the context's keys and values once; later calls
``layer(x, context_kv=cached)`` must equal projecting the context every time.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attn_core import MultiHeadAttention, padding_mask
from conftest import F64, randn


def make(d_model=16, n_heads=4, seed=0, **kw) -> MultiHeadAttention:
    torch.manual_seed(seed)
    return MultiHeadAttention(d_model, n_heads, **kw).double()


# --- cross-attention with the context's keys and values projected once (cache_context) ---


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
@pytest.mark.parametrize("qk_norm", [False, True])
def test_cache_context_equals_projecting_the_context(n_kv_heads, qk_norm):
    layer = make(n_kv_heads=n_kv_heads, d_context=6, qk_norm=qk_norm, bias=True).double()
    x, context = randn(2, 5, 16, dtype=F64, seed=1), randn(2, 7, 6, dtype=F64, seed=2)
    mask = padding_mask([7, 4], 7)  # (B, 1, T_k)
    cached = layer.cache_context(context)
    assert cached.k.shape == (2, n_kv_heads, 7, 4) and cached.size == 7
    assert cached.numel_per_token() == 2 * n_kv_heads * 4 and cached.nbytes() == 2 * 2 * n_kv_heads * 7 * 4 * 8
    want, want_w = layer(x, context, mask=mask, return_weights=True)
    got, got_w = layer(x, context_kv=cached, mask=mask, return_weights=True)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    torch.testing.assert_close(got_w, want_w, rtol=0, atol=1e-12)
    torch.testing.assert_close(layer(x, context_kv=cached, mask=mask), want, rtol=0, atol=1e-12)  # fast path
    # against PyTorch: SDPA on the cached keys and values (expanded to every query head)
    q = layer.q_proj(x).view(2, 5, 4, 4).transpose(1, 2)  # (B, H, T_q, D)
    if qk_norm:
        q = layer.q_norm(q)
    G = 4 // n_kv_heads
    k, v = cached.k.repeat_interleave(G, 1), cached.v.repeat_interleave(G, 1)  # (B, H, T_k, D)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None])  # (B, H, T_q, D)
    torch.testing.assert_close(got, layer.out_proj(ref.transpose(1, 2).reshape(2, 5, 16)), rtol=0, atol=1e-12)


def test_cache_context_is_projected_once_and_reused_step_by_step():
    layer = make(d_context=6)
    context = randn(1, 7, 6, seed=3)
    calls = []
    layer.k_proj.register_forward_hook(lambda *_: calls.append("k"))
    cached = layer.cache_context(context)
    x = randn(1, 4, 16, seed=4)
    with torch.no_grad():
        steps = torch.cat([layer(x[:, t : t + 1], context_kv=cached) for t in range(4)], dim=1)  # (1, T_q, d)
    assert calls == ["k"]  # one projection of the context for four decoding steps
    torch.testing.assert_close(steps, layer(x, context), rtol=0, atol=1e-6)


def test_cache_context_stores_values_not_the_graph():
    layer = make(d_context=6)
    cached = layer.cache_context(randn(1, 3, 6, seed=5))
    assert not cached.k.requires_grad and not cached.v.requires_grad
    out = layer(randn(1, 2, 16, seed=6), context_kv=cached)
    out.sum().backward()  # gradients reach the query and output projections only
    assert layer.q_proj.weight.grad is not None and layer.k_proj.weight.grad is None


def test_context_kv_gradcheck():
    layer = make(d_model=8, n_heads=2, d_context=4).double()
    cached = layer.cache_context(randn(1, 3, 4, dtype=F64, seed=7))
    x = randn(1, 2, 8, dtype=F64, seed=8).requires_grad_()
    assert torch.autograd.gradcheck(lambda x: layer(x, context_kv=cached, return_weights=True)[0], (x,))


def test_context_kv_bad_input():
    from attn_core import ContextKVCache, RotaryEmbedding

    layer = make(d_context=6)
    cached = layer.cache_context(randn(2, 5, 6, seed=9))
    x = randn(2, 3, 16)
    with pytest.raises(TypeError, match="context_kv must be an attn_core.ContextKVCache"):
        layer(x, context_kv=(cached.k, cached.v))
    with pytest.raises(ValueError, match="pass context or context_kv"):
        layer(x, randn(2, 5, 6), context_kv=cached)
    with pytest.raises(ValueError, match=r"context_kv holds \(B, H_kv, D\) = \(2, 4, 4\); this call needs \(1, 4, 4\)"):
        layer(randn(1, 3, 16), context_kv=cached)
    with pytest.raises(ValueError, match=r"\(2, 1, 4\)"):
        make(n_kv_heads=1, d_context=6)(x, context_kv=cached)
    with pytest.raises(ValueError, match="kv_cache is for self-attention"):
        layer(x, context_kv=cached, kv_cache=layer.make_cache(2, 8))
    with pytest.raises(ValueError, match="without causal, this one has causal=True"):
        make(causal=True).cache_context(randn(2, 5, 16))
    with pytest.raises(ValueError, match="without rope"):
        make(rope=RotaryEmbedding(4)).cache_context(randn(2, 5, 16))
    with pytest.raises(ValueError, match="d_context"):
        layer.cache_context(randn(2, 5, 16))
    with pytest.raises(ValueError, match=r"k and v must have the same shape, got \(1, 2, 3, 4\) and \(1, 2, 5, 4\)"):
        ContextKVCache(randn(1, 2, 3, 4), randn(1, 2, 5, 4))
    with pytest.raises(ValueError, match="cross-attention keys can be computed once"):
        layer(x, randn(2, 5, 6), kv_cache=layer.make_cache(2, 8))
