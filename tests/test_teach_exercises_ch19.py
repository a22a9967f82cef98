"""attn_core.teach.exercises.ch19: the right and wrong answers of exercises 19.1-19.3 (ANSWERS, held to
the standard by tests/test_teach_exercises_standard.py)."""

from __future__ import annotations

import torch

from attn_core.teach.exercises.ch19 import check_router_logit_grad, check_router_z_loss, check_sequence_balance_loss


def _z(z):
    return torch.logsumexp(z, dim=-1).pow(2).mean()


# --- the new 19.1 and 19.2 (check_router_logit_grad, check_sequence_balance_loss)


def _router_grad(logits, expert_out, grad_out, k):
    """By hand: ∂L/∂w_j = grad_out · expert_j(x); the softmax over the k kept logits."""
    top, experts = logits.topk(k, dim=-1)  # (N, k)
    w = torch.softmax(top, -1)  # (N, k)
    chosen = expert_out.gather(1, experts[..., None].expand(-1, -1, expert_out.shape[-1]))
    g_w = (chosen * grad_out[:, None]).sum(-1)  # (N, k)
    g_top = w * (g_w - (w * g_w).sum(-1, keepdim=True))  # the softmax's Jacobian
    return torch.zeros_like(logits).scatter(1, experts, g_top)


def _router_grad_softmax_first(logits, expert_out, grad_out, k):  # softmax over all E: unchosen get a gradient
    p = torch.softmax(logits, -1)
    w, experts = p.topk(k, dim=-1)
    chosen = expert_out.gather(1, experts[..., None].expand(-1, -1, expert_out.shape[-1]))
    g_w = (chosen * grad_out[:, None]).sum(-1)
    g_p = torch.zeros_like(logits).scatter(1, experts, g_w)
    return p * (g_p - (p * g_p).sum(-1, keepdim=True))


def _router_no_jacobian(z, out, g, k):  # ∂L/∂w put on the logits as they are
    top, experts = z.topk(k, dim=-1)
    chosen = out.gather(1, experts[..., None].expand(-1, -1, out.shape[-1]))
    return torch.zeros_like(z).scatter(1, experts, (chosen * g[:, None]).sum(-1))


def _seq_balance(scores, experts, E):
    B, T, k = experts.shape
    counts = torch.stack([torch.bincount(experts[b].flatten(), minlength=E) for b in range(B)]).to(scores.dtype)
    f = counts * E / (k * T)
    P = (scores / scores.sum(-1, keepdim=True)).mean(1)
    return (f * P).sum(-1).mean()


def _batch_wise(scores, experts, E):  # counts and P pooled over the batch: blind to per-sequence skew
    B, T, k = experts.shape
    f = torch.bincount(experts.flatten(), minlength=E).to(scores.dtype) * E / (k * T * B)
    P = (scores / scores.sum(-1, keepdim=True)).mean((0, 1))
    return (f * P).sum()


def _unnormalised(scores, experts, E):  # raw sigmoid scores as P
    B, T, k = experts.shape
    counts = torch.stack([torch.bincount(experts[b].flatten(), minlength=E) for b in range(B)])
    return (counts.to(scores.dtype) * E / (k * T) * scores.mean(1)).sum(-1).mean()


ANSWERS = {
    check_router_z_loss: (
        [_z],
        [
            (lambda z: torch.logsumexp(z, dim=-1).mean(), "expected"),  # not squared
            (lambda z: z.pow(2).mean(), "expected"),  # the logits squared
            (lambda z: torch.logsumexp(z - z.mean(-1, keepdim=True), -1).pow(2).mean(), "constant"),
            (lambda z: torch.logsumexp(z, dim=-1).pow(2).sum(), "expected"),  # a sum over tokens
            (lambda z: _z(z).detach(), "differentiable"),
            (lambda z: torch.logsumexp(z, dim=-1).pow(2), "scalar tensor"),
        ],
    ),
    check_router_logit_grad: (
        [_router_grad],
        [
            (_router_grad_softmax_first, "outside a token's top"),
            (_router_no_jacobian, "autograd"),
            (lambda z, out, g, k: -_router_grad(z, out, g, k), "autograd"),  # the sign
            (lambda z, out, g, k: _router_grad(z, out, g, k)[:, :-1], "expected a tensor of shape"),
        ],
    ),
    check_sequence_balance_loss: (
        [_seq_balance],
        [
            (_batch_wise, "skewed"),
            (_unnormalised, "expected"),
            (lambda s, e, E: _seq_balance(s, e, E) * e.shape[-1], "expected"),  # E/T, no 1/k
            (lambda s, e, E: _seq_balance(s, e, E).detach(), "differentiable"),
            (lambda s, e, E: [1.0], "scalar tensor"),
        ],
    ),
}
