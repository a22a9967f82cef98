"""attn_core.measure.dispatch: peak tensor memory and the ATen operators a function runs."""

from __future__ import annotations

import pytest
import torch

from attn_core import attention
from attn_core.efficient import tiled_attention
from attn_core.measure import (
    aten_ops,
    attention_score_bytes,
    peak_tensor_memory,
)
from conftest import qkv


def test_peak_memory_of_tiled_is_below_explicit_at_4096():
    """The issue's target: at T = 4096 the tiled forward's peak memory is below the explicit path's."""
    q, k, v = qkv(B=1, H=1, T_q=4096, D=32, seed=1)
    with torch.no_grad():
        explicit = peak_tensor_memory(lambda: attention(q, k, v, is_causal=True, return_weights=True)[0])
        tiled = peak_tensor_memory(tiled_attention, q, k, v, is_causal=True, block_size=256)
    scores = attention_score_bytes(1, 1, 4096)
    assert explicit >= 2 * scores, "the explicit path holds at least the scores and the weights"
    assert tiled < scores / 8, f"tiled peak {tiled} should be far below one score matrix ({scores})"
    assert tiled < explicit


def test_peak_tensor_memory_counts_live_tensors():
    x = torch.zeros(1000)  # created outside: not counted

    def two_buffers():
        a = x + 1  # 4000 bytes
        b = a * 2  # 4000 more, both alive
        del a
        return b.sum()  # a is gone; the 4-byte result

    assert peak_tensor_memory(two_buffers) == 8000
    assert peak_tensor_memory(lambda: x.view(10, 100).t()) == 0, "views allocate nothing"
    meta = torch.empty(1, 4, 1024, 64, device="meta")
    with torch.no_grad():
        got = peak_tensor_memory(lambda: attention(meta, meta, meta, return_weights=True)[0])
    assert got >= 2 * attention_score_bytes(1, 4, 1024)
    with pytest.raises(TypeError, match="fn must be callable"):
        peak_tensor_memory(3)


def test_aten_ops_names_the_kernels():
    q = torch.randn(1, 2, 8, 4)
    with torch.no_grad():
        explicit = aten_ops(lambda: attention(q, q, q, return_weights=True))
    assert "_softmax" in explicit or "softmax" in " ".join(explicit)
    assert any("scaled_dot_product" in op for op in aten_ops(attention, q, q, q))
    with pytest.raises(TypeError, match="fn must be callable"):
        aten_ops(None)
