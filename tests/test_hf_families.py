"""attn_core.hf.families: the registry, and the families of issue 29 converted: Qwen2, Gemma 2 with any
query_pre_attn_scalar, Granite, Phi-3, Cohere 2, DeepSeek-V3.2 and GLM-4-MoE.

The shared test file of ``attn_core/hf/families/*`` (tests/test_layout.py); the families with
more to test have their own (``test_hf_families_<family>.py``), LLaMA, Mistral, Qwen3, Gemma 3
and the MoE models are in ``test_hf_convert.py``.

Tiny random models built from configs (nothing downloaded), float64 weights everywhere
(:func:`test_parity_hf.seeded`, norm gains included). The exact comparisons lift Hugging
Face's float32-by-design paths (RMSNorm input, RoPE tables: :func:`exact_families`), as
``tests/test_hf_convert.py`` does; each family's test measures the float64 logit difference
(< 1e-10) and checks greedy generation with our caches against ``generate``.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers", minversion="5.0")

from test_hf_convert import (  # noqa: E402
    IDX,
    SMALL,
    assert_greedy_generation_matches,
    exact_gemma2,  # noqa: F401
    exact_gemma3,  # noqa: F401
    tiny_gemma2,
    tiny_gemma3,
)
from test_parity_hf import EXACT, _rmsnorm_float64, _rope_float64, max_diff, seeded  # noqa: E402
from transformers import (  # noqa: E402
    Cohere2Config,
    Cohere2ForCausalLM,
    DeepseekV32Config,
    DeepseekV32ForCausalLM,
    Glm4MoeConfig,
    Glm4MoeForCausalLM,
    GraniteConfig,
    GraniteForCausalLM,
    Phi3Config,
    Phi3ForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)
from transformers.models.cohere2 import modeling_cohere2 as hf_cohere2  # noqa: E402
from transformers.models.deepseek_v32 import modeling_deepseek_v32 as hf_v32  # noqa: E402
from transformers.models.glm4_moe import modeling_glm4_moe as hf_glm4_moe  # noqa: E402
from transformers.models.granite import modeling_granite as hf_granite  # noqa: E402
from transformers.models.phi3 import modeling_phi3 as hf_phi3  # noqa: E402
from transformers.models.qwen2 import modeling_qwen2 as hf_qwen2  # noqa: E402

from attn_core import parameter_count  # noqa: E402
from attn_core.hf.configs import config_from_hf  # noqa: E402
from attn_core.hf.convert import from_hf  # noqa: E402
from attn_core.hf.families import FAMILIES, NOT_CONVERTED, SUPPORTED_MODEL_TYPES, experts_family, family_of  # noqa: E402
from attn_core.hf.families.base import Family  # noqa: E402
from attn_core.hf.families.llama import LLAMA  # noqa: E402
from attn_core.layers.sparse_attention import SparseAttention  # noqa: E402

HF_MODULES = [hf_qwen2, hf_granite, hf_phi3, hf_glm4_moe]
NO_SPECIAL_TOKENS = dict(bos_token_id=None, eos_token_id=None, pad_token_id=None)


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
    base.update(NO_SPECIAL_TOKENS)
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
    assert (c.pattern.layer_types, c.pattern.sliding_window) == (("full", "sliding", "sliding"), 3)
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
    assert {"qwen2", "granite", "phi3", "cohere2", "deepseek_v32", "glm4_moe"} <= set(SUPPORTED_MODEL_TYPES)


def test_gemma3_any_query_pre_attn_scalar(exact_gemma3):  # noqa: F811
    hf = tiny_gemma3(query_pre_attn_scalar=24)
    assert from_hf(hf).config.attention_scale == 24**-0.5
    check_exact(hf)


# --------------------------------------------------------------------------- Granite
def granite(seed: int = 3, **kw) -> GraniteForCausalLM:
    """Multipliers far from 1 (Granite 3.0 2B's are 12, 0.22, 0.015625 and 8), so that each one shows."""
    base = dict(
        SMALL, rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 1e4}, **NO_SPECIAL_TOKENS
    )
    base.update(embedding_multiplier=3.0, residual_multiplier=0.5, attention_multiplier=0.3, logits_scaling=4.0)
    return seeded(GraniteForCausalLM(GraniteConfig(**{**base, **kw})), seed=seed)


