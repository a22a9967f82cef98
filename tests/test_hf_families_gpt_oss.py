"""gpt-oss's mixture of experts (issue 28): clamped SwiGLU experts with biases, a router with a bias.

Hugging Face's ``GptOssMLP`` (``GptOssTopKRouter`` + ``GptOssExperts``) is the reference in
float64, its weights copied by :func:`~attn_core.hf.weights.copy_moe` (interleaved gate/up
columns, transposed storage, expert biases). Its attention (window, sinks) is held equal in
``tests/test_parity_hf_window.py``; whole tiny models (YaRN, sinks, a window of 3 on alternate
layers, clamped experts) convert with :func:`~attn_core.hf.convert.from_hf`: logits and greedy
generation with caches equal Hugging Face's in float64 (:func:`test_rope_scaling.hf_in_float64`).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers", minversion="5.0")

from test_hf_convert import IDX, assert_greedy_generation_matches  # noqa: E402
from test_parity_hf import EXACT, max_diff, seeded  # noqa: E402
from test_positions_rope_scaling import hf_in_float64  # noqa: E402
from transformers import GptOssConfig, GptOssForCausalLM  # noqa: E402
from transformers.models.gpt_oss import modeling_gpt_oss as hf_gpt_oss  # noqa: E402

from attn_core import SwiGLU  # noqa: E402
from attn_core.hf.configs import config_from_hf  # noqa: E402
from attn_core.hf.convert import from_hf  # noqa: E402
from attn_core.hf.families import NOT_CONVERTED  # noqa: E402
from attn_core.hf.weights import copy_moe  # noqa: E402
from attn_core.modules.mlp import ClampedSwiGLU  # noqa: E402
from attn_core.modules.moe import MixtureOfExperts  # noqa: E402
from attn_core.positions.rope_scaling import YarnScaling  # noqa: E402

F64 = torch.float64


def gpt_oss_config(**kw) -> GptOssConfig:
    base = dict(
        hidden_size=16, intermediate_size=12, num_local_experts=5, num_experts_per_tok=2, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=4, vocab_size=31,
    )  # fmt: skip
    return GptOssConfig(**{**base, **kw})


def moe_pair(config: GptOssConfig, std: float = 1.0):
    """HF's block with weights large enough that the clamps at ±limit act, and ours copied from it."""
    hf = seeded(hf_gpt_oss.GptOssMLP(config), seed=1, std=std)
    ours = MixtureOfExperts(
        config.hidden_size, config.num_local_experts, config.num_experts_per_tok, d_ff=config.intermediate_size,
        bias=True, router_bias=True, topk_first=True, swiglu_limit=config.swiglu_limit,
        swiglu_alpha=config.swiglu_alpha,
    ).to(F64)  # fmt: skip
    copy_moe(ours, hf)
    return hf, ours


@pytest.mark.parametrize("limit", [7.0, 1.5], ids=["gpt-oss", "tight-clamp"])
def test_gpt_oss_moe_equals_hugging_face(limit):
    hf, ours = moe_pair(gpt_oss_config(swiglu_limit=limit))
    x = torch.randn(2, 9, 16, dtype=F64, generator=torch.Generator().manual_seed(0))
    expected, _ = hf(x)
    diff = max_diff(ours(x), expected)
    print(f"gpt-oss MoE (limit {limit}): max |difference| = {diff:.2e}")
    assert diff < EXACT
    # The clamps act on these inputs: the gate and up pre-activations reach past ±limit.
    pre = torch.stack([torch.cat([e.gate_proj(x), e.up_proj(x)], -1).abs().max() for e in ours.experts])
    assert pre.max() > limit
    # Plain SwiGLU experts with the same weights compute something else.
    plain = MixtureOfExperts(16, 5, 2, d_ff=12, bias=True, router_bias=True, topk_first=True).to(F64)
    plain.load_state_dict(ours.state_dict())
    assert max_diff(plain(x), expected) > 1e-3


