"""attn_core.hf.convert: Hugging Face LLaMA / Mistral / Qwen3 / DeepSeek-V3 / Gemma 2 / 3 into DecoderLM, or a refusal.

Random-initialised models built from configs; nothing is downloaded. The exact (float64,
1e-10) comparisons use :func:`test_parity_hf.exact_hf`, which lifts Hugging Face's
deliberate float32 round trips (see that module), and :func:`exact_gemma3` /
:func:`exact_gemma2`, which lift Gemma's own (its RMSNorm, its RoPE tables, its float32
embedding scale).
"""

from __future__ import annotations

import sys
import types

import pytest
import torch

pytest.importorskip("transformers", minversion="5.0")

from test_parity_hf import (  # noqa: E402, F401
    EXACT,
    _rmsnorm_float64,
    _rope_float64,
    deepseek_config,
    exact_hf,
    llama_config,
    max_diff,
    seeded,
)
from transformers import (  # noqa: E402
    DeepseekV3ForCausalLM,
    Gemma2Config,
    Gemma2ForCausalLM,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)
from transformers.models.gemma2 import modeling_gemma2 as hf_gemma2  # noqa: E402
from transformers.models.gemma3 import modeling_gemma3 as hf_gemma3  # noqa: E402
from transformers.models.mixtral import modeling_mixtral as hf_mixtral  # noqa: E402
from transformers.models.qwen3_moe import modeling_qwen3_moe as hf_qwen3_moe  # noqa: E402

from attn_core import DecoderLM, MixtureOfExperts, generate, parameter_count  # noqa: E402
from attn_core.hf.configs import config_from_hf  # noqa: E402
from attn_core.hf.convert import from_hf  # noqa: E402
from attn_core.hf.families import NOT_CONVERTED, SUPPORTED_MODEL_TYPES  # noqa: E402

IDX = torch.randint(0, 61, (2, 9), generator=torch.Generator().manual_seed(0))
SMALL = dict(
    vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=64, attn_implementation="sdpa",
)  # fmt: skip


def qwen3(**kw):
    base = dict(SMALL, head_dim=16, rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    return Qwen3ForCausalLM(Qwen3Config(**{**base, **kw}))


MODELS = {
    "llama-tied-bias": lambda: LlamaForCausalLM(llama_config(tie_word_embeddings=True, attention_bias=True)),
    "llama-mha-head_dim": lambda: LlamaForCausalLM(llama_config(num_key_value_heads=4, head_dim=4)),
    "mistral": lambda: MistralForCausalLM(MistralConfig(**SMALL, sliding_window=None)),
    "mistral-window": lambda: MistralForCausalLM(MistralConfig(**SMALL, sliding_window=4)),  # shorter than IDX
    "qwen3-window": lambda: qwen3(use_sliding_window=True, sliding_window=3, max_window_layers=1),
    "qwen3": lambda: qwen3(),
    "qwen3-tied-bias": lambda: qwen3(tie_word_embeddings=True, attention_bias=True),
    "deepseek-v3": lambda: DeepseekV3ForCausalLM(deepseek_config()),
    "deepseek-v3-half-bias": lambda: DeepseekV3ForCausalLM(
        deepseek_config(q_lora_rank=None, rope_interleave=False, attention_bias=True)
    ),
}


def gemma3_config(**kw) -> Gemma3TextConfig:
    """A tiny Gemma 3: a sliding layer (window 3 < the 9 tokens of IDX), a full one, a sliding one; heads of
    width 16 ≠ 32/4; RoPE bases 10000 (sliding) and 1e6 (full); query_pre_attn_scalar = head_dim."""
    base = dict(
        SMALL, num_hidden_layers=3, head_dim=16, query_pre_attn_scalar=16, rms_norm_eps=1e-6, sliding_window=3,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"], tie_word_embeddings=True,
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                         "full_attention": {"rope_type": "default", "rope_theta": 1e6}},
        bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )  # fmt: skip
    return Gemma3TextConfig(**{**base, **kw})


