"""attn_core.modules.moe: the mixture of experts (dense definition, stats, capacity drops), the model-level helpers."""

from __future__ import annotations

import math

import pytest
import torch

from attn_core import DecoderConfig, DecoderLM, SwiGLU
from attn_core.config import MoE
from attn_core.modules.moe import (
    MixtureOfExperts,
    load_imbalance,
    moe_aux_loss,
    moe_layers,
    update_selection_biases,
)
from attn_core.modules.router import TopKRouter, expert_capacity, load_balancing_loss
from attn_core.teach.training import moe_lm_loss
from conftest import F64, randn

D = 8


def moe(E=4, k=2, seed=0, **kw) -> MixtureOfExperts:
    torch.manual_seed(seed)
    return MixtureOfExperts(D, E, k, d_ff=12, **kw).to(F64)


def reference(m: MixtureOfExperts, x: torch.Tensor) -> torch.Tensor:
    """Every token through every expert, then the router's weights on the chosen ones: the dense definition."""
    flat = x.reshape(-1, D)
    r = m.router(flat)
    all_out = torch.stack([e(flat) for e in m.experts], 1)  # (N, E, d)
    chosen = all_out.gather(1, r.experts[..., None].expand(-1, -1, D))  # (N, k, d)
    out = (r.weights[..., None] * chosen).sum(1)
    if m.shared is not None:
        out = out + m.shared(flat)
    return out.view_as(x)


@pytest.mark.parametrize(
    "kw",
    [{}, dict(topk_first=True), dict(normalize=True), dict(scoring="sigmoid", normalize=True, scale=2.5),
     dict(n_shared=2), dict(E=8, k=3, scoring="sigmoid", n_groups=4, topk_groups=2)],
)  # fmt: skip
def test_forward_equals_the_dense_definition(kw):
    m = moe(**kw)
    x = randn(2, 5, D)
    out = m(x)
    assert out.shape == x.shape
    torch.testing.assert_close(out, reference(m, x), atol=1e-12, rtol=0)


def test_one_expert_is_its_swiglu():
    m = moe(E=1, k=1)
    x = randn(3, 4, D)
    torch.testing.assert_close(m(x), m.experts[0](x), atol=1e-12, rtol=0)
    assert isinstance(m.experts[0], SwiGLU)


def test_stats_count_every_assignment():
    m = moe(E=4, k=2)
    m(randn(3, 5, D))
    s = m.stats
    assert s.tokens_per_expert.shape == (4,) and int(s.tokens_per_expert.sum()) == 3 * 5 * 2
    assert s.experts.shape == (3, 5, 2) and s.weights.shape == (3, 5, 2) and s.dropped == 0 and s.n_tokens == 15
    assert torch.equal(torch.bincount(s.experts.flatten(), minlength=4), s.tokens_per_expert)
    # the k chosen experts of a token are distinct
    assert (s.experts[..., 0] != s.experts[..., 1]).all()


def test_capacity_drops_and_counts():
    m = moe(E=4, k=1, capacity_factor=1.0)
    with torch.no_grad():  # a router that sends every token to expert 2
        m.router.proj.weight.zero_()
        m.router.proj.bias = None
        m.router.selection_bias[2] = 1.0
    x = randn(1, 12, D)
    out = m(x)
    cap = expert_capacity(1.0, 12, 1, 4)
    assert cap == 3 and m.stats.dropped == 12 - cap and m.stats.dropped_fraction == pytest.approx(9 / 12)
    flat = x.reshape(-1, D)
    kept = m.experts[2](flat[:cap]) * 0.25  # uniform softmax over 4 experts: weight 1/4
    torch.testing.assert_close(out[0, :cap], kept)
    assert out[0, cap:].abs().max() == 0  # dropped: the layer adds nothing for them


def test_large_capacity_changes_nothing():
    a, b = moe(), moe(capacity_factor=4.0)
    b.load_state_dict(a.state_dict())
    x = randn(2, 7, D)
    torch.testing.assert_close(a(x), b(x), atol=0, rtol=0)
    assert b.stats.dropped == 0


