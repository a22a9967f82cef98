"""Tests for attn_core.layers.kv_sharing (SharedKV, KVSharing, borrows_kv) and attn_core.layers.context_kv (cached
cross-attention): the two places besides its own projections where MultiHeadAttention takes keys and values."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from attn_core import DecoderConfig, DecoderLM, MultiHeadAttention
from attn_core.config import LayerPattern
from attn_core.layers.context_kv import check_context_kv, check_cross_cacheable, context_keys
from attn_core.layers.kv_sharing import SharedKV, borrows_kv
from conftest import F64, randn


def make(seed=0, **kw) -> MultiHeadAttention:
    torch.manual_seed(seed)
    return MultiHeadAttention(16, 4, **kw).double()


def test_a_source_publishes_frozen_shared_kv_that_the_reader_attends_to():
    source = make(causal=True, n_kv_heads=2)
    reader = make(causal=True, n_kv_heads=2, seed=1, kv_source=source)
    assert borrows_kv(reader) and not borrows_kv(source) and not borrows_kv(nn.Linear(2, 2))
    assert reader.kv_source is source and source.kv_source is None
    assert reader.make_cache(1, 4) is None and reader.k_proj is None and reader.v_proj is None
    assert source.publishes_kv and source.shared_kv is None  # nothing computed yet
    x = randn(1, 5, 16, seed=2)
    source(x)
    shared = source.shared_kv
    assert isinstance(shared, SharedKV) and shared.k.shape == (1, 2, 5, 4) and shared.n_queries == 5
    assert shared.past == 0 and shared.is_causal and shared.window is None and shared.mask is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        shared.past = 3
    # The source's parameters are not the reader's: the link is not a submodule.
    assert {n for n, _ in reader.named_parameters()} == {"q_proj.weight", "out_proj.weight"}


def test_the_reader_needs_the_source_to_have_run_on_this_input():
    source = make(causal=True)
    reader = make(causal=True, kv_source=source)
    source(randn(1, 5, 16, seed=3))
    with pytest.raises(ValueError, match="kv_source has not run on this input yet"):
        reader(randn(1, 4, 16, seed=4))  # another length
    with pytest.raises(ValueError, match="kv_source has not run on this input yet"):
        reader(randn(2, 5, 16, seed=4))  # another batch size
    with pytest.raises(ValueError, match="a layer with a kv_source attends with its source's mask"):
        reader(randn(1, 5, 16, seed=4), mask=torch.ones(5, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="a layer with a kv_source has no cache of its own"):
        reader(randn(1, 5, 16, seed=4), kv_cache=source.make_cache(1, 8))
    with pytest.raises(ValueError, match="kv_source must compute its own keys and values"):
        make(causal=True, kv_source=reader)


def test_a_model_with_kv_share_runs_with_none_for_the_borrowing_layers_caches():
    config = DecoderConfig(
        vocab_size=11, d_model=16, n_heads=4, n_layers=3, max_len=8, pattern=LayerPattern(kv_share=(0, 1, 0))
    )
    torch.manual_seed(0)
    model = DecoderLM(config).eval()
    assert [borrows_kv(block.attn) for block in model.blocks] == [False, False, True]
    caches = model.make_caches(1)
    assert caches[2] is None
    idx = torch.randint(0, 11, (1, 6))
    with torch.no_grad():
        full = model(idx)
        steps = torch.cat([model(idx[:, t : t + 1], caches=caches) for t in range(6)], dim=1)
    torch.testing.assert_close(steps, full)


def test_cached_context_keys_attend_like_the_context_also_with_a_query_temperature():
    layer = make(n_kv_heads=2, temperature=(2.0, 0.5), gate="headwise")
    x, context = randn(2, 6, 16, seed=5), randn(2, 5, 16, seed=6)
    mask = torch.rand(2, 6, 5, generator=torch.Generator().manual_seed(0)) > 0.3
    cached = layer.cache_context(context)
    kv = context_keys(cached, mask, 6)
    assert kv.k is cached.k and kv.mask is mask and not kv.is_causal and kv.window is None and kv.past == 0
    torch.testing.assert_close(layer(x, context_kv=cached, mask=mask), layer(x, context, mask=mask), rtol=0, atol=1e-12)


def test_cached_cross_attention_checks():
    layer = make(n_kv_heads=2)
    cached = layer.cache_context(randn(2, 5, 16, seed=7, dtype=F64))
    check_context_kv(layer, cached, randn(2, 3, 16), None)  # fits: no error
    with pytest.raises(TypeError, match="context_kv must be an attn_core.ContextKVCache"):
        check_context_kv(layer, (cached.k, cached.v), randn(2, 3, 16), None)
    with pytest.raises(ValueError, match=r"this call needs \(1, 2, 4\)"):
        check_context_kv(layer, cached, randn(1, 3, 16), None)
    with pytest.raises(ValueError, match="cached cross-attention needs a layer without causal"):
        check_cross_cacheable(make(causal=True))
    source = make(causal=False)
    with pytest.raises(ValueError, match="cached cross-attention needs a layer without kv_source"):
        check_cross_cacheable(make(kv_source=source))
