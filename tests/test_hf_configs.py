"""Tests for attn_core.hf.configs: Hugging Face configs read into DecoderConfig's parts.

The whole-model parity (logits and generation equal to Hugging Face's) is in test_hf_convert.py and
test_hf_families*.py; here each field lands in its part, and what cannot be computed exactly is
refused by name.
"""

from __future__ import annotations

import pytest
from transformers import LlamaConfig, MistralConfig, MixtralConfig, Qwen3Config

from attn_core.config import LayerPattern, MoE, Positions
from attn_core.hf.configs import config_from_hf
from attn_core.hf.families import NOT_CONVERTED, SUPPORTED_MODEL_TYPES
from attn_core.hf.families.base import refuse

SMALL = dict(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4)


def test_llama_fields_land_in_the_core_and_positions():
    c = config_from_hf(LlamaConfig(**SMALL, num_key_value_heads=2, rope_theta=5e5, rms_norm_eps=1e-5))
    assert (c.vocab_size, c.d_model, c.n_layers, c.n_heads, c.n_kv_heads, c.d_ff) == (61, 32, 2, 4, 2, 48)
    assert (c.norm, c.mlp, c.norm_eps, c.attention) == ("rmsnorm", "swiglu", 1e-5, "mha")
    assert isinstance(c.positions, Positions)
    assert (c.positions.positional, c.positions.rope_base, c.positions.rope_scaling) == ("rope", 5e5, None)
    assert c.moe is None and c.indexer is None and c.pattern == LayerPattern()


def test_qwen3_and_mistral_fields():
    q = config_from_hf(Qwen3Config(**SMALL, num_key_value_heads=2, head_dim=16))
    assert (q.head_dim, q.qk_norm) == (16, True)
    m = config_from_hf(MistralConfig(**SMALL, num_key_value_heads=2, sliding_window=5))
    assert m.pattern.sliding_window == 5


def test_mixtral_fields_land_in_the_moe_part():
    c = config_from_hf(MixtralConfig(**SMALL, num_key_value_heads=2, num_local_experts=6, num_experts_per_tok=2))
    assert isinstance(c.moe, MoE)
    assert (c.moe.n_experts, c.moe.experts_per_token, c.moe.n_shared_experts) == (6, 2, 0)


def test_what_is_refused_names_the_model_and_the_reason():
    with pytest.raises(ValueError, match="gpt2"):
        refuse("gpt2", "learned absolute positions")
    assert "llama" in SUPPORTED_MODEL_TYPES
    for model_type, reason in NOT_CONVERTED.items():
        assert model_type not in SUPPORTED_MODEL_TYPES and reason.strip(), model_type


def test_bad_input():
    with pytest.raises((TypeError, ValueError), match="model_type|config"):
        config_from_hf(object())
