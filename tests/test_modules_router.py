"""attn_core.modules.router: the top-k router (orders, groups, selection bias), capacity, the balancing loss."""

from __future__ import annotations

import pytest
import torch

from attn_core.modules.moe import (
    MixtureOfExperts,
)
from attn_core.modules.router import TopKRouter, capacity_keep, load_balancing_loss
from conftest import F64, randn

D = 8


def moe(E=4, k=2, seed=0, **kw) -> MixtureOfExperts:
    torch.manual_seed(seed)
    return MixtureOfExperts(D, E, k, d_ff=12, **kw).to(F64)


def test_orders_softmax_topk_renormalised_equals_topk_softmax():
    a, b = moe(normalize=True), moe(topk_first=True)
    b.load_state_dict(a.state_dict())
    x = randn(4, 6, D, seed=2)
    torch.testing.assert_close(a(x), b(x), atol=1e-12, rtol=0)
    plain = moe()
    plain.load_state_dict(a.state_dict())
    plain(x)
    assert (plain.stats.weights.sum(-1) < 1 - 1e-6).all()  # unnormalised softmax keeps less than 1
    torch.testing.assert_close(b.stats.weights.sum(-1), torch.ones(4, 6, dtype=F64))


def test_capacity_priority_first_choices_first():
    experts = torch.tensor([[0, 1], [1, 0], [0, 1]])  # expert 0: slot-0 of tokens 0, 2; slot-1 of token 1
    keep = capacity_keep(experts, 2, capacity=2)
    assert keep.tolist() == [[True, True], [True, False], [True, False]]


def test_load_balancing_loss_bounds():
    E = 4
    uniform = torch.full((8, E), 1 / E, dtype=F64)
    experts = torch.arange(8).remainder(E)[:, None]
    assert load_balancing_loss(uniform, experts, E).item() == pytest.approx(1.0)
    collapsed = torch.zeros(8, E, dtype=F64)
    collapsed[:, 0] = 1
    assert load_balancing_loss(collapsed, torch.zeros(8, 1, dtype=torch.long), E).item() == pytest.approx(E)


def test_load_balancing_loss_gradient_lowers_the_busy_expert():
    logits = randn(16, 4, seed=3).requires_grad_()
    probs = torch.softmax(logits, -1)
    experts = torch.zeros(16, 1, dtype=torch.long)  # expert 0 got everything
    load_balancing_loss(probs, experts, 4).backward()
    step = -logits.grad  # gradient descent's direction
    assert (torch.softmax(logits + 0.1 * step, -1)[:, 0] < probs[:, 0]).all()


def test_selection_bias_moves_choice_not_weights():
    m = moe(E=4, k=2, scoring="sigmoid")
    x = randn(10, D, seed=4)
    before = m.router(x)
    m.router.selection_bias[before.experts[0, 0]] -= 10.0  # exclude token 0's first choice
    after = m.router(x)
    assert before.experts[0, 0] not in after.experts[0]
    scores = torch.sigmoid(after.logits)
    torch.testing.assert_close(after.weights, scores.gather(-1, after.experts))


def test_group_limited_choice():
    r = TopKRouter(D, 8, 2, scoring="sigmoid", n_groups=4, topk_groups=1).to(F64)
    out = r(randn(30, D))
    assert (out.experts[:, 0] // 2 == out.experts[:, 1] // 2).all()  # both from the one allowed group


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(k=0), "k must be in 1..n_experts=4"),
        (dict(k=5), "k must be in 1..n_experts=4"),
        (dict(scoring="relu"), "scoring"),
        (dict(topk_first=True, scoring="sigmoid"), "topk_first=True"),
        (dict(topk_first=True, normalize=True), "normalize=False"),
        (dict(n_groups=3), "not divisible by n_groups=3"),
        (dict(n_groups=2, topk_groups=3), "topk_groups=3"),
        (dict(n_groups=4), "must be >= 2"),
        (dict(k=3, n_groups=2, topk_groups=1), "k=3 exceeds"),
        (dict(scale=0.0), "scale"),
    ],
)
def test_router_bad_arguments(kw, message):
    args = {"k": 2, **kw}
    with pytest.raises(ValueError, match=message):
        TopKRouter(D, 4, args.pop("k"), **args)


def test_capacity_keep_bad_input():
    with pytest.raises(ValueError, match="experts must be in"):
        capacity_keep(torch.tensor([[0, 4]]), 4, 1)
    with pytest.raises(ValueError, match="capacity"):
        capacity_keep(torch.tensor([[0, 1]]), 4, -1)
    with pytest.raises(ValueError):
        capacity_keep(torch.tensor([0, 1]), 4, 1)  # (N,) not (N, k)
    assert not capacity_keep(torch.tensor([[0], [0]]), 2, 0).any()  # capacity 0 drops everything


def test_check_router_rules_names_the_callers_fields():
    from attn_core.modules.router import check_router_rules

    check_router_rules(8, 2, "softmax", False, False, 4, 2)  # a valid DeepSeek-style grouping passes
    with pytest.raises(ValueError, match=r"^n_experts=6 is not divisible by n_groups=4$"):
        check_router_rules(6, 2, "softmax", False, False, 4, 1)
    names = {"k": "experts_per_token", "topk_groups": "router_topk_groups", "n_groups": "router_groups"}
    with pytest.raises(ValueError, match=r"experts_per_token=5 exceeds the experts in the router_topk_groups=1"):
        check_router_rules(8, 5, "softmax", False, False, 2, 1, names=names)
    with pytest.raises(ValueError, match=r"router_groups=4 must be >= 2"):
        check_router_rules(4, 1, "softmax", False, False, 4, 1, names=names)