def _gemma3_rmsnorm_float64(self, x):
    """Gemma 3's RMSNorm, ``(1 + weight) · x / rms(x)``, without its float32 cast (``x.float()``)."""
    return self._norm(x) * (1.0 + self.weight)


def _half_rope_float64(params: dict, dim: int, x, position_ids):
    """Plain RoPE tables for ``rope_parameters`` ``params``, the angles in float64 as attn_core's (Gemma 2 and 3)."""
    assert params["rope_type"] == "default", params
    inv_freq = params["rope_theta"] ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    freqs = position_ids[..., None].to(torch.float64) * inv_freq  # (B, T, D/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (B, T, D): the "half" layout
    return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def _gemma3_rope_float64(self, x, position_ids, layer_type):
    """Gemma 3's plain RoPE tables for ``layer_type`` (its own base), the angles in float64 as attn_core's."""
    return _half_rope_float64(self.config.rope_parameters[layer_type], self.config.head_dim, x, position_ids)


@pytest.fixture
def exact_gemma3(monkeypatch):
    """Lift Gemma 3's float32 round trips: its RMSNorm's ``x.float()`` and its RoPE tables (as exact_hf does)."""
    monkeypatch.setattr(hf_gemma3.Gemma3RMSNorm, "forward", _gemma3_rmsnorm_float64)
    monkeypatch.setattr(hf_gemma3.Gemma3RotaryEmbedding, "forward", _gemma3_rope_float64)


def tiny_gemma3(seed: int = 3, **kw) -> Gemma3ForCausalLM:
    """Random float64 weights, norm gains included (``seeded``); the embedding scale √d in float64.

    Hugging Face keeps ``embed_scale`` in a buffer made in float32 (``torch.tensor(√d)``), so
    ``.to(float64)`` carries √32 rounded to float32 (off by ~1e-8 relative); set it exactly.
    """
    hf = seeded(Gemma3ForCausalLM(gemma3_config(**kw)), seed=seed)
    hf.model.embed_tokens.embed_scale.fill_(hf.config.hidden_size**0.5)
    return hf


@pytest.mark.parametrize("name", sorted(MODELS))
def test_from_hf_gives_the_same_logits(exact_hf, name):  # noqa: F811
    hf = seeded(MODELS[name](), seed=3)
    ours = from_hf(hf)
    assert isinstance(ours, DecoderLM) and not ours.training
    assert next(ours.parameters()).dtype == torch.float64
    assert max_diff(ours(IDX), hf(IDX).logits) < EXACT


# --------------------------------------------------------------------------- Gemma 3
@pytest.mark.parametrize("tied", [True, False])
def test_gemma3_gives_the_same_logits(exact_gemma3, tied):
    hf = tiny_gemma3(tie_word_embeddings=tied, attention_bias=not tied)
    ours = from_hf(hf)
    c = ours.config
    assert (c.norm_position, c.mlp, c.scale_embeddings, c.qk_norm, c.tie_weights) == (
        "sandwich", "geglu_tanh", True, True, tied,
    )  # fmt: skip
    assert (c.pattern.layer_types, c.pattern.sliding_window, c.positions.rope_base, c.positions.sliding_rope_base) == (
        ("sliding", "full", "sliding"), 3, 1e6, 1e4,
    )  # fmt: skip
    assert [b.attn.rope.base for b in ours.blocks] == [1e4, 1e6, 1e4]
    assert max_diff(ours(IDX), hf(IDX).logits) < EXACT


