"""attn_core.ops.partial: block attention with its log-sum-exp, and the merge that gives attention over all keys."""

from __future__ import annotations

import pytest
import torch

from attn_core import attention
from attn_core.ops.partial import merge_partials, partial_attention
from conftest import F64, qkv


@pytest.mark.parametrize("H_kv", [4, 2, 1])
def test_lse_is_the_log_of_the_softmax_denominator(H_kv):
    q, k, v = qkv(2, 4, 6, 8, T_k=9, H_kv=H_kv, dtype=F64)
    out, lse = partial_attention(q, k, v)
    k_full = k.repeat_interleave(4 // H_kv, dim=1)  # (B, H, T_k, D)
    scores = q @ k_full.transpose(-2, -1) / 8**0.5  # (B, H, T_q, T_k)
    torch.testing.assert_close(lse, torch.logsumexp(scores, -1), rtol=0, atol=1e-12)
    torch.testing.assert_close(out, attention(q, k, v), rtol=0, atol=0)


def test_causal_lse_is_bottom_right_aligned():
    q, k, v = qkv(1, 2, 3, 4, T_k=5, dtype=F64)
    _, lse = partial_attention(q, k, v, is_causal=True)
    scores = q @ k.transpose(-2, -1) / 2.0  # (1, 2, 3, 5): query i sits at position 2 + i
    allowed = torch.arange(5)[None, :] <= torch.arange(2, 5)[:, None]
    torch.testing.assert_close(lse, torch.logsumexp(scores.masked_fill(~allowed, float("-inf")), -1))


@pytest.mark.parametrize("cuts", [[4], [1, 3], [2, 5, 7], [3, 3, 5]])
@pytest.mark.parametrize("H_kv", [3, 1])
def test_merging_key_blocks_gives_attention_over_all_keys(cuts, H_kv):
    q, k, v = qkv(2, 3, 5, 8, T_k=9, H_kv=H_kv, D_v=6, dtype=F64)
    edges = [0, *cuts, 9]
    parts = [partial_attention(q, k[..., a:b, :], v[..., a:b, :]) for a, b in zip(edges, edges[1:]) if b > a]
    out, lse = merge_partials([p[0] for p in parts], [p[1] for p in parts])
    torch.testing.assert_close(out, attention(q, k, v), rtol=0, atol=1e-13)
    torch.testing.assert_close(lse, partial_attention(q, k, v)[1], rtol=0, atol=1e-13)
    # The order of the partials does not matter (the merge is a symmetric sum).
    out_reversed, _ = merge_partials([p[0] for p in parts][::-1], [p[1] for p in parts][::-1])
    torch.testing.assert_close(out_reversed, out, rtol=0, atol=1e-14)


def test_merge_is_differentiable_and_matches_attention_gradients():
    q, k, v = (t.requires_grad_() for t in qkv(1, 2, 4, 4, T_k=6, dtype=F64))
    parts = [partial_attention(q, k[..., a:b, :], v[..., a:b, :]) for a, b in ((0, 2), (2, 6))]
    merged, _ = merge_partials([p[0] for p in parts], [p[1] for p in parts])
    g = torch.randn_like(merged)
    got = torch.autograd.grad(merged, (q, k, v), g)
    want = torch.autograd.grad(attention(q, k, v), (q, k, v), g)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_rows_no_block_saw_give_zeros_not_nan():
    o = torch.randn(2, 3, 4, dtype=F64)
    lse = torch.tensor([[0.5, float("-inf"), 1.0], [float("-inf")] * 3], dtype=F64)
    out, merged = merge_partials([o, o * 2], [lse, lse])
    assert not out.isnan().any()
    assert torch.equal(out[1], torch.zeros(3, 4, dtype=F64)) and torch.isinf(merged[1]).all()
    torch.testing.assert_close(out[0, 0], 1.5 * o[0, 0])  # two equal halves: the mean


def test_half_inputs_merge_in_float32():
    q, k, v = qkv(1, 2, 4, 8, T_k=8, dtype=torch.bfloat16)
    parts = [partial_attention(q, k[..., a : a + 4, :], v[..., a : a + 4, :]) for a in (0, 4)]
    assert parts[0][1].dtype == torch.float32
    out, _ = merge_partials([p[0] for p in parts], [p[1] for p in parts])
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), attention(q.float(), k.float(), v.float()), atol=2e-2, rtol=2e-2)


def test_bad_partials_are_named():
    o, lse = torch.zeros(2, 3, 4), torch.zeros(2, 3)
    with pytest.raises(ValueError, match="one lse per output"):
        merge_partials([o, o], [lse])
    with pytest.raises(ValueError, match="at least one"):
        merge_partials([], [])
    with pytest.raises(ValueError, match=r"partial 1 does not fit: outputs\[1\].shape=\(2, 3, 5\)"):
        merge_partials([o, torch.zeros(2, 3, 5)], [lse, lse])
    with pytest.raises(TypeError, match="lses"):
        merge_partials([o], [[0.0]])
    with pytest.raises(ValueError, match="multiple of the number of key/value heads"):
        partial_attention(*qkv(1, 3, 4, 4, H_kv=2))
