"""Tests for attn_core.layers.multihead: the one MultiHeadAttention behind MHA, GQA, MQA
and cross-attention, with sliding windows, sinks, cached cross-attention and shared K/V."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from attn_core import (
    GroupedQueryAttention,
    KVCache,
    MultiHeadAttention,
    MultiQueryAttention,
    RollingKVCache,
    RotaryEmbedding,
    SelfAttention,
    attention,
    causal_mask,
    padding_mask,
)
from conftest import F64, leaks, randn


def make(d_model=16, n_heads=4, seed=0, **kw) -> MultiHeadAttention:
    torch.manual_seed(seed)
    return MultiHeadAttention(d_model, n_heads, **kw).double()


def reference(layer: MultiHeadAttention, x, context=None, mask=None, causal=False):
    """Attention written out with repeat_interleave: every query head and its key/value head."""
    src = x if context is None else context
    B, T_q, _ = x.shape
    T_k = src.shape[1]
    H, H_kv, D = layer.n_heads, layer.n_kv_heads, layer.head_dim
    q = layer.q_proj(x).view(B, T_q, H, D).transpose(1, 2)  # (B, H, T_q, D)
    k = layer.k_proj(src).view(B, T_k, H_kv, D).transpose(1, 2)  # (B, H_kv, T_k, D)
    v = layer.v_proj(src).view(B, T_k, H_kv, D).transpose(1, 2)
    k, v = k.repeat_interleave(H // H_kv, dim=1), v.repeat_interleave(H // H_kv, dim=1)  # (B, H, T_k, D)
    scores = q @ k.transpose(-2, -1) / D**0.5  # (B, H, T_q, T_k)
    allowed = torch.ones(T_q, T_k, dtype=torch.bool)
    if causal:
        allowed = allowed & causal_mask(T_q, T_k)
    if mask is not None:
        allowed = allowed & (mask.unsqueeze(1) if mask.dim() == 3 else mask)
    allowed = allowed.expand(B, H, T_q, T_k)
    w = torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1).nan_to_num(0.0)
    out = (w @ v).transpose(1, 2).reshape(B, T_q, H * D)
    return layer.out_proj(out), w


def copy_into_nn_mha(layer: MultiHeadAttention) -> nn.MultiheadAttention:
    """An nn.MultiheadAttention holding the same weights as ``layer`` (MHA, any d_context)."""
    bias = layer.q_proj.bias is not None
    kdim = layer.d_context
    ref = nn.MultiheadAttention(layer.d_model, layer.n_heads, bias=bias, batch_first=True, kdim=kdim, vdim=kdim)
    ref = ref.to(layer.q_proj.weight.dtype)
    with torch.no_grad():
        if ref._qkv_same_embed_dim:
            ref.in_proj_weight.copy_(torch.cat([layer.q_proj.weight, layer.k_proj.weight, layer.v_proj.weight]))
        else:
            ref.q_proj_weight.copy_(layer.q_proj.weight)
            ref.k_proj_weight.copy_(layer.k_proj.weight)
            ref.v_proj_weight.copy_(layer.v_proj.weight)
        if bias:
            ref.in_proj_bias.copy_(torch.cat([layer.q_proj.bias, layer.k_proj.bias, layer.v_proj.bias]))
            ref.out_proj.bias.copy_(layer.out_proj.bias)
        ref.out_proj.weight.copy_(layer.out_proj.weight)
    return ref.eval()


# --------------------------------------------------------------------------- reference equality
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("masking", ["none", "causal", "padding"])
def test_mha_matches_nn_multihead_attention(bias, masking):
    layer = make(16, 4, bias=bias, causal=masking == "causal")
    ref = copy_into_nn_mha(layer)
    x = randn(3, 6, 16)
    kwargs, mask = {}, None
    if masking == "causal":
        kwargs["attn_mask"] = ~causal_mask(6)  # nn.MultiheadAttention: True = *blocked*
    if masking == "padding":
        mask = padding_mask([6, 4, 1], 6)  # (B, 1, T), True = real token
        kwargs["key_padding_mask"] = ~mask[:, 0]  # (B, T), True = padding
    want, want_w = ref(x, x, x, average_attn_weights=False, **kwargs)
    out, w = layer(x, mask=mask, return_weights=True)
    assert (out - want).abs().max().item() <= 1e-12
    assert (w - want_w).abs().max().item() <= 1e-12
    assert (layer(x, mask=mask) - want).abs().max().item() <= 1e-12  # fast path


@pytest.mark.parametrize("d_context", [16, 10])
def test_cross_attention_matches_nn_multihead_attention(d_context):
    layer = make(16, 4, bias=True, d_context=d_context)
    ref = copy_into_nn_mha(layer)
    x, context = randn(2, 3, 16), randn(2, 7, d_context, seed=2)
    mask = padding_mask([7, 4], 7)
    want, want_w = ref(x, context, context, key_padding_mask=~mask[:, 0], average_attn_weights=False)
    out, w = layer(x, context, mask=mask, return_weights=True)
    assert out.shape == (2, 3, 16) and w.shape == (2, 4, 3, 7)
    assert (out - want).abs().max().item() <= 1e-12
    assert (w - want_w).abs().max().item() <= 1e-12
    assert (layer(x, context, mask=mask) - want).abs().max().item() <= 1e-12


@pytest.mark.parametrize("n_kv_heads", [8, 4, 2, 1])
@pytest.mark.parametrize("masking", ["none", "causal", "padding"])
def test_gqa_matches_sdpa_enable_gqa(n_kv_heads, masking):
    layer = make(32, 8, n_kv_heads=n_kv_heads, causal=masking == "causal")
    x = randn(2, 6, 32)
    B, T, H, D = 2, 6, 8, 4
    q = layer.q_proj(x).view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
    k = layer.k_proj(x).view(B, T, n_kv_heads, D).transpose(1, 2)  # (B, H_kv, T, D)
    v = layer.v_proj(x).view(B, T, n_kv_heads, D).transpose(1, 2)
    mask = padding_mask([6, 3], 6) if masking == "padding" else None
    sdpa_mask = None if mask is None else mask[:, None]  # (B, 1, 1, T)
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=sdpa_mask, is_causal=masking == "causal", enable_gqa=True)
    want = layer.out_proj(o.transpose(1, 2).reshape(B, T, H * D))
    assert (layer(x, mask=mask) - want).abs().max().item() <= 1e-12
    assert (layer(x, mask=mask, return_weights=True)[0] - want).abs().max().item() <= 1e-12


def test_mqa_matches_sdpa_with_broadcast_kv():
    layer = MultiQueryAttention(32, 8).double()
    x = randn(2, 6, 32)
    B, T, H, D = 2, 6, 8, 4
    q = layer.q_proj(x).view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
    k = layer.k_proj(x).view(B, T, 1, D).transpose(1, 2)  # (B, 1, T, D)
    v = layer.v_proj(x).view(B, T, 1, D).transpose(1, 2)
    k_all, v_all = k.expand(B, H, T, D), v.expand(B, H, T, D)  # views: no copy
    assert k_all.stride(1) == 0 and k_all.data_ptr() == k.data_ptr()
    o = F.scaled_dot_product_attention(q, k_all, v_all)
    want = layer.out_proj(o.transpose(1, 2).reshape(B, T, H * D))
    assert (layer(x) - want).abs().max().item() <= 1e-12
    assert (layer(x, return_weights=True)[0] - want).abs().max().item() <= 1e-12


@pytest.mark.parametrize("masking", ["none", "causal", "padding"])
def test_matches_reference_with_repeat_interleave(masking):
    layer = make(24, 6, n_kv_heads=2, causal=masking == "causal")
    x = randn(2, 5, 24)
    mask = padding_mask([5, 2], 5) if masking == "padding" else None
    want, want_w = reference(layer, x, mask=mask, causal=masking == "causal")
    out, w = layer(x, mask=mask, return_weights=True)
    assert (out - want).abs().max().item() <= 1e-12
    assert (w - want_w).abs().max().item() <= 1e-12


def test_query_head_uses_kv_head_of_its_group():
    """Query head h reads key/value head h // G (repeat_interleave order), not h % H_kv (repeat order)."""
    H, H_kv, T, D = 6, 2, 4, 3
    q = randn(1, H, T, D)
    k, v = randn(1, H_kv, T, D, seed=2), randn(1, H_kv, T, D, seed=3)
    out = attention(q, k, v)
    interleaved = attention(q, k.repeat_interleave(3, dim=1), v.repeat_interleave(3, dim=1))
    tiled = attention(q, k.repeat(1, 3, 1, 1), v.repeat(1, 3, 1, 1))
    assert (out - interleaved).abs().max().item() <= 1e-12
    assert (out - tiled).abs().max().item() > 1e-3
    for h in range(H):
        alone = attention(q[:, h], k[:, h // 3], v[:, h // 3])
        assert (out[:, h] - alone).abs().max().item() <= 1e-12


# --------------------------------------------------------------------------- one class, many forms
def test_gqa_with_n_heads_kv_heads_equals_mha():
    mha = make(32, 8)
    gqa = GroupedQueryAttention(32, 8, n_kv_heads=8).double()
    gqa.load_state_dict(mha.state_dict())
    x = randn(2, 5, 32)
    assert torch.equal(gqa(x), mha(x))
    assert type(gqa).forward is MultiHeadAttention.forward  # a named form, not a copy


def test_gqa_with_one_kv_head_equals_mqa():
    gqa = make(32, 8, n_kv_heads=1)
    mqa = MultiQueryAttention(32, 8).double()
    mqa.load_state_dict(gqa.state_dict())
    x = randn(2, 5, 32)
    assert torch.equal(mqa(x), gqa(x))
    assert mqa.k_proj.weight.shape == (4, 32)  # one head of width D = 32 / 8
    # ... and both equal MHA whose heads all share one K/V head.
    mha = make(32, 8)
    with torch.no_grad():
        mha.q_proj.weight.copy_(gqa.q_proj.weight)
        mha.out_proj.weight.copy_(gqa.out_proj.weight)
        mha.k_proj.weight.copy_(gqa.k_proj.weight.repeat(8, 1))
        mha.v_proj.weight.copy_(gqa.v_proj.weight.repeat(8, 1))
    assert (mha(x) - gqa(x)).abs().max().item() <= 1e-12


@pytest.mark.parametrize(
    "n_kv_heads, expected", [(None, 4 * 32 * 32), (4, 2 * 32 * 32 + 2 * 32 * 16), (1, 2 * 32 * 32 + 2 * 32 * 4)]
)
def test_parameter_counts(n_kv_heads, expected):
    layer = MultiHeadAttention(32, 8, n_kv_heads=n_kv_heads)
    assert sum(p.numel() for p in layer.parameters()) == expected
    with_bias = MultiHeadAttention(32, 8, n_kv_heads=n_kv_heads, bias=True)
    kv = 32 if n_kv_heads is None else n_kv_heads * 4
    assert sum(p.numel() for p in with_bias.parameters()) == expected + 32 + 2 * kv + 32


# --------------------------------------------------------------------------- causality
CAUSAL_CONFIGS = [
    ("self-attention", lambda: SelfAttention(16, 16, causal=True)),
    ("mha", lambda: MultiHeadAttention(16, 4, causal=True)),
    ("mha, bias", lambda: MultiHeadAttention(16, 4, causal=True, bias=True)),
    ("gqa", lambda: MultiHeadAttention(16, 4, n_kv_heads=2, causal=True)),
    ("mqa", lambda: MultiQueryAttention(16, 4, causal=True)),
    ("gqa, rope", lambda: GroupedQueryAttention(16, 4, 2, causal=True, rope=RotaryEmbedding(4))),
    ("mha, dropout (eval)", lambda: MultiHeadAttention(16, 4, causal=True, dropout=0.5).eval()),
]


@pytest.mark.parametrize("name, factory", CAUSAL_CONFIGS, ids=[c[0] for c in CAUSAL_CONFIGS])
@pytest.mark.parametrize("path", ["fast", "explicit"])
@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("padded", [False, True])
def test_future_tokens_do_not_change_the_past(name, factory, path, dtype, padded):
    torch.manual_seed(0)
    layer = factory().to(dtype)
    B, T, t = 2, 7, 4  # change tokens t.. and compare outputs 0..t-1
    x = torch.randn(B, T, 16, dtype=dtype)
    x2 = x.clone()
    x2[:, t:] = torch.randn(B, T - t, 16, dtype=dtype) * 3
    kwargs = {"return_weights": True} if path == "explicit" else {}
    if padded:
        kwargs["mask"] = padding_mask([7, 5], T)
    y, y2 = layer(x, **kwargs), layer(x2, **kwargs)
    if path == "explicit":
        (y, w), (y2, _) = y, y2
        assert (w.triu(1) == 0).all()  # no weight above the diagonal
    assert torch.equal(y[:, :t], y2[:, :t])
    assert not torch.equal(y[:, t:], y2[:, t:])


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_decoding_with_cache_uses_bottom_right_causal_mask(n_kv_heads):
    """T_q < T_k: the queries are the *last* positions; the result equals the full sequence's rows."""
    layer = make(16, 4, n_kv_heads=n_kv_heads, causal=True)
    x = randn(2, 7, 16)
    full = layer(x)
    cache = KVCache(2, n_kv_heads, 4, 7, dtype=F64)
    prefill = layer(x[:, :5], kv_cache=cache)
    step, w = layer(x[:, 5:], kv_cache=cache, return_weights=True)  # T_q = 2, T_k = 7
    assert w.shape == (2, 4, 2, 7)
    assert (prefill - full[:, :5]).abs().max().item() <= 1e-12
    assert (step - full[:, 5:]).abs().max().item() <= 1e-12
    # PyTorch's is_causal=True aligns the mask top-left: for T_q < T_k that is a different function.
    q, k, v = randn(1, 1, 2, 4), randn(1, 1, 7, 4, seed=2), randn(1, 1, 7, 4, seed=3)
    top_left = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    ours = attention(q, k, v, is_causal=True)
    assert (ours - F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(2, 7))).abs().max().item() <= 1e-12
    assert (ours - top_left).abs().max().item() > 1e-3


# --------------------------------------------------------------------------- cross-attention
@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
@pytest.mark.parametrize("path", ["fast", "explicit"])
def test_cross_attention_ignores_padded_source_positions(n_kv_heads, path):
    layer = make(16, 4, n_kv_heads=n_kv_heads, d_context=12)
    x, context = randn(3, 5, 16), randn(3, 9, 12, seed=2)  # T_q = 5 != T_k = 9
    lengths = [9, 6, 2]
    mask = padding_mask(lengths, 9)
    changed = context.clone()
    for b, n in enumerate(lengths):
        changed[b, n:] = randn(9 - n, 12, seed=10 + b) * 5
    kwargs = {"return_weights": True} if path == "explicit" else {}
    y, y2 = layer(x, context, mask=mask, **kwargs), layer(x, changed, mask=mask, **kwargs)
    if path == "explicit":
        (y, w), (y2, _) = y, y2
        assert w.shape == (3, 4, 5, 9)
        for b, n in enumerate(lengths):
            assert (w[b, ..., n:] == 0).all()
        torch.testing.assert_close(w.sum(-1), torch.ones(3, 4, 5, dtype=F64))
    assert y.shape == (3, 5, 16)
    assert torch.equal(y, y2)
    # Each sequence alone, unpadded, gives the same output.
    for b, n in enumerate(lengths):
        alone = layer(x[b : b + 1], context[b : b + 1, :n])
        assert (alone[0] - y[b]).abs().max().item() <= 1e-12


@pytest.mark.parametrize("path", ["fast", "explicit"])
def test_fully_masked_rows_give_zeros_and_finite_gradients(path):
    layer = make(16, 4, d_context=12)
    x = randn(2, 3, 16).requires_grad_()
    context = randn(2, 4, 12, seed=2).requires_grad_()
    mask = padding_mask([4, 0], 4)  # the second source is empty: every key masked
    kwargs = {"return_weights": True} if path == "explicit" else {}
    y = layer(x, context, mask=mask, **kwargs)
    y = y[0] if path == "explicit" else y
    assert torch.isfinite(y).all()
    assert torch.equal(y[1], torch.zeros_like(y[1]))  # no bias: out_proj(0) = 0
    y.sum().backward()
    assert torch.isfinite(x.grad).all() and torch.isfinite(context.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in layer.parameters())


def test_cross_attention_is_not_causal_and_has_no_cache():
    layer = make(16, 4, causal=True)
    with pytest.raises(ValueError, match="causal=True is for self-attention"):
        layer(randn(1, 3, 16), randn(1, 5, 16))
    with pytest.raises(ValueError, match="kv_cache is for self-attention"):
        make(16, 4)(randn(1, 3, 16), randn(1, 5, 16), kv_cache=KVCache(1, 4, 4, 8, dtype=F64))


# --------------------------------------------------------------------------- properties
@st.composite
def configs(draw):
    n_kv = draw(st.integers(1, 4))
    groups = draw(st.integers(1, 3))
    head_dim = draw(st.integers(1, 5))
    return dict(
        n_heads=n_kv * groups,
        n_kv_heads=n_kv,
        head_dim=head_dim,
        B=draw(st.integers(1, 3)),
        T_q=draw(st.integers(1, 6)),
        T_k=draw(st.integers(1, 6)),
        d_context=draw(st.integers(1, 7)),
        cross=draw(st.booleans()),
        causal=draw(st.booleans()),
        seed=draw(st.integers(0, 2**16)),
    )


@settings(max_examples=30, deadline=None)
@given(configs())
def test_any_shape_and_head_count_matches_reference(c):
    H, H_kv, D = c["n_heads"], c["n_kv_heads"], c["head_dim"]
    d_model = H * D
    torch.manual_seed(c["seed"])
    if c["cross"]:
        layer = MultiHeadAttention(d_model, H, n_kv_heads=H_kv, d_context=c["d_context"]).double()
        x, context = (
            torch.randn(c["B"], c["T_q"], d_model, dtype=F64),
            torch.randn(c["B"], c["T_k"], c["d_context"], dtype=F64),
        )
        lengths = torch.randint(0, c["T_k"] + 1, (c["B"],))
        mask, causal, T_k = padding_mask(lengths, c["T_k"]), False, c["T_k"]
    else:
        layer = MultiHeadAttention(d_model, H, n_kv_heads=H_kv, causal=c["causal"]).double()
        x, context, mask, causal, T_k = (
            torch.randn(c["B"], c["T_q"], d_model, dtype=F64),
            None,
            None,
            c["causal"],
            c["T_q"],
        )
    want, want_w = reference(layer, x, context, mask=mask, causal=causal)
    out, w = layer(x, context, mask=mask, return_weights=True)
    assert out.shape == (c["B"], c["T_q"], d_model) and w.shape == (c["B"], H, c["T_q"], T_k)
    assert (out - want).abs().max().item() <= 1e-12
    assert (w - want_w).abs().max().item() <= 1e-12
    assert (layer(x, context, mask=mask) - want).abs().max().item() <= 1e-12


def test_dropout_rescales_kept_weights_and_is_off_in_eval():
    layer = make(16, 4, dropout=0.5)
    x = randn(1, 5, 16)
    layer.eval()
    assert torch.equal(layer(x), make(16, 4)(x))
    layer.train()
    torch.manual_seed(3)
    draws = layer(x.expand(4000, 5, 16))  # one pass, 4000 independent dropout masks
    assert not torch.equal(draws[0], draws[1])
    # Kept weights are scaled by 1/(1-p), so the output is unbiased: its mean is the eval output.
    assert (draws.mean(0) - layer.eval()(x)[0]).abs().max().item() < 0.05


# --------------------------------------------------------------------------- gradients
@pytest.mark.parametrize(
    "d_model, n_heads, kw",
    [
        (4, 2, dict(causal=True)),
        (4, 4, dict(n_kv_heads=2, causal=True)),
        (4, 2, dict(n_kv_heads=1, bias=True)),
        (4, 2, dict(d_context=3)),
    ],
    ids=["mha-causal", "gqa-causal", "mqa-bias", "cross"],
)
@pytest.mark.parametrize("path", ["fast", "explicit"])
def test_gradcheck_float64(d_model, n_heads, kw, path):
    """Gradients with respect to the inputs *and* every parameter (small sizes: gradcheck is O(#inputs))."""
    layer = make(d_model, n_heads, **kw)
    x = randn(2, 3, d_model).requires_grad_()
    cross = "d_context" in kw
    context = randn(2, 4, 3, seed=2).requires_grad_() if cross else None
    mask = padding_mask([4, 2], 4) if cross else None
    names = [n for n, _ in layer.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in layer.parameters())

    def fn(x, *rest):
        ctx, ps = (rest[0], rest[1:]) if cross else (None, rest)
        out = torch.func.functional_call(
            layer, dict(zip(names, ps)), (x, ctx), {"mask": mask, "return_weights": path == "explicit"}
        )
        return out[0] if path == "explicit" else out

    inputs = (x, context, *params) if cross else (x, *params)
    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-6)