def test_gemma3_every_gain_is_one_plus_weight():
    """Gemma's stored gains start at 0: each of the four block norms, the QK-norms and the final norm is 1 + weight."""
    hf = tiny_gemma3()
    ours = from_hf(hf)
    pairs = [(ours.final_norm, hf.model.norm)]
    for b, layer in zip(ours.blocks, hf.model.layers, strict=True):
        pairs += [
            (b.attn_norm, layer.input_layernorm), (b.attn_post_norm, layer.post_attention_layernorm),
            (b.mlp_norm, layer.pre_feedforward_layernorm), (b.mlp_post_norm, layer.post_feedforward_layernorm),
            (b.attn.q_norm, layer.self_attn.q_norm), (b.attn.k_norm, layer.self_attn.k_norm),
        ]  # fmt: skip
    for mine, theirs in pairs:
        torch.testing.assert_close(mine.weight, 1.0 + theirs.weight, rtol=0, atol=0)
    assert ours.num_parameters() == sum(p.numel() for p in hf.parameters()) == parameter_count(ours.config)


def test_gemma3_without_the_lifts_differs_by_float32_rounding_only():
    """Without :func:`exact_gemma3` and the float64 embedding scale: ~1e-5 apart on logits of size ~10, never 1e-4."""
    hf = seeded(Gemma3ForCausalLM(gemma3_config()), seed=3)
    diff = max_diff(from_hf(hf)(IDX), hf(IDX).logits)
    assert EXACT < diff < 1e-4


def assert_greedy_generation_matches(hf) -> None:
    """Greedy decoding with our caches gives ``hf.generate(do_sample=False)``'s tokens, and its logits."""
    idx = torch.randint(0, 61, (2, 5), generator=torch.Generator().manual_seed(1))
    expected = hf.generate(idx, max_new_tokens=12, do_sample=False, attention_mask=torch.ones_like(idx))
    ours = from_hf(hf)
    tokens, logits = generate(ours, idx, 12, temperature=0.0, return_logits=True)
    assert torch.equal(tokens, expected)
    assert max_diff(logits, hf(tokens[:, :-1]).logits) < EXACT


def test_gemma3_greedy_generation_with_caches(exact_gemma3):
    """The same tokens as ``generate(do_sample=False)``, past the window (rolling caches in the sliding layers)."""
    assert_greedy_generation_matches(tiny_gemma3(seed=4))


@pytest.mark.parametrize(
    "kw,message",
    [
        (dict(final_logit_softcapping=30.0), "final_logit_softcapping=30.0"),
        (dict(attn_logit_softcapping=50.0), "attn_logit_softcapping=50.0"),
        (dict(hidden_activation="gelu"), "hidden_activation='gelu'"),
        (dict(use_bidirectional_attention=True), "use_bidirectional_attention=True"),
        (dict(rope_parameters={"sliding_attention": {"rope_type": "linear", "rope_theta": 1e4, "factor": 8.0},
                               "full_attention": {"rope_type": "default", "rope_theta": 1e6}}),
         "rope scaling 'linear' in the sliding_attention layers"),
    ],
)  # fmt: skip
def test_gemma3_refusals(kw, message):
    with pytest.raises(ValueError, match=f"cannot convert this gemma3_text model exactly: {message}"):
        config_from_hf(gemma3_config(**kw))


# --------------------------------------------------------------------------- Gemma 2
def gemma2_config(**kw) -> Gemma2Config:
    """A tiny Gemma 2: sliding (window 3 < the 9 tokens of IDX), full, sliding; heads of width 16 ≠ 32/4; one
    RoPE base; soft-caps small enough to bite (attention 5, final 3: the logits reach ~10 uncapped)."""
    base = dict(
        SMALL, num_hidden_layers=3, head_dim=16, query_pre_attn_scalar=16, rms_norm_eps=1e-6, sliding_window=3,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"], tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1e4}, attn_logit_softcapping=5.0,
        final_logit_softcapping=3.0, attn_implementation="eager", bos_token_id=None, eos_token_id=None,
        pad_token_id=None,
    )  # fmt: skip
    return Gemma2Config(**{**base, **kw})


def _gemma2_rope_float64(self, x, position_ids):
    """Gemma 2's plain RoPE tables (one base), the angles in float64 as attn_core's."""
    return _half_rope_float64(self.config.rope_parameters, self.config.head_dim, x, position_ids)


