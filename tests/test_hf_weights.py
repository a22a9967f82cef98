"""Tests for attn_core.hf.weights: Hugging Face sub-modules' weights copied into ours.

Each copy is checked by running both modules on the same input (float64, exact to rounding);
the whole models are in test_hf_convert.py and test_hf_families*.py.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm

from attn_core import RMSNorm, SwiGLU
from attn_core.hf.weights import copy_mlp, copy_norm, copy_weights
from conftest import F64, randn


def test_copy_mlp_gives_the_same_output():
    torch.manual_seed(0)
    hf = LlamaMLP(LlamaConfig(hidden_size=16, intermediate_size=24, num_attention_heads=4)).to(F64)
    ours = SwiGLU(16, 24).to(F64)
    copy_mlp(ours, hf)
    x = randn(2, 5, 16, dtype=F64, seed=1)
    torch.testing.assert_close(ours(x), hf(x), rtol=0, atol=1e-14)


@pytest.mark.parametrize("offset", [0.0, 1.0])
def test_copy_norm_adds_the_offset(offset):
    hf = LlamaRMSNorm(8, eps=1e-6).to(F64)
    with torch.no_grad():
        hf.weight.copy_(torch.linspace(-0.5, 0.5, 8, dtype=F64))
    ours = RMSNorm(8, eps=1e-6).to(F64)
    copy_norm(ours, hf, offset)
    torch.testing.assert_close(ours.weight, hf.weight + offset, rtol=0, atol=0)
    if offset == 0.0:  # with the same gain, the same output; both normalise in float32
        x = randn(3, 8, dtype=F64, seed=2)
        torch.testing.assert_close(ours(x), hf(x), rtol=0, atol=1e-6)


def test_copy_weights_zeroes_a_bias_the_source_lacks():
    dst, src = nn.Linear(4, 3), nn.Linear(4, 3, bias=False)
    copy_weights(dst, src)
    assert torch.equal(dst.weight, src.weight) and torch.equal(dst.bias, torch.zeros(3))
    copy_weights(dst, src.weight, bias=torch.ones(3))  # a tensor and an explicit bias
    assert torch.equal(dst.bias, torch.ones(3))


def test_copy_weights_refuses_another_shape():
    with pytest.raises(ValueError, match=r"shape mismatch: \(3, 5\) into \(3, 4\)"):
        copy_weights(nn.Linear(4, 3), nn.Linear(5, 3))