def test_gradcheck_self_attention_float64():
    torch.manual_seed(0)
    layer = SelfAttention(4, 3, causal=True).double()
    x = randn(2, 4, 4).requires_grad_()
    assert torch.autograd.gradcheck(lambda x: layer(x, return_weights=True)[0], (x,))
    assert torch.autograd.gradcheck(layer, (x,))


# --------------------------------------------------------------------------- bad input
def test_d_model_not_divisible_by_n_heads():
    with pytest.raises(ValueError, match=r"d_model=10 is not divisible by n_heads=3"):
        MultiHeadAttention(10, 3)


def test_n_heads_not_divisible_by_n_kv_heads():
    with pytest.raises(ValueError, match=r"n_heads=8 is not divisible by n_kv_heads=3"):
        MultiHeadAttention(16, 8, n_kv_heads=3)
    with pytest.raises(ValueError, match=r"n_heads=4 is not divisible by n_kv_heads=8"):
        GroupedQueryAttention(16, 4, 8)


@pytest.mark.parametrize("name, value", [("d_model", 0), ("n_heads", -1), ("n_kv_heads", 0), ("d_context", 0)])
def test_non_positive_sizes(name, value):
    kw = {"d_model": 16, "n_heads": 4, name: value}
    d_model, n_heads = kw.pop("d_model"), kw.pop("n_heads")
    with pytest.raises(ValueError, match=rf"{name} must be >= 1, got {name}={value}"):
        MultiHeadAttention(d_model, n_heads, **kw)


