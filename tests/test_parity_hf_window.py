"""Sliding windows and attention sinks compute what Hugging Face's gpt-oss and Mistral compute (chapter 15).

Tiny Hugging Face modules are built from configs (nothing is downloaded), their random
weights are copied into attn_core, and both run in float64:

* ``GptOssAttention`` (a sliding layer and a full layer, each with its learned sink
  logits; gpt-oss's mixture-of-experts MLP is not needed to test the attention), on
  the full sequence and decoded one token at a time from a :class:`~attn_core.RollingKVCache`;
* ``MistralForCausalLM`` with a sliding window shorter than the sequence: logits, and
  greedy cached decoding (rolling caches) giving the same tokens as ``generate``.

The masks are Hugging Face's own mask functions (``causal_mask_function`` with
``sliding_window_overlay``), so the window's convention (``q - w < k <= q``) is checked
against theirs, not against a copy of ours. Hugging Face rounds RMSNorm inputs and RoPE
tables to float32, and Mistral's eager attention its softmax; :func:`exact_hf` lifts the
first two for the duration of a test (the same formulas in float64) and Mistral runs
with SDPA, so that what is left is float64 rounding.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5.0")

from transformers import GptOssConfig, MistralConfig, MistralForCausalLM  # noqa: E402
from transformers.masking_utils import causal_mask_function, sliding_window_overlay  # noqa: E402
from transformers.models.gpt_oss import modeling_gpt_oss as hf_gpt_oss  # noqa: E402
from transformers.models.mistral import modeling_mistral as hf_mistral  # noqa: E402

from attn_core import DecoderConfig, DecoderLM, MultiHeadAttention, RollingKVCache, RotaryEmbedding, generate  # noqa: E402
from attn_core.config import LayerPattern  # noqa: E402
from attn_core.hf.convert import copy_attention  # noqa: E402

F64 = torch.float64
EXACT = 1e-10  # float64 rounding in another summation order
THETA = 10000.0


def _rmsnorm_float64(self, hidden_states):
    """Hugging Face's RMSNorm without its float32 cast (the same formula)."""
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))


def _rope_float64(self, x, position_ids):
    """Mistral's plain RoPE tables with the angles in float64 (as attn_core computes them)."""
    dim = 2 * self.inv_freq.numel()
    inv_freq = THETA ** (-torch.arange(0, dim, 2, dtype=F64) / dim)
    freqs = position_ids[..., None].to(F64) * inv_freq  # (B, T, D/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (B, T, D): the "half" layout's table
    return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


@pytest.fixture
def exact_hf(monkeypatch):
    monkeypatch.setattr(hf_mistral.MistralRMSNorm, "forward", _rmsnorm_float64)
    monkeypatch.setattr(hf_mistral.MistralRotaryEmbedding, "forward", _rope_float64)


def hf_bias(T: int, window: int | None) -> torch.Tensor:
    """The additive mask from Hugging Face's own mask functions: ``(1, 1, T, T)``, 0 or -inf."""
    q, k = torch.arange(T)[:, None], torch.arange(T)[None, :]
    allowed = causal_mask_function(0, 0, q, k)
    if window is not None:
        allowed = allowed & sliding_window_overlay(window)(0, 0, q, k)
    return torch.zeros(T, T, dtype=F64).masked_fill(~allowed, float("-inf"))[None, None]


def seeded(module: torch.nn.Module, seed: int = 0, std: float = 0.3) -> torch.nn.Module:
    """Random float64 weights everywhere (norm gains around 1, sinks too), so that a dropped weight shows."""
    torch.manual_seed(seed)
    module = module.to(F64)
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_(torch.randn_like(p) * std + (1.0 if "norm" in name or "sinks" in name else 0.0))
    return module.eval()


# --------------------------------------------------------------------------- gpt-oss
WINDOW = 4


def gpt_oss_config() -> GptOssConfig:
    return GptOssConfig(
        hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_hidden_layers=2,
        sliding_window=WINDOW, layer_types=["sliding_attention", "full_attention"], attention_bias=True,
        rope_parameters={"rope_type": "default", "rope_theta": THETA}, attn_implementation="eager",
        intermediate_size=16, num_local_experts=2, num_experts_per_tok=1, vocab_size=31,
    )  # fmt: skip


def gpt_oss_pair(layer_idx: int):
    config = gpt_oss_config()
    hf = seeded(hf_gpt_oss.GptOssAttention(config, layer_idx=layer_idx), seed=layer_idx)
    window = config.sliding_window if config.layer_types[layer_idx] == "sliding_attention" else None
    ours = MultiHeadAttention(
        32, 4, n_kv_heads=2, head_dim=8, bias=True, causal=True, rope=RotaryEmbedding(8, base=THETA),
        window=window, sinks=True,
    ).to(F64)  # fmt: skip
    copy_attention(ours, hf)
    return hf, ours, window


