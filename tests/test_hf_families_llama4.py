"""Llama 4's text model (issue 28): its parts against Hugging Face's, then whole tiny models.

Its mixture of experts (``Llama4TextMoe``: top-1 by logit, the token scaled by the sigmoid of its
logit *before* the expert, a shared expert beside) is ``MixtureOfExperts(scoring="sigmoid",
n_shared=1, weight_inputs=True)``, held equal to Hugging Face's block in float64 (copied by
:func:`~attn_core.hf.weights.copy_moe`). Its QK-norm (an L2 norm without a gain, after RoPE) equals a
unit-gain per-head RMSNorm before RoPE: a rotation keeps a vector's length. Its chunked attention
(``MultiHeadAttention(chunk=)``) and the NoPE layers' temperature (``temperature=``) are held to
Hugging Face's attention layer here and to their definitions in ``tests/test_llama4_attention.py``;
whole models (chunks of 4 < the 9 and 17 tokens, a NoPE temperature that steps every 3 positions,
dense layers between MoE ones, Llama 3.1 rope scaling) convert with :func:`~attn_core.hf.convert.from_hf`:
logits and greedy generation with caches equal Hugging Face's in float64 (its float32 steps lifted).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers", minversion="5.0")
pytest.importorskip("transformers.models.llama4")

from test_hf_convert import IDX, assert_greedy_generation_matches  # noqa: E402
from test_parity_hf import EXACT, max_diff, seeded  # noqa: E402
from test_positions_rope_scaling import hf_in_float64  # noqa: E402
from transformers import Llama4ForCausalLM, Llama4TextConfig  # noqa: E402
from transformers.models.llama4 import modeling_llama4 as hf_llama4  # noqa: E402

from attn_core import MultiHeadAttention, RMSNorm, RotaryEmbedding  # noqa: E402
from attn_core.hf.configs import config_from_hf  # noqa: E402
from attn_core.hf.convert import copy_attention, from_hf  # noqa: E402,E501
from attn_core.hf.families import NOT_CONVERTED, SUPPORTED_MODEL_TYPES  # noqa: E402
from attn_core.hf.weights import copy_moe  # noqa: E402,E501
from attn_core.model.params import parameter_count  # noqa: E402
from attn_core.modules.moe import MixtureOfExperts  # noqa: E402
from attn_core.positions.rope_scaling import Llama3Scaling  # noqa: E402

F64 = torch.float64


def llama4_config(**kw) -> Llama4TextConfig:
    base = dict(
        hidden_size=16, intermediate_size=12, intermediate_size_mlp=24, num_local_experts=4, num_experts_per_tok=1,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=8, vocab_size=31,
    )  # fmt: skip
    return Llama4TextConfig(**{**base, **kw})


def moe_pair(k: int = 1):
    config = llama4_config(num_experts_per_tok=k)
    with hf_in_float64(hf_llama4):  # the router's sigmoid in float32, lifted
        hf = seeded(hf_llama4.Llama4TextMoe(config), seed=1)
    ours = MixtureOfExperts(16, 4, k, d_ff=12, n_shared=1, scoring="sigmoid", weight_inputs=True).to(F64)
    copy_moe(ours, hf)
    return hf, ours


@pytest.mark.parametrize("k", [1, 2], ids=["top-1", "top-2"])
def test_llama4_moe_equals_hugging_face(k):
    hf, ours = moe_pair(k)
    x = torch.randn(2, 7, 16, dtype=F64, generator=torch.Generator().manual_seed(0))
    with hf_in_float64(hf_llama4):
        expected, _ = hf(x)
    diff = max_diff(ours(x).reshape(-1, 16), expected)
    print(f"Llama 4 MoE (top-{k}): max |difference| = {diff:.2e}")
    assert diff < EXACT
    # Weighting the inputs is not weighting the outputs (a SwiGLU is not linear).
    outputs = MixtureOfExperts(16, 4, k, d_ff=12, n_shared=1, scoring="sigmoid").to(F64)
    outputs.load_state_dict(ours.state_dict())
    assert max_diff(outputs(x).reshape(-1, 16), expected) > 1e-3


def test_copy_moe_refuses_experts_that_weight_the_other_side():
    hf, _ = moe_pair()
    with pytest.raises(ValueError, match="Llama4TextExperts weights its inputs: .*weight_inputs=True"):
        copy_moe(MixtureOfExperts(16, 4, 1, d_ff=12, n_shared=1, scoring="sigmoid").to(F64), hf)


def test_weight_inputs_by_hand_and_bad_input():
    torch.manual_seed(0)
    moe = MixtureOfExperts(8, 3, 1, d_ff=6, scoring="sigmoid", weight_inputs=True).double()
    x = torch.randn(5, 8, dtype=F64)
    r = moe.router(x)
    by_hand = torch.stack([moe.experts[int(e)](x[i] * r.weights[i, 0]) for i, e in enumerate(r.experts[:, 0])])
    assert max_diff(moe(x), by_hand) < 1e-14
    torch.autograd.gradcheck(moe, (x[:2].clone().requires_grad_(),))
    with pytest.raises(TypeError, match="weight_inputs"):
        MixtureOfExperts(8, 3, 1, weight_inputs=1)


def test_l2_qk_norm_after_rope_is_a_unit_rmsnorm_before_it():
    """Llama 4 normalises q and k after rotating them; the rotation keeps their length, so the order does not
    matter: attn_core's per-head QK-norm (before RoPE) with gains of 1 computes it."""
    x = torch.randn(2, 4, 9, 8, dtype=F64, generator=torch.Generator().manual_seed(1))  # (B, H, T, D)
    rope = RotaryEmbedding(8, base=5e5, layout="interleaved")  # Llama 4 rotates neighbouring pairs
    with hf_in_float64(hf_llama4):
        expected = hf_llama4.Llama4TextL2Norm(eps=1e-6)(rope(x))
    assert max_diff(rope(RMSNorm(8, eps=1e-6).double()(x)), expected) < 1e-14