def test_clamped_swiglu_is_hugging_faces_gate():
    """One expert against ``GptOssExperts._apply_gate`` on the interleaved gate/up pre-activations."""
    torch.manual_seed(0)
    mlp = ClampedSwiGLU(8, 6, limit=2.0, alpha=1.702, bias=True).to(F64)
    x = torch.randn(4, 8, dtype=F64) * 6  # pre-activations past ±2 on both sides
    gate, up = mlp.gate_proj(x), mlp.up_proj(x)
    interleaved = torch.stack([gate, up], -1).flatten(-2)  # (N, 2f): gate, up, gate, up, ...
    hf = hf_gpt_oss.GptOssExperts(gpt_oss_config(swiglu_limit=2.0))
    expected = mlp.down_proj(hf._apply_gate(interleaved))
    assert max_diff(mlp(x), expected) < 1e-14
    # By hand: the gate clamped from above only, up from both sides, then (up + 1) · g · σ(α g).
    g, u = gate.clamp(max=2.0), up.clamp(-2.0, 2.0)
    assert max_diff(mlp(x), mlp.down_proj((u + 1) * g * torch.sigmoid(1.702 * g))) < 1e-14
    assert (gate < -2.0).any() and (gate > 2.0).any() and (up.abs() > 2.0).any()  # every clamp acts
    torch.autograd.gradcheck(mlp, (x[:2].clone().requires_grad_(),))


def test_clamped_swiglu_bad_arguments():
    with pytest.raises(ValueError, match="limit"):
        ClampedSwiGLU(8, 6, limit=0.0)
    with pytest.raises(ValueError, match="alpha"):
        ClampedSwiGLU(8, 6, alpha=-1.0)
    with pytest.raises(ValueError, match="swiglu_alpha=2.0 shapes the clamped experts: set swiglu_limit too"):
        MixtureOfExperts(8, 4, 2, swiglu_alpha=2.0)
    moe = MixtureOfExperts(8, 4, 2, swiglu_limit=7.0)
    assert all(type(e) is ClampedSwiGLU for e in moe.experts)
    assert all(type(e) is SwiGLU for e in MixtureOfExperts(8, 4, 2).experts)


# --------------------------------------------------------------------------- whole models
YARN = {
    "rope_type": "yarn",
    "rope_theta": 1.5e5,
    "factor": 4.0,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "truncate": False,
    "original_max_position_embeddings": 8,
}  # gpt-oss's own, its length shrunk to 8


def tiny_gpt_oss(seed: int = 3, **kw) -> GptOssForCausalLM:
    """A sliding layer (window 3 < the 9 tokens of IDX) and a full one, sinks, biases, 4 clamped experts, top-2."""
    base = dict(
        vocab_size=61, hidden_size=32, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, sliding_window=3, num_local_experts=4, num_experts_per_tok=2,
        max_position_embeddings=32, rope_parameters=dict(YARN), attn_implementation="eager",
        experts_implementation="eager", bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )  # fmt: skip
    return seeded(GptOssForCausalLM(GptOssConfig(**{**base, **kw})), seed=seed, std=0.5)


CASES = {"gpt-oss": {}, "tight-clamp-4-layers": dict(swiglu_limit=1.0, num_hidden_layers=4)}


@pytest.mark.parametrize("case", sorted(CASES))
def test_gpt_oss_gives_the_same_logits(case):
    with hf_in_float64(hf_gpt_oss):
        hf = tiny_gpt_oss(**CASES[case])
        ours = from_hf(hf)
        expected = hf(IDX).logits
    c = ours.config
    assert (
        c.attention_sinks
        and c.moe.router_bias
        and c.moe.router_topk_first
        and isinstance(c.positions.rope_scaling, YarnScaling)
    )
    assert c.moe.expert_swiglu_limit == hf.config.swiglu_limit and c.pattern.layer_types[:2] == ("sliding", "full")
    diff = max_diff(ours(IDX), expected)
    print(f"{case}: max |logit difference| = {diff:.2e}")
    assert diff < EXACT


@pytest.mark.parametrize("case", sorted(CASES))
def test_gpt_oss_greedy_generation_with_caches(case):
    """17 positions: past the window (rolling caches with sinks) and past YaRN's original length 8."""
    with hf_in_float64(hf_gpt_oss):
        assert_greedy_generation_matches(tiny_gpt_oss(seed=4, **CASES[case]))


def test_gpt_oss_converts_and_refuses_another_alpha():
    assert "gpt_oss" not in NOT_CONVERTED
    with pytest.raises(ValueError, match="gpt_oss model exactly: swiglu_alpha=1.5"):
        config_from_hf(gpt_oss_config(swiglu_alpha=1.5))