@pytest.fixture
def exact_gemma2(monkeypatch):
    """Lift Gemma 2's float32 round trips: its RMSNorm's ``x.float()``, its RoPE tables, and its eager
    attention's ``softmax(..., dtype=torch.float32)`` (Gemma 2 soft-caps, so it has no SDPA path), kept in float64
    as in ``test_parity_hf_gated``."""
    monkeypatch.setattr(hf_gemma2.Gemma2RMSNorm, "forward", _gemma3_rmsnorm_float64)  # the same (1 + weight) norm
    monkeypatch.setattr(hf_gemma2.Gemma2RotaryEmbedding, "forward", _gemma2_rope_float64)
    softmax = torch.nn.functional.softmax

    def keep(x, dim=None, *args, dtype=None, **kwargs):
        if x.dtype == torch.float64 and dtype == torch.float32:
            dtype = torch.float64
        return softmax(x, dim, *args, dtype=dtype, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "softmax", keep)


def tiny_gemma2(seed: int = 3, **kw) -> Gemma2ForCausalLM:
    """Random float64 weights (``seeded``), the embedding scale √d in float64 (see :func:`tiny_gemma3`)."""
    hf = seeded(Gemma2ForCausalLM(gemma2_config(**kw)), seed=seed)
    hf.model.embed_tokens.embed_scale.fill_(hf.config.hidden_size**0.5)
    return hf


@pytest.mark.parametrize("tied", [True, False])
def test_gemma2_gives_the_same_logits(exact_gemma2, tied):
    hf = tiny_gemma2(tie_word_embeddings=tied, attention_bias=not tied)
    ours = from_hf(hf)
    c = ours.config
    assert (c.norm_position, c.mlp, c.scale_embeddings, c.qk_norm, c.tie_weights) == (
        "sandwich", "geglu_tanh", True, False, tied,
    )  # fmt: skip
    assert (c.pattern.layer_types, c.pattern.sliding_window, c.positions.rope_base, c.positions.sliding_rope_base) == (
        ("sliding", "full", "sliding"), 3, 1e4, None,
    )  # fmt: skip
    assert (c.attention_softcap, c.final_softcap) == (5.0, 3.0)
    assert all(b.attn.softcap == 5.0 for b in ours.blocks)
    logits = ours(IDX)
    assert max_diff(logits, hf(IDX).logits) < EXACT
    assert logits.abs().max() < 3.0 < from_hf(tiny_gemma2(final_logit_softcapping=None))(IDX).abs().max()
    assert ours.num_parameters() == parameter_count(c)
    if not c.bias:  # attn_core's one bias switch also gives the MLP (zero) biases HF does not have
        assert ours.num_parameters() == sum(p.numel() for p in hf.parameters())


@pytest.mark.parametrize(
    "kw", [dict(attn_logit_softcapping=None), dict(final_logit_softcapping=None)], ids=["no-attn-cap", "no-final-cap"]
)
def test_gemma2_each_softcap_matters(exact_gemma2, kw):
    """Either cap removed on both sides: still equal; and the capped model's logits are not the uncapped ones."""
    hf = tiny_gemma2(**kw)
    ours = from_hf(hf)
    assert max_diff(ours(IDX), hf(IDX).logits) < EXACT
    assert max_diff(ours(IDX), from_hf(tiny_gemma2())(IDX)) > 1e-3


def test_gemma2_greedy_generation_with_caches(exact_gemma2):
    """The same tokens as ``generate(do_sample=False)``, past the window (rolling caches in the sliding layers)."""
    assert_greedy_generation_matches(tiny_gemma2(seed=4))


@pytest.mark.parametrize(
    "kw,message",
    [
        (dict(hidden_activation="gelu"), "hidden_activation='gelu'"),
        (dict(use_bidirectional_attention=True), "use_bidirectional_attention=True"),
        (dict(rope_parameters={"rope_type": "linear", "rope_theta": 1e4, "factor": 8.0}), "rope scaling 'linear'"),
    ],
)
def test_gemma2_refusals(kw, message):
    with pytest.raises(ValueError, match=f"cannot convert this gemma2 model exactly: {message}"):
        config_from_hf(gemma2_config(**kw))