def test_non_integer_sizes():
    with pytest.raises(TypeError, match=r"n_heads must be an int, got float \(4.0\)"):
        MultiHeadAttention(16, 4.0)
    with pytest.raises(TypeError, match=r"d_out must be an int"):
        SelfAttention(4, "8")


def test_bad_dropout():
    with pytest.raises(ValueError, match=r"dropout must be a number in \[0, 1\), got dropout=1.0"):
        MultiHeadAttention(16, 4, dropout=1.0)


def test_context_width_mismatch():
    layer = make(16, 4, d_context=12)
    with pytest.raises(ValueError, match=r"context must have shape \(B, T, d_context=12\), got \(2, 5, 16\)"):
        layer(randn(2, 3, 16), randn(2, 5, 16))
    with pytest.raises(ValueError, match=r"expects a context of width d_context=12"):
        layer(randn(2, 3, 16))
    with pytest.raises(ValueError, match=r"x and context must have the same batch size, got 2 and 3"):
        layer(randn(2, 3, 16), randn(3, 5, 12))


def test_input_width_mismatch():
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, d_model=16\), got \(2, 3, 8\)"):
        make(16, 4)(randn(2, 3, 8))
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, d_in=6\), got \(3, 6\)"):
        SelfAttention(6, 4)(torch.randn(3, 6))
    with pytest.raises(TypeError, match=r"x must be a torch.Tensor, got list"):
        make(16, 4)([[0.0] * 16])


