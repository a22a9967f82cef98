"""attn_core.ops.efficient: online softmax and tiled (FlashAttention-style) attention equal the reference."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attn_core import attention
from attn_core.ops.efficient import online_softmax, tiled_attention
from conftest import F64, qkv


# ----------------------------------------------------------------------------- online softmax
@pytest.mark.parametrize("block_size", [1, 3, 7, 64])
@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_online_softmax_equals_softmax(block_size, dim):
    x = torch.randn(5, 9, 6, dtype=F64) * 4
    torch.testing.assert_close(online_softmax(x, dim, block_size=block_size), torch.softmax(x, dim), rtol=0, atol=1e-14)


def test_online_softmax_large_scores_and_masked_entries():
    x = torch.tensor([[1000.0, 999.0, float("-inf"), 998.0], [float("-inf")] * 4, [-1e4, 0.0, 1e4, 3.0]])
    out = online_softmax(x, block_size=2)
    expected = torch.softmax(x[[0, 2]], -1)
    torch.testing.assert_close(out[[0, 2]], expected)
    assert torch.equal(out[1], torch.zeros(4)), "an all -inf row gives zeros, not NaN"
    assert not out.isnan().any()


def test_online_softmax_half_precision_keeps_dtype():
    x = torch.randn(4, 33).half() * 8
    out = online_softmax(x, block_size=5)
    assert out.dtype == torch.float16
    torch.testing.assert_close(out.float(), torch.softmax(x.float(), -1), atol=1e-3, rtol=1e-3)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 40), block=st.integers(1, 50), scale=st.floats(0.1, 50.0), seed=st.integers(0, 2**16))
def test_online_softmax_property(n, block, scale, seed):
    x = torch.randn(3, n, generator=torch.Generator().manual_seed(seed), dtype=F64) * scale
    out = online_softmax(x, block_size=block)
    torch.testing.assert_close(out, torch.softmax(x, -1), rtol=0, atol=1e-12)


# ----------------------------------------------------------------------------- tiled attention
CASES = [
    dict(T_q=10, T_k=10),
    dict(T_q=17, T_k=17),  # length not a multiple of the block
    dict(T_q=5, T_k=13),  # decoding: fewer queries than keys
    dict(T_q=13, T_k=5),  # more queries than keys (non-causal only: causal needs T_k >= T_q)
    dict(T_q=1, T_k=9),  # one decoding step
    dict(T_q=12, T_k=12, H=4, H_kv=2),  # GQA
    dict(T_q=9, T_k=11, H=4, H_kv=1),  # MQA, T_q != T_k
    dict(T_q=8, T_k=8, D=8, D_v=5),  # value width differs
]


PAIRS = [(c, causal) for c in CASES for causal in (False, True) if not (causal and c["T_q"] > c["T_k"])]


@pytest.mark.parametrize(
    "case, is_causal",
    PAIRS,
    ids=lambda p: "-".join(f"{k}{v}" for k, v in p.items()) if isinstance(p, dict) else f"causal{p}",
)
@pytest.mark.parametrize("block", [(4, None), (3, 5), (64, None)])
def test_tiled_equals_reference_float32(case, is_causal, block):
    q, k, v = qkv(**case)
    expected = attention(q, k, v, is_causal=is_causal, return_weights=True)[0]  # explicit path
    got = tiled_attention(q, k, v, is_causal=is_causal, block_size=block[0], block_size_k=block[1])
    assert got.shape == expected.shape and got.dtype == torch.float32
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got, attention(q, k, v, is_causal=is_causal), rtol=1e-5, atol=1e-5)  # fast path


def test_tiled_equals_sdpa_at_scale_float64():
    q, k, v = qkv(B=1, H=2, T_q=300, D=16, dtype=F64)
    for causal in (False, True):
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        got = tiled_attention(q, k, v, is_causal=causal, block_size=64, block_size_k=48)
        assert (got - expected).abs().max().item() <= 1e-12


def test_tiled_causal_needs_enough_keys():
    q, k, v = qkv(T_q=6, T_k=2)
    with pytest.raises(ValueError, match="T_q=6, T_k=2"):
        tiled_attention(q, k, v, is_causal=True, block_size=2)


def test_tiled_custom_scale_and_3d_inputs():
    q, k, v = qkv()
    torch.testing.assert_close(tiled_attention(q, k, v, scale=0.3, block_size=4), attention(q, k, v, scale=0.3))
    q3, k3, v3 = q[0], k[0], v[0]  # (H, T, D): no batch axis
    torch.testing.assert_close(
        tiled_attention(q3, k3, v3, is_causal=True, block_size=3), attention(q3, k3, v3, is_causal=True)
    )
    q2, k2, v2 = q[0, 0], k[0, 0], v[0, 0]  # (T, D): a single head
    torch.testing.assert_close(tiled_attention(q2, k2, v2, block_size=3), attention(q2, k2, v2))


def test_tiled_half_precision():
    q, k, v = qkv(T_q=40, dtype=torch.float32)
    out = tiled_attention(q.half(), k.half(), v.half(), is_causal=True, block_size=16)
    assert out.dtype == torch.float16
    torch.testing.assert_close(out.float(), attention(q, k, v, is_causal=True), atol=5e-3, rtol=5e-3)


def test_tiled_causality():
    q, k, v = qkv(T_q=12)
    out = tiled_attention(q, k, v, is_causal=True, block_size=4)
    k2, v2 = k.clone(), v.clone()
    k2[..., 7:, :] += 5.0
    v2[..., 7:, :] -= 3.0
    out2 = tiled_attention(q, k2, v2, is_causal=True, block_size=4)
    assert torch.equal(out[..., :7, :], out2[..., :7, :]), "changing future keys changed past outputs"
    assert not torch.equal(out[..., 7:, :], out2[..., 7:, :])


@settings(max_examples=20, deadline=None)
@given(
    T_q=st.integers(1, 20),
    T_k=st.integers(1, 20),
    block_q=st.integers(1, 9),
    block_k=st.integers(1, 9),
    causal=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_tiled_property(T_q, T_k, block_q, block_k, causal, seed):
    causal = causal and T_q <= T_k
    q, k, v = qkv(B=1, H=2, T_q=T_q, T_k=T_k, D=4, dtype=F64, seed=seed)
    got = tiled_attention(q, k, v, is_causal=causal, block_size=block_q, block_size_k=block_k)
    expected = attention(q, k, v, is_causal=causal, return_weights=True)[0]
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)


def test_tiled_gradcheck_float64():
    q, k, v = (t.requires_grad_() for t in qkv(B=1, H=2, T_q=5, T_k=7, D=3, dtype=F64))
    for causal in (False, True):
        assert torch.autograd.gradcheck(
            lambda q, k, v, causal=causal: tiled_attention(q, k, v, is_causal=causal, block_size=2, block_size_k=3),
            (q, k, v),
        )


def test_tiled_gradients_equal_reference():
    q, k, v = (t.requires_grad_() for t in qkv(T_q=9, dtype=F64))
    g = torch.randn(2, 3, 9, 8, dtype=F64)
    grads = torch.autograd.grad((tiled_attention(q, k, v, is_causal=True, block_size=4) * g).sum(), (q, k, v))
    ref = torch.autograd.grad((attention(q, k, v, is_causal=True) * g).sum(), (q, k, v))
    for a, b in zip(grads, ref):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(block_size=0), ValueError, "block_size=0"),
        (dict(block_size=2.5), TypeError, "block_size must be an int"),
        (dict(block_size_k=-1), ValueError, "block_size_k=-1"),
        (dict(scale=0.0), ValueError, "scale=0.0"),
        (dict(scale=True), TypeError, "scale must be a number, got bool"),
    ],
)
def test_tiled_bad_arguments(kwargs, error, match):
    q, k, v = qkv()
    with pytest.raises(error, match=match):
        tiled_attention(q, k, v, **kwargs)


def test_tiled_bad_inputs():
    q, k, v = qkv()
    with pytest.raises(TypeError, match="q must be a torch.Tensor"):
        tiled_attention(q.tolist(), k, v)
    with pytest.raises(TypeError, match="floating-point"):
        tiled_attention(q.long(), k, v)
    with pytest.raises(TypeError, match="share a dtype"):
        tiled_attention(q.double(), k, v)
    with pytest.raises(ValueError, match="same last dimension"):
        tiled_attention(q[..., :4], k, v)
    with pytest.raises(ValueError, match="k and v must agree"):
        tiled_attention(q, k, v[..., :5, :])
    with pytest.raises(ValueError, match="3 query heads"):
        tiled_attention(q, k[:, :2], v[:, :2])
    with pytest.raises(ValueError, match="same number of dimensions"):
        tiled_attention(q, k[0], v[0])
    with pytest.raises(ValueError, match="do not broadcast"):
        tiled_attention(q, k[:1].expand(3, -1, -1, -1), v[:1].expand(3, -1, -1, -1))
    with pytest.raises(ValueError, match=r"must have shape \(\.\.\., T, D\)"):
        tiled_attention(q[0, 0, 0], k[0, 0, 0], v[0, 0, 0])


def test_online_softmax_bad_inputs():
    with pytest.raises(TypeError, match="floating-point"):
        online_softmax(torch.arange(4))
    with pytest.raises(ValueError, match="dim=2 is out of range"):
        online_softmax(torch.randn(3, 4), dim=2)
    with pytest.raises(ValueError, match="block_size=0"):
        online_softmax(torch.randn(3, 4), block_size=0)
