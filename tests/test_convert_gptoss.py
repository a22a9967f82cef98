"""gpt-oss's mixture of experts (issue 28): clamped SwiGLU experts with biases, a router with a bias.

Hugging Face's ``GptOssMLP`` (``GptOssTopKRouter`` + ``GptOssExperts``) is the reference in
float64, its weights copied by :func:`~attn_core.convert.copy_moe` (interleaved gate/up
columns, transposed storage, expert biases). Its attention (window, sinks) is held equal in
``tests/test_parity_hf_window.py``. :func:`~attn_core.convert.from_hf` still refuses the whole
model: DecoderLM does not build its mixtures of experts with clamped experts yet.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers", minversion="5.0")

from test_parity_hf import EXACT, max_diff, seeded  # noqa: E402
from transformers import GptOssConfig  # noqa: E402
from transformers.models.gpt_oss import modeling_gpt_oss as hf_gpt_oss  # noqa: E402

from attn_core import SwiGLU  # noqa: E402
from attn_core.convert import config_from_hf, copy_moe  # noqa: E402
from attn_core.mlp import ClampedSwiGLU  # noqa: E402
from attn_core.moe import MixtureOfExperts  # noqa: E402

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


def test_from_hf_refuses_gpt_oss_naming_why():
    with pytest.raises(ValueError, match="gpt_oss model exactly: .*DecoderLM does not build"):
        config_from_hf(gpt_oss_config())