def test_from_hf_counts():
    """Every weight is copied: the converted model has HF's parameter count (HF's missing biases are zeros)."""
    for name in ("qwen3", "deepseek-v3", "mistral"):
        hf = MODELS[name]()
        ours = from_hf(hf)
        assert ours.num_parameters() == sum(p.numel() for p in hf.parameters()) == parameter_count(ours.config)


def test_from_hf_float32_model_stays_float32():
    hf = LlamaForCausalLM(llama_config()).eval()
    ours = from_hf(hf)
    assert next(ours.parameters()).dtype == torch.float32
    with torch.no_grad():
        assert max_diff(ours(IDX), hf(IDX).logits) < 1e-4  # float32 rounding


def test_sliding_windows_are_converted():
    mistral = config_from_hf(MODELS["mistral-window"]().config)
    assert mistral.resolved_layer_types == ("sliding", "sliding") and mistral.pattern.sliding_window == 4
    qwen = config_from_hf(MODELS["qwen3-window"]().config)
    assert qwen.pattern.layer_types == ("full", "sliding") and qwen.pattern.sliding_window == 3


def test_config_from_hf_fields():
    c = config_from_hf(qwen3().config)
    assert (c.head_dim, c.qk_norm, c.norm_eps, c.positions.rope_base, c.n_kv_heads) == (16, True, 1e-6, 1e6, 2)
    d = config_from_hf(deepseek_config())
    assert (d.attention, d.d_latent, d.d_q_latent, d.head_dim, d.rope_dim, d.v_head_dim, d.positions.rope_layout) == (
        "mla", 16, 12, 8, 4, 6, "interleaved",
    )  # fmt: skip


# --------------------------------------------------------------------------- mixtures of experts (chapter 19)
def moe_small(**kw) -> dict:
    """A tiny MoE shape: 6 experts of width 24, top-2; every layer a mixture."""
    return dict(SMALL, num_experts_per_tok=2, experts_implementation="eager", **kw)


MOE_MODELS = {
    "mixtral": lambda: MixtralForCausalLM(MixtralConfig(**moe_small(intermediate_size=24), num_local_experts=6)),
    "mixtral-window-tied": lambda: MixtralForCausalLM(MixtralConfig(
        **moe_small(intermediate_size=24, tie_word_embeddings=True), num_local_experts=6, sliding_window=4)),
    "qwen3-moe": lambda: Qwen3MoeForCausalLM(Qwen3MoeConfig(
        **moe_small(head_dim=16, rms_norm_eps=1e-6), num_experts=6, moe_intermediate_size=24)),
    "qwen3-moe-normalised": lambda: Qwen3MoeForCausalLM(Qwen3MoeConfig(
        **moe_small(head_dim=16), num_experts=6, moe_intermediate_size=24, norm_topk_prob=True)),
    # 8 experts in 4 groups (2 usable), top-3, a shared expert; layer 0 dense, layer 1 a mixture
    "deepseek-v3-moe": lambda: DeepseekV3ForCausalLM(deepseek_config(
        first_k_dense_replace=1, n_routed_experts=8, num_experts_per_tok=3, n_group=4, topk_group=2,
        n_shared_experts=1, moe_intermediate_size=12, routed_scaling_factor=2.5, norm_topk_prob=True,
        experts_implementation="eager")),
}  # fmt: skip


@pytest.fixture
def exact_moe(exact_hf, monkeypatch):  # noqa: F811
    """exact_hf for Mixtral's and Qwen3-MoE's RMSNorm and RoPE too, and the routers kept in float64."""
    for module in (hf_mixtral, hf_qwen3_moe):
        monkeypatch.setattr(module.__dict__[[n for n in dir(module) if n.endswith("RMSNorm")][0]], "forward",
                            _rmsnorm_float64)  # fmt: skip
        monkeypatch.setattr(module.__dict__[[n for n in dir(module) if n.endswith("RotaryEmbedding")][0]], "forward",
                            _rope_float64)  # fmt: skip
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