@pytest.mark.parametrize(
    "mask_shape",
    [(5, 5), (2, 3, 5), (3, 1, 4), (2, 4, 1, 3, 4)],
    ids=["wrong T_q", "wrong T_k", "wrong batch", "too many dims"],
)
def test_mask_shape_mismatch(mask_shape):
    layer = make(16, 4)
    x, context = randn(2, 3, 16), randn(2, 4, 16, seed=2)  # scores (2, 4, 3, 4)
    mask = torch.ones(mask_shape, dtype=torch.bool)
    with pytest.raises(
        ValueError, match=r"mask of shape \(.*\) does not broadcast to the scores' shape \(2, 4, 3, 4\)"
    ):
        layer(x, context, mask=mask)


def test_mask_dtype():
    with pytest.raises(TypeError, match=r"mask must be boolean .* got dtype=torch.int64"):
        make(16, 4)(randn(2, 3, 16), mask=torch.ones(3, 3, dtype=torch.long))


def test_rope_head_dim_mismatch():
    with pytest.raises(ValueError, match=r"rope.head_dim=8 does not match head_dim=4"):
        MultiHeadAttention(16, 4, rope=RotaryEmbedding(8))


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_make_cache_matches_the_layer_and_decoding_equals_the_full_pass(n_kv_heads):
    layer = make(causal=True, n_kv_heads=n_kv_heads).eval()
    cache = layer.make_cache(2, 6)
    assert cache.numel_per_token() == 2 * n_kv_heads * layer.head_dim
    assert cache.nbytes() == 2 * 2 * n_kv_heads * 6 * layer.head_dim * 8  # float64, like the weights
    x = randn(2, 6, 16)
    full = layer(x)
    steps = torch.cat([layer(x[:, t : t + 1], kv_cache=cache) for t in range(6)], dim=1)
    torch.testing.assert_close(steps, full, atol=1e-12, rtol=0)


