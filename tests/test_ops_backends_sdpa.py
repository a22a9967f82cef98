"""attn_core.ops.backends.sdpa: PyTorch's SDPA with bottom-right causality, NaN-free masked rows and GQA."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attn_core.ops.backends import explicit, sdpa
from attn_core.ops.backends.call import Call
from attn_core.ops.masks import causal_mask
from conftest import qkv

F64 = torch.float64


def test_causal_with_fewer_queries_is_aligned_bottom_right():
    q, k, v = qkv(1, 2, 3, 8, T_k=7, dtype=F64)
    out = sdpa.sdpa_attention(q, k, v, None, True, None, 0.0, 1, 3, 7)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(3, 7))
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-14)


def test_grouped_heads_with_and_without_enable_gqa_and_masked_rows(monkeypatch):
    q, k, v = qkv(2, 4, 5, 8, H_kv=2, dtype=F64)
    mask = torch.ones(5, 5, dtype=torch.bool)
    mask[0] = False  # a query that sees no key: zeros, not NaN
    expected, _ = explicit.explicit_attention(q, k, v, mask, False, 8**-0.5, 0.0, 2)
    out = sdpa.run(Call(q, k, v, mask, groups=2))
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
    monkeypatch.setattr(sdpa, "_SDPA_HAS_GQA", False)  # PyTorch < 2.5: the heads are repeated
    torch.testing.assert_close(sdpa.run(Call(q, k, v, mask, groups=2)), expected, rtol=0, atol=1e-12)
    assert torch.equal(out[:, :, 0], torch.zeros_like(out[:, :, 0]))


def test_the_common_call_is_one_direct_sdpa_call(monkeypatch):
    calls = []
    real = F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *a, **kw: calls.append(kw) or real(*a, **kw))
    q, k, v = qkv(1, 2, 5, 8)
    sdpa.run(Call(q, k, v, is_causal=True))
    assert calls == [dict(dropout_p=0.0, is_causal=True, scale=None)]
