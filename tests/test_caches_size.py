"""attn_core.caches.size: KV-cache elements per token measured from a layer's own cache (DeepSeek-V2's Table 1)."""

from __future__ import annotations

import pytest
import torch

from attn_core import (
    GroupedQueryAttention,
    MultiHeadAttention,
    MultiHeadLatentAttention,
    MultiQueryAttention,
)
from attn_core.caches.size import kv_cache_elements_per_token


def test_table1_cache_elements_per_token():
    H, d_h = 8, 16
    d = H * d_h
    assert kv_cache_elements_per_token(MultiHeadAttention(d, H)) == 2 * H * d_h
    assert kv_cache_elements_per_token(GroupedQueryAttention(d, H, 2)) == 2 * 2 * d_h
    assert kv_cache_elements_per_token(MultiQueryAttention(d, H)) == 2 * d_h
    mla = MultiHeadLatentAttention(d, H, d_latent=4 * d_h)  # d_r = d_h / 2 by default
    assert mla.cache_elements_per_token() == 4 * d_h + d_h // 2 == 9 * d_h // 2
    assert mla.cache_elements_per_token() == 2 * 2.25 * d_h  # "GQA with 2.25 groups"
    assert mla.make_cache(1, 1).numel_per_token() == 72
    with pytest.raises(TypeError, match="Linear"):
        kv_cache_elements_per_token(torch.nn.Linear(2, 2))
