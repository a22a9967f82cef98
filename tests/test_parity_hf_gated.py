"""Parity with Hugging Face (float64, copied weights): Qwen3-Next's gated attention, Gemma 2's soft-capping.

Both are :class:`attn_core.MultiHeadAttention` with options: ``gate="elementwise"``,
``qk_norm=True`` and a decoupled ``head_dim`` for Qwen3-Next; ``softcap=`` and a decoupled
``head_dim`` for Gemma 2. Nothing is downloaded: tiny configs, random weights.
Qwen3's own attention (QK-norm, decoupled head width) is in ``tests/test_parity_hf.py``.
"""

from __future__ import annotations

import pytest
import torch

from attn_core import MultiHeadAttention, RotaryEmbedding
from attn_core.hf.convert import copy_attention
from conftest import F64, randn

transformers = pytest.importorskip("transformers")
from transformers.models.gemma2 import modeling_gemma2  # noqa: E402
from transformers.models.gemma3 import modeling_gemma3  # noqa: E402
from transformers.models.qwen3_next import modeling_qwen3_next  # noqa: E402

D_MODEL, H, H_KV, D, T, B = 32, 4, 2, 16, 7, 2  # H·D = 64 ≠ d_model: a decoupled head width
BASE = 10000.0


@pytest.fixture(autouse=True)
def _softmax_keeps_float64(monkeypatch):
    """Hugging Face's eager attention takes ``softmax(..., dtype=torch.float32)``: an upcast
    for half precision, a downcast for float64. Keep float64 inputs in float64 (its intent)."""
    softmax = torch.nn.functional.softmax

    def keep(x, dim=None, *args, dtype=None, **kwargs):
        if x.dtype == F64 and dtype == torch.float32:
            dtype = F64
        return softmax(x, dim, *args, dtype=dtype, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "softmax", keep)


def _gemma3_pair(seed: int = 0):
    """Gemma 3's attention (QK-norm with gains ``1 + weight``, a sliding layer) and ours with copied weights."""
    config = modeling_gemma3.Gemma3TextConfig(
        hidden_size=D_MODEL,
        num_attention_heads=H,
        num_key_value_heads=H_KV,
        head_dim=D,
        num_hidden_layers=1,
        layer_types=["sliding_attention"],
        sliding_window=3,
        query_pre_attn_scalar=D,
        attn_implementation="eager",
    )
    hf = modeling_gemma3.Gemma3Attention(config, layer_idx=0).to(F64).eval()
    _randomise(hf, seed)
    for norm in (hf.q_norm, hf.k_norm):  # its (1 + weight) formula, kept in float64 (see _qwen3_next_pair)
        norm.forward = lambda x, norm=norm: norm._norm(x) * (1.0 + norm.weight)
    ours = MultiHeadAttention(
        D_MODEL, H, n_kv_heads=H_KV, head_dim=D, causal=True, qk_norm=True, norm_eps=config.rms_norm_eps,
        window=3, rope=RotaryEmbedding(D, base=BASE),
    ).to(F64)  # fmt: skip
    copy_attention(ours, hf)
    return hf, ours


