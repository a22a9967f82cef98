"""Tests for attn_core.layers.gating (the output gate) and the gate of MultiHeadAttention."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attn_core import DecoderConfig, MultiHeadAttention, TransformerBlock, parameter_count
from attn_core.layers.gating import GATE_KINDS, gate_width, output_gate
from conftest import F64, decoder, leaks, randn


def test_gate_width():
    assert gate_width("elementwise", 16) == 16
    assert gate_width("headwise", 16) == 1
    with pytest.raises(ValueError, match="gate must be one of .*got gate='sigmoid'"):
        gate_width("sigmoid", 16)
    with pytest.raises(ValueError, match="head_dim=0"):
        gate_width("headwise", 0)


@pytest.mark.parametrize("width", [4, 1])
def test_output_gate_is_out_times_sigmoid(width):
    out, g = randn(2, 3, 5, 4, seed=1), randn(2, 3, 5, width, seed=2)
    want = out * (1.0 / (1.0 + torch.exp(-g)))  # σ written out; a width-1 gate scales the whole head
    torch.testing.assert_close(output_gate(out, g), want, rtol=0, atol=1e-15)


def test_output_gate_bounds_and_limits():
    out = randn(1, 2, 3, 4, seed=1)
    big = torch.full((1, 2, 3, 4), 50.0, dtype=F64)
    torch.testing.assert_close(output_gate(out, big), out, rtol=0, atol=1e-15)  # σ(50) = 1: open
    assert output_gate(out, -big).abs().max() < 1e-20  # σ(-50) ≈ 0: closed
    assert (output_gate(out, randn(1, 2, 3, 4, seed=3)).abs() < out.abs()).all()  # σ < 1 shrinks


def test_output_gate_gradcheck():
    out = randn(1, 2, 3, 4, seed=1).requires_grad_()
    g = randn(1, 2, 3, 4, seed=2).requires_grad_()
    gh = randn(1, 2, 3, 1, seed=3).requires_grad_()
    assert torch.autograd.gradcheck(output_gate, (out, g))
    assert torch.autograd.gradcheck(output_gate, (out, gh))


def test_output_gate_bad_input():
    out = randn(2, 3, 5, 4)
    with pytest.raises(ValueError, match=r"gate width 3, head width D=4"):
        output_gate(out, randn(2, 3, 5, 3))
    with pytest.raises(ValueError, match=r"gate_logits.shape=\(2, 3, 6, 4\)"):
        output_gate(out, randn(2, 3, 6, 4))
    with pytest.raises(ValueError, match="gate_logits must have shape"):
        output_gate(out, randn(3, 5, 4))
    with pytest.raises(TypeError, match="gate_logits must be a floating-point tensor"):
        output_gate(out, torch.ones(2, 3, 5, 4, dtype=torch.long))
    with pytest.raises(TypeError, match="out must be a torch.Tensor"):
        output_gate([1.0], randn(2, 3, 5, 4))


# --------------------------------------------------------------------------- MultiHeadAttention(gate=...)
def _gated(kind: str, seed: int = 0, **kwargs) -> MultiHeadAttention:
    torch.manual_seed(seed)
    return MultiHeadAttention(16, 4, causal=True, gate=kind, **kwargs).to(F64)


@pytest.mark.parametrize("kind", GATE_KINDS)
def test_gated_attention_matches_pytorch(kind):
    """Reference: PyTorch's SDPA, each head times σ(x W_g), then the output projection."""
    m = _gated(kind, bias=True)
    x = randn(2, 6, 16, seed=4)
    B, T, H, D = 2, 6, 4, 4
    q = m.q_proj(x).view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
    k = m.k_proj(x).view(B, T, H, D).transpose(1, 2)
    v = m.v_proj(x).view(B, T, H, D).transpose(1, 2)
    heads = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, D)
    g = m.gate_proj(x).view(B, T, H, -1).transpose(1, 2)  # (B, H, T, D or 1)
    want = m.out_proj((heads * torch.sigmoid(g)).transpose(1, 2).reshape(B, T, H * D))
    torch.testing.assert_close(m(x), want, rtol=0, atol=1e-12)


