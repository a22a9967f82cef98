"""attn_core.config: the frozen DecoderConfig, its presets and checks, and the parameter count by formula."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from attn_core import (
    DecoderConfig,
    DecoderLM,
    MultiHeadLatentAttention,
    parameter_breakdown,
    parameter_count,
)
from attn_core.mla import default_rope_dim
from attn_core.mlp import make_mlp, mlp_hidden_dim
from conftest import PRESETS, decoder


# --------------------------------------------------------------------------- parameter count
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
        dict(positional="rope"),
        dict(mlp="swiglu", d_ff=40),
        dict(n_kv_heads=2, norm="rmsnorm"),
        dict(n_layers=3, block="sas", bias=True),
        dict(n_layers=1, block="sas-p"),
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


# --------------------------------------------------------------------------- the config
def test_config_is_frozen_and_presets():
    c = DecoderConfig.gpt2_like()
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.d_model = 8  # type: ignore[misc]
    assert (c.attention, c.positional, c.mlp, c.norm, c.norm_position, c.tie_weights) == (
        "mha",
        "learned",
        "gelu",
        "layernorm",
        "pre",
        True,
    )
    l = DecoderConfig.llama_like(n_layers=3)
    assert (l.positional, l.mlp, l.norm, l.tie_weights, l.n_layers) == ("rope", "swiglu", "rmsnorm", False, 3)
    assert l.resolved_n_kv_heads < l.n_heads  # GQA
    assert DecoderConfig.gpt2_like(d_model=48, n_heads=4).resolved_d_ff == 192
    assert dataclasses.replace(c, d_model=32).resolved_d_ff == 128  # recomputed, not stale


@pytest.mark.parametrize(
    "overrides,message",
    [
        (dict(d_model=30, n_heads=4), "d_model=30 is not divisible by n_heads=4"),
        (dict(n_kv_heads=3), "n_heads=4 is not divisible by n_kv_heads=3"),
        (dict(positional="alibi"), "positional='alibi'"),
        (dict(mlp="relu"), "mlp='relu'"),
        (dict(norm="batchnorm"), "norm='batchnorm'"),
        (dict(norm_position="sandwich"), "norm_position='sandwich'"),
        (dict(attention="linear"), "attention='linear'"),
        (dict(block="resnet"), "block='resnet'"),
        (dict(vocab_size=0), "vocab_size=0"),
        (dict(dropout=1.5), "dropout=1.5"),
        (dict(attention="mla"), "needs d_latent"),
        (dict(d_latent=8), "d_latent=8 is an MLA size"),
        (dict(head_dim=8), "head_dim=8 must equal d_model // n_heads = 16"),
        (dict(block="sas", n_kv_heads=2), "n_kv_heads=2"),
        (dict(block="sas-p", norm_position="post"), "norm_position='post'"),
        (dict(attention="mla", d_latent=8, rope_dim=4), "rope_dim=4 needs positional='rope'"),
        (dict(rope_base=1.0), "rope_base=1.0"),
    ],
)
def test_config_errors_name_the_values(overrides, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        DecoderConfig.gpt2_like(**overrides)


def test_config_type_errors():
    with pytest.raises(TypeError, match="n_layers must be an int"):
        DecoderConfig.gpt2_like(n_layers=2.0)
    with pytest.raises(TypeError, match="tie_weights must be a bool"):
        DecoderConfig.gpt2_like(tie_weights=1)


def test_mla_rope_dim_has_one_default():
    """MLA's own default and the config's resolved value agree (d_model=24, n_heads=4: head_dim 6)."""
    c = DecoderConfig.llama_like(d_model=24, n_heads=4, n_kv_heads=None, attention="mla", d_latent=8)
    mla = MultiHeadLatentAttention(24, 4, d_latent=8)
    assert c.resolved_rope_dim == mla.rope_dim == default_rope_dim(6) == 2
    model = decoder(c)
    assert model.blocks[0].attn.rope_dim == c.resolved_rope_dim
    assert parameter_count(c) == sum(p.numel() for p in model.parameters())


def test_mla_in_the_model_uses_the_config_rope_base():
    c = DecoderConfig.llama_like(n_kv_heads=None, attention="mla", d_latent=16, rope_base=500.0)
    assert decoder(c).blocks[0].attn.rope.base == 500.0


def test_mlp_hidden_width_has_one_default():
    for mlp in ("gelu", "swiglu"):
        c = DecoderConfig.gpt2_like(d_model=48, n_heads=4, mlp=mlp)
        assert c.resolved_d_ff == mlp_hidden_dim(mlp, 48) == make_mlp(mlp, 48, None, bias=False).d_ff
