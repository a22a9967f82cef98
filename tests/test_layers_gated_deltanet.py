"""Tests for attn_core.layers.gated_deltanet: Qwen3-Next's Gated DeltaNet layer and its decoding cache.

The rule inside it is tested in ``tests/test_ops_linear_attention.py``; parity with Hugging
Face's ``Qwen3NextGatedDeltaNet`` is in ``tests/test_parity_hf_linear.py``.
"""

from __future__ import annotations

import types

import pytest
import torch
import torch.nn.functional as F

from attn_core import GatedDeltaNet
from attn_core.hf.weights import copy_gated_deltanet
from conftest import F64, randn


def _layer(seed: int = 0, **kw) -> GatedDeltaNet:
    torch.manual_seed(seed)
    kw = {"n_value_heads": 4, "value_head_dim": 6, "chunk_size": 4} | kw
    return GatedDeltaNet(16, 2, 8, **kw).to(F64)


@pytest.mark.parametrize("conv_size", [4, 1])
def test_gated_deltanet_decode_equals_full_forward(conv_size):
    layer, x = _layer(conv_size=conv_size), randn(2, 11, 16, seed=5)
    with torch.no_grad():
        full = layer(x)
        cache = layer.make_cache(2, 64)
        steps = torch.cat([layer(x[:, t : t + 1], kv_cache=cache) for t in range(11)], dim=1)
        torch.testing.assert_close(steps, full, rtol=0, atol=1e-12)
        assert cache.size == 11
        cache.reset()
        parts = [layer(x[:, a:b], kv_cache=cache) for a, b in [(0, 5), (5, 6), (6, 11)]]  # prefill, then mixed
        torch.testing.assert_close(torch.cat(parts, dim=1), full, rtol=0, atol=1e-12)


def test_gated_deltanet_forward_structure():
    layer, x = _layer(), randn(2, 9, 16, seed=5)
    out, weights = layer(x, return_weights=True)
    assert out.shape == (2, 9, 16) and weights.shape == (2, 4, 9, 9)
    assert (weights.triu(1) == 0).all()
    # the weights' contract: the delta rule's output (what the gated norm receives) is weights @ values
    seen = {}
    layer.norm.register_forward_pre_hook(lambda module, args: seen.update(core=args[0]))
    layer(x)
    w_v = layer.conv.weight[2 * 2 * 8 :]  # (H_v·D_v, 1, K): the value channels come after q and k
    v = F.silu(F.conv1d(F.pad(layer.v_proj(x).transpose(1, 2), (3, 0)), w_v, groups=w_v.shape[0]))  # (B, 24, T)
    v = v.transpose(1, 2).reshape(2, 9, 4, 6).transpose(1, 2)  # (B, H_v, T, D_v)
    torch.testing.assert_close(seen["core"], weights @ v, rtol=0, atol=1e-12)
    later = x.clone()
    later[:, 5:] += 1.0
    torch.testing.assert_close(layer(later)[:, :5], out[:, :5], rtol=0, atol=1e-12)  # causal
    # the chunk size changes how, not what
    other = _layer(chunk_size=64)
    torch.testing.assert_close(other(x), out, rtol=0, atol=1e-12)
    # float32 in, float32 out; the cache takes the weights' dtype
    layer32 = GatedDeltaNet(16, 2, 8)
    assert layer32(x.float()).dtype == torch.float32
    assert layer32.make_cache(1).state.dtype == torch.float32
    assert layer32.make_cache(1).state.shape == (1, 2, 8, 8)


def test_gated_deltanet_gradcheck():
    layer = GatedDeltaNet(4, 1, 2, n_value_heads=2, conv_size=2, chunk_size=2).to(F64)
    x = randn(1, 3, 4, seed=6).requires_grad_()
    names = [n for n, _ in layer.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in layer.parameters())
    fn = lambda x, *ps: torch.func.functional_call(layer, dict(zip(names, ps)), (x,))
    assert torch.autograd.gradcheck(fn, (x, *params), fast_mode=True)  # the input and every parameter


def test_gated_deltanet_bad_input():
    layer, x = _layer(), randn(2, 5, 16, seed=5)
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, d_model=16\), got \(2, 5, 8\)"):
        layer(x[..., :8])
    with pytest.raises(ValueError, match="takes no mask"):
        layer(x, mask=torch.ones(2, 5, 5, dtype=torch.bool))
    with pytest.raises(TypeError, match="kv_cache must be an attn_core.GatedDeltaNetCache or None, got dict"):
        layer(x, kv_cache={})
    with pytest.raises(ValueError, match="return_weights=True needs a whole sequence"):
        layer(x, kv_cache=layer.make_cache(2), return_weights=True)
    with pytest.raises(ValueError, match="kv_cache was made for batch_size=1, but this call needs batch_size=2"):
        layer(x, kv_cache=layer.make_cache(1))
    with pytest.raises(ValueError, match="n_value_heads=3 is not a multiple of n_heads=2"):
        GatedDeltaNet(16, 2, 8, n_value_heads=3)
    with pytest.raises(ValueError, match="conv_size must be >= 1, got conv_size=0"):
        GatedDeltaNet(16, 2, 8, conv_size=0)
    with pytest.raises(TypeError, match="head_dim must be an int"):
        GatedDeltaNet(16, 2, 8.0)


def test_copy_gated_deltanet_refuses_other_sizes():
    fake = types.SimpleNamespace(
        hidden_size=16, num_k_heads=2, head_k_dim=8, num_v_heads=2, head_v_dim=6, conv_kernel_size=4
    )
    with pytest.raises(ValueError, match="n_value_heads differs: ours has n_value_heads=4, the Hugging Face layer 2"):
        copy_gated_deltanet(_layer(), fake)
    with pytest.raises(TypeError, match="ours must be an attn_core.GatedDeltaNet"):
        copy_gated_deltanet(torch.nn.Linear(2, 2), fake)
