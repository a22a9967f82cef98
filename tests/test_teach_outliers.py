"""Tests for attn_core.teach.outliers: attention logits, first-token mass, largest activation."""

from __future__ import annotations

import pytest
import torch

from attn_core import DecoderConfig, MultiHeadAttention, RotaryEmbedding
from attn_core.teach.outliers import attention_logits, first_token_mass, max_activation, max_attention_logit
from conftest import F64, decoder, randn

LAYERS = {
    "plain": dict(),
    "gqa_rope": dict(n_kv_heads=2, rope=RotaryEmbedding(4)),
    "qk_norm": dict(qk_norm=True, rope=RotaryEmbedding(8), head_dim=8),
    "softcap": dict(softcap=1.5),
    "gated": dict(gate="elementwise", softcap=4.0, qk_norm=True),
}


@pytest.mark.parametrize("name", LAYERS)
def test_attention_logits_softmax_to_the_layers_weights(name):
    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 4, causal=True, **LAYERS[name]).to(F64)
    with torch.no_grad():
        for p in attn.parameters():
            p.add_(torch.randn_like(p) * 0.3)  # move the norm gains off 1
    x = randn(2, 6, 16, seed=1) * 3
    s = attention_logits(attn, x)
    _, w = attn(x, return_weights=True)
    assert s.shape == (2, 4, 6, 6)
    torch.testing.assert_close(torch.softmax(s, -1), w, rtol=0, atol=1e-12)
    assert torch.isinf(s[..., 0, 1:]).all() and torch.isfinite(s[..., -1, :]).all()  # causal: -inf above the diagonal
    if attn.softcap is not None:
        assert s[torch.isfinite(s)].abs().max() <= attn.softcap  # tanh saturates to 1 in floating point


def test_attention_logits_non_causal_and_bad_input():
    attn = MultiHeadAttention(8, 2).to(F64)
    assert torch.isfinite(attention_logits(attn, randn(1, 3, 8))).all()
    with pytest.raises(TypeError, match="attn must be an attn_core.MultiHeadAttention"):
        attention_logits(torch.nn.Linear(8, 8), randn(1, 3, 8))
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, d_model=8\), got \(1, 3, 5\)"):
        attention_logits(attn, randn(1, 3, 5))
    with pytest.raises(ValueError, match="not a layer with d_context=4"):
        attention_logits(MultiHeadAttention(8, 2, d_context=4), randn(1, 3, 8, dtype=torch.float32))


def _model(**kw):
    return decoder(DecoderConfig.llama_like(d_model=16, n_heads=4, vocab_size=12, max_len=16, **kw), seed=2).double()


def test_max_attention_logit_is_the_largest_score():
    model = _model()
    idx = torch.randint(0, 12, (2, 9), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        x = model.tok_emb(idx)
        want = 0.0
        for block in model.blocks:  # pre-norm blocks: the attention reads attn_norm(x)
            s = attention_logits(block.attn, block.attn_norm(x))
            want = max(want, s[torch.isfinite(s)].abs().max().item())
            x = block(x)
    assert max_attention_logit(model, idx) == pytest.approx(want, rel=1e-12)
    assert not any(m._forward_hooks for m in model.modules())  # hooks removed
    with pytest.raises(ValueError, match="no MultiHeadAttention layer"):
        max_attention_logit(_model(attention="mla", d_latent=8, n_kv_heads=None), idx)
    with pytest.raises(TypeError, match="idx must be an integer tensor"):
        max_attention_logit(model, idx.double())


def test_max_activation_is_the_largest_residual_entry():
    model = _model()
    idx = torch.randint(0, 12, (2, 9), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        x, want = model.tok_emb(idx), 0.0
        for block in model.blocks:
            x = block(x)
            want = max(want, x.abs().max().item())
    assert max_activation(model, idx) == want
    assert not any(m._forward_hooks for m in model.modules())
    with pytest.raises(TypeError, match="model must be an attn_core.DecoderLM"):
        max_activation(torch.nn.Linear(2, 2), idx)


def test_first_token_mass():
    T = 6
    uniform = torch.tril(torch.ones(T, T, dtype=F64))
    uniform = uniform / uniform.sum(-1, keepdim=True)  # (T, T): query t spreads 1/(t+1)
    want = torch.tensor([1 / (t + 1) for t in range(2, T)], dtype=F64).mean()
    torch.testing.assert_close(first_token_mass(uniform, min_query=2), want)
    sink = torch.zeros(3, T, T, dtype=F64)
    sink[..., 0] = 1.0
    torch.testing.assert_close(first_token_mass(sink), torch.ones(3, dtype=F64))
    with pytest.raises(ValueError, match="min_query must be < T=6, got min_query=6"):
        first_token_mass(uniform, min_query=6)
    with pytest.raises(ValueError, match="must be square"):
        first_token_mass(uniform[:3])
    with pytest.raises(TypeError, match="weights must be a floating-point tensor"):
        first_token_mass(torch.ones(3, 3, dtype=torch.long))
