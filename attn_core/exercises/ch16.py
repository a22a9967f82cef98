"""Checks for the exercises of chapter 16 (gated attention, QK-norm and logit soft-capping)."""

from __future__ import annotations

import math
from typing import Callable

import torch

from ..config import DecoderConfig
from ..core import attention
from ..norms import RMSNorm
from ..params import parameter_count
from ._common import compare, report

__all__ = [
    "check_softcap",
    "check_split_fused_gate",
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