@pytest.mark.parametrize("name", sorted(MOE_MODELS))
def test_moe_models_give_the_same_logits(exact_moe, name):
    hf = seeded(MOE_MODELS[name](), seed=5)
    if name.startswith("deepseek"):  # a non-zero selection bias, so that copying it is tested
        for layer in hf.model.layers[1:]:
            layer.mlp.gate.e_score_correction_bias.copy_(torch.linspace(-0.2, 0.2, 8, dtype=torch.float64))
    ours = from_hf(hf)
    moe = [b.mlp for b in ours.blocks if isinstance(b.mlp, MixtureOfExperts)]
    assert len(moe) == (1 if name.startswith("deepseek") else 2)
    assert ours.num_parameters() == sum(p.numel() for p in hf.parameters()) == parameter_count(ours.config)
    assert max_diff(ours(IDX), hf(IDX).logits) < EXACT


def test_moe_greedy_generation_with_caches(exact_moe):
    """Our caches (and the MoE layers on one new token at a time) give HF's greedy tokens, past the window."""
    assert_greedy_generation_matches(seeded(MOE_MODELS["mixtral-window-tied"](), seed=6).eval())


def test_moe_config_fields():
    q = config_from_hf(MOE_MODELS["qwen3-moe-normalised"]().config)
    assert (q.moe.n_experts, q.moe.experts_per_token, q.moe.moe_d_ff, q.moe.router_normalize, q.qk_norm) == (
        6,
        2,
        24,
        True,
        True,
    )
    m = config_from_hf(MOE_MODELS["mixtral-window-tied"]().config)
    assert (m.moe.n_experts, m.moe.router_topk_first, m.resolved_moe_d_ff, m.pattern.sliding_window, m.tie_weights) == (
        6, True, 24, 4, True,
    )  # fmt: skip
    d = config_from_hf(MOE_MODELS["deepseek-v3-moe"]().config)
    assert (d.moe.n_experts, d.moe.experts_per_token, d.moe.n_shared_experts, d.moe.moe_d_ff, d.moe.router_scoring) == (
        8,
        3,
        1,
        12,
        "sigmoid",
    )
    assert (
        d.moe.router_groups,
        d.moe.router_topk_groups,
        d.moe.router_scale,
        d.moe.router_normalize,
        d.moe.first_dense_layers,
    ) == (
        4,
        2,
        2.5,
        True,
        1,
    )
    dense = config_from_hf(deepseek_config(first_k_dense_replace=2, n_routed_experts=4))
    assert dense.moe is None  # every layer dense: no MoE fields