def test_gate_widths_and_parameters():
    plain = sum(p.numel() for p in MultiHeadAttention(16, 4).parameters())
    assert sum(p.numel() for p in MultiHeadAttention(16, 4, gate="elementwise").parameters()) == plain + 16 * 16
    assert sum(p.numel() for p in MultiHeadAttention(16, 4, gate="headwise").parameters()) == plain + 16 * 4
    assert MultiHeadAttention(16, 4, gate="elementwise", head_dim=8).gate_proj.out_features == 4 * 8
    assert MultiHeadAttention(16, 4).gate_proj is None


@pytest.mark.parametrize("kind", GATE_KINDS)
def test_gated_attention_is_causal(kind):
    m = _gated(kind)
    assert not leaks(m, randn(1, 7, 16, seed=5))
    assert leaks(MultiHeadAttention(16, 4, gate=kind).to(F64), randn(1, 7, 16, seed=5))  # the probe can fail


def test_gated_attention_gradcheck():
    m = _gated("elementwise", n_kv_heads=2)
    x = randn(1, 4, 16, seed=6).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: m(t), (x,))


def test_gated_attention_cached_decoding_equals_full():
    m = _gated("headwise", qk_norm=True)
    x = randn(2, 6, 16, seed=7)
    with torch.no_grad():
        full = m(x)
        cache = m.make_cache(2, 6)
        steps = torch.cat([m(x[:, t : t + 1], kv_cache=cache) for t in range(6)], dim=1)
    torch.testing.assert_close(steps, full, rtol=0, atol=1e-12)


def test_gated_attention_weights_are_ungated():
    """The gate acts on the output, not on the attention weights: they stay the same."""
    m = _gated("elementwise")
    plain = MultiHeadAttention(16, 4, causal=True).to(F64)
    plain.load_state_dict({k: v for k, v in m.state_dict().items() if not k.startswith("gate_proj")})
    x = randn(1, 5, 16, seed=8)
    torch.testing.assert_close(m(x, return_weights=True)[1], plain(x, return_weights=True)[1], rtol=0, atol=0)
    assert (m(x) - plain(x)).abs().max() > 1e-3


def test_gate_bad_input():
    with pytest.raises(ValueError, match="gate must be one of .*got gate='sigmoid'"):
        MultiHeadAttention(16, 4, gate="sigmoid")
    with pytest.raises(ValueError, match="gate must be one of .*got gate=True"):
        MultiHeadAttention(16, 4, gate=True)
    with pytest.raises(ValueError, match="gate configure the built-in attention"):
        TransformerBlock(16, 4, attention=MultiHeadAttention(16, 4), gate="headwise")


# ------------------------------------------------- DecoderConfig(attention_gate=, attention_softcap=)
@pytest.mark.parametrize(
    "options",
    [
        dict(attention_gate="elementwise"),
        dict(attention_gate="headwise", bias=True),
        dict(attention_gate="elementwise", attention_softcap=20.0, qk_norm=True, head_dim=16),
    ],
)
def test_decoder_builds_gated_and_capped_attention(options):
    config = DecoderConfig.llama_like(d_model=32, n_heads=4, vocab_size=24, max_len=16, **options)
    model = decoder(config)
    attn = model.blocks[0].attn
    assert attn.gate == options.get("attention_gate") and attn.softcap == options.get("attention_softcap")
    assert model.num_parameters() == parameter_count(config)
    assert ("attention_gate" in repr(config)) == ("attention_gate" in options)  # the repr names what is set
    idx = torch.randint(0, 24, (2, 9), generator=torch.Generator().manual_seed(0))
    model = model.double()
    with torch.no_grad():
        full = model(idx)
        caches = model.make_caches(2)
        steps = torch.cat([model(idx[:, t : t + 1], caches=caches) for t in range(9)], dim=1)
    torch.testing.assert_close(steps, full, rtol=0, atol=1e-10)


def test_decoder_config_gate_and_softcap_bad_input():
    with pytest.raises(ValueError, match="attention_gate must be one of .*got attention_gate='sigmoid'"):
        DecoderConfig.llama_like(attention_gate="sigmoid")
    with pytest.raises(ValueError, match="attention_softcap must be a finite number > 0, got attention_softcap=0"):
        DecoderConfig.llama_like(attention_softcap=0)
    with pytest.raises(ValueError, match="attention_gate='headwise': options of the standard blocks' multi-head"):
        DecoderConfig.llama_like(attention="mla", d_latent=16, n_kv_heads=None, attention_gate="headwise")
    with pytest.raises(ValueError, match="attention_softcap=30.0: options of the standard blocks'"):
        DecoderConfig.gpt2_like(block="sas", attention_softcap=30.0)