def gpt_oss_rope(T: int):
    """gpt-oss's cos/sin tables (half width: its rotation pairs the two halves), in float64."""
    inv_freq = THETA ** (-torch.arange(0, 8, 2, dtype=F64) / 8)
    angles = torch.arange(T, dtype=F64)[None, :, None] * inv_freq  # (1, T, D/2)
    return angles.cos(), angles.sin()


@pytest.mark.parametrize("layer_idx", [0, 1], ids=["sliding", "full"])
def test_gpt_oss_attention_window_and_sinks(layer_idx):
    hf, ours, window = gpt_oss_pair(layer_idx)
    T = 11
    x = torch.randn(2, T, 32, generator=torch.Generator().manual_seed(3), dtype=F64)
    expected, hf_weights = hf(x, position_embeddings=gpt_oss_rope(T), attention_mask=hf_bias(T, window))
    out, weights = ours(x, return_weights=True)
    assert (out - expected).abs().max() < EXACT
    assert (weights - hf_weights).abs().max() < EXACT
    assert (weights.sum(-1) < 1).all()  # the sinks took their share
    if window is not None:  # nothing outside the window
        assert (weights[..., WINDOW:, 0] == 0).all()


@pytest.mark.parametrize("layer_idx", [0, 1], ids=["sliding", "full"])
def test_gpt_oss_attention_decoded_from_a_rolling_cache(layer_idx):
    hf, ours, window = gpt_oss_pair(layer_idx)
    T = 13
    x = torch.randn(1, T, 32, generator=torch.Generator().manual_seed(4), dtype=F64)
    expected, _ = hf(x, position_embeddings=gpt_oss_rope(T), attention_mask=hf_bias(T, window))
    cache = ours.make_cache(1, T)
    assert isinstance(cache, RollingKVCache) == (window is not None)
    with torch.no_grad():
        steps = [ours(x[:, :3], kv_cache=cache)] + [ours(x[:, t : t + 1], kv_cache=cache) for t in range(3, T)]
    assert (torch.cat(steps, 1) - expected).abs().max() < EXACT


# --------------------------------------------------------------------------- Mistral
def mistral_pair():
    config = MistralConfig(
        vocab_size=41, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, sliding_window=WINDOW, max_position_embeddings=64, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": THETA}, attn_implementation="sdpa",
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )  # fmt: skip
    hf = seeded(MistralForCausalLM(config), seed=1)
    ours = (
        DecoderLM(
            DecoderConfig.llama_like(
                vocab_size=41,
                n_layers=2,
                d_model=32,
                n_heads=4,
                n_kv_heads=2,
                d_ff=48,
                max_len=64,
                norm_eps=1e-5,
                pattern=LayerPattern(sliding_window=WINDOW),
            )
        )
        .to(F64)
        .eval()
    )
    with torch.no_grad():
        ours.tok_emb.weight.copy_(hf.model.embed_tokens.weight)
        ours.lm_head.weight.copy_(hf.lm_head.weight)
        ours.final_norm.weight.copy_(hf.model.norm.weight)
        for block, layer in zip(ours.blocks, hf.model.layers):
            copy_attention(block.attn, layer.self_attn)
            block.attn_norm.weight.copy_(layer.input_layernorm.weight)
            block.mlp_norm.weight.copy_(layer.post_attention_layernorm.weight)
            for name in ("gate_proj", "up_proj", "down_proj"):
                getattr(block.mlp, name).weight.copy_(getattr(layer.mlp, name).weight)
    return hf, ours


def test_mistral_sliding_window_logits(exact_hf):
    hf, ours = mistral_pair()
    idx = torch.randint(0, 41, (2, 12), generator=torch.Generator().manual_seed(0))
    expected = hf(idx).logits
    assert (ours(idx) - expected).abs().max() < EXACT
    # The window matters here: the same model without it computes something else.
    full = DecoderLM(
        dataclasses.replace(ours.config, pattern=dataclasses.replace(ours.config.pattern, sliding_window=None))
    ).to(F64)
    full.load_state_dict(ours.state_dict())
    assert (full(idx) - expected).abs().max() > 1e-3


def test_mistral_greedy_generation_with_rolling_caches(exact_hf):
    """The same tokens as ``generate(do_sample=False)``, decoded from constant-memory rolling caches."""
    hf, ours = mistral_pair()
    idx = torch.randint(0, 41, (2, 5), generator=torch.Generator().manual_seed(1))
    expected = hf.generate(idx, max_new_tokens=12, do_sample=False, attention_mask=torch.ones_like(idx))
    assert all(isinstance(c, RollingKVCache) for c in ours.make_caches(2, 17))
    tokens, logits = generate(ours, idx, 12, temperature=0.0, return_logits=True)
    assert torch.equal(tokens, expected)
    assert (logits - hf(tokens[:, :-1]).logits).abs().max() < EXACT
