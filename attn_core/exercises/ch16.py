"""Checks for the exercises of chapter 16 (gated attention, QK-norm and logit soft-capping)."""

from __future__ import annotations

import math
from typing import Callable

import torch

from ..core import attention
from ..norms import RMSNorm
from ._common import compare, report

__all__ = ["check_softcap", "check_split_fused_gate", "check_qk_norm_bound"]


def _run(name: str, fn: Callable, *args):
    """Call the learner's function; a crash becomes a printed verdict, not an exception."""
    try:
        return True, fn(*args)
    except Exception as e:  # a learner's bug should print, not stop the notebook
        return False, report(name, False, f"{type(e).__name__}: {e}")


def check_softcap(fn: Callable[[torch.Tensor, float], torch.Tensor]) -> bool:
    """Exercise 16.1: ``fn(scores, cap)`` is Gemma 2's soft cap, ``cap · tanh(scores / cap)``.

    Checked on scores far inside and far outside the cap, and through
    :func:`attn_core.attention` (``softcap=``): the capped scores, softmaxed, must give the
    same weights.

    Shapes:
        scores: ``(..., T_q, T_k)``; fn's output: same shape
    """
    name = "16.1 soft cap"
    g = torch.Generator().manual_seed(160)
    scores = torch.randn(2, 3, 5, 5, generator=g, dtype=torch.float64) * 40
    for cap in (50.0, 2.0):
        ok, got = _run(name, fn, scores, cap)
        if not ok:
            return False
        want = cap * torch.tanh(scores / cap)
        if not (isinstance(got, torch.Tensor) and got.shape == want.shape):
            return compare(name, got, want)
        err = (got.double() - want).abs().max().item()
        if not err < 1e-9:
            return report(name, False, f"cap={cap}: max |Δ| = {err:.2g} from cap·tanh(scores/cap)")
    q = torch.randn(1, 2, 4, 8, generator=g, dtype=torch.float64) * 3
    k = torch.randn(1, 2, 4, 8, generator=g, dtype=torch.float64) * 3
    v = torch.randn(1, 2, 4, 8, generator=g, dtype=torch.float64)
    ok, capped = _run(name, fn, q @ k.transpose(-2, -1) / math.sqrt(8), 1.5)
    if not ok:
        return False
    _, want_w = attention(q, k, v, softcap=1.5, return_weights=True)
    if (torch.softmax(capped, -1) - want_w).abs().max() > 1e-9:
        return report(name, False, "softmax of your capped scores differs from attention(..., softcap=1.5)")
    return report(name, True, "equals cap·tanh(scores/cap) and attention(..., softcap=) for caps 50, 2 and 1.5")


def check_split_fused_gate(fn: Callable[[torch.Tensor, int, int], tuple[torch.Tensor, torch.Tensor]]) -> bool:
    """Exercise 16.2: ``fn(weight, n_heads, head_dim)`` splits Qwen3-Next's fused ``q_proj`` weight.

    Qwen3-Next's ``q_proj`` produces, for each head ``h``, ``head_dim`` query rows followed
    by ``head_dim`` gate rows. ``fn`` returns ``(w_q, w_gate)``, each with the rows of all
    heads in head order, as ``MultiHeadAttention``'s ``q_proj`` and ``gate_proj`` expect.

    Shapes:
        weight: ``(H·2D, d_model)``; w_q, w_gate: ``(H·D, d_model)``
    """
    name = "16.2 split the fused gate"
    for H, D, d in ((4, 3, 5), (2, 8, 16), (1, 4, 6)):
        # Row r of head h's query is the number 1000·h + r, of its gate 1000·h + 500 + r: a
        # wrong layout shows which rows went where.
        rows = [torch.arange(D) + 1000 * h + off for h in range(H) for off in (0, 500)]
        weight = torch.cat(rows).double()[:, None].expand(H * 2 * D, d).contiguous()  # (H·2D, d)
        want_q = weight.view(H, 2 * D, d)[:, :D].reshape(H * D, d)
        want_g = weight.view(H, 2 * D, d)[:, D:].reshape(H * D, d)
        ok, got = _run(name, fn, weight, H, D)
        if not ok:
            return False
        if not (isinstance(got, tuple) and len(got) == 2):
            return report(name, False, f"return a pair (w_q, w_gate), got {type(got).__name__}")
        for label, mine, want in (("w_q", got[0], want_q), ("w_gate", got[1], want_g)):
            if not isinstance(mine, torch.Tensor) or mine.shape != want.shape:
                shape = tuple(mine.shape) if isinstance(mine, torch.Tensor) else type(mine).__name__
                return report(name, False, f"H={H}, D={D}: {label} has shape {shape}, expected {tuple(want.shape)}")
            if not torch.equal(mine, want):
                first = mine[:, 0].long().tolist()[: 2 * D]
                return report(
                    name,
                    False,
                    f"H={H}, D={D}: {label} starts with rows {first}; rows 0..{D - 1} of head 0 are its query, "
                    f"500..{500 + D - 1} its gate, 1000.. head 1",
                )
    return report(name, True, "queries and gates of every head in place, for 3 layouts")


def check_qk_norm_bound(fn: Callable[[torch.Tensor, torch.Tensor], float]) -> bool:
    """Exercise 16.3: ``fn(q_gain, k_gain)``: the largest attention logit a QK-normed head can produce.

    After QK-norm, a query is ``g_q ⊙ u`` and a key ``g_k ⊙ w`` with ``‖u‖ = ‖w‖ = √D``
    (unit RMS); the logit is ``q·k/√D``. The check compares ``fn`` with the bound and with
    logits of real RMS-normed vectors (none may exceed it; the best one reaches it).

    Shapes:
        q_gain, k_gain: ``(D,)``
    """
    name = "16.3 QK-norm bound"
    g = torch.Generator().manual_seed(163)
    for D in (4, 16, 64):
        q_gain = 1 + torch.rand(D, generator=g, dtype=torch.float64)
        k_gain = 1 + torch.rand(D, generator=g, dtype=torch.float64)
        want = math.sqrt(D) * (q_gain * k_gain).abs().max().item()
        ok, got = _run(name, fn, q_gain, k_gain)
        if not ok:
            return False
        got = float(got) if isinstance(got, (int, float, torch.Tensor)) else got
        if not isinstance(got, float) or not abs(got - want) < 1e-9 * want:
            norm_q, norm_k = RMSNorm(D, eps=0.0).double(), RMSNorm(D, eps=0.0).double()
            with torch.no_grad():
                norm_q.weight.copy_(q_gain)
                norm_k.weight.copy_(k_gain)
                x = torch.randn(4096, D, generator=g, dtype=torch.float64)
                reached = ((norm_q(x) * norm_k(x)).sum(-1) / math.sqrt(D)).max().item()
            detail = f"D={D}: got {got!r}, the bound is {want:.4f}"
            return report(name, False, f"{detail} (a query and key from the same random vectors reach {reached:.4f})")
    return report(name, True, "√D · max_i |g_q,i · g_k,i| for D = 4, 16, 64")
