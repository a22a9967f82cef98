"""Parity with Hugging Face (float64, copied weights): the mixture-of-experts blocks of Mixtral, Qwen3-MoE, DeepSeek-V3.

:class:`attn_core.MixtureOfExperts` with options: ``topk_first=True`` is Mixtral's router,
``normalize`` Qwen3-MoE's ``norm_topk_prob``, sigmoid scoring with groups, a scale, a
shared expert and the selection bias DeepSeek-V3's. Hugging Face computes its routers in
float32 (``.float()``, ``softmax(dtype=torch.float)``, ``.type(torch.float32)``); the fixture
keeps float64 tensors in float64 there (their intent is "at least float32"), and the
blocks then agree to ~1e-15. Nothing is downloaded: tiny configs, random weights.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attn_core import MixtureOfExperts
from attn_core.modules.router import load_balancing_loss
from conftest import F64, randn

transformers = pytest.importorskip("transformers")
from transformers.models.deepseek_v3 import modeling_deepseek_v3  # noqa: E402
from transformers.models.mixtral import modeling_mixtral  # noqa: E402
from transformers.models.qwen3_moe import modeling_qwen3_moe  # noqa: E402

D_MODEL, D_FF = 16, 24
TOL = 1e-12


@pytest.fixture(autouse=True)
def _routers_keep_float64(monkeypatch):
    """Keep float64 in float64 where Hugging Face's routers cast to float32 (an upcast for half precision)."""
    softmax, to_float, to_type = torch.nn.functional.softmax, torch.Tensor.float, torch.Tensor.type

    def keep_softmax(x, dim=None, *args, dtype=None, **kwargs):
        if x.dtype == F64 and dtype == torch.float32:
            dtype = F64
        return softmax(x, dim, *args, dtype=dtype, **kwargs)

    def keep_type(self, dtype=None, *args, **kwargs):
        if self.dtype == F64 and dtype is torch.float32:
            return self
        return to_type(self, dtype, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "softmax", keep_softmax)
    monkeypatch.setattr(
        torch.Tensor, "float", lambda self, *a, **k: self if self.dtype == F64 else to_float(self, *a, **k)
    )
    monkeypatch.setattr(torch.Tensor, "type", keep_type)


def _randomise(module: nn.Module, seed: int, std: float = 0.3) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * std)


def copy_moe(ours: MixtureOfExperts, hf: nn.Module) -> MixtureOfExperts:
    """Hugging Face's stacked expert weights (``gate_up_proj (E, 2f, d)``, ``down_proj (E, d, f)``) into our experts."""
    with torch.no_grad():
        ours.router.proj.weight.copy_(hf.gate.weight)
        if hasattr(hf.gate, "e_score_correction_bias"):
            ours.router.selection_bias.copy_(hf.gate.e_score_correction_bias)
        for e, expert in enumerate(ours.experts):
            gate, up = hf.experts.gate_up_proj[e].chunk(2, dim=0)  # (2f, d) -> two (f, d): gate rows first
            expert.gate_proj.weight.copy_(gate)
            expert.up_proj.weight.copy_(up)
            expert.down_proj.weight.copy_(hf.experts.down_proj[e])
        if getattr(hf, "shared_experts", None) is not None:
            for name in ("gate_proj", "up_proj", "down_proj"):
                getattr(ours.shared, name).weight.copy_(getattr(hf.shared_experts, name).weight)
    return ours


def mixtral_pair(seed: int = 0, E: int = 6, k: int = 2):
    config = modeling_mixtral.MixtralConfig(
        hidden_size=D_MODEL, intermediate_size=D_FF, num_local_experts=E, num_experts_per_tok=k
    )
    hf = modeling_mixtral.MixtralSparseMoeBlock(config).to(F64).eval()
    _randomise(hf, seed)
    return hf, copy_moe(MixtureOfExperts(D_MODEL, E, k, d_ff=D_FF, topk_first=True).to(F64), hf)


def qwen3_moe_pair(seed: int = 0, E: int = 6, k: int = 2, normalize: bool = False):
    config = modeling_qwen3_moe.Qwen3MoeConfig(
        hidden_size=D_MODEL, moe_intermediate_size=D_FF, num_experts=E, num_experts_per_tok=k,
        norm_topk_prob=normalize,
    )  # fmt: skip
    hf = modeling_qwen3_moe.Qwen3MoeSparseMoeBlock(config).to(F64).eval()
    _randomise(hf, seed)
    return hf, copy_moe(MixtureOfExperts(D_MODEL, E, k, d_ff=D_FF, normalize=normalize).to(F64), hf)


