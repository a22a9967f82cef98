"""Checks for the exercises of chapter 19 (mixture of experts).

* 19.1 the router's gradient, derived by hand (``check_router_logit_grad``);
* 19.2 DeepSeek-V3's complementary sequence-wise balance loss (``check_sequence_balance_loss``);
* 19.3 capacity: which assignments an expert of limited capacity keeps.

Earlier editions' 19.1 (Mixtral's router: top-k logits, then a softmax; ``check_topk_softmax``)
and 19.2 (the Switch load-balancing loss; ``check_balancing_loss``) restated code the chapter
prints; their checks are kept for anyone who still calls them.
"""

from __future__ import annotations

from typing import Callable

import torch

from ..moe import TopKRouter, capacity_keep, load_balancing_loss
from ._common import report

__all__ = [
    "check_topk_softmax",
    "check_balancing_loss",
    "check_capacity_keep",
    "check_router_logit_grad",
    "check_sequence_balance_loss",
]

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


def _mixtral_logit_grad(logits: torch.Tensor, expert_out: torch.Tensor, grad_out: torch.Tensor, k: int) -> torch.Tensor:
    """Reference for 19.1, by autograd: ``∂L/∂logits`` of ``L = Σ grad_out · y``."""
    z = logits.detach().clone().requires_grad_()
    top, experts = z.topk(k, dim=-1)  # (N, k)
    w = torch.softmax(top, dim=-1)  # (N, k)
    chosen = expert_out.gather(1, experts[..., None].expand(-1, -1, expert_out.shape[-1]))  # (N, k, d)
    y = (w[..., None] * chosen).sum(1)  # (N, d)
    (y * grad_out).sum().backward()
    return z.grad


def check_router_logit_grad(fn: Callable) -> bool:
    """Exercise 19.1: ``fn(logits, expert_out, grad_out, k) -> ∂L/∂logits`` for Mixtral's router.

    Mixtral's layer computes ``y_t = Σ_{j ∈ topk(z_t)} w_tj · expert_j(x_t)`` with
    ``w_t = softmax`` over the ``k`` kept logits. Given every expert's output on every token
    (``expert_out``) and ``grad_out = ∂L/∂y``, return the gradient of ``L`` with respect to
    the router's logits, derived by hand (no autograd): the check compares it with autograd.

    Shapes:
        logits: ``(N, E)``; expert_out: ``(N, E, d)``; grad_out: ``(N, d)``; output: ``(N, E)``
    """
    name = "19.1 the router's gradient"
    g = torch.Generator().manual_seed(194)
    for N, E, k, d in ((5, 4, 2, 3), (7, 8, 3, 6), (4, 6, 1, 5)):
        logits = torch.randn(N, E, generator=g, dtype=F64)
        expert_out = torch.randn(N, E, d, generator=g, dtype=F64)
        grad_out = torch.randn(N, d, generator=g, dtype=F64)
        want = _mixtral_logit_grad(logits, expert_out, grad_out, k)
        got = _call(name, fn, logits.clone(), expert_out.clone(), grad_out.clone(), k)
        if got is None:
            return False
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            return report(name, False, f"N={N}, E={E}, k={k}: got {shape}, expected a tensor of shape {(N, E)}")
        got = got.detach().double()
        unchosen = want == 0
        if (got[unchosen] != 0).any():
            return report(
                name, False, f"k={k}: an expert outside a token's top {k} gets a gradient (its logit is not used)"
            )
        err = (got - want).abs().max().item()
        if not err < 1e-9:
            return report(name, False, f"N={N}, E={E}, k={k}: max |Δ| {err:.3g} from autograd's gradient")
    return report(name, True, "equals autograd's ∂L/∂logits for 3 routings (zero outside the top k)")


def _sequence_balance(scores: torch.Tensor, experts: torch.Tensor, n_experts: int) -> torch.Tensor:
    """Reference for 19.2: DeepSeek-V3's sequence-wise balance loss, without its α, averaged over sequences."""
    B, T, k = experts.shape
    counts = torch.zeros(B, n_experts, dtype=scores.dtype).scatter_add_(
        1, experts.reshape(B, T * k), torch.ones(B, T * k, dtype=scores.dtype)
    )  # (B, E): tokens of each sequence that chose each expert
    f = counts * n_experts / (k * T)  # (B, E): 1 for every expert when balanced
    P = (scores / scores.sum(-1, keepdim=True)).mean(1)  # (B, E): normalised affinities, mean over T
    return (f * P).sum(-1).mean()


def check_sequence_balance_loss(fn: Callable) -> bool:
    """Exercise 19.2: ``fn(scores, experts, n_experts)``: DeepSeek-V3's sequence-wise balance loss.

    For each sequence of ``T`` tokens, ``f_i = E/(k·T) · #{t : i ∈ topk_t}`` and ``P_i`` the mean
    over ``t`` of the normalised affinity ``s_{i,t} / Σ_j s_{j,t}``; the loss of the sequence is
    ``Σ_i f_i P_i`` (DeepSeek-V3 multiplies it by α = 1e-4) and ``fn`` returns its mean over the
    batch, differentiable in ``scores``. Checked on random routings, on one where each sequence
    is skewed but the batch as a whole is balanced (a batch-wise loss cannot see it), and at a
    perfect per-sequence balance with uniform scores (loss 1).

    Shapes:
        scores: ``(B, T, E)`` (positive, sigmoid affinities); experts: ``(B, T, k)``; output: ``()``
    """
    name = "19.2 sequence-wise balance loss"
    g = torch.Generator().manual_seed(195)
    E, k, T = 4, 2, 8
    # sequence 0 always picks experts 0, 1; sequence 1 always 2, 3: balanced over the batch
    skew = torch.tensor([[0, 1], [2, 3]])[:, None, :].expand(2, T, k).contiguous()
    skew_scores = torch.sigmoid(torch.randn(2, T, E, generator=g, dtype=F64))
    cases = [(skew_scores, skew)]
    for _ in range(2):  # random
        scores = torch.sigmoid(torch.randn(3, T, E, generator=g, dtype=F64))
        cases.append((scores, scores.topk(k, dim=-1).indices))
    # every expert chosen equally often in each sequence, uniform scores: loss 1
    even = torch.tensor([[0, 1], [2, 3]]).repeat(T // 2, 1)[None].expand(2, T, k).contiguous()
    cases.append((torch.full((2, T, E), 0.7, dtype=F64), even))
    for i, (scores, experts) in enumerate(cases):
        want = _sequence_balance(scores, experts, E)
        s = scores.clone().requires_grad_()
        got = _call(name, fn, s, experts.clone(), E)
        if got is None:
            return False
        if not isinstance(got, torch.Tensor) or got.numel() != 1:
            return report(name, False, f"return a scalar tensor, got {type(got).__name__}")
        if not abs(got.detach().double().item() - want.item()) < 1e-9:
            hint = " (each sequence skewed, the batch balanced: count per sequence)" if i == 0 else ""
            return report(name, False, f"case {i + 1}: got {got.item():.6f}, expected {want.item():.6f}{hint}")
        if not got.requires_grad:
            return report(name, False, "the loss must be differentiable in scores (P is, f is counted)")
    return report(name, True, "equals the reference on 4 routings, a skewed-per-sequence one included")
