"""attn_core.ops.attention.attention: reference equality, properties, gradients and bad input."""

from __future__ import annotations

import functools
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attn_core import attention, causal_mask, padding_mask
from conftest import qkv

_qkv = functools.partial(qkv, dtype=torch.float64)  # (B, H, T_q, D) in float64 unless asked


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
@pytest.mark.parametrize("T_q,T_k", [(5, 5), (3, 7), (1, 6)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("explicit", [False, True])
def test_equals_torch_sdpa(dtype, tol, T_q, T_k, causal, explicit):
    q, k, v = _qkv(2, 3, T_q, 8, T_k=T_k, dtype=dtype)
    # PyTorch's is_causal is top-left aligned; the bottom-right mask is the reference.
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(T_q, T_k) if causal else None)
    out = attention(q, k, v, is_causal=causal, return_weights=explicit)
    out = out[0] if explicit else out
    assert (out - ref).abs().max().item() <= tol


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
@pytest.mark.parametrize("mask_kind", ["bool", "float", "padding"])
def test_masks_equal_torch_sdpa(dtype, tol, mask_kind):
    q, k, v = _qkv(2, 2, 4, 8, T_k=6, dtype=dtype)
    if mask_kind == "bool":
        mask = torch.rand(4, 6, generator=torch.Generator().manual_seed(1)) > 0.3
        mask[:, 0] = True  # no fully masked row: SDPA would give NaN there
    elif mask_kind == "float":
        mask = torch.randn(2, 1, 4, 6, dtype=dtype)
    else:
        mask = padding_mask([6, 3], 6)[:, None]  # (B, 1, 1, T_k)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    for explicit in (False, True):
        out = attention(q, k, v, mask=mask, return_weights=explicit)
        out = out[0] if explicit else out
        assert (out - ref).abs().max().item() <= tol


def test_scale_and_explicit_fast_paths_agree():
    q, k, v = _qkv(2, 3, 5, 4)
    fast = attention(q, k, v, scale=0.3, is_causal=True)
    explicit, _ = attention(q, k, v, scale=0.3, is_causal=True, return_weights=True)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3)
    assert torch.allclose(fast, ref, atol=1e-12) and torch.allclose(explicit, ref, atol=1e-12)


def test_grouped_heads_equal_repeat_interleave_and_enable_gqa():
    q, k, v = _qkv(2, 6, 5, 8, H_kv=2)
    ref = F.scaled_dot_product_attention(q, k.repeat_interleave(3, dim=1), v.repeat_interleave(3, dim=1))
    gqa = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    for explicit in (False, True):
        out = attention(q, k, v, return_weights=explicit)
        out = out[0] if explicit else out
        assert (out - ref).abs().max() <= 1e-12 and (out - gqa).abs().max() <= 1e-12


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_weights_rows_sum_to_one(dtype):
    q, k, v = _qkv(2, 3, 6, 8, dtype=dtype)
    _, w = attention(q, k, v, is_causal=True, return_weights=True)
    assert w.shape == (2, 3, 6, 6)
    assert torch.allclose(w.sum(-1), torch.ones(2, 3, 6, dtype=dtype), atol=1e-6)
    assert (w.triu(1) == 0).all(), "causal weights must be zero above the diagonal"


@pytest.mark.parametrize("explicit", [False, True])
def test_fully_masked_rows_give_zeros_not_nan(explicit):
    q, k, v = _qkv(1, 2, 4, 8)
    mask = torch.ones(4, 4, dtype=torch.bool)
    mask[1] = False  # query 1 may attend to nothing
    q.requires_grad_(True)
    result = attention(q, k, v, mask=mask, return_weights=explicit)
    out = result[0] if explicit else result
    assert not torch.isnan(out).any()
    assert (out[:, :, 1] == 0).all()
    if explicit:
        assert (result[1][:, :, 1] == 0).all()
    out.sum().backward()
    assert not torch.isnan(q.grad).any()


def _mask_form(allowed: torch.Tensor, form: str) -> torch.Tensor:
    """The boolean mask ``allowed`` written as ``form``: itself, or an additive bias of -inf or finfo.min."""
    if form == "bool":
        return allowed
    blocked = float("-inf") if form == "-inf" else torch.finfo(torch.float64).min
    return torch.zeros(allowed.shape, dtype=torch.float64).masked_fill(~allowed, blocked)


