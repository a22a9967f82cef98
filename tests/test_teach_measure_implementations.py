"""attn_core.teach.measure.implementations: every benchmark subject computes the same layer."""

from __future__ import annotations

import pytest
import torch

from attn_core import MultiHeadAttention
from attn_core.teach.measure import (
    attention_implementations,
)


def test_attention_implementations_agree():
    torch.manual_seed(0)
    layer = MultiHeadAttention(32, 4, causal=True).eval()
    impls = attention_implementations(layer, include_tiled=True, tiled_block_size=5)
    assert len(impls) == 8 and "fused QKV + SDPA" in impls
    x = torch.randn(2, 11, 32)
    with torch.no_grad():
        ref = impls["fused QKV + SDPA"](x)
        for name, fn in impls.items():
            torch.testing.assert_close(fn(x), ref, rtol=1e-5, atol=1e-5, msg=name)
    with pytest.raises(ValueError, match="causal=False"):
        attention_implementations(MultiHeadAttention(32, 4))
    with pytest.raises(ValueError, match="n_kv_heads=2"):
        attention_implementations(MultiHeadAttention(32, 4, n_kv_heads=2, causal=True))
    with pytest.raises(TypeError, match="MultiHeadAttention"):
        attention_implementations(torch.nn.Linear(2, 2))