def test_kv_cache_argument_is_typed():
    from attn_core import LatentKVCache

    with pytest.raises(
        TypeError, match="kv_cache must be an attn_core.KVCache or attn_core.RollingKVCache or None, got LatentKVCache"
    ):
        make(causal=True)(randn(1, 2, 16), kv_cache=LatentKVCache(1, 4, 0, 4))


# --------------------------------------------------------------------------- softcap= (Gemma 2)
def test_mha_softcap_caps_the_scores():
    torch.manual_seed(0)
    m = MultiHeadAttention(16, 4, causal=True, softcap=3.0).to(torch.float64)
    x = randn(2, 6, 16, seed=2) * 5
    q = m.q_proj(x).view(2, 6, 4, 4).transpose(1, 2)  # (B, H, T, D)
    k = m.k_proj(x).view(2, 6, 4, 4).transpose(1, 2)
    v = m.v_proj(x).view(2, 6, 4, 4).transpose(1, 2)
    s = 3.0 * torch.tanh((q @ k.transpose(-2, -1) / 2.0) / 3.0)  # (B, H, T, T); √D = 2
    s = s.masked_fill(torch.ones(6, 6, dtype=torch.bool).triu(1), float("-inf"))
    heads = torch.softmax(s, -1) @ v  # (B, H, T, D)
    want = m.out_proj(heads.transpose(1, 2).reshape(2, 6, 16))
    torch.testing.assert_close(m(x), want, rtol=0, atol=1e-12)
    x2 = x.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda t: m(t), (x2[:1, :4],))


