"""The explicit path: attention with every step written out, the reference the other backends are tested against.

Scores, soft-cap, mask and bias, a softmax in (at least) float32, dropout, the weighted sum of
the values: each step one PyTorch operation, and the weights are returned, so that they can be
plotted. It is the one backend that computes every option (the weights, soft-capping, sinks
with a mask or dropout), so it is the last row of the table (:mod:`attn_core.ops.backends`):
whatever no faster backend takes ends here. It materialises the ``T_q × T_k`` scores.

Shape legend:
    ...  any leading batch dimensions, typically ``(B, H)``
    H    query heads; ``H_kv`` key/value heads (``H_kv`` divides ``H``), ``G = H // H_kv``
    T_q  number of queries, ``T_k`` number of keys (= values)
    D    query/key width per head, ``D_v`` value width per head
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..masks import combine_masks
from .call import Call

__all__ = ["explicit_attention", "run"]


def explicit_attention(q, k, v, mask, is_causal, scale, dropout_p, groups, softcap=None, window=None, sinks=None):
    """Attention step by step; returns ``(output, weights)``, the weights before dropout.

    Arguments as :func:`attn_core.ops.attention.attention`, checked, with ``scale`` a number
    and ``groups`` the query heads per key/value head (1 when one key/value head is broadcast).

    Shapes:
        q: ``(..., H, T_q, D)``; k: ``(..., H_kv, T_k, D)``; v: ``(..., H_kv, T_k, D_v)``
        output: ``(..., H, T_q, D_v)``; weights: ``(..., H, T_q, T_k)``
    """
    T_q, T_k = q.shape[-2], k.shape[-2]
    if groups > 1:
        # Grouped heads without copying K/V: give each key/value head an axis of G query
        # heads, let matmul broadcast K over it, then flatten back to H = H_kv * G heads.
        q = q.unflatten(-3, (k.shape[-3], groups))  # (..., H_kv, G, T_q, D)
        k, v = k.unsqueeze(-3), v.unsqueeze(-3)  # (..., H_kv, 1, T_k, D)
    scores = (q @ k.transpose(-2, -1)) * scale  # (..., [H_kv, G,] T_q, T_k)
    if groups > 1:
        scores = scores.flatten(-4, -3)  # (..., H, T_q, T_k)
    # Softmax in (at least) float32: float16 keeps 11 significant bits, so a sum over
    # many keys loses digits, and a finite mask bias (finfo.min) added to a score can
    # overflow to -inf. (A float16 q @ kᵀ that overflowed is already inf: no cast undoes
    # it.) float64 inputs stay float64.
    scores = scores.to(torch.promote_types(scores.dtype, torch.float32))
    if softcap is not None:
        # Gemma 2's soft cap: near-linear for |s| << cap, never beyond ±cap; before the mask.
        scores = softcap * torch.tanh(scores / softcap)
    allowed, bias = combine_masks(mask, is_causal, T_q, T_k, q.device, window)
    if bias is not None:
        scores = scores + bias.to(scores.dtype)
    if sinks is not None:
        return _softmax_with_sinks(scores, allowed, sinks, v, dropout_p, groups)
    if allowed is not None:
        fully_masked = ~allowed.any(dim=-1, keepdim=True)  # (..., T_q, 1)
        scores = scores.masked_fill(~allowed, float("-inf"))
        # A row with every key masked would be softmax(-inf, ..., -inf) = NaN. Give it
        # finite scores (any will do) and zero its weights after the softmax instead.
        scores = scores.masked_fill(fully_masked, 0.0)
    weights = torch.softmax(scores, dim=-1)
    if allowed is not None:
        weights = weights.masked_fill(fully_masked, 0.0)
    weights = weights.to(v.dtype)
    dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    if groups > 1:
        dropped = dropped.unflatten(-3, (k.shape[-4], groups))  # (..., H_kv, G, T_q, T_k)
    out = dropped @ v  # (..., [H_kv, G,] T_q, D_v)
    if groups > 1:
        out = out.flatten(-4, -3)  # (..., H, T_q, D_v)
    return out, weights


def _softmax_with_sinks(scores, allowed, sinks, v, dropout_p, groups):
    """Softmax with one extra logit per head (the sink) in the denominator; the sink's own weight is dropped."""
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))  # a fully masked row gives all its mass to the sink
    sink = sinks.to(scores.dtype)[:, None, None].expand(*scores.shape[:-1], 1)  # (H,) -> (..., H, T_q, 1)
    weights = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]  # (..., H, T_q, T_k)
    weights = weights.to(v.dtype)
    dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    if groups > 1:  # v arrives as (..., H_kv, 1, T_k, D_v) from explicit_attention
        dropped = dropped.unflatten(-3, (v.shape[-4], groups))  # (..., H_kv, G, T_q, T_k)
        return (dropped @ v).flatten(-4, -3), weights  # (..., H_kv, G, T_q, D_v) -> (..., H, T_q, D_v)
    return dropped @ v, weights  # (..., H, T_q, D_v)


def run(call: Call) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The table's entry: :func:`explicit_attention` on ``call``; the output, or ``(output, weights)`` if it asks.

    Shapes:
        as :func:`explicit_attention`
    """
    out, weights = explicit_attention(
        call.q, call.k, call.v, call.mask, call.is_causal, call.softmax_scale, call.dropout_p, call.groups,
        softcap=call.softcap, window=call.window, sinks=call.sinks,
    )  # fmt: skip
    return (out, weights) if call.weights else out
