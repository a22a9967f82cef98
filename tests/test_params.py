"""attn_core.params: the parameter count by formula equals the module's count, for every kind of model."""

from __future__ import annotations

import pytest
import torch

from attn_core import DecoderConfig, DecoderLM, parameter_breakdown, parameter_count
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
        dict(positional="rope"),
        dict(mlp="swiglu", d_ff=40),
        dict(n_kv_heads=2, norm="rmsnorm"),
        dict(n_layers=3, block="sas", bias=True),
        dict(n_layers=1, block="sas-p"),
        dict(norm_position="sandwich"),
        dict(norm_position="sandwich", norm="rmsnorm", mlp="geglu_tanh", bias=False),
        dict(mlp="geglu_tanh", d_ff=40),
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
