"""Tests for attn_core.ops.linear_attention: linear attention (and checks shared with the delta rule).

The three forms of each rule (parallel matrix, recurrent, chunked) are one computation:
they agree in float64 to 1e-10 (measured: about 1e-14) for lengths that are and are not
multiples of the chunk size. Parity with Hugging Face is in ``tests/test_parity_hf_linear.py``.
"""

from __future__ import annotations

import pytest
import torch

from attn_core.ops import delta_rule as dr
from attn_core.ops import linear_attention as la
from conftest import F64, randn

B, H, D_K, D_V = 2, 3, 5, 4
TOL = {"rtol": 0, "atol": 1e-10}
MAPS = ["elu+1", "relu", "identity"]


def _qkv(T: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Queries and keys ``(B, H, T, D_K)``, values ``(B, H, T, D_V)``, float64."""
    return randn(B, H, T, D_K, seed=seed), randn(B, H, T, D_K, seed=seed + 1), randn(B, H, T, D_V, seed=seed + 2)


def _delta_inputs(T: int, seed: int = 0, gated: bool = True):
    """L2-normalised q, k (the stable regime), values, β ∈ (0, 1) and log-decays g ∈ (-1, 0) (or None)."""
    q, k, v = _qkv(T, seed)
    gen = torch.Generator().manual_seed(seed + 3)
    beta = torch.rand(B, H, T, generator=gen, dtype=F64)
    g = -torch.rand(B, H, T, generator=gen, dtype=F64) if gated else None
    return la.l2_normalize(q), la.l2_normalize(k), v, beta, g


# ---------------------------------------------------------------- linear attention


@pytest.mark.parametrize("phi", MAPS)
@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("T, chunk_size", [(1, 4), (7, 3), (8, 4), (13, 4), (13, 1), (13, 64)])
def test_linear_attention_three_forms_agree(phi, normalize, T, chunk_size):
    q, k, v = _qkv(T)
    if phi == "identity" and normalize:
        q, k = q.abs(), k.abs()  # keep the normaliser away from 0: a sign-free φ·φ can cancel to ~0
    kw = {"feature_map": phi, "normalize": normalize}
    parallel = la.linear_attention_parallel(q, k, v, **kw)
    recurrent, (S_r, z_r) = la.linear_attention_recurrent(q, k, v, **kw)
    chunked, (S_c, z_c) = la.linear_attention_chunked(q, k, v, chunk_size=chunk_size, **kw)
    torch.testing.assert_close(recurrent, parallel, **TOL)
    torch.testing.assert_close(chunked, parallel, **TOL)
    torch.testing.assert_close(S_c, S_r, **TOL)
    torch.testing.assert_close(z_c, z_r, **TOL)
    f = la.get_feature_map(phi)
    torch.testing.assert_close(S_r, f(k).transpose(-1, -2) @ v, **TOL)  # the state is Σ φ(k_s) v_sᵀ
    torch.testing.assert_close(z_r, f(k).sum(dim=2), **TOL)


def test_linear_attention_identity_is_masked_matmul():
    q, k, v = _qkv(9)
    want = torch.tril(q @ k.transpose(-1, -2)) @ v  # attention without softmax, future zeroed
    got = la.linear_attention_parallel(q, k, v, feature_map="identity", normalize=False)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    out, _ = la.linear_attention_recurrent(q, k, v, feature_map="identity", normalize=False)
    torch.testing.assert_close(out, want, rtol=0, atol=1e-12)


def test_linear_attention_matrix_rows():
    q, k, _ = _qkv(6)
    m = la.linear_attention_matrix(q, k, eps=0.0)
    assert m.shape == (B, H, 6, 6)
    assert (m.triu(1) == 0).all()  # causal
    assert (
        m[..., torch.ones(6, 6, dtype=torch.bool).tril()] > 0
    ).all()  # elu+1 is positive: every past token gets a positive weight
    torch.testing.assert_close(m.sum(dim=-1), torch.ones(B, H, 6, dtype=F64), rtol=0, atol=1e-12)
    # a callable feature map is used as given
    torch.testing.assert_close(
        la.linear_attention_matrix(q, k, feature_map=torch.exp, normalize=False),
        torch.tril(torch.exp(q) @ torch.exp(k).transpose(-1, -2)),
        rtol=0,
        atol=1e-12,
    )


@pytest.mark.parametrize("form", ["recurrent", "chunked"])
def test_linear_attention_continues_from_state(form):
    q, k, v = _qkv(11)
    run = getattr(la, f"linear_attention_{form}")
    kw = {"chunk_size": 4} if form == "chunked" else {}
    full, (S, z) = run(q, k, v, **kw)
    first, state = run(q[:, :, :6], k[:, :, :6], v[:, :, :6], **kw)
    second, (S2, z2) = run(q[:, :, 6:], k[:, :, 6:], v[:, :, 6:], initial_state=state, **kw)
    torch.testing.assert_close(torch.cat([first, second], dim=2), full, **TOL)
    torch.testing.assert_close(S2, S, **TOL)
    torch.testing.assert_close(z2, z, **TOL)


# ---------------------------------------------------------------- the (gated) delta rule


def test_causality_of_every_form():
    T, t0 = 10, 6
    q, k, v, beta, g = _delta_inputs(T)
    later = [x.clone() for x in (q, k, v, beta, g)]
    for x in later:
        x[:, :, t0:] = x[:, :, t0:] + 1.0  # change every future token
    forms = {
        "linear parallel": lambda q, k, v, b, g: la.linear_attention_parallel(q, k, v),
        "linear recurrent": lambda q, k, v, b, g: la.linear_attention_recurrent(q, k, v)[0],
        "linear chunked": lambda q, k, v, b, g: la.linear_attention_chunked(q, k, v, chunk_size=4)[0],
        "delta parallel": lambda q, k, v, b, g: dr.delta_rule_parallel(q, k, v, b, g),
        "delta recurrent": lambda q, k, v, b, g: dr.delta_rule_recurrent(q, k, v, b, g)[0],
        "delta chunked": lambda q, k, v, b, g: dr.delta_rule_chunked(q, k, v, b, g, chunk_size=4)[0],
    }
    for name, run in forms.items():
        before, after = run(q, k, v, beta, g), run(*later)
        torch.testing.assert_close(after[:, :, :t0], before[:, :, :t0], rtol=0, atol=1e-12, msg=name)
        assert (after[:, :, t0:] - before[:, :, t0:]).abs().max() > 1e-3, name


def test_gradcheck_float64():
    # fast_mode checks random projections of the Jacobian: the same bugs, a fraction of the time.
    q, k, v = (x[:1, :1, :5, :3].clone().requires_grad_() for x in _qkv(5))
    assert torch.autograd.gradcheck(
        lambda q, k, v: la.linear_attention_chunked(q, k, v, chunk_size=2)[0], (q, k, v), fast_mode=True
    )
    qd, kd, vd, beta, g = (x[:1, :1, :5].clone().requires_grad_() for x in _delta_inputs(5))
    fn = lambda q, k, v, b, g: dr.delta_rule_chunked(q, k, v, b, g, chunk_size=2)
    assert torch.autograd.gradcheck(fn, (qd, kd, vd, beta, g), fast_mode=True)
    assert torch.autograd.gradcheck(dr.delta_rule_matrix, (qd, kd, beta, g), fast_mode=True)


def test_l2_normalize():
    x = randn(3, 7, seed=4)
    torch.testing.assert_close(la.l2_normalize(x, eps=0.0), x / x.norm(dim=-1, keepdim=True), rtol=0, atol=1e-15)
    assert la.l2_normalize(torch.zeros(2, 3, dtype=F64)).abs().max() == 0  # eps keeps a zero vector finite


# ---------------------------------------------------------------- bad input


def test_bad_input_names_the_value():
    q, k, v, beta, g = _delta_inputs(6)
    with pytest.raises(ValueError, match=r"q must have shape \(B, H, T, D_k\), got \(3, 6, 5\)"):
        la.linear_attention_parallel(q[0], k[0], v[0])
    with pytest.raises(ValueError, match=r"q and k must have the same shape.*got q \(2, 3, 6, 5\), k \(2, 3, 5, 5\)"):
        la.linear_attention_recurrent(q, k[:, :, :5], v)
    with pytest.raises(ValueError, match=r"v must have shape .*got \(2, 3, 5, 4\)"):
        dr.delta_rule_recurrent(q, k, v[:, :, :5], beta)
    with pytest.raises(TypeError, match="k must be a floating-point tensor, got dtype=torch.int64"):
        la.linear_attention_matrix(q, k.long())
    with pytest.raises(TypeError, match="q must be a torch.Tensor, got list"):
        dr.delta_rule_matrix([1.0], k, beta)
    for chunk_size in (0, -2):
        with pytest.raises(ValueError, match=f"chunk_size must be >= 1, got chunk_size={chunk_size}"):
            la.linear_attention_chunked(q, k, v, chunk_size=chunk_size)
        with pytest.raises(ValueError, match=f"chunk_size={chunk_size}"):
            dr.delta_rule_chunked(q, k, v, beta, chunk_size=chunk_size)
    with pytest.raises(TypeError, match=r"chunk_size must be an int, got float \(2.0\)"):
        dr.delta_rule_chunked(q, k, v, beta, chunk_size=2.0)
    with pytest.raises(ValueError, match=r"beta must have shape \(B, H, T\) = \(2, 3, 6\), got \(2, 3, 5\)"):
        dr.delta_rule_chunked(q, k, v, beta[:, :, :5])
    with pytest.raises(ValueError, match=r"beta must have shape \(B, H, T\), got \(2, 3, 6, 1\)"):
        dr.delta_rule_recurrent(q, k, v, beta[..., None])
    with pytest.raises(ValueError, match=r"g must have shape \(B, H, T\) = \(2, 3, 6\), got \(2, 1, 6\)"):
        dr.delta_rule_matrix(q, k, beta, g[:, :1])
    with pytest.raises(ValueError, match=r"initial_state must have shape \(2, 3, 5, 4\), got \(2, 3, 4, 4\)"):
        dr.delta_rule_recurrent(q, k, v, beta, initial_state=torch.zeros(2, 3, 4, 4, dtype=F64))
    with pytest.raises(ValueError, match=r"initial_state must be a pair \(S, z\), got 1 tensors"):
        la.linear_attention_chunked(q, k, v, initial_state=(torch.zeros(2, 3, 5, 4, dtype=F64),))
    with pytest.raises(ValueError, match=r"initial_state\[1\] \(z\) must have shape \(2, 3, 5\), got \(2, 3\)"):
        la.linear_attention_recurrent(
            q, k, v, initial_state=(torch.zeros(2, 3, 5, 4, dtype=F64), torch.zeros(2, 3, dtype=F64))
        )
    with pytest.raises(ValueError, match="feature_map must be one of .*got feature_map='softmax'"):
        la.linear_attention_matrix(q, k, feature_map="softmax")
    with pytest.raises(TypeError, match="feature_map must be callable, got int"):
        la.linear_attention_matrix(q, k, feature_map=3)
    with pytest.raises(TypeError, match="scale must be a number"):
        dr.delta_rule_recurrent(q, k, v, beta, scale="1")