def _rope_cos_sin(T: int, offset: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Hugging Face's ``(cos, sin)`` in float64 (its rotary modules compute them in float32).

    Shapes:
        cos, sin: ``(1, T, D)``
    """
    inv_freq = 1.0 / BASE ** (torch.arange(0, D, 2, dtype=F64) / D)  # (D/2,)
    freqs = torch.arange(offset, offset + T, dtype=F64)[:, None] * inv_freq  # (T, D/2)
    emb = torch.cat([freqs, freqs], dim=-1)[None]  # (1, T, D): the "half" layout
    return emb.cos(), emb.sin()


def _causal_bias(T: int) -> torch.Tensor:
    """Hugging Face's additive causal mask. Shapes: ``(1, 1, T, T)``"""
    return torch.full((T, T), float("-inf"), dtype=F64).triu(1)[None, None]


def _randomise(module: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.3)


def _qwen3_next_pair(seed: int = 0):
    config = modeling_qwen3_next.Qwen3NextConfig(
        hidden_size=D_MODEL,
        num_attention_heads=H,
        num_key_value_heads=H_KV,
        head_dim=D,
        num_hidden_layers=4,
        rope_parameters={"rope_type": "default", "rope_theta": BASE, "partial_rotary_factor": 1.0},
        attn_implementation="eager",
    )
    hf = modeling_qwen3_next.Qwen3NextAttention(config, layer_idx=3).to(F64).eval()
    _randomise(hf, seed)
    for norm in (hf.q_norm, hf.k_norm):
        # Its RMSNorm computes in float32 (x.float(): an upcast for half precision, a
        # downcast here); keep its own formula, (1 + weight) · x / rms(x), in float64.
        norm.forward = lambda x, norm=norm: norm._norm(x) * (1.0 + norm.weight)
    ours = MultiHeadAttention(
        D_MODEL,
        H,
        n_kv_heads=H_KV,
        head_dim=D,
        causal=True,
        qk_norm=True,
        norm_eps=config.rms_norm_eps,
        gate="elementwise",
        rope=RotaryEmbedding(D, base=BASE),
    ).to(F64)
    copy_attention(ours, hf)  # splits the fused query/gate rows, copies the norm gains as 1 + weight
    return hf, ours


def _gemma2_pair(softcap: float, seed: int = 0):
    config = modeling_gemma2.Gemma2Config(
        hidden_size=D_MODEL,
        num_attention_heads=H,
        num_key_value_heads=H_KV,
        head_dim=D,
        num_hidden_layers=1,
        layer_types=["full_attention"],
        query_pre_attn_scalar=D,  # scale 1/√D, as ours
        attn_logit_softcapping=softcap,
        attn_implementation="eager",
    )
    hf = modeling_gemma2.Gemma2Attention(config, layer_idx=0).to(F64).eval()
    _randomise(hf, seed)
    ours = MultiHeadAttention(
        D_MODEL, H, n_kv_heads=H_KV, head_dim=D, causal=True, softcap=softcap, rope=RotaryEmbedding(D, base=BASE)
    ).to(F64)
    copy_attention(ours, hf)
    return hf, ours


def test_qwen3_next_gated_attention_matches_hugging_face():
    hf, ours = _qwen3_next_pair()
    x = randn(B, T, D_MODEL, seed=3)
    with torch.no_grad():
        want, want_w = hf(x, _rope_cos_sin(T), _causal_bias(T))
        got, got_w = ours(x, return_weights=True)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    torch.testing.assert_close(got_w, want_w, rtol=0, atol=1e-12)


def test_qwen3_next_gate_matters():
    """The parity above is not vacuous: without its gate the output differs from Hugging Face's."""
    hf, ours = _qwen3_next_pair()
    x = randn(B, T, D_MODEL, seed=3)
    with torch.no_grad():
        want, _ = hf(x, _rope_cos_sin(T), _causal_bias(T))
        ours.gate_proj.weight.zero_()  # σ(0) = ½ on every channel
        got = ours(x)
    assert (got - want).abs().max() > 1e-2


def test_qwen3_next_cached_decoding_matches_hugging_face():
    hf, ours = _qwen3_next_pair(seed=1)
    x = randn(1, T, D_MODEL, seed=4)
    with torch.no_grad():
        want, _ = hf(x, _rope_cos_sin(T), _causal_bias(T))
        cache = ours.make_cache(1, T)
        steps = [ours(x[:, t : t + 1], kv_cache=cache) for t in range(T)]
    torch.testing.assert_close(torch.cat(steps, dim=1), want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("softcap", [50.0, 1.5])
def test_gemma2_softcapped_attention_matches_hugging_face(softcap):
    hf, ours = _gemma2_pair(softcap)
    x = randn(B, T, D_MODEL, seed=5) * 3  # large scores, so that a cap of 1.5 bites
    with torch.no_grad():
        want, want_w = hf(x, _rope_cos_sin(T), _causal_bias(T))
        got, got_w = ours(x, return_weights=True)
        got_fast = ours(x)  # the cap forces the explicit path even without weights
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    torch.testing.assert_close(got_w, want_w, rtol=0, atol=1e-12)
    torch.testing.assert_close(got_fast, want, rtol=0, atol=1e-12)


def test_gemma2_cap_matters():
    """With a cap of 1.5 the output differs from the same layer without it."""
    hf, ours = _gemma2_pair(1.5)
    x = randn(B, T, D_MODEL, seed=5) * 3
    with torch.no_grad():
        want, _ = hf(x, _rope_cos_sin(T), _causal_bias(T))
        ours.softcap = None
        got = ours(x)
    assert (got - want).abs().max() > 1e-2


def _windowed_causal_bias(T: int, window: int) -> torch.Tensor:
    """Causal, and each query sees itself and the ``window - 1`` keys before it. Shapes: ``(1, 1, T, T)``"""
    q, k = torch.arange(T)[:, None], torch.arange(T)[None, :]
    allowed = (k <= q) & (q - k < window)
    return torch.zeros(T, T, dtype=F64).masked_fill(~allowed, float("-inf"))[None, None]


def test_gemma3_sliding_attention_with_qk_norm_matches_hugging_face():
    hf, ours = _gemma3_pair()
    x = randn(B, T, D_MODEL, seed=6)
    with torch.no_grad():
        want, want_w = hf(x, _rope_cos_sin(T), _windowed_causal_bias(T, 3))
        got, got_w = ours(x, return_weights=True)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    torch.testing.assert_close(got_w, want_w, rtol=0, atol=1e-12)
    assert (got_w[..., 3:, 0] == 0).all()  # the window bites


def test_gemma3_norm_gains_are_one_plus_weight():
    """Copying the stored weight (not 1 + weight) would be off: the gains start at 0 in Hugging Face."""
    hf, ours = _gemma3_pair()
    torch.testing.assert_close(ours.q_norm.weight, 1.0 + hf.q_norm.weight, rtol=0, atol=0)
    torch.testing.assert_close(ours.k_norm.weight, 1.0 + hf.k_norm.weight, rtol=0, atol=0)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(softcap=None), "soft-caps its logits at 1.5, the layer at softcap=None"),
        (dict(softcap=1.5, sinks=True), "has no learned sinks: build the layer with sinks=False"),
        (dict(softcap=1.5, window=4), "has sliding_window=None, the layer window=4"),
        (dict(softcap=1.5, gate="elementwise"), "has no output gate per query element: build the layer with gate=None"),
    ],
)
def test_copy_attention_refuses_a_layer_that_computes_something_else(kwargs, message):
    hf, _ = _gemma2_pair(1.5)
    ours = MultiHeadAttention(D_MODEL, H, n_kv_heads=H_KV, head_dim=D, causal=True, **kwargs).to(F64)
    with pytest.raises(ValueError, match=message):
        copy_attention(ours, hf)


def test_copy_attention_refuses_another_score_scale():
    config = modeling_gemma2.Gemma2Config(
        hidden_size=D_MODEL, num_attention_heads=H, num_key_value_heads=H_KV, head_dim=D, num_hidden_layers=1,
        layer_types=["full_attention"], query_pre_attn_scalar=2 * D, attn_logit_softcapping=None,
    )  # fmt: skip
    hf = modeling_gemma2.Gemma2Attention(config, layer_idx=0)
    ours = MultiHeadAttention(D_MODEL, H, n_kv_heads=H_KV, head_dim=D, causal=True)
    with pytest.raises(ValueError, match="scales its scores by 0.176777"):
        copy_attention(ours, hf)


def test_copy_attention_refuses_a_missing_gate():
    hf, _ = _qwen3_next_pair()
    ours = MultiHeadAttention(D_MODEL, H, n_kv_heads=H_KV, head_dim=D, causal=True, qk_norm=True).to(F64)
    with pytest.raises(
        ValueError, match="makes an output gate per query element: build the layer with gate='elementwise'"
    ):
        copy_attention(ours, hf)