def test_mha_softcap_bad_input():
    with pytest.raises(ValueError, match="softcap must be a finite number > 0, got softcap=0"):
        MultiHeadAttention(16, 4, softcap=0)
    with pytest.raises(ValueError, match="softcap must be a finite number > 0, got softcap=-1"):
        MultiHeadAttention(16, 4, softcap=-1)
    with pytest.raises(TypeError, match="softcap must be a number, got bool"):
        MultiHeadAttention(16, 4, softcap=True)


# --------------------------------------------------------------------------- windows, sinks, shared K/V
@pytest.mark.parametrize("window", [1, 3, 20])
def test_window_matches_nn_multihead_attention_with_the_band(window):
    layer = make(causal=True, window=window)
    x = randn(2, 9, 16)
    ref = copy_into_nn_mha(layer)
    expected, _ = ref(x, x, x, attn_mask=~causal_mask(9, window=window), need_weights=False)
    torch.testing.assert_close(layer(x), expected, rtol=0, atol=1e-12)
    _, w = layer(x, return_weights=True)
    assert (w.count_nonzero(-1) == torch.clamp(torch.arange(1, 10), max=window)).all()


WINDOWED = {
    "window": dict(window=4),
    "window+GQA+RoPE": dict(window=3, n_kv_heads=2, rope=RotaryEmbedding(4)),
    "sinks": dict(window=4, sinks=True),
    "sink_tokens": dict(window=3, sink_tokens=2, rope=RotaryEmbedding(4)),
    "sinks, no window": dict(sinks=True, n_kv_heads=1),
}