def test_granite_gives_the_same_logits(exact_families):
    hf = granite()
    ours = from_hf(hf)
    c = ours.config
    assert (c.attention_scale, c.embedding_multiplier, c.residual_multiplier, c.logit_scale) == (0.3, 3.0, 0.5, 0.25)
    assert ours.embed_scale == 3.0 and ours.blocks[0].attn.scale == 0.3
    check_exact(hf)
    assert ours.num_parameters() == hf_parameters(hf) == parameter_count(c)


@pytest.mark.parametrize(
    "name", ["embedding_multiplier", "residual_multiplier", "attention_multiplier", "logits_scaling"]
)
def test_granite_each_multiplier_matters(exact_families, name):
    """Each multiplier set to 1 on both sides: still equal, and not the logits of the model with it."""
    hf = granite(**{name: 1.0})
    ours = from_hf(hf)
    assert max_diff(ours(IDX), hf(IDX).logits) < EXACT
    assert max_diff(ours(IDX), from_hf(granite())(IDX)) > 1e-3


def test_granite_greedy_generation_with_caches(exact_families):
    assert_greedy_generation_matches(granite(seed=4))


# --------------------------------------------------------------------------- Phi-3
def phi3(seed: int = 3, **kw) -> Phi3ForCausalLM:
    base = dict(
        SMALL, rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 1e4}, **NO_SPECIAL_TOKENS
    )
    return seeded(Phi3ForCausalLM(Phi3Config(**{**base, **kw})), seed=seed)


@pytest.mark.parametrize("window", [None, 4])
def test_phi3_gives_the_same_logits(exact_families, window):
    """The fused qkv_proj (H·D query rows, then H_kv·D key, then value rows) and gate_up_proj (gate rows first)."""
    hf = phi3(sliding_window=window)
    ours = from_hf(hf)
    assert ours.config.pattern.sliding_window == window
    layer, block = hf.model.layers[1], ours.blocks[1]
    q_rows = 4 * 8
    torch.testing.assert_close(block.attn.k_proj.weight, layer.self_attn.qkv_proj.weight[q_rows : q_rows + 16])
    torch.testing.assert_close(block.mlp.up_proj.weight, layer.mlp.gate_up_proj.weight[48:])
    check_exact(hf)
    assert ours.num_parameters() == hf_parameters(hf) == parameter_count(ours.config)


def test_phi3_greedy_generation_with_caches(exact_families):
    assert_greedy_generation_matches(phi3(seed=4, sliding_window=4))


# --------------------------------------------------------------------------- Cohere 2
def _cohere_layernorm_float64(self, x):
    """Cohere's bias-free LayerNorm without its float32 casts (the same formula)."""
    mean = x.mean(-1, keepdim=True)
    variance = (x - mean).pow(2).mean(-1, keepdim=True)
    return self.weight * ((x - mean) * torch.rsqrt(variance + self.variance_epsilon))