def deepseek_pair(seed: int = 0, **kw):
    """DeepSeek-V3's MoE: 8 experts in 4 groups, 2 groups per token, top-3, sigmoid, scale 2.5, one shared expert."""
    base = dict(
        hidden_size=D_MODEL, moe_intermediate_size=D_FF, n_routed_experts=8, num_experts_per_tok=3, n_group=4,
        topk_group=2, n_shared_experts=1, routed_scaling_factor=2.5, norm_topk_prob=True,
    )  # fmt: skip
    config = modeling_deepseek_v3.DeepseekV3Config(**{**base, **kw})
    hf = modeling_deepseek_v3.DeepseekV3MoE(config).to(F64).eval()
    _randomise(hf, seed)
    hf.gate.e_score_correction_bias.copy_(randn(config.n_routed_experts, seed=seed + 7) * 0.1)
    ours = MixtureOfExperts(
        D_MODEL, config.n_routed_experts, config.num_experts_per_tok, d_ff=D_FF, n_shared=config.n_shared_experts,
        scoring="sigmoid", normalize=config.norm_topk_prob, scale=config.routed_scaling_factor,
        n_groups=config.n_group, topk_groups=config.topk_group,
    ).to(F64)  # fmt: skip
    return hf, copy_moe(ours, hf)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mixtral_sparse_moe_block(seed):
    hf, ours = mixtral_pair(seed)
    x = randn(2, 9, D_MODEL, seed=seed)
    torch.testing.assert_close(ours(x), hf(x), atol=TOL, rtol=0)


@pytest.mark.parametrize("normalize", [False, True])
def test_qwen3_moe_sparse_moe_block(normalize):
    hf, ours = qwen3_moe_pair(normalize=normalize)
    x = randn(2, 9, D_MODEL, seed=3)
    torch.testing.assert_close(ours(x), hf(x), atol=TOL, rtol=0)


def test_qwen3_normalised_equals_mixtral_order():
    """Softmax, top-k, renormalise = top-k, softmax: Qwen3-MoE with norm_topk_prob = our Mixtral order."""
    hf, _ = qwen3_moe_pair(seed=4, normalize=True)
    ours = copy_moe(MixtureOfExperts(D_MODEL, 6, 2, d_ff=D_FF, topk_first=True).to(F64), hf)
    x = randn(3, 5, D_MODEL, seed=4)
    torch.testing.assert_close(ours(x), hf(x), atol=TOL, rtol=0)


@pytest.mark.parametrize("kw", [{}, dict(n_group=1, topk_group=1), dict(norm_topk_prob=False, n_shared_experts=2)])
def test_deepseek_v3_moe(kw):
    hf, ours = deepseek_pair(seed=5, **kw)
    x = randn(2, 9, D_MODEL, seed=5)
    torch.testing.assert_close(ours(x), hf(x), atol=TOL, rtol=0)


def test_deepseek_v3_selection_bias_changes_the_choice_only():
    """With the bias zeroed, HF and ours still agree, and differ from the biased output (the bias matters)."""
    hf, ours = deepseek_pair(seed=6)
    x = randn(2, 9, D_MODEL, seed=6)
    biased = ours(x)
    hf.gate.e_score_correction_bias.zero_()
    ours.router.selection_bias.zero_()
    torch.testing.assert_close(ours(x), hf(x), atol=TOL, rtol=0)
    assert (ours(x) - biased).abs().max() > 1e-3


def test_router_choice_equals_hf():
    hf, ours = deepseek_pair(seed=8)
    x = randn(20, D_MODEL, seed=8)
    _, hf_weights, hf_index = hf.gate(x)
    r = ours.router(x)
    order_hf, order_ours = hf_index.sort(-1), r.experts.sort(-1)  # HF keeps them unsorted
    assert torch.equal(order_hf.values, order_ours.values)
    torch.testing.assert_close(r.weights.gather(-1, order_ours.indices), hf_weights.gather(-1, order_hf.indices))


@pytest.mark.parametrize("k", [1, 2, 3])
def test_load_balancing_loss_is_hf_over_k(k):
    """Hugging Face's ``load_balancing_loss_func`` counts top-k assignments per token (its f sums to k)."""
    logits = randn(40, 6, seed=k)
    hf = modeling_mixtral.load_balancing_loss_func((logits[:20], logits[20:]), num_experts=6, top_k=k)
    probs = torch.softmax(logits, -1)
    ours = load_balancing_loss(probs, probs.topk(k, -1).indices, 6)
    torch.testing.assert_close(ours * k, hf.to(F64), atol=1e-6, rtol=1e-6)  # HF sums its histogram in float32