def test_gradcheck():
    m = moe(E=3, k=2, n_shared=1)
    x = randn(2, 3, D).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: m(t), (x,))
    # the router's weights get a gradient through the expert weights and the aux loss
    m(x).sum().add(m.stats.aux_loss).backward()
    assert m.router.proj.weight.grad.abs().sum() > 0


def test_selection_bias_update_by_sign():
    m = moe(E=4, k=1)
    with torch.no_grad():
        m.router.proj.weight.zero_()
        m.router.selection_bias[1] = 0.5  # every token to expert 1
    m(randn(1, 8, D))
    bias = m.update_selection_bias(0.1)
    torch.testing.assert_close(bias, torch.tensor([0.1, 0.4, 0.1, 0.1], dtype=F64))
    with pytest.raises(ValueError, match="forward first"):
        moe().update_selection_bias(0.1)
    with pytest.raises(ValueError, match="rate"):
        m.update_selection_bias(0.0)


def test_load_imbalance():
    assert load_imbalance(torch.tensor([5, 5, 5, 5])) == 1.0
    assert load_imbalance(torch.tensor([20, 0, 0, 0])) == 4.0
    with pytest.raises(ValueError, match="sums to 0"):
        load_imbalance(torch.zeros(3))


def test_bad_arguments_and_inputs():
    with pytest.raises(TypeError, match="k must be an int"):
        TopKRouter(D, 4, 1.5)
    with pytest.raises(ValueError, match="n_shared"):
        MixtureOfExperts(D, 4, 2, n_shared=-1)
    with pytest.raises(ValueError, match="capacity_factor"):
        MixtureOfExperts(D, 4, 2, capacity_factor=0.0)
    with pytest.raises(ValueError, match="d_model"):
        moe()(randn(2, 3, D + 1))
    with pytest.raises(ValueError):
        TopKRouter(D, 4, 2)(torch.randn(2, 3, D))  # the router takes (N, d)
    with pytest.raises(ValueError, match=r"E=5"):
        load_balancing_loss(torch.rand(3, 4), torch.zeros(3, 1, dtype=torch.long), 5)
    assert expert_capacity(1.25, 10, 2, 4) == math.ceil(1.25 * 10 * 2 / 4)


def test_model_helpers_and_loss_fn():
    config = DecoderConfig.llama_like(d_ff=16, moe=MoE(n_experts=4, experts_per_token=2))
    torch.manual_seed(0)
    model = DecoderLM(config)
    layers = moe_layers(model)
    assert len(layers) == config.n_layers
    with pytest.raises(ValueError, match="run the model first"):
        moe_aux_loss(model)
    idx = torch.randint(0, 64, (2, 9))
    loss = moe_lm_loss(aux_weight=0.01, bias_rate=0.001)(model, (idx, idx))
    assert torch.isfinite(loss)
    aux = moe_aux_loss(model)
    assert aux.item() > 0 and aux.requires_grad
    assert any(m.router.selection_bias.abs().sum() > 0 for m in layers)
    update_selection_biases(model, 0.01)


def test_moe_decoder_caches_and_causality():
    """A MoE layer is per token: prefill + one token at a time equals the full pass, and the future cannot leak."""
    config = DecoderConfig.llama_like(
        n_layers=3, d_ff=16, moe=MoE(n_experts=4, experts_per_token=2, n_shared_experts=1, first_dense_layers=1)
    )
    torch.manual_seed(1)
    model = DecoderLM(config).double().eval()
    idx = torch.randint(0, 64, (2, 10))
    with torch.no_grad():
        full = model(idx)
        caches = model.make_caches(2, 16)
        steps = [model(idx[:, :4], caches=caches)] + [model(idx[:, t : t + 1], caches=caches) for t in range(4, 10)]
        torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-10, rtol=0)
        changed = idx.clone()
        changed[:, 6:] = (changed[:, 6:] + 1) % 64
        torch.testing.assert_close(model(changed)[:, :6], full[:, :6], atol=1e-12, rtol=0)