@pytest.mark.parametrize("form", ["bool", "-inf", "finfo.min"])
@pytest.mark.parametrize("softcap", [None, 30.0])
@pytest.mark.parametrize("sinks", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_every_mask_form_gives_the_same_result_on_both_paths(form, softcap, sinks, causal):
    # Query 1 sees nothing (fully masked), query 2 only key 0; the rest see every key but key 3.
    allowed = torch.ones(4, 5, dtype=torch.bool)
    allowed[:, 3], allowed[1], allowed[2, 1:] = False, False, False
    q, k, v = _qkv(2, 2, 4, 8, T_k=5)
    sink = torch.tensor([0.5, -1.0], dtype=torch.float64) if sinks else None
    kwargs = dict(is_causal=causal, softcap=softcap, sinks=sink)
    results = []
    for mask, explicit in ((allowed, True), (_mask_form(allowed, form), True), (_mask_form(allowed, form), False)):
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        r = attention(*leaves, mask=mask, return_weights=explicit, **kwargs)
        out = r[0] if explicit else r
        out.pow(2).sum().backward()
        results.append((out.detach(), *(t.grad for t in leaves)))
        assert (out[:, :, 1] == 0).all(), "a fully masked query must give zeros"
        assert all(torch.isfinite(t).all() for t in results[-1]), "values and gradients must be NaN-free"
        if explicit:
            assert (r[1][:, :, 1] == 0).all()
            assert (r[1][..., 3] == 0).all()
    reference = results[0]  # boolean mask, explicit path
    for result in results[1:]:
        for got, want in zip(result, reference):
            assert (got - want).abs().max().item() <= 1e-12


def test_half_precision_softmax_in_float32():
    q, k, v = _qkv(1, 2, 8, 16, dtype=torch.float16)
    q = q * 30  # large scores: a float16 softmax would lose most digits
    out, w = attention(q, k, v, return_weights=True)
    ref = attention(q.double(), k.double(), v.double())
    assert out.dtype == torch.float16 and w.dtype == torch.float16
    assert (out.double() - ref).abs().max() < 2e-2
    assert not torch.isnan(out).any()


def test_dropout_rescales_and_is_off_at_zero():
    q, k, v = _qkv(1, 1, 64, 8, dtype=torch.float32)
    torch.manual_seed(0)
    dropped = attention(q, k, v, dropout_p=0.5, return_weights=True)[0]
    plain = attention(q, k, v, return_weights=True)[0]
    assert not torch.allclose(dropped, plain)
    # Averaged over many draws, inverted dropout leaves the expectation unchanged.
    mean = torch.stack([attention(q, k, v, dropout_p=0.5, return_weights=True)[0] for _ in range(400)]).mean(0)
    assert (mean - plain).abs().mean() < 0.05


@settings(max_examples=25, deadline=None)
@given(
    B=st.integers(1, 3),
    H_kv=st.integers(1, 3),
    G=st.integers(1, 3),
    T_q=st.integers(1, 6),
    extra=st.integers(0, 4),
    D=st.sampled_from([2, 4, 8]),
    causal=st.booleans(),
)
def test_shapes_and_paths_agree(B, H_kv, G, T_q, extra, D, causal):
    q, k, v = _qkv(B, H_kv * G, T_q, D, T_k=T_q + extra, H_kv=H_kv)
    fast = attention(q, k, v, is_causal=causal)
    explicit, w = attention(q, k, v, is_causal=causal, return_weights=True)
    assert fast.shape == (B, H_kv * G, T_q, D) and w.shape == (B, H_kv * G, T_q, T_q + extra)
    assert (fast - explicit).abs().max() <= 1e-12


def test_causality_future_keys_do_not_matter():
    q, k, v = _qkv(1, 2, 6, 4)
    out = attention(q, k, v, is_causal=True)
    k2, v2 = k.clone(), v.clone()
    k2[..., 4:, :] += 10
    v2[..., 4:, :] -= 10
    out2 = attention(q, k2, v2, is_causal=True)
    assert torch.equal(out[..., :4, :], out2[..., :4, :])


@pytest.mark.parametrize("explicit", [False, True])
def test_gradcheck(explicit):
    q, k, v = (t.requires_grad_(True) for t in _qkv(1, 2, 3, 4, T_k=4))
    mask = padding_mask([3], 4)[:, None]

    def f(q, k, v):
        r = attention(q, k, v, mask=mask, is_causal=True, return_weights=explicit)
        return r[0] if explicit else r

    assert torch.autograd.gradcheck(f, (q, k, v))


def test_bad_input_names_the_values():
    q, k, v = _qkv(1, 2, 3, 4)
    with pytest.raises(TypeError, match="q must be a torch.Tensor, got list"):
        attention([1.0], k, v)
    with pytest.raises(ValueError, match=r"same number of dimensions.*q.shape=\(2, 3, 4\)"):
        attention(q[0], k, v)
    with pytest.raises(ValueError, match=r"same last dimension.*k.shape=\(1, 2, 3, 5\)"):
        attention(q, torch.randn(1, 2, 3, 5, dtype=q.dtype), v)
    with pytest.raises(ValueError, match="k and v must agree"):
        attention(q, k, v[..., :2, :])
    with pytest.raises(ValueError, match="multiple of the number of key/value heads, got 2 query heads"):
        attention(q, torch.randn(1, 3, 3, 4, dtype=q.dtype), torch.randn(1, 3, 3, 4, dtype=q.dtype))
    with pytest.raises(TypeError, match="share a dtype.*q=torch.float64, k=torch.float32"):
        attention(q, k.float(), v)
    with pytest.raises(TypeError, match="mask must be boolean .* got dtype=torch.int64"):
        attention(q, k, v, mask=torch.ones(3, 3, dtype=torch.long))
    with pytest.raises(
        ValueError, match=r"mask of shape \(4, 3\) does not broadcast to the scores' shape \(1, 2, 3, 3\)"
    ):
        attention(q, k, v, mask=torch.ones(4, 3, dtype=torch.bool))
    with pytest.raises(TypeError, match="mask must be a torch.Tensor, got list"):
        attention(q, k, v, mask=[[True]])
    with pytest.raises(ValueError, match="scale must be a finite number > 0, got scale=-1"):
        attention(q, k, v, scale=-1)
    with pytest.raises(TypeError, match=r"scale must be a number, got str \('2'\)"):
        attention(q, k, v, scale="2")
    with pytest.raises(TypeError, match="dropout_p must be a number, got NoneType"):
        attention(q, k, v, dropout_p=None)
    with pytest.raises(ValueError, match="dropout_p must be a number in \\[0, 1\\), got dropout_p=1.5"):
        attention(q, k, v, dropout_p=1.5)
    with pytest.raises(TypeError, match="floating-point tensor, got dtype=torch.int64"):
        attention(q.long(), k.long(), v.long())
    with pytest.raises(ValueError, match=r"must have shape \(\.\.\., T, D\), got \(3,\)"):
        attention(torch.randn(3), torch.randn(3), torch.randn(3))


def test_default_scale_is_inverse_sqrt_d():
    q, k, v = _qkv(1, 1, 2, 16)
    _, w = attention(q, k, v, return_weights=True)
    expected = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(16), -1)
    assert torch.allclose(w, expected, atol=1e-14)