def _cohere_rope_float64(self, x, position_ids):
    """Cohere's interleaved RoPE tables (each angle twice in a row), the angles in float64 as attn_core's."""
    dim = 2 * self.inv_freq.numel()
    inv_freq = self.config.rope_parameters["rope_theta"] ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    freqs = position_ids[..., None].to(torch.float64) * inv_freq  # (B, T, D/2)
    emb = torch.repeat_interleave(freqs, 2, dim=-1)  # (B, T, D): the "interleaved" layout
    return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def _cohere_apply_rope_float64(q, k, cos, sin, unsqueeze_dim=1):
    """Cohere's apply_rotary_pos_emb without its ``q.float()``, ``k.float()``."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + hf_cohere2.rotate_half(q) * sin, k * cos + hf_cohere2.rotate_half(k) * sin


@pytest.fixture
def exact_cohere2(monkeypatch):
    monkeypatch.setattr(hf_cohere2.Cohere2LayerNorm, "forward", _cohere_layernorm_float64)
    monkeypatch.setattr(hf_cohere2.Cohere2RotaryEmbedding, "forward", _cohere_rope_float64)
    monkeypatch.setattr(hf_cohere2, "apply_rotary_pos_emb", _cohere_apply_rope_float64)


def cohere2(seed: int = 3, **kw) -> Cohere2ForCausalLM:
    """Sliding, sliding, full (window 3 < the 9 tokens of IDX); logit scale 0.5."""
    base = dict(SMALL, num_hidden_layers=3, layer_norm_eps=1e-5, logit_scale=0.5, sliding_window=3,
                layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                rope_parameters={"rope_type": "default", "rope_theta": 1e4}, **NO_SPECIAL_TOKENS)  # fmt: skip
    return seeded(Cohere2ForCausalLM(Cohere2Config(**{**base, **kw})), seed=seed)


@pytest.mark.parametrize("tied", [True, False])
def test_cohere2_gives_the_same_logits(exact_cohere2, tied):
    hf = cohere2(tie_word_embeddings=tied)
    ours = from_hf(hf)
    c = ours.config
    assert (c.parallel_block, c.norm, c.positions.rope_layout, c.positions.rope_full_layers, c.logit_scale) == (
        True, "layernorm", "interleaved", False, 0.5,
    )  # fmt: skip
    assert [b.attn.rope is not None for b in ours.blocks] == [True, True, False]
    assert [b.attn.window for b in ours.blocks] == [3, 3, None]
    check_exact(hf)
    # HF's LayerNorm has no bias: ours get zeros (one per norm), the rest is HF's parameters.
    assert ours.num_parameters() == parameter_count(c) == hf_parameters(hf) + (c.n_layers + 1) * c.d_model


def test_cohere2_without_sliding_layers_has_no_positions(exact_cohere2):
    hf = cohere2(layer_types=["full_attention"] * 3)
    assert from_hf(hf).config.positions.positional == "none"
    check_exact(hf)


def test_cohere2_greedy_generation_with_caches(exact_cohere2):
    """Past the window: rolling caches in the sliding layers, a full cache without RoPE in the global one."""
    assert_greedy_generation_matches(cohere2(seed=4))


# --------------------------------------------------------------------------- DeepSeek-V3.2
@pytest.fixture
def exact_v32(monkeypatch):
    """Lift DeepSeek-V3.2's float32 paths: RMSNorm, RoPE tables, the eager softmax, the router's and the
    indexer's ``.float()`` / ``.type(torch.float32)`` (float64 tensors stay float64, as in test_convert's
    exact_moe), so that the index scores are ours to rounding and the top-k picks the same tokens."""
    monkeypatch.setattr(hf_v32.DeepseekV32RMSNorm, "forward", _rmsnorm_float64)
    monkeypatch.setattr(hf_v32.DeepseekV32RotaryEmbedding, "forward", _rope_float64)
    softmax, to_float, to_type = torch.nn.functional.softmax, torch.Tensor.float, torch.Tensor.type

    def keep_softmax(x, dim=None, *args, dtype=None, **kwargs):
        return softmax(x, dim, *args, dtype=torch.float64 if x.dtype == torch.float64 else dtype, **kwargs)

    def keep_type(self, dtype=None, *args, **kwargs):
        return self if self.dtype == torch.float64 and dtype is torch.float32 else to_type(self, dtype, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "softmax", keep_softmax)
    monkeypatch.setattr(
        torch.Tensor, "float", lambda t, *a, **k: t if t.dtype == torch.float64 else to_float(t, *a, **k)
    )
    monkeypatch.setattr(torch.Tensor, "type", keep_type)


def deepseek_v32(seed: int = 3, **kw) -> DeepseekV32ForCausalLM:
    """Two layers (dense, then 8 experts in 4 groups, top-3, a shared one); the indexer keeps 4 of the 9 tokens.

    8 indexer heads, not fewer: a token whose ReLU scores are all 0 ties with the others that are (with 3
    heads, one in 8 tokens), and the two top-k implementations may break a tie differently.
    """
    base = dict(
        SMALL, num_key_value_heads=4, q_lora_rank=12, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4,
        v_head_dim=6, index_topk=4, index_n_heads=8, index_head_dim=8, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1e4}, attn_implementation="eager",
        first_k_dense_replace=1, n_routed_experts=8, num_experts_per_tok=3, n_group=4, topk_group=2,
        n_shared_experts=1, moe_intermediate_size=12, routed_scaling_factor=2.5, norm_topk_prob=True,
        experts_implementation="eager", **NO_SPECIAL_TOKENS,
    )  # fmt: skip
    hf = seeded(DeepseekV32ForCausalLM(DeepseekV32Config(**{**base, **kw})), seed=seed)
    for layer in hf.model.layers[hf.config.first_k_dense_replace :]:  # a non-zero selection bias, to copy
        layer.mlp.gate.e_score_correction_bias.copy_(torch.linspace(-0.2, 0.2, 8, dtype=torch.float64))
    return hf


def test_deepseek_v32_gives_the_same_logits(exact_v32):
    hf = deepseek_v32()
    ours = from_hf(hf)
    c = ours.config
    assert (
        c.attention,
        c.indexer.index_n_heads,
        c.indexer.index_head_dim,
        c.indexer.index_topk,
        c.moe.first_dense_layers,
    ) == ("mla", 8, 8, 4, 1)
    assert all(isinstance(b.attn, SparseAttention) and b.attn.topk == 4 for b in ours.blocks)
    check_exact(hf)
    assert ours.num_parameters() == hf_parameters(hf) == parameter_count(c)


def test_deepseek_v32_topk_matters(exact_v32):
    """With every token kept (topk >= T) both are dense MLA and still equal; with 4 of 9 they differ from it."""
    dense = deepseek_v32(index_topk=64)
    assert max_diff(from_hf(dense)(IDX), dense(IDX).logits) < EXACT
    assert max_diff(from_hf(deepseek_v32())(IDX), from_hf(dense)(IDX)) > 1e-3


def test_deepseek_v32_greedy_generation_with_caches(exact_v32):
    """Our SparseCache (latents and indexer keys) gives HF's tokens; 17 positions, the indexer keeps 4."""
    assert_greedy_generation_matches(deepseek_v32(seed=4))