def _randomise_sinks(layer):
    if layer.sinks is not None:
        with torch.no_grad():
            layer.sinks.copy_(torch.linspace(-1.0, 1.5, layer.n_heads, dtype=F64))
    return layer


@pytest.mark.parametrize("kw", WINDOWED.values(), ids=WINDOWED.keys())
def test_rolling_cache_decoding_equals_the_full_windowed_pass(kw):
    layer = _randomise_sinks(make(causal=True, **kw))
    x = randn(2, 15, 16)
    full = layer(x)
    cache = layer.make_cache(2, 100)
    assert isinstance(cache, RollingKVCache) == ("window" in kw)
    with torch.no_grad():
        steps = [layer(x[:, :5], kv_cache=cache)] + [layer(x[:, t : t + 2], kv_cache=cache) for t in range(5, 15, 2)]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=0, atol=1e-12)
    if "window" in kw:  # constant memory: the cache never grew
        assert cache.nbytes() == layer.make_cache(2, 10_000).nbytes()


@pytest.mark.parametrize("kw", WINDOWED.values(), ids=WINDOWED.keys())
def test_windowed_layers_are_causal_and_gradcheck(kw):
    layer = _randomise_sinks(make(causal=True, **kw))
    x = randn(1, 6, 16)
    assert not leaks(layer, x)
    params = [] if layer.sinks is None else [layer.sinks]
    assert torch.autograd.gradcheck(lambda x, *p: layer(x), [x.requires_grad_(True), *params])


