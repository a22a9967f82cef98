"""All-gather attention: every rank gathers all keys and values, then attends its own queries.

The simplest context parallelism, the one Llama 3 uses for long-context training (Llama
Team 2024, "The Llama 3 Herd of Models"): each rank all-gathers the key/value
shards (``torch.distributed.all_gather``) and attends its query shard to the whole
sequence with one call of :func:`attn_core.attention`, the causal mask built from the
global positions of its queries (:func:`attn_core.parallel.sharding.shard_positions`).
It sends as many bytes as the ring's forward pass, all at once rather than a block per
step, and holds every rank's ``K, V`` at the same time. With grouped-query attention the
keys and values are small next to the queries, the reason the Llama 3 report gives for
choosing it.

The gather is :class:`attn_core.parallel.comm.AllGather`, whose backward pass sums each
piece's gradients from every rank back onto the rank that owns it: autograd does the rest.

Shape legend:
    B    batch size
    H    query heads; ``H_kv`` key/value heads
    T    sequence length; ``T_l = T / W`` per rank
    D    query/key width per head, ``D_v`` value width per head
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ..checks import check_bool, check_choice
from ..ops.attention import attention, check_qkv
from ..ops.masks import position_mask
from .checks import agree_across_ranks
from .comm import AllGather
from .sharding import LAYOUTS, gather_sequence, shard_positions

__all__ = ["allgather_attention"]


def allgather_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    group: dist.ProcessGroup | None = None,
    is_causal: bool = False,
    layout: str = "contiguous",
    scale: float | None = None,
) -> torch.Tensor:
    """Attention over the whole sequence, of which this rank holds one shard: gather ``K, V``, attend locally.

    A collective: every rank of ``group`` calls it with its shard and gets its shard of
    ``attn_core.attention(q_full, k_full, v_full, is_causal=is_causal)``. Differentiable.
    Checked on every rank and across ranks before any data moves.

    Args:
        q: This rank's queries.
        k: This rank's keys (``H_kv`` heads; only those travel).
        v: This rank's values.
        group: The ranks sharing the sequence (default: the whole world).
        is_causal: Causal mask by global positions.
        layout: How the sequence was sharded (``"contiguous"`` or ``"zigzag"``).
        scale: Multiplies the scores; default ``1/√D``.

    Returns:
        This rank's output shard, in the inputs' dtype.

    Shapes:
        q: ``(B, H, T_l, D)``; k: ``(B, H_kv, T_l, D)``; v: ``(B, H_kv, T_l, D_v)``
        gathered k, v: ``(B, H_kv, T, D)``; output: ``(B, H, T_l, D_v)``

    Raises:
        TypeError, ValueError: On every rank, when any rank's arguments fail the checks of
            :func:`attn_core.attention`, the layout is unknown or cannot split the shard, or
            the ranks disagree on a shape, dtype or setting.
    """

    def local_check():
        check_qkv(q, k, v, scale=scale)
        if q.dim() != 4 or k.shape[-2] != q.shape[-2]:
            raise ValueError(
                f"allgather_attention takes (B, H, T_l, D) shards with as many keys as queries, "
                f"got q.shape={tuple(q.shape)}, k.shape={tuple(k.shape)}"
            )
        check_bool("is_causal", is_causal)
        check_choice("layout", layout, LAYOUTS)
        if layout == "zigzag" and q.shape[-2] % 2:
            raise ValueError(
                f"the zigzag layout holds two chunks per rank, so the shard length must be even, got T_l={q.shape[-2]}"
            )

    settings = {"q": q, "k": k, "v": v, "is_causal": is_causal, "layout": layout, "scale": scale}
    W, rank = agree_across_ranks("allgather_attention", settings, group=group, local_check=local_check)
    k_all = gather_sequence(AllGather.apply(group, k), layout=layout)  # (B, H_kv, T, D) in sequence order
    v_all = gather_sequence(AllGather.apply(group, v), layout=layout)  # (B, H_kv, T, D_v)
    mask = None
    if is_causal:
        T = k_all.shape[-2]
        q_pos = shard_positions(T, rank, W, layout=layout, device=q.device)  # (T_l,) global positions
        mask = position_mask(q_pos, torch.arange(T, device=q.device))  # (T_l, T): True = may attend
    return attention(q, k_all, v_all, mask=mask, scale=scale)  # (B, H, T_l, D_v)