# --------------------------------------------------------------------------- Phi-4-mini's partial RoPE
def test_phi3_partial_rotary(exact_families):
    """partial_rotary_factor 0.75 (Phi-4-mini): RoPE on the first 6 of each head's 8 dimensions."""
    hf = phi3(rope_parameters={"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.75})
    ours = from_hf(hf)
    assert ours.config.positions.rotary_dim == 6 and ours.blocks[0].attn.rope.rotary_dim == 6
    check_exact(hf)


# --------------------------------------------------------------------------- GLM-4-MoE
def glm4_moe(seed: int = 3, **kw) -> Glm4MoeForCausalLM:
    """Layer 0 dense, layers 1-2 mixtures (8 experts in 4 groups, 2 usable, top-3, a shared one, scale 2.5),
    q/k/v biases, QK-norm, RoPE on half of each head (4 of 8)."""
    base = dict(
        SMALL, num_hidden_layers=3, rms_norm_eps=1e-5, attention_bias=True, use_qk_norm=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5},
        first_k_dense_replace=1, n_routed_experts=8, num_experts_per_tok=3, n_group=4, topk_group=2,
        n_shared_experts=1, moe_intermediate_size=12, routed_scaling_factor=2.5, norm_topk_prob=True,
        experts_implementation="eager", **NO_SPECIAL_TOKENS,
    )  # fmt: skip
    hf = seeded(Glm4MoeForCausalLM(Glm4MoeConfig(**{**base, **kw})), seed=seed)
    for layer in hf.model.layers[hf.config.first_k_dense_replace :]:  # a non-zero selection bias, to copy
        layer.mlp.gate.e_score_correction_bias.copy_(torch.linspace(-0.2, 0.2, 8, dtype=torch.float64))
    return hf


@pytest.fixture
def exact_glm(exact_families, exact_v32):
    """exact_families for GLM's RMSNorm and RoPE, exact_v32's float64 router (the same lifts)."""


def test_glm4_moe_gives_the_same_logits(exact_glm):
    hf = glm4_moe()
    ours = from_hf(hf)
    c = ours.config
    assert (
        c.qkv_bias,
        c.qk_norm,
        c.positions.rotary_dim,
        c.moe.n_experts,
        c.moe.n_shared_experts,
        c.moe.first_dense_layers,
    ) == (
        True,
        True,
        4,
        8,
        1,
        1,
    )
    assert (c.moe.router_scoring, c.moe.router_groups, c.moe.router_topk_groups, c.moe.router_scale) == (
        "sigmoid",
        4,
        2,
        2.5,
    )
    check_exact(hf)
    assert ours.num_parameters() == hf_parameters(hf) == parameter_count(c)


def test_glm4_moe_greedy_generation_with_caches(exact_glm):
    assert_greedy_generation_matches(glm4_moe(seed=4))


# --------------------------------------------------------------------------- one layer at a time
def test_copy_attention_splits_phi3_and_checks_the_scale(exact_families):
    """copy_attention takes a Phi3Attention (fused rows split) and refuses a layer with another score scale."""
    from attn_core import MultiHeadAttention, RotaryEmbedding
    from attn_core.hf.convert import copy_attention
    from attn_core.hf.weights import copy_indexer

    hf = phi3()
    hf_attn = hf.model.layers[0].self_attn
    ours = MultiHeadAttention(32, 4, n_kv_heads=2, causal=True, rope=RotaryEmbedding(8)).to(torch.float64)
    copy_attention(ours, hf_attn)
    torch.testing.assert_close(ours.v_proj.weight, hf_attn.qkv_proj.weight[48:], rtol=0, atol=0)
    granite_attn = granite().model.layers[0].self_attn  # scales by attention_multiplier = 0.3
    with pytest.raises(ValueError, match=r"scales its scores by 0.3, the layer by 0.353553: build it with scale=0.3 "):
        copy_attention(ours, granite_attn)
    scaled = MultiHeadAttention(32, 4, n_kv_heads=2, causal=True, scale=0.3).to(torch.float64)
    copy_attention(scaled, granite_attn)
    with pytest.raises(TypeError, match="ours"):
        copy_indexer(ours, hf_attn)


# ---------------------------------------------------------------- the registry


def test_supported_list_keeps_its_order():
    # The appendix prints this list: a new family is appended, none moves.
    assert SUPPORTED_MODEL_TYPES[:20] == (
        "llama", "mistral", "qwen3", "deepseek_v3", "deepseek_v32", "gemma2", "gemma3_text", "mixtral", "qwen3_moe",
        "qwen2", "granite", "phi3", "cohere2", "glm4_moe", "smollm3", "olmo2", "olmo3", "qwen3_next", "gpt_oss",
        "llama4_text",
    )  # fmt: skip
    assert SUPPORTED_MODEL_TYPES == tuple(FAMILIES) and not set(FAMILIES) & set(NOT_CONVERTED)


def test_every_family_file_is_registered():
    """A record defined in a family file but missing from the registry (or registered twice) fails here."""
    import importlib
    import pkgutil

    import attn_core.hf.families as package

    defined = []
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        records = [value for value in vars(module).values() if isinstance(value, Family)]
        assert records or info.name == "base", f"hf/families/{info.name}.py defines no Family"
        defined += records
    assert sorted(f.model_type for f in defined) == sorted(FAMILIES)  # each once
    assert all(FAMILIES[f.model_type] is f for f in defined)


def test_the_shared_readers_name_no_family():
    """hf/configs.py, convert.py and weights.py ask the family record; no model type or HF class name in their code."""
    import ast
    import re
    from pathlib import Path

    import attn_core.hf

    names = set(SUPPORTED_MODEL_TYPES) | set(NOT_CONVERTED)
    hf_class = re.compile(r"^[A-Z][A-Za-z0-9]*(Attention|Experts|MLP|Moe|Model|ForCausalLM)$")
    for name in ("configs", "convert", "weights"):
        tree = ast.parse((Path(attn_core.hf.__file__).parent / f"{name}.py").read_text())
        docstrings = {id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.FunctionDef))
                      and n.body and isinstance(n.body[0], ast.Expr)}  # fmt: skip
        strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                   and id(n) not in docstrings]  # fmt: skip
        assert [s for s in strings if s in names or hf_class.match(s)] == [], name


def test_a_module_is_read_as_its_configs_family():
    assert family_of(object()) is LLAMA and experts_family(torch.nn.ModuleList()) is LLAMA
    assert family_of(torch.nn.Linear(2, 2)) is LLAMA
    phi3 = hf_phi3.Phi3MLP(Phi3Config(hidden_size=8, intermediate_size=12, num_attention_heads=2))
    assert family_of(phi3) is FAMILIES["phi3"]