# --------------------------------------------------------------------------- attention layers
def attention_pair(layer_idx: int, **kw):
    """Hugging Face's attention of layer ``layer_idx`` (layers 0, 2 chunked RoPE, 1, 3 NoPE), ours copied from it."""
    config = llama4_config(
        no_rope_layers=[1, 0, 1, 0], attention_chunk_size=4, floor_scale=3, attn_scale=0.5, **kw
    )  # fmt: skip
    config._attn_implementation = "eager"
    with hf_in_float64(hf_llama4):
        hf = seeded(hf_llama4.Llama4TextAttention(config, layer_idx), seed=2)
    c = config_from_hf(config)
    spec = c.layer(layer_idx)
    rope = RotaryEmbedding(8, base=c.positions.rope_base, layout="interleaved") if spec.rope else None
    ours = MultiHeadAttention(
        16, 4, n_kv_heads=2, head_dim=8, causal=True, rope=rope, qk_norm=spec.qk_norm,
        norm_eps=c.norm_eps, chunk=spec.chunk, temperature=spec.temperature,
    ).to(F64)  # fmt: skip
    copy_attention(ours, hf)
    return config, hf, ours


@pytest.mark.parametrize("layer_idx", [0, 1], ids=["chunked-rope-qk_norm", "nope-temperature"])
def test_llama4_attention_layer_equals_hugging_face(layer_idx):
    """One layer over 11 positions (chunks of 4; the temperature steps at positions 2, 5, 8) with HF's own masks."""
    from transformers.masking_utils import create_causal_mask, create_chunked_causal_mask

    config, hf, ours = attention_pair(layer_idx)
    x = torch.randn(2, 11, 16, dtype=F64, generator=torch.Generator().manual_seed(3))
    pos = torch.arange(11)[None]
    kw = dict(config=config, inputs_embeds=x, attention_mask=None, past_key_values=None, position_ids=pos)
    mask = (create_chunked_causal_mask if layer_idx == 0 else create_causal_mask)(**kw)
    with hf_in_float64(hf_llama4):
        freqs = hf_llama4.Llama4TextRotaryEmbedding(config)(x, pos)
        expected, _ = hf(x, freqs, mask)
    diff = max_diff(ours(x), expected)
    print(f"Llama 4 attention, layer {layer_idx}: max |difference| = {diff:.2e}")
    assert diff < EXACT
    # Without its chunk (or temperature) the layer computes something else on these 11 positions.
    plain = MultiHeadAttention(
        16,
        4,
        n_kv_heads=2,
        head_dim=8,
        causal=True,
        rope=ours.rope,
        qk_norm=ours.q_norm is not None,
        norm_eps=ours.q_norm.eps if ours.q_norm is not None else 1e-6,
    ).to(F64)
    plain.load_state_dict(ours.state_dict())
    assert max_diff(plain(x), expected) > 1e-3


def test_copy_attention_refuses_a_layer_without_llama4s_options():
    _, hf, _ = attention_pair(0)
    wrong = MultiHeadAttention(
        16, 4, n_kv_heads=2, head_dim=8, causal=True, rope=RotaryEmbedding(8, layout="interleaved"), qk_norm=True
    ).to(F64)
    with pytest.raises(ValueError, match=r"Llama4TextAttention \(layer 0\) has chunk=4, the layer chunk=None"):
        copy_attention(wrong, hf)
    _, hf, _ = attention_pair(1)
    wrong = MultiHeadAttention(16, 4, n_kv_heads=2, head_dim=8, causal=True).to(F64)
    with pytest.raises(ValueError, match=r"has temperature=\(3.0, 0.5\), the layer temperature=None"):
        copy_attention(wrong, hf)