def test_sink_tokens_see_the_first_positions_beyond_the_window():
    layer = make(causal=True, window=2, sink_tokens=1)
    _, w = layer(randn(1, 6, 16), return_weights=True)
    assert (w[0, :, :, 0] > 0).all() and (w[0, :, 5, 1:4] == 0).all()


def test_window_sinks_bad_input():
    with pytest.raises(ValueError, match="window must be >= 1.*window=0"):
        make(causal=True, window=0)
    with pytest.raises(ValueError, match="sinks=True is for causal self-attention, got causal=False"):
        make(sinks=True)
    with pytest.raises(ValueError, match="window=3 is for causal self-attention, got causal=False"):
        make(window=3)
    with pytest.raises(ValueError, match="sink_tokens=2 keeps the first tokens inside a window"):
        make(causal=True, sink_tokens=2)
    small = RollingKVCache(1, 4, 4, window=2, dtype=F64)
    with pytest.raises(ValueError, match="too small for this layer: cache window=2, .* the layer needs window=4"):
        make(causal=True, window=4)(randn(1, 3, 16), kv_cache=small)
    with pytest.raises(ValueError, match="a RollingKVCache drops old keys.*window=None"):
        make(causal=True)(randn(1, 3, 16), kv_cache=small)
    with pytest.raises(ValueError, match="mask= cannot be combined with a RollingKVCache"):
        make(causal=True, window=2)(randn(1, 3, 16), kv_cache=small, mask=causal_mask(3))


def test_shared_kv_equals_attention_to_the_sources_keys_and_values():
    rope = RotaryEmbedding(4)
    source = make(causal=True, n_kv_heads=2, window=3, rope=rope)
    reader = make(causal=True, n_kv_heads=2, window=3, rope=rope, seed=1, kv_source=source)
    x, y = randn(2, 8, 16, seed=1), randn(2, 8, 16, seed=2)  # the reader's own input differs
    source(x)
    got = reader(y)
    # Reference: the reader's queries; keys and values projected from x by the source's weights.
    q = rope(reader.q_proj(y).view(2, 8, 4, 4).transpose(1, 2))  # (B, H, T, D)
    k = rope(source.k_proj(x).view(2, 8, 2, 4).transpose(1, 2))  # (B, H_kv, T, D)
    v = source.v_proj(x).view(2, 8, 2, 4).transpose(1, 2)
    k, v = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(8, window=3))
    want = reader.out_proj(out.transpose(1, 2).reshape(2, 8, 16))
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    assert sum(p.numel() for p in reader.parameters()) == 2 * 16 * 16  # W_Q and W_O only
    assert reader.make_cache(2, 10) is None


def test_shared_kv_bad_input():
    source = make(causal=True, n_kv_heads=2)
    with pytest.raises(ValueError, match="kv_source has n_kv_heads=2, this layer n_kv_heads=4"):
        make(causal=True, kv_source=source)
    with pytest.raises(ValueError, match="kv_source has window=None, this layer window=3"):
        make(causal=True, n_kv_heads=2, window=3, kv_source=source)
    with pytest.raises(TypeError, match="kv_source"):
        make(causal=True, kv_source=nn.Linear(2, 2))
    reader = make(causal=True, n_kv_heads=2, kv_source=source)
    with pytest.raises(ValueError, match="kv_source has not run on this input yet"):
        reader(randn(1, 3, 16))
    source(randn(1, 3, 16))
    with pytest.raises(ValueError, match="has no cache of its own"):
        reader(randn(1, 3, 16), kv_cache=source.make_cache(1, 4))