# --------------------------------------------------------------------------- refusals
@pytest.mark.parametrize(
    "make,message",
    [
        (lambda: deepseek_config(rope_parameters={"rope_type": "linear", "rope_theta": 1e4, "factor": 4.0,
                                                  "mscale_all_dim": 1.0}),
         "rope scaling 'linear' with mscale_all_dim"),
        (lambda: Qwen3MoeConfig(**moe_small(), decoder_sparse_step=2), "decoder_sparse_step=2"),
        (lambda: Qwen3MoeConfig(**moe_small(), mlp_only_layers=[1]), "dense layers between MoE layers"),
        (lambda: llama_config(hidden_act="gelu"), "hidden_act='gelu'"),
        (lambda: llama_config(attention_dropout=0.1), "attention_dropout=0.1"),
    ],
)  # fmt: skip
def test_refuses_what_it_cannot_compute_exactly(make, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        config_from_hf(make())


def test_refuses_other_model_types_and_non_models():
    with pytest.raises(ValueError, match="model_type='gpt2' is not supported"):
        config_from_hf(types.SimpleNamespace(model_type="gpt2"))
    with pytest.raises(TypeError, match="got dict"):
        from_hf({"config": None})
    assert {
        "llama",
        "mistral",
        "qwen3",
        "deepseek_v3",
        "gemma2",
        "gemma3_text",
        "mixtral",
        "qwen3_moe",
    } <= set(SUPPORTED_MODEL_TYPES)  # the families of issue 29: tests/test_hf_families.py
    # fmt: skip


@pytest.mark.parametrize(
    "config_name,message",
    [
        ("KimiLinearConfig", r"Kimi Delta Attention .* one decay per channel"),
        ("DeepseekV4Config", "compresses past keys"),
        ("Gemma3nTextConfig", "AltUp"),
        ("MiniMaxConfig", "lightning attention"),
    ],
)
def test_refuses_the_models_of_part_v_saying_what_they_add(config_name, message):
    """The models chapters 15-16 discuss are refused with the reason, not as an unknown model type.

    Gemma 2 and 3 (``gemma2``, ``gemma3_text``), Mixtral and Qwen3-MoE are converted (their tests are above),
    so they are not refused.
    """
    for t in ("gemma2", "gemma3_text", "mixtral", "qwen3_moe"):
        assert t not in NOT_CONVERTED and t in SUPPORTED_MODEL_TYPES
    hf_config = getattr(__import__("transformers"), config_name)()
    assert hf_config.model_type in NOT_CONVERTED
    with pytest.raises(ValueError, match=f"cannot convert this {hf_config.model_type} model exactly: .*{message}"):
        config_from_hf(hf_config)


def test_attn_core_does_not_import_transformers():
    """attn_core (and its convert module) load without transformers: convert reads the object it is given."""
    code = (
        "import sys; sys.modules['transformers'] = None\n"  # any import of transformers now fails
        "import attn_core, attn_core.hf.convert\n"
        "assert 'transformers' not in {m.split('.')[0] for m in sys.modules if sys.modules[m] is not None}\n"
    )
    import subprocess

    subprocess.run([sys.executable, "-c", code], check=True)


def _llama_slip(slip: str):
    from attn_core import MultiHeadAttention
    from attn_core.hf.convert import copy_attention

    hf = LlamaForCausalLM(llama_config())  # d_model=32, 4 heads of 8, 2 key/value heads
    if slip == "base model":
        return from_hf(hf.model)
    if slip == "decoder layer":
        return copy_attention(MultiHeadAttention(32, 4, n_kv_heads=2), hf.model.layers[0])
    if slip == "d_model":
        return copy_attention(MultiHeadAttention(16, 2, n_kv_heads=1), hf.model.layers[0].self_attn)
    if slip == "head_dim":
        return copy_attention(MultiHeadAttention(32, 4, n_kv_heads=2, head_dim=4), hf.model.layers[0].self_attn)
    if slip == "n_kv_heads":
        return copy_attention(MultiHeadAttention(32, 4), hf.model.layers[0].self_attn)
    return copy_attention(hf.model.layers[0].self_attn, MultiHeadAttention(32, 4))  # the arguments swapped


@pytest.mark.parametrize(
    "slip,error,message",
    [
        (
            "base model",
            TypeError,
            r"model must be a causal LM with its head \(e.g. LlamaForCausalLM\), got .*LlamaModel",
        ),
        ("decoder layer", TypeError, r"hf_attn is a decoder layer \(LlamaDecoderLayer\).*pass layer.self_attn"),
        ("d_model", ValueError, "LlamaAttention has d_model=32, the layer d_model=16"),
        ("head_dim", ValueError, "LlamaAttention has head_dim=8, the layer head_dim=4"),
        ("n_kv_heads", ValueError, "LlamaAttention has n_kv_heads=2, the layer n_kv_heads=4"),
        ("swapped", TypeError, "attn must be an attn_core.MultiHeadAttention or .*, got LlamaAttention"),
    ],
)
def test_conversion_slips_name_the_argument(slip, error, message):
    with pytest.raises(error, match=message):
        _llama_slip(slip)
