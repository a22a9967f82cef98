"""Checks for the exercises of chapter 19 (mixture of experts).

* 19.1 the router's gradient, derived by hand (``check_router_logit_grad``);
* 19.2 DeepSeek-V3's complementary sequence-wise balance loss (``check_sequence_balance_loss``);
* 19.3 ST-MoE's router z-loss (``check_router_z_loss``).
"""

from __future__ import annotations

from typing import Callable

import torch

from ._common import describe, report

__all__ = [
    "check_router_logit_grad",
    "check_router_z_loss",
    "check_sequence_balance_loss",
]

F64 = torch.float64


_RAISED = object()  # what _call returns when the learner's function raised (None may be an answer)


def _call(name: str, fn: Callable, *args):
    """The learner's result, or ``_RAISED`` after printing why (a crash becomes a verdict, not an error)."""
    try:
        return fn(*args)
    except Exception as e:  # a learner's bug should print, not stop the notebook
        report(name, False, f"{type(e).__name__}: {e}")
        return _RAISED


def _z_loss(logits: torch.Tensor) -> torch.Tensor:
    """Reference for 19.3: ST-MoE's router z-loss, the mean over tokens of ``logsumexp(z)²``."""
    return torch.logsumexp(logits, dim=-1).pow(2).mean()


def check_router_z_loss(fn: Callable) -> bool:
    """Exercise 19.3: ``fn(logits) -> z_loss``, ST-MoE's router z-loss (without its weight).

    ``(1/N) Σ_t (log Σ_e exp z_te)²`` over the ``N`` tokens of ``logits``, whatever its
    leading dimensions, differentiable. Unlike the router's softmax, it changes when every
    logit of a token moves by the same constant: that is what keeps the logits small. Checked
    on random logits of two shapes and on logits shifted by a constant.

    Shapes:
        logits: ``(..., E)``; output: ``()``
    """
    name = "19.3 the router z-loss"
    g = torch.Generator().manual_seed(196)
    base = torch.randn(6, 4, generator=g, dtype=F64)
    cases = [
        ("(6, 4) random", base),
        ("(2, 5, 8) random", 2 * torch.randn(2, 5, 8, generator=g, dtype=F64)),
        ("(6, 4) + 5 on every logit", base + 5.0),
    ]
    for label, logits in cases:
        want = _z_loss(logits)
        z = logits.clone().requires_grad_()
        got = _call(name, fn, z)
        if got is _RAISED:
            return False
        if not isinstance(got, torch.Tensor) or got.numel() != 1:
            return report(name, False, f"return a scalar tensor, got {describe(got)}")
        if not abs(got.detach().double().item() - want.item()) < 1e-9:
            detail = f"got {got.item():.6f}, expected {want.item():.6f}"
            try:  # the softmax's blind spot: blind to a constant added to every logit
                shifted = fn(base.clone()) - fn(base.clone() + 5.0)
                if abs(float(shifted)) < 1e-9:
                    detail = "a constant added to every logit must change it (the softmax hides it)"
            except Exception:  # the verdict above stands
                pass
            return report(name, False, f"{label}: {detail}")
        if not got.requires_grad:
            return report(name, False, "the loss must be differentiable in the logits")
    return report(name, True, "equals the reference on 3 cases, shifted ones included")


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
        if got is _RAISED:
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
        if got is _RAISED:
            return False
        if not isinstance(got, torch.Tensor) or got.numel() != 1:
            return report(name, False, f"return a scalar tensor, got {type(got).__name__}")
        if not abs(got.detach().double().item() - want.item()) < 1e-9:
            hint = " (each sequence skewed, the batch balanced: count per sequence)" if i == 0 else ""
            return report(name, False, f"case {i + 1}: got {got.item():.6f}, expected {want.item():.6f}{hint}")
        if not got.requires_grad:
            return report(name, False, "the loss must be differentiable in scores (P is, f is counted)")
    return report(name, True, "equals the reference on 4 routings, a skewed-per-sequence one included")
