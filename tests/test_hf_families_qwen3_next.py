"""Qwen3-Next's mixture of experts (issue 28): a shared expert scaled by a learned sigmoid gate per token.

Hugging Face's ``Qwen3NextSparseMoeBlock`` is the reference in float64, copied by
:func:`~attn_core.hf.weights.copy_moe` (``shared_expert``, ``shared_expert_gate``). Its other layers
convert one by one (gated attention: ``tests/test_parity_hf_*``; Gated DeltaNet:
``copy_gated_deltanet``). :func:`~attn_core.hf.convert.from_hf` still refuses the whole model:
DecoderLM does not build its mixtures of experts with the shared gate yet.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

pytest.importorskip("transformers", minversion="5.0")

from test_hf_convert import IDX, assert_greedy_generation_matches  # noqa: E402
from test_parity_hf import EXACT, max_diff, seeded  # noqa: E402
from test_positions_rope_scaling import hf_in_float64  # noqa: E402
from transformers import Qwen3NextConfig, Qwen3NextForCausalLM  # noqa: E402
from transformers.models.qwen3_next import modeling_qwen3_next as hf_qwen3_next  # noqa: E402

from attn_core import DecoderLM, GatedDeltaNet  # noqa: E402
from attn_core.hf.configs import config_from_hf  # noqa: E402
from attn_core.hf.convert import from_hf  # noqa: E402
from attn_core.hf.families import NOT_CONVERTED  # noqa: E402
from attn_core.hf.weights import copy_moe  # noqa: E402
from attn_core.modules.moe import MixtureOfExperts  # noqa: E402

F64 = torch.float64


def qwen3_next_config(**kw) -> Qwen3NextConfig:
    base = dict(
        hidden_size=16, moe_intermediate_size=8, shared_expert_intermediate_size=12, num_experts=6,
        num_experts_per_tok=2, norm_topk_prob=True, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, vocab_size=31,
    )  # fmt: skip
    return Qwen3NextConfig(**{**base, **kw})


@pytest.mark.parametrize("normalize", [True, False], ids=["norm_topk_prob", "unnormalised"])
def test_qwen3_next_moe_equals_hugging_face(normalize):
    config = qwen3_next_config(norm_topk_prob=normalize)
    with hf_in_float64(hf_qwen3_next):  # its router's softmax in float32, lifted
        hf = seeded(hf_qwen3_next.Qwen3NextSparseMoeBlock(config), seed=2)
        ours = MixtureOfExperts(16, 6, 2, d_ff=8, n_shared=1, shared_d_ff=12, shared_gate=True, normalize=normalize).to(
            F64
        )
        copy_moe(ours, hf)
        x = torch.randn(2, 7, 16, dtype=F64, generator=torch.Generator().manual_seed(0))
        expected = hf(x)
    diff = max_diff(ours(x), expected)
    print(f"Qwen3-Next MoE (normalize={normalize}): max |difference| = {diff:.2e}")
    assert diff < EXACT
    # The gate matters: without it (the shared expert added whole) the output differs.
    ungated = MixtureOfExperts(16, 6, 2, d_ff=8, n_shared=1, shared_d_ff=12, normalize=normalize).to(F64)
    ungated.load_state_dict({k: v for k, v in ours.state_dict().items() if not k.startswith("shared_gate")})
    assert max_diff(ungated(x), expected) > 1e-3


def test_shared_gate_scales_the_shared_expert_by_a_sigmoid_per_token():
    torch.manual_seed(0)
    moe = MixtureOfExperts(8, 4, 1, d_ff=6, n_shared=1, shared_gate=True).double()
    x = torch.randn(5, 8, dtype=F64)
    routed = MixtureOfExperts(8, 4, 1, d_ff=6).double()
    routed.load_state_dict({k: v for k, v in moe.state_dict().items() if k.startswith(("router", "experts"))})
    by_hand = routed(x) + torch.sigmoid(x @ moe.shared_gate.weight.t()) * moe.shared(x)
    assert max_diff(moe(x), by_hand) < 1e-14
    assert moe.shared.d_ff == 6 and moe.shared_gate.bias is None
    torch.autograd.gradcheck(moe, (x[:2].clone().requires_grad_(),))


def test_shared_gate_bad_arguments():
    with pytest.raises(ValueError, match="shared_gate=True gates the shared experts, but n_shared=0"):
        MixtureOfExperts(8, 4, 2, shared_gate=True)
    with pytest.raises(ValueError, match="shared_d_ff=12 is the shared experts' width, but n_shared=0"):
        MixtureOfExperts(8, 4, 2, shared_d_ff=12)
    with pytest.raises(TypeError, match="shared_gate"):
        MixtureOfExperts(8, 4, 2, n_shared=1, shared_gate=1)


def test_copy_moe_refuses_a_missing_gate():
    hf = hf_qwen3_next.Qwen3NextSparseMoeBlock(qwen3_next_config())
    with pytest.raises(ValueError, match="shared expert gate: Hugging Face has True, ours False"):
        copy_moe(MixtureOfExperts(16, 6, 2, d_ff=8, n_shared=1, shared_d_ff=12), hf)


def test_qwen3_next_moe_layers_are_read_and_dense_ones_after_them_refused():
    c = config_from_hf(qwen3_next_config())
    assert (c.moe.n_experts, c.moe.experts_per_token, c.moe.moe_d_ff, c.moe.first_dense_layers) == (6, 2, 8, 0)
    assert (c.moe.n_shared_experts, c.moe.shared_expert_d_ff, c.moe.shared_expert_gate, c.moe.router_normalize) == (
        1,
        12,
        True,
        True,
    )
    assert config_from_hf(qwen3_next_config(mlp_only_layers=[0, 1])).moe.first_dense_layers == 2
    with pytest.raises(ValueError, match=r"mixture-of-experts layers \[1, 3\]: dense layers after MoE ones"):
        config_from_hf(qwen3_next_config(decoder_sparse_step=2))
    assert "qwen3_next" not in NOT_CONVERTED


# --------------------------------------------------------------------------- whole models, dense MLPs
def tiny_qwen3_next(seed: int = 3, **kw) -> Qwen3NextForCausalLM:
    """Three Gated DeltaNet layers and a full one; every MLP dense (mlp_only_layers); decays not all ~0."""
    base = dict(
        vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=64, linear_num_key_heads=2,
        linear_key_head_dim=8, linear_num_value_heads=4, linear_value_head_dim=6, linear_conv_kernel_dim=4,
        mlp_only_layers=[0, 1, 2, 3], bos_token_id=None, eos_token_id=None, pad_token_id=None,
        attn_implementation="sdpa",
    )  # fmt: skip
    hf = seeded(Qwen3NextForCausalLM(Qwen3NextConfig(**{**base, **kw})), seed=seed)
    with torch.no_grad():
        for layer in hf.model.layers:
            if hasattr(layer, "linear_attn"):
                layer.linear_attn.A_log.copy_(torch.rand_like(layer.linear_attn.A_log).log())
    return hf


CASES = {
    "qwen3-next": {},
    "moe-after-a-dense-layer": dict(mlp_only_layers=[0], num_experts=4, num_experts_per_tok=2, moe_intermediate_size=8,
                                    shared_expert_intermediate_size=12, experts_implementation="eager"),
    "full-first-tied": dict(layer_types=["full_attention", "linear_attention", "full_attention", "linear_attention"],
                            tie_word_embeddings=True),
    "half-rotary": dict(rope_parameters={"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_qwen3_next_gives_the_same_logits(case):
    with hf_in_float64(hf_qwen3_next):
        hf = tiny_qwen3_next(**CASES[case])
        ours = from_hf(hf)
        expected = hf(IDX).logits
    c = ours.config
    assert c.resolved_layer_types.count("linear") == (2 if "layer_types" in CASES[case] else 3)
    assert [isinstance(b.attn, GatedDeltaNet) for b in ours.blocks] == [k == "linear" for k in c.pattern.layer_types]
    assert c.attention_gate == "elementwise" and c.positions.rotary_dim == (8 if case == "half-rotary" else 4)
    assert (c.moe is not None) == ("num_experts" in CASES[case])
    diff = max_diff(ours(IDX), expected)
    print(f"{case}: max |logit difference| = {diff:.2e}")
    assert diff < EXACT
    # RoPE on part of each head matters: rotating all of it gives other logits.
    whole = (
        DecoderLM(dataclasses.replace(c, positions=dataclasses.replace(c.positions, rotary_dim=None))).to(F64).eval()
    )
    whole.load_state_dict(ours.state_dict())
    assert max_diff(whole(IDX), expected) > 1e-3


@pytest.mark.parametrize("case", sorted(CASES))
def test_qwen3_next_greedy_generation_with_caches(case):
    """Recurrent states in the linear layers, a KV cache in the full ones: HF's tokens and logits."""
    with hf_in_float64(hf_qwen3_next):
        assert_greedy_generation_matches(tiny_qwen3_next(seed=4, **CASES[case]))