def test_the_common_call_reaches_sdpa_as_a_direct_call_would(monkeypatch):
    """No mask, no options: attention() passes SDPA what a direct caller does (its default scale
    included), so that a GPU runs the same kernel for both; the explicit path still gets 1/√D."""
    calls = []
    real = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    q, k, v = _qkv(2, 4, 5, 24)
    out = attention(q, k, v, is_causal=True)
    attention(q, k, v, scale=0.3)
    assert [c["scale"] for c in calls] == [None, 0.3] and calls[0]["is_causal"] is True
    assert torch.equal(out, real(q, k, v, is_causal=True))
    expected, _ = attention(q, k, v, is_causal=True, return_weights=True)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)


# --------------------------------------------------------------------------- softcap= (Gemma 2)
def _softcap_reference(q, k, v, cap, causal=True):
    """Gemma 2's eager attention, written out: cap · tanh(QKᵀ/√D / cap), then the causal mask."""
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    s = cap * torch.tanh(s / cap)
    if causal:
        s = s.masked_fill(~causal_mask(q.shape[-2], k.shape[-2]), float("-inf"))
    w = torch.softmax(s, dim=-1)
    return w @ v, w


@pytest.mark.parametrize("T_q", [6, 2])
def test_softcap_matches_reference(T_q):
    q, k, v = qkv(2, 3, T_q, 4, T_k=6, dtype=torch.float64)
    q = q * 4  # scores well beyond the cap
    want, want_w = _softcap_reference(q, k, v, 2.0)
    got, got_w = attention(q, k, v, is_causal=True, softcap=2.0, return_weights=True)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    torch.testing.assert_close(got_w, want_w, rtol=0, atol=1e-12)
    # Without return_weights the cap takes the explicit path too (SDPA cannot cap).
    torch.testing.assert_close(attention(q, k, v, is_causal=True, softcap=2.0), want, rtol=0, atol=1e-12)
    assert (attention(q, k, v, is_causal=True) - want).abs().max() > 1e-2  # the cap bites here