# --------------------------------------------------------------------------- whole models
LLAMA3 = {
    "rope_type": "llama3", "rope_theta": 5e5, "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8,
}  # fmt: skip


def tiny_llama4(seed: int = 3, **kw) -> Llama4ForCausalLM:
    """4 layers: 0 and 2 chunked RoPE layers (chunks of 4), 1 and 3 NoPE layers with a temperature stepping every
    3 positions (scale 0.5); 4 experts of width 24 and a shared one, dense MLPs of width 40 where not MoE."""
    base = dict(
        vocab_size=61, hidden_size=32, intermediate_size=24, intermediate_size_mlp=40, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_local_experts=4, num_experts_per_tok=1,
        no_rope_layers=[1, 0, 1, 0], attention_chunk_size=4, floor_scale=3, attn_scale=0.5,
        max_position_embeddings=64, attn_implementation="eager", bos_token_id=None, eos_token_id=None,
        pad_token_id=None,
    )  # fmt: skip
    return seeded(Llama4ForCausalLM(Llama4TextConfig(**{**base, **kw})), seed=seed, std=0.5)


SCOUT_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 5e5,
    "factor": 16.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 1.0,
    "original_max_position_embeddings": 8,
}  # Llama 4 Scout's own (low = high: a step, no band; needs /tmp/llama4-rope_scaling.patch), its length shrunk to 8

CASES = {
    "scout-like": {},
    "scout-rope": dict(rope_parameters=dict(SCOUT_ROPE)),
    "moe-every-2nd-no-qk_norm": dict(interleave_moe_layer_step=2, use_qk_norm=False),
    "llama3-rope-top-2-sdpa": dict(rope_parameters=dict(LLAMA3), num_experts_per_tok=2, attn_implementation="sdpa"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_llama4_gives_the_same_logits(case):
    with hf_in_float64(hf_llama4):
        hf = tiny_llama4(**CASES[case])
        ours = from_hf(hf)
        expected = hf(IDX).logits
    c = ours.config
    assert c.pattern.layer_types == ("chunked", "full", "chunked", "full") and c.pattern.attention_chunk_size == 4
    assert c.positions.rope_layers == (True, False, True, False) and c.positions.nope_temperature == (3.0, 0.5)
    assert (
        c.positions.rope_layout == "interleaved"
        and c.moe.router_weight_inputs
        and c.d_ff == 40
        and c.moe.moe_d_ff == 24
    )
    assert [c.is_moe_layer(i) for i in range(4)] == [hf.config.interleave_moe_layer_step == 1, True] * 2
    assert isinstance(c.positions.rope_scaling, Llama3Scaling) == ("rope_parameters" in CASES[case])
    # Hugging Face's count, plus the unit QK-norm gains attn_core keeps in the RoPE layers (2 · head_dim each).
    gains = 2 * 8 * 2 if hf.config.use_qk_norm else 0
    assert ours.num_parameters() == parameter_count(c) == sum(p.numel() for p in hf.parameters()) + gains
    diff = max_diff(ours(IDX), expected)
    print(f"{case}: max |logit difference| = {diff:.2e}")
    assert diff < EXACT


@pytest.mark.parametrize("case", sorted(CASES))
def test_llama4_greedy_generation_with_caches(case):
    """17 positions: five chunks of 4, the temperature's steps, past Llama 3.1's original length 8."""
    with hf_in_float64(hf_llama4):
        assert_greedy_generation_matches(tiny_llama4(seed=4, **CASES[case]))


def test_llama4_converts_and_refuses_what_attn_core_does_not_compute():
    assert "llama4_text" in SUPPORTED_MODEL_TYPES and "llama4_text" not in NOT_CONVERTED
    with pytest.raises(ValueError, match=r"llama4_text model exactly: moe_layers=\[0, 2\]"):
        config_from_hf(llama4_config(moe_layers=[0, 2]))
    with pytest.raises(ValueError, match="hidden_act='gelu'"):
        config_from_hf(llama4_config(hidden_act="gelu"))
    with pytest.raises(ValueError, match="attention_chunk_size=None"):
        config_from_hf(llama4_config(attention_chunk_size=None))
    # Without NoPE layers the temperature has nowhere to act and is not set; no QK-norm without use_qk_norm.
    c = config_from_hf(llama4_config(no_rope_layers=[1, 1, 1, 1], use_qk_norm=False))
    assert c.positions.nope_temperature is None and c.positions.rope_layers is None and not c.qk_norm
