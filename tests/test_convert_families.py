"""attn_core.convert for the open-weight families of issue 29: Qwen2, Gemma 2 with any query_pre_attn_scalar,
Granite, Phi-3, Cohere 2, DeepSeek-V3.2 and GLM-4-MoE.

Tiny random models built from configs (nothing downloaded), float64 weights everywhere
(:func:`test_parity_hf.seeded`, norm gains included). The exact comparisons lift Hugging
Face's float32-by-design paths (RMSNorm input, RoPE tables: :func:`exact_families`), as
``tests/test_convert.py`` does; each family's test measures the float64 logit difference
(< 1e-10) and checks greedy generation with our caches against ``generate``.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers", minversion="5.0")

from test_convert import (  # noqa: E402
    IDX,
    SMALL,
    assert_greedy_generation_matches,
    exact_gemma2,  # noqa: F401
    exact_gemma3,  # noqa: F401
    tiny_gemma2,
    tiny_gemma3,
)
from test_parity_hf import EXACT, _rmsnorm_float64, _rope_float64, max_diff, seeded  # noqa: E402
from transformers import Qwen2Config, Qwen2ForCausalLM  # noqa: E402
from transformers.models.qwen2 import modeling_qwen2 as hf_qwen2  # noqa: E402

from attn_core import parameter_count  # noqa: E402
from attn_core.convert import SUPPORTED_MODEL_TYPES, config_from_hf, from_hf  # noqa: E402

HF_MODULES = [hf_qwen2]


@pytest.fixture
def exact_families(monkeypatch):
    """Lift the float32 round trips of the plain-RMSNorm, plain-RoPE families (Qwen2, Granite, Phi-3, ...)."""
    for module in HF_MODULES:
        for name in dir(module):
            if name.endswith("RMSNorm"):
                monkeypatch.setattr(getattr(module, name), "forward", _rmsnorm_float64)
            elif name.endswith("RotaryEmbedding"):
                monkeypatch.setattr(getattr(module, name), "forward", _rope_float64)


def hf_parameters(hf) -> int:
    return sum(p.numel() for p in hf.parameters())


def check_exact(hf) -> float:
    """Convert ``hf``; the float64 logits within EXACT of Hugging Face's (the difference is returned)."""
    ours = from_hf(hf)
    diff = max_diff(ours(IDX), hf(IDX).logits)
    print(f"{hf.config.model_type}: max |logit difference| = {diff:.2e}")
    assert diff < EXACT
    return diff


# --------------------------------------------------------------------------- Qwen2
def qwen2(seed: int = 3, **kw) -> Qwen2ForCausalLM:
    base = dict(SMALL, rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    base.update(bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return seeded(Qwen2ForCausalLM(Qwen2Config(**{**base, **kw})), seed=seed)


@pytest.mark.parametrize("tied", [False, True])
def test_qwen2_gives_the_same_logits(exact_families, tied):
    hf = qwen2(tie_word_embeddings=tied)
    ours = from_hf(hf)
    c = ours.config
    assert (c.qkv_bias, c.bias, c.qk_norm, c.tie_weights) == (True, False, False, tied)
    attn = ours.blocks[0].attn
    assert attn.q_proj.bias is not None and attn.out_proj.bias is None and ours.blocks[0].mlp.up_proj.bias is None
    # The biases are Qwen2's (random here), not zeros: without them the logits differ.
    torch.testing.assert_close(attn.k_proj.bias, hf.model.layers[0].self_attn.k_proj.bias, rtol=0, atol=0)
    check_exact(hf)
    assert ours.num_parameters() == hf_parameters(hf) == parameter_count(c)


def test_qwen2_sliding_layers(exact_families):
    """Qwen2's ``use_sliding_window`` above ``max_window_layers``: the window in those layers only."""
    hf = qwen2(num_hidden_layers=3, use_sliding_window=True, sliding_window=3, max_window_layers=1)
    c = from_hf(hf).config
    assert (c.layer_types, c.sliding_window) == (("full", "sliding", "sliding"), 3)
    check_exact(hf)


def test_qwen2_greedy_generation_with_caches(exact_families):
    assert_greedy_generation_matches(qwen2(seed=4))


# --------------------------------------------------------------------------- Gemma 2's score scale
@pytest.mark.parametrize("scalar", [144, 9])
def test_gemma2_any_query_pre_attn_scalar(exact_gemma2, scalar):  # noqa: F811
    """Gemma 2 27B scales heads of 128 by 1/sqrt(144): any query_pre_attn_scalar is the layers' score scale."""
    hf = tiny_gemma2(query_pre_attn_scalar=scalar)
    ours = from_hf(hf)
    assert ours.config.attention_scale == scalar**-0.5
    assert all(b.attn.scale == scalar**-0.5 for b in ours.blocks)
    check_exact(hf)
    # And it matters: the default scale (1/sqrt(16)) gives other logits.
    assert max_diff(ours(IDX), from_hf(tiny_gemma2())(IDX)) > 1e-3


def test_gemma2_scalar_equal_to_head_dim_keeps_the_default_scale():
    assert config_from_hf(tiny_gemma2().config).attention_scale is None


def test_gemma2_scaled_greedy_generation_with_caches(exact_gemma2):  # noqa: F811
    assert_greedy_generation_matches(tiny_gemma2(seed=4, query_pre_attn_scalar=144))


def test_supported_types_list_the_new_families():
    assert "qwen2" in SUPPORTED_MODEL_TYPES


def test_gemma3_any_query_pre_attn_scalar(exact_gemma3):  # noqa: F811
    hf = tiny_gemma3(query_pre_attn_scalar=24)
    assert from_hf(hf).config.attention_scale == 24**-0.5
    check_exact(hf)