def test_softcap_bounds_the_weight_ratio_and_vanishes_when_large():
    q, k, v = qkv(1, 2, 5, 4, dtype=torch.float64)
    _, w = attention(q * 10, k, v, softcap=1.5, return_weights=True)
    # Scores lie in (-1.5, 1.5): no two weights of a row differ by more than e^3.
    assert (w.amax(-1) / w.amin(-1)).max() < math.exp(3.0)
    torch.testing.assert_close(attention(q, k, v, softcap=1e8), attention(q, k, v), rtol=0, atol=1e-12)


def test_softcap_is_causal_and_gradcheck():
    q, k, v = qkv(1, 2, 5, 4, dtype=torch.float64)
    out = attention(q, k, v, is_causal=True, softcap=1.0)
    q2, k2, v2 = q.clone(), k.clone(), v.clone()
    q2[..., 3:, :] += 1.0
    k2[..., 3:, :] += 1.0
    v2[..., 3:, :] += 1.0
    torch.testing.assert_close(attention(q2, k2, v2, is_causal=True, softcap=1.0)[..., :3, :], out[..., :3, :])
    fn = functools.partial(attention, is_causal=True, softcap=0.7)
    assert torch.autograd.gradcheck(fn, tuple(t.requires_grad_() for t in (q, k, v)))


def test_softcap_bad_input():
    q, k, v = qkv(1, 2, 3, 4)
    with pytest.raises(ValueError, match="softcap must be a finite number > 0, got softcap=0"):
        attention(q, k, v, softcap=0)
    with pytest.raises(ValueError, match="softcap must be a finite number > 0, got softcap=-5.0"):
        attention(q, k, v, softcap=-5.0)
    with pytest.raises(TypeError, match=r"softcap must be a number, got str \('50'\)"):
        attention(q, k, v, softcap="50")


# --------------------------------------------------------------------------- window and sinks (chapter 15)
@pytest.mark.parametrize("T_q,T_k", [(6, 6), (3, 8), (1, 8)])
@pytest.mark.parametrize("explicit", [False, True])
def test_window_equals_sdpa_with_the_band_mask(T_q, T_k, explicit):
    q, k, v = _qkv(2, 4, T_q, 8, T_k=T_k, H_kv=2)
    band = causal_mask(T_q, T_k, window=3)
    ref = F.scaled_dot_product_attention(
        q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), attn_mask=band
    )  # fmt: skip
    out = attention(q, k, v, is_causal=True, window=3, return_weights=explicit)
    torch.testing.assert_close(out[0] if explicit else out, ref, rtol=0, atol=1e-12)


