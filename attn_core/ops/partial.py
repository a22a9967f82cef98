"""Partial attention: one block of keys' output with its log-sum-exp, and the merge of such partials.

Attention over all keys can be computed a block of keys at a time. A block gives, per
query, its own softmax-weighted output ``o_b`` and the log of its softmax denominator,
``lse_b = log Σ_j exp(s_j)`` over the block's scores. Two blocks' results combine exactly:

    lse = log(exp(lse_1) + exp(lse_2)),   o = exp(lse_1 - lse) · o_1 + exp(lse_2 - lse) · o_2

This is the online softmax of Milakov & Gimelshein (2018), written with ``(o, lse)`` in
place of the running ``(m, l, acc)`` of :func:`attn_core.ops.efficient.tiled_attention`:
``lse = m + log l`` and ``o = acc / l``. The form with ``lse`` is the one that travels well:
a block's result is complete on its own, so blocks computed on different devices (ring
attention, :mod:`attn_core.parallel.ring`) or by different kernels merge in any order.

Each block's output comes from :func:`attn_core.ops.attention.attention`; only the
normaliser ``lse`` is computed here, from the same scaled scores.

Shape legend:
    ...  leading batch dimensions, typically ``(B, H)``
    H    query heads; ``H_kv`` key/value heads (``H_kv`` divides ``H``: GQA/MQA)
    T_q  queries, ``T_k`` keys of the block
    D    query/key width per head, ``D_v`` value width per head
    N    number of partial results merged
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ..checks import check_tensor
from .attention import attention, check_qkv
from .masks import causal_mask

__all__ = ["partial_attention", "merge_partials"]


def partial_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    is_causal: bool = False,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of ``q`` over one block of keys, and each query's log-sum-exp over that block.

    The output is ``attention(q, k, v, is_causal=is_causal, scale=scale)``; the log-sum-exp
    ``lse = logsumexp(scale · q kᵀ, masked)`` is what :func:`merge_partials` needs to weigh
    this block against others. Both are differentiable. A query that sees no key of the
    block (possible only with ``is_causal`` and ``T_q > T_k``, which :func:`attention`
    refuses) would get ``lse = -inf``.

    Args:
        q: Queries.
        k: Keys of the block; may have fewer heads than ``q`` (grouped-query attention:
            query head ``h`` reads key/value head ``h // (H // H_kv)``).
        v: Values of the block.
        is_causal: Causal mask within the block, aligned bottom-right as in
            :func:`attn_core.attention` (a diagonal block of equal lengths: ordinary causal).
        scale: Multiplies the scores; default ``1/√D``.

    Returns:
        ``(output, lse)``: the output in the inputs' dtype, ``lse`` in at least float32.

    Shapes:
        q: ``(..., H, T_q, D)``; k: ``(..., H_kv, T_k, D)``; v: ``(..., H_kv, T_k, D_v)``
        output: ``(..., H, T_q, D_v)``; lse: ``(..., H, T_q)``

    Raises:
        TypeError, ValueError: As :func:`attn_core.attention` for the same arguments.
    """
    out = attention(q, k, v, is_causal=is_causal, scale=scale)  # checks the arguments
    groups = check_qkv(q, k, v, scale=scale)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    work = torch.promote_types(q.dtype, torch.float32)  # the normaliser in at least float32
    qw, kw = q.to(work), k.to(work)
    if groups > 1:
        # GQA without copying K: a group axis of G query heads per key/value head.
        qw = qw.unflatten(-3, (k.shape[-3], groups))  # (..., H_kv, G, T_q, D)
        kw = kw.unsqueeze(-3)  # (..., H_kv, 1, T_k, D)
    scores = (qw * scale) @ kw.transpose(-2, -1)  # (..., [H_kv, G,] T_q, T_k)
    if is_causal:
        allowed = causal_mask(q.shape[-2], k.shape[-2], device=q.device)  # (T_q, T_k)
        scores = scores.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # (..., [H_kv, G,] T_q)
    if groups > 1:
        lse = lse.flatten(-3, -2)  # (..., H_kv, G, T_q) -> (..., H, T_q)
    return out, lse


def merge_partials(outputs: Sequence[torch.Tensor], lses: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge partial attention results over disjoint blocks of keys into the result over all of them.

    ``lse = log Σ_b exp(lse_b)`` and ``output = Σ_b exp(lse_b - lse) · output_b``: the
    online-softmax rescaling, in any order (the sum is symmetric). A query that no block
    saw (every ``lse_b = -inf``) gets zeros and ``lse = -inf``, not NaN (the convention of
    :func:`attn_core.attention` for a fully masked row).

    Args:
        outputs: Each block's output (:func:`partial_attention`), all of one shape.
        lses: Each block's log-sum-exp, in the same order.

    Returns:
        ``(output, lse)``: the output in the dtype of ``outputs``, ``lse`` in at least float32.

    Shapes:
        outputs: N × ``(..., T_q, D_v)``; lses: N × ``(..., T_q)``
        output: ``(..., T_q, D_v)``; lse: ``(..., T_q)``

    Raises:
        TypeError: Not tensors.
        ValueError: No partials, a different number of outputs and lses, or shapes that
            disagree (named with their index).
    """
    outputs, lses = list(outputs), list(lses)
    if not outputs or len(outputs) != len(lses):
        raise ValueError(
            f"merge_partials needs one lse per output and at least one of each, "
            f"got {len(outputs)} outputs and {len(lses)} lses"
        )
    for i, (o, lse) in enumerate(zip(outputs, lses)):
        check_tensor(f"outputs[{i}]", o, ("...", "T_q", "D_v"), floating=True)
        check_tensor(f"lses[{i}]", lse, floating=True)
        if o.shape != outputs[0].shape or lse.shape != o.shape[:-1]:
            raise ValueError(
                f"partial {i} does not fit: outputs[{i}].shape={tuple(o.shape)}, lses[{i}].shape={tuple(lse.shape)} "
                f"(expected {tuple(outputs[0].shape)} and {tuple(outputs[0].shape[:-1])})"
            )
    work = torch.promote_types(outputs[0].dtype, torch.float32)
    stacked = torch.stack([lse.to(work) for lse in lses])  # (N, ..., T_q)
    lse = torch.logsumexp(stacked, dim=0)  # (..., T_q)
    # Where every block saw nothing, lse = -inf: subtract 0 there, so each weight is
    # exp(-inf) = 0 rather than exp(-inf - (-inf)) = NaN.
    safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    weights = torch.exp(stacked - safe)  # (N, ..., T_q): each block's share of the softmax
    out = sum(w.unsqueeze(-1) * o.to(work) for w, o in zip(weights, outputs))  # (..., T_q, D_v)
    return out.to(outputs[0].dtype), lse
