"""Checks for the exercises of chapter 16 (gated attention, QK-norm and logit soft-capping)."""

from __future__ import annotations

import math
from typing import Callable

import torch

from ...config import DecoderConfig
from ...model.params import parameter_count
from ...modules.norms import RMSNorm
from ._common import report

__all__ = [
    "check_qk_norm_bound",
    "check_gate_parameters",
    "check_whole_projection_bound",
]


def _run(name: str, fn: Callable, *args):
    """Call the learner's function; a crash becomes a printed verdict, not an exception."""
    try:
        return True, fn(*args)
    except Exception as e:  # a learner's bug should print, not stop the notebook
        return False, report(name, False, f"{type(e).__name__}: {e}")


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


def check_gate_parameters(fn: Callable[[int, int, int, int, str], int]) -> bool:
    """Exercise 16.1: ``fn(d_model, n_heads, head_dim, n_layers, kind)``: what the gate adds.

    The number of parameters that ``attention_gate=kind`` (``"elementwise"`` or
    ``"headwise"``) adds to a ``DecoderConfig.llama_like`` model, derived by the learner
    and compared with :func:`attn_core.parameter_count` of the two configurations (the
    count of real modules, not a formula written here). The cases include a head width
    that is not ``d_model / n_heads``, so ``d_model²`` and ``H·D·d_model`` differ.
    """
    name = "16.1 the gate's parameters"
    cases = []
    for d_model, n_heads, head_dim, n_layers in ((32, 4, None, 2), (48, 6, 16, 3), (24, 2, 8, 1)):
        base = DecoderConfig.llama_like(
            vocab_size=50, d_model=d_model, n_heads=n_heads, n_kv_heads=None, n_layers=n_layers, head_dim=head_dim
        )
        for kind in ("elementwise", "headwise"):
            gated = DecoderConfig.llama_like(
                vocab_size=50,
                d_model=d_model,
                n_heads=n_heads,
                n_kv_heads=None,
                n_layers=n_layers,
                head_dim=head_dim,
                attention_gate=kind,
            )
            D = head_dim if head_dim is not None else d_model // n_heads
            cases.append(((d_model, n_heads, D, n_layers, kind), parameter_count(gated) - parameter_count(base)))
    for args, want in cases:
        ok, got = _run(name, fn, *args)
        if not ok:
            return False
        if isinstance(got, bool) or not isinstance(got, int) or got != want:
            d_model, n_heads, D, n_layers, kind = args
            return report(
                name,
                False,
                f"d_model={d_model}, n_heads={n_heads}, head_dim={D}, n_layers={n_layers}, kind={kind!r}: "
                f"got {got!r}; the two models' parameter counts differ by {want:,}",
            )
    return report(name, True, "equals the difference of parameter_count for 6 models, both kinds")


def check_whole_projection_bound(fn: Callable[[torch.Tensor, torch.Tensor, int], float]) -> bool:
    """Exercise 16.2: OLMo 2's QK-norm, over the whole projection: the largest logit of a head.

    OLMo 2 RMS-normalises the query projection of all ``H`` heads together (an RMSNorm of
    width ``H·D``, before the heads are split), and the keys alike. ``fn(q_gain, k_gain,
    n_heads)`` returns the largest ``|q_h·k_h|/√D`` any head ``h`` can reach. The check
    compares it with the bound and builds the query and key that reach it through a real
    ``RMSNorm`` of width ``H·D``.

    Shapes:
        q_gain, k_gain: ``(H·D,)``
    """
    name = "16.2 OLMo 2's QK-norm bound"
    g = torch.Generator().manual_seed(162)
    for H, D in ((2, 4), (4, 16), (8, 8)):
        q_gain = 1 + torch.rand(H * D, generator=g, dtype=torch.float64)
        k_gain = 1 + torch.rand(H * D, generator=g, dtype=torch.float64)
        q_gain[3] = 3.0  # the largest query gain and the largest product sit on
        k_gain[5] = 3.5  # different channels: max|g_q|·max|g_k| overshoots
        product = (q_gain * k_gain).abs()
        want = H * math.sqrt(D) * product.max().item()
        # The query and key that reach it: all of the H·D RMS on the best channel.
        i = int(product.argmax())
        x = torch.zeros(1, H * D, dtype=torch.float64)
        x[0, i] = 1.0
        norm_q, norm_k = RMSNorm(H * D, eps=0.0).double(), RMSNorm(H * D, eps=0.0).double()
        with torch.no_grad():
            norm_q.weight.copy_(q_gain)
            norm_k.weight.copy_(k_gain)
            q, k = norm_q(x).view(H, D), norm_k(x).view(H, D)  # (H·D,) -> (H, D)
        reached = ((q * k).sum(-1) / math.sqrt(D)).abs().max().item()
        assert abs(reached - want) < 1e-9 * want  # the bound is reached: the check is right
        ok, got = _run(name, fn, q_gain, k_gain, H)
        if not ok:
            return False
        got = float(got) if isinstance(got, (int, float, torch.Tensor)) else got
        if not isinstance(got, float) or not abs(got - want) < 1e-9 * want:
            per_head = math.sqrt(D) * product.max().item()
            return report(
                name,
                False,
                f"H={H}, D={D}: got {got!r}; a query and key through an RMSNorm of width H·D reach "
                f"{reached:.4f} (the per-head bound would be {per_head:.4f})",
            )
    return report(name, True, "H · √D · max_i |g_q,i · g_k,i|, reached, for (H, D) = (2, 4), (4, 16), (8, 8)")