def test_window_composes_with_padding_on_both_paths():
    q, k, v = _qkv(2, 2, 6, 4)
    pad = padding_mask([4, 6], 6)[:, None]  # (B, 1, 1, T)
    fast = attention(q, k, v, mask=pad, is_causal=True, window=2)
    slow, w = attention(q, k, v, mask=pad, is_causal=True, window=2, return_weights=True)
    torch.testing.assert_close(fast, slow, rtol=0, atol=1e-12)
    assert (w[0, :, 5] == 0).all()  # query 5 sees keys 4, 5: both padding in example 0
    assert (w[..., 4:, :3] == 0).all()  # nothing older than the window


def sink_reference(q, k, v, sinks, allowed):
    """gpt-oss's eager formula: the sink logit joins the softmax, its column is dropped."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~allowed, float("-inf"))
    sink = sinks[:, None, None].expand(*scores.shape[:-1], 1)
    p = torch.softmax(torch.cat([scores, sink], -1), -1)[..., :-1]
    return p @ v, p


@pytest.mark.parametrize("groups", [1, 2])
def test_sinks_equal_the_reference_formula(groups):
    q, k, v = _qkv(2, 4, 5, 8, T_k=7, H_kv=4 // groups)
    sinks = torch.linspace(-1.0, 2.0, 4, dtype=torch.float64)
    kk, vv = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    ref_out, ref_w = sink_reference(q, kk, vv, sinks, causal_mask(5, 7, window=4))
    out, w = attention(q, k, v, is_causal=True, window=4, sinks=sinks, return_weights=True)
    torch.testing.assert_close(out, ref_out, rtol=0, atol=1e-12)
    torch.testing.assert_close(w, ref_w, rtol=0, atol=1e-12)
    torch.testing.assert_close(attention(q, k, v, is_causal=True, window=4, sinks=sinks), ref_out, rtol=0, atol=1e-12)
    assert (w.sum(-1) < 1).all()


def test_a_very_negative_sink_is_no_sink_and_a_fully_masked_row_gives_its_mass_to_the_sink():
    q, k, v = _qkv(1, 2, 4, 8)
    out = attention(q, k, v, is_causal=True, sinks=torch.full((2,), -1e4, dtype=torch.float64))
    torch.testing.assert_close(out, attention(q, k, v, is_causal=True), rtol=0, atol=1e-12)
    none = torch.zeros(4, 4, dtype=torch.bool)
    out, w = attention(q, k, v, mask=none, sinks=torch.zeros(2, dtype=torch.float64), return_weights=True)
    assert torch.isfinite(out).all() and (w == 0).all() and (out == 0).all()


def test_window_and_sinks_are_causal_and_gradcheck():
    q, k, v = _qkv(1, 2, 5, 4)
    sinks = torch.tensor([0.3, -0.5], dtype=torch.float64)
    for t in range(4):  # changing keys/values after t leaves outputs up to t unchanged
        k2, v2 = k.clone(), v.clone()
        k2[..., t + 1 :, :] += 1.0
        v2[..., t + 1 :, :] += 1.0
        a = attention(q, k, v, is_causal=True, window=2, sinks=sinks)[..., : t + 1, :]
        b = attention(q, k2, v2, is_causal=True, window=2, sinks=sinks)[..., : t + 1, :]
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    inputs = [t.clone().requires_grad_(True) for t in (q, k, v, sinks)]
    assert torch.autograd.gradcheck(
        lambda q, k, v, s: attention(q, k, v, is_causal=True, window=2, sinks=s), inputs
    )  # fmt: skip
    assert torch.autograd.gradcheck(lambda q, k, v: attention(q, k, v, is_causal=True, window=2), inputs[:3])


def test_window_and_sinks_bad_input():
    q, k, v = _qkv(1, 2, 3, 4)
    with pytest.raises(ValueError, match="window must be >= 1.*window=0"):
        attention(q, k, v, is_causal=True, window=0)
    with pytest.raises(ValueError, match="window=2 is a causal sliding window: pass is_causal=True"):
        attention(q, k, v, window=2)
    with pytest.raises(ValueError, match=r"sinks needs one logit per query head: got sinks.shape=\(3,\) for 2 heads"):
        attention(q, k, v, sinks=torch.zeros(3, dtype=torch.float64))
    with pytest.raises(TypeError, match="sinks"):
        attention(q, k, v, sinks=torch.zeros(2, dtype=torch.long))
