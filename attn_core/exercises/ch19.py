"""Checks for the exercises of chapter 19 (mixture of experts).

* 19.1 Mixtral's router: the top-k logits, then a softmax over them;
* 19.2 the Switch load-balancing loss;
* 19.3 capacity: which assignments an expert of limited capacity keeps.
"""

from __future__ import annotations

from typing import Callable

import torch

from ..moe import TopKRouter, capacity_keep, load_balancing_loss
from ._common import report

__all__ = ["check_topk_softmax", "check_balancing_loss", "check_capacity_keep"]

F64 = torch.float64


def _call(name: str, fn: Callable, *args):
    """The learner's result, or ``None`` after printing why (a crash becomes a verdict, not an error)."""
    try:
        return fn(*args)
    except Exception as e:  # a learner's bug should print, not stop the notebook
        report(name, False, f"{type(e).__name__}: {e}")
        return None


def check_topk_softmax(fn: Callable) -> bool:
    """Exercise 19.1: ``fn(logits, k) -> (weights, experts)``, Mixtral's routing of ``N`` tokens.

    Keep the ``k`` largest logits of each token, then a softmax over those ``k`` only. The
    order of the ``k`` experts within a token does not matter: pairs are compared after sorting
    by expert. Compared with :class:`attn_core.TopKRouter` (``topk_first=True``).

    Shapes:
        logits: ``(N, E)``; weights: ``(N, k)``; experts: ``(N, k)`` (int64)
    """
    name = "19.1 top-k, then softmax"
    g = torch.Generator().manual_seed(191)
    for N, E, k in ((7, 4, 2), (12, 8, 3), (5, 6, 1)):
        router = TopKRouter(E, E, k, topk_first=True).to(F64)
        with torch.no_grad():
            router.proj.weight.copy_(torch.eye(E, dtype=F64))  # logits = the input itself
        logits = torch.randn(N, E, generator=g, dtype=F64)
        want = router(logits)
        got = _call(name, fn, logits.clone(), k)
        if got is None:
            return False
        if not (isinstance(got, tuple) and len(got) == 2 and all(isinstance(t, torch.Tensor) for t in got)):
            return report(name, False, f"return (weights, experts), two tensors; got {type(got).__name__}")
        weights, experts = got
        if weights.shape != (N, k) or experts.shape != (N, k):
            return report(name, False, f"shapes {tuple(weights.shape)}, {tuple(experts.shape)}; expected ({N}, {k})")
        order, want_order = experts.long().sort(-1), want.experts.sort(-1)
        if not torch.equal(order.values, want_order.values):
            return report(name, False, "not the experts of the k largest logits")
        diff = (weights.double().gather(-1, order.indices) - want.weights.gather(-1, want_order.indices)).abs().max()
        if not diff < 1e-9:
            sums = weights.double().sum(-1)
            hint = " (a softmax over all E experts? the kept weights must sum to 1)" if (sums < 1 - 1e-6).any() else ""
            return report(name, False, f"weights differ by {diff.item():.2g}{hint}")
    return report(name, True, "the experts and weights of attn_core's Mixtral router, 3 cases")


def check_balancing_loss(fn: Callable) -> bool:
    """Exercise 19.2: ``fn(probs, experts, n_experts) -> loss``, the Switch Transformer's auxiliary loss.

    ``E · Σ_e f_e · P_e``: ``f_e`` the fraction of the ``N·k`` assignments routed to expert
    ``e``, ``P_e`` the mean router probability of ``e`` over the ``N`` tokens. Compared with
    :func:`attn_core.moe.load_balancing_loss`, and its gradient with respect to ``probs`` too.

    Shapes:
        probs: ``(N, E)``; experts: ``(N, k)``; loss: a scalar
    """
    name = "19.2 load-balancing loss"
    g = torch.Generator().manual_seed(192)
    for N, E, k in ((10, 4, 1), (16, 8, 2), (9, 3, 3)):
        probs = torch.softmax(torch.randn(N, E, generator=g, dtype=F64), -1)
        experts = probs.topk(k, -1).indices
        want = load_balancing_loss(probs, experts, E)
        p = probs.clone().requires_grad_()
        got = _call(name, fn, p, experts.clone(), E)
        if got is None:
            return False
        if not isinstance(got, torch.Tensor) or got.numel() != 1:
            return report(name, False, f"return a scalar tensor, got {got!r:.60}")
        if not abs(got.item() - want.item()) < 1e-9:
            hint = " (f must sum to 1: divide the counts by N·k)" if abs(got.item() - k * want.item()) < 1e-9 else ""
            return report(name, False, f"N={N}, E={E}, k={k}: got {got.item():.4f}, expected {want.item():.4f}{hint}")
        if not got.requires_grad:
            return report(name, False, "the loss must be differentiable in probs (its gradient balances the router)")
        (grad,) = torch.autograd.grad(got, p)
        ref = probs.clone().requires_grad_()
        (want_grad,) = torch.autograd.grad(load_balancing_loss(ref, experts, E), ref)
        if not (grad - want_grad).abs().max() < 1e-9:
            return report(name, False, "the gradient differs: only P (the probabilities) carries one, f is counted")
    return report(name, True, "equals attn_core's loss for 3 routings, and is differentiable")


def check_capacity_keep(fn: Callable) -> bool:
    """Exercise 19.3: ``fn(experts, n_experts, capacity) -> keep``, which assignments fit their expert.

    Each expert computes at most ``capacity`` assignments. Priority: every token's *first*
    choice before any second choice (GShard), and within one choice, earlier tokens first.
    Compared with :class:`attn_core.MixtureOfExperts`'s own rule.

    Shapes:
        experts: ``(N, k)`` int64; keep: ``(N, k)`` bool
    """
    name = "19.3 capacity: kept assignments"
    g = torch.Generator().manual_seed(193)
    for N, E, k, capacity in ((8, 4, 1, 1), (10, 4, 2, 3), (12, 3, 2, 5)):
        experts = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(N)])  # distinct per token
        want = capacity_keep(experts, E, capacity)
        got = _call(name, fn, experts.clone(), E, capacity)
        if got is None:
            return False
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            return report(name, False, f"return a bool tensor of shape {tuple(want.shape)}, got {got!r:.60}")
        if not torch.equal(got.bool(), want):
            per_expert = torch.bincount(experts[got.bool()], minlength=E)
            if (per_expert > capacity).any():
                return report(name, False, f"an expert keeps more than capacity={capacity}: {per_expert.tolist()}")
            return report(
                name, False, f"N={N}, k={k}, capacity={capacity}: other assignments kept (first choices come first)"
            )
    return report(name, True, "the same assignments as MixtureOfExperts keeps, 3 cases")
