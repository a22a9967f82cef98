"""attn_core.teach.measure.dispatch: peak tensor memory and the ATen operators a function runs."""

from __future__ import annotations

import pytest
import torch

from attn_core import KVCache, attention
from attn_core.ops.efficient import tiled_attention
from attn_core.teach.measure import (
    Traffic,
    aten_ops,
    attention_score_bytes,
    launched_ops,
    memory_traffic,
    peak_tensor_memory,
    saved_tensor_bytes,
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


def test_launched_ops_leave_out_views_and_scalar_reads():
    x = torch.randn(4, 6)

    def fn():
        y = x.t().unsqueeze(0)[..., :2]  # three views: no kernel
        z = (y * 2).sum()  # two kernels
        z.item()  # a read, returns no tensor
        # Two kernels: a linear layer on a (1, 8, 6) input runs view, mm, _unsafe_view.
        return torch.nn.functional.linear(torch.cat((x, x))[None], x)

    assert aten_ops(fn)[:3] == ["t", "unsqueeze", "slice"]
    assert launched_ops(fn) == ["mul", "sum", "cat", "mm"]
    with pytest.raises(TypeError, match="fn must be callable"):
        launched_ops("mul")


def test_memory_traffic_counts_inputs_and_outputs_of_each_operator():
    x, y = torch.zeros(100), torch.zeros(100)  # 400 bytes each

    def work():
        z = x + y  # reads 800, writes 400
        return (z * 2).sum()  # mul reads 400 (+ the scalar), writes 400; sum reads 400, writes 4

    traffic = memory_traffic(work)
    assert isinstance(traffic, Traffic)
    assert traffic.written == 400 + 400 + 4
    assert 800 + 400 + 400 <= traffic.read <= 800 + 400 + 400 + 8  # a wrapped Python scalar is 0-dim
    assert traffic.total == traffic.read + traffic.written
    assert memory_traffic(lambda: x.view(10, 10).t().narrow(0, 2, 3)) == (0, 0), "views move nothing"


def test_memory_traffic_of_a_cache_append_versus_cat():
    """KVCache.update writes one position (copy_ into a slot: written, not read); torch.cat copies all."""
    cache = KVCache(batch_size=1, n_kv_heads=2, head_dim=4, max_len=16)
    cache.update(torch.randn(1, 2, 9, 4), torch.randn(1, 2, 9, 4))
    k_new = torch.randn(1, 2, 1, 4)  # 32 bytes
    assert memory_traffic(cache.update, k_new, k_new) == (64, 64)
    history = torch.randn(1, 2, 10, 4)
    assert memory_traffic(torch.cat, [history, k_new], dim=2) == (11 * 32, 11 * 32)


def test_saved_tensor_bytes_sees_what_the_backward_keeps():
    q, k, v = (t.requires_grad_() for t in qkv(B=1, H=2, T_q=128, D=16, seed=3))
    flash = saved_tensor_bytes(torch.nn.functional.scaled_dot_product_attention, q, k, v, is_causal=True)
    assert flash == q.numel() * 4 + 2 * 128 * 4  # the output and one float32 log-sum-exp per query
    explicit = saved_tensor_bytes(lambda q, k, v: attention(q, k, v, return_weights=True)[0], q, k, v)
    assert explicit >= attention_score_bytes(1, 2, 128), "the explicit path keeps the weights"
    x = torch.randn(10, requires_grad=True)
    assert saved_tensor_bytes(lambda x: x * 2, x) == 0  # a constant factor: nothing saved
    assert saved_tensor_bytes(torch.exp, x) == 40  # exp keeps its output
    assert saved_tensor_bytes(torch.sin, x) == 0  # sin keeps its input, the argument: not counted


def test_measuring_tools_reject_a_non_callable():
    for tool in (memory_traffic, saved_tensor_bytes):
        with pytest.raises(TypeError, match="fn must be callable"):
            tool(42)
