"""attn_core.model.params: the parameter count by formula equals the module's count, for every kind of model."""

from __future__ import annotations

import pytest
import torch

from attn_core import DecoderConfig, DecoderLM, parameter_count
from attn_core.config import Indexer
from attn_core.model.params import parameter_breakdown
from conftest import PRESETS


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_parameter_count_equals_formula(name):
    model = DecoderLM(PRESETS[name])
    assert model.num_parameters() == parameter_count(PRESETS[name])
    assert sum(parameter_breakdown(PRESETS[name]).values()) == parameter_count(PRESETS[name])


@pytest.mark.parametrize(
    "overrides",
    [
        dict(tie_weights=False),
        dict(bias=False),
        dict(positions={"positional": "rope"}),
        dict(mlp="swiglu", d_ff=40),
        dict(n_kv_heads=2, norm="rmsnorm"),
        dict(n_layers=3, block="sas", bias=True),
        dict(n_layers=1, block="sas-p"),
        dict(norm_position="sandwich"),
        dict(norm_position="sandwich", norm="rmsnorm", mlp="geglu_tanh", bias=False),
        dict(mlp="geglu_tanh", d_ff=40),
        # Issue 29's options: q/k/v biases (also with KV sharing), one norm per parallel block, partial RoPE.
        dict(bias=False, qkv_bias=True, norm="rmsnorm", mlp="swiglu", positions={"positional": "rope"}),
        dict(bias=False, qkv_bias=True, n_layers=3, pattern={"kv_share": (0, 0, 2)}, positions={"positional": "rope"}),
        dict(parallel_block=True),
        dict(bias=False, parallel_block=True, logit_scale=0.5, residual_multiplier=0.5, embedding_multiplier=2.0),
        dict(attention_scale=0.2, positions={"positional": "rope", "rotary_dim": 4}),
    ],
)
def test_parameter_count_equals_formula_variants(overrides):
    config = DecoderConfig.gpt2_like(d_model=32, n_heads=4, vocab_size=24, **overrides)
    assert DecoderLM(config).num_parameters() == parameter_count(config)


def test_published_parameter_counts():
    gpt2 = DecoderConfig.gpt2_like(vocab_size=50257, n_layers=12, d_model=768, n_heads=12, max_len=1024)
    assert parameter_count(gpt2) == 124_439_808  # GPT-2 small
    with torch.device("meta"):  # the module, without allocating 124M floats
        assert DecoderLM(gpt2).num_parameters() == 124_439_808
    llama = DecoderConfig.llama_like(
        vocab_size=32000, n_layers=32, d_model=4096, n_heads=32, n_kv_heads=32, d_ff=11008, max_len=2048
    )
    assert parameter_count(llama) == 6_738_415_616  # LLaMA-7B


def test_bad_input():
    with pytest.raises(TypeError, match="config"):
        parameter_count({"d_model": 8})


def test_qkv_bias_and_parallel_block_counts_by_hand():
    """The exact deltas: q/k/v biases add H·D + 2·H_kv·D per layer; a parallel block drops one norm per layer."""
    base = DecoderConfig.llama_like(vocab_size=24, d_model=32, n_heads=4, n_kv_heads=2, n_layers=3)
    plus = parameter_count(DecoderConfig.llama_like(**{**_fields(base), "qkv_bias": True}))
    assert plus - parameter_count(base) == 3 * (4 * 8 + 2 * 2 * 8)
    minus = parameter_count(DecoderConfig.llama_like(**{**_fields(base), "parallel_block": True}))
    assert parameter_count(base) - minus == 3 * 32  # one RMSNorm gain of width d per layer


def test_indexer_counts():
    """DeepSeek-V3.2's lightning indexer: W_q (d_q_latent -> H_I·D_I), W_k (d -> D_I), LayerNorm (2·D_I), W_w."""
    mla = dict(vocab_size=24, d_model=32, n_heads=4, n_kv_heads=None, n_layers=2, attention="mla", d_latent=16,
               d_q_latent=12, rope_dim=4)  # fmt: skip
    dense, sparse = (
        DecoderConfig.llama_like(**mla),
        DecoderConfig.llama_like(**mla, indexer=Indexer(index_n_heads=3, index_head_dim=8)),
    )
    assert parameter_count(sparse) - parameter_count(dense) == 2 * (12 * 3 * 8 + 32 * 8 + 2 * 8 + 32 * 3)
    assert DecoderLM(sparse).num_parameters() == parameter_count(sparse)


def _fields(config: DecoderConfig) -> dict:
    import dataclasses

    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
