"""Ulysses attention: swap the sequence split for a head split, attend locally, swap back.

DeepSpeed-Ulysses (Jacobs et al. 2023): each of ``W`` ranks holds a shard of the sequence
for *all* heads. One all-to-all gives each rank the *whole* sequence for ``H / W`` of the
heads; attention is then ordinary one-device attention (:func:`attn_core.attention`), since
heads never interact; a second all-to-all returns each rank its shard of the sequence for
all heads. The head count limits it: ``H`` must be divisible by ``W``.

Grouped-query attention: the key/value heads are split the same way. When ``H_kv`` is not
a multiple of ``W`` (e.g. one key/value head, MQA), each key/value head is first repeated
``lcm(H_kv, W) / H_kv`` times (the fewest copies that split evenly; ``repeat_interleave``
keeps query head ``h`` reading a copy of its own key/value head), so the ranks receive
``lcm(H_kv, W) / W`` key/value heads each instead of all ``H / W`` query heads' worth.

Both all-to-alls are :class:`attn_core.parallel.comm.AllToAll`, whose backward pass is the
all-to-all of the gradients: autograd differentiates the whole function.

Shape legend:
    B    batch size
    H    query heads; ``H_kv`` key/value heads
    T    sequence length; ``T_l = T / W`` per rank
    D    query/key width per head, ``D_v`` value width per head
    W    world size
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from ..checks import check_bool, check_choice
from ..ops.attention import attention, check_qkv
from .checks import agree_across_ranks
from .comm import AllToAll
from .sharding import LAYOUTS, gather_sequence, shard_sequence

__all__ = ["ulysses_attention", "kv_head_repeats"]


def kv_head_repeats(H_kv: int, world_size: int) -> int:
    """How many copies of each key/value head Ulysses makes so that they split over ``world_size`` ranks.

    ``lcm(H_kv, W) / H_kv``: 1 when ``H_kv`` is a multiple of ``W``.
    """
    return math.lcm(H_kv, world_size) // H_kv


def _sequence_to_heads(x, group, W, layout):
    """All-to-all: (B, H, T_l, D) with every head -> (B, H / W, T, D) with every position."""
    received = AllToAll.apply(group, *x.chunk(W, dim=1))  # W × (B, H / W, T_l, D), from each rank
    return gather_sequence(received, layout=layout)  # (B, H / W, T, D) in sequence order


def _heads_to_sequence(y, group, W, layout):
    """All-to-all back: (B, H / W, T, D) -> (B, H, T_l, D)."""
    pieces = [shard_sequence(y, j, W, layout=layout) for j in range(W)]  # W × (B, H / W, T_l, D)
    return torch.cat(AllToAll.apply(group, *pieces), dim=1)  # (B, H, T_l, D): head blocks by rank


def ulysses_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    group: dist.ProcessGroup | None = None,
    is_causal: bool = False,
    layout: str = "contiguous",
    scale: float | None = None,
) -> torch.Tensor:
    """Attention over the whole sequence, of which this rank holds one shard: the Ulysses algorithm.

    A collective: every rank of ``group`` calls it with its shard and gets its shard of
    ``attn_core.attention(q_full, k_full, v_full, is_causal=is_causal)``. Differentiable.
    Checked on every rank and across ranks before any data moves (as :func:`ring_attention
    <attn_core.parallel.ring.ring_attention>`).

    Args:
        q: This rank's queries; ``H`` must be divisible by the group's size.
        k: This rank's keys (``H_kv`` heads; see the module docstring for ``H_kv`` that
            ``W`` does not divide).
        v: This rank's values.
        group: The ranks sharing the sequence (default: the whole world).
        is_causal: Causal mask over the whole sequence.
        layout: How the sequence was sharded (``"contiguous"`` or ``"zigzag"``): the
            gathered sequence is put back in order before attention.
        scale: Multiplies the scores; default ``1/√D``.

    Returns:
        This rank's output shard, in the inputs' dtype.

    Shapes:
        q: ``(B, H, T_l, D)``; k: ``(B, H_kv, T_l, D)``; v: ``(B, H_kv, T_l, D_v)``
        inside: ``(B, H / W, T, D)`` per rank; output: ``(B, H, T_l, D_v)``

    Raises:
        TypeError, ValueError: On every rank, when any rank's arguments fail the checks of
            :func:`attn_core.attention`, ``H`` is not divisible by the group's size (naming
            both), the layout is unknown or cannot split the shard, or the ranks disagree.
    """
    W = dist.get_world_size(group) if dist.is_initialized() else 1

    def local_check():
        check_qkv(q, k, v, scale=scale)
        if q.dim() != 4 or k.shape[-2] != q.shape[-2]:
            raise ValueError(
                f"ulysses_attention takes (B, H, T_l, D) shards with as many keys as queries, "
                f"got q.shape={tuple(q.shape)}, k.shape={tuple(k.shape)}"
            )
        check_bool("is_causal", is_causal)
        check_choice("layout", layout, LAYOUTS)
        if q.shape[1] % W:
            raise ValueError(
                f"ulysses_attention splits the heads across the group: H={q.shape[1]} query heads are not "
                f"divisible by the group's {W} ranks (use ring_attention, or a group whose size divides H)"
            )
        if layout == "zigzag" and q.shape[-2] % 2:
            raise ValueError(
                f"the zigzag layout holds two chunks per rank, so the shard length must be even, got T_l={q.shape[-2]}"
            )

    settings = {"q": q, "k": k, "v": v, "is_causal": is_causal, "layout": layout, "scale": scale}
    W, _ = agree_across_ranks("ulysses_attention", settings, group=group, local_check=local_check)
    repeats = kv_head_repeats(k.shape[1], W)
    if repeats > 1:
        k, v = k.repeat_interleave(repeats, dim=1), v.repeat_interleave(repeats, dim=1)  # (B, lcm(H_kv, W), T_l, D)
    q_h, k_h, v_h = (_sequence_to_heads(t, group, W, layout) for t in (q, k, v))  # (B, H / W, T, D), ...
    out = attention(q_h, k_h, v_h, is_causal=is_causal, scale=scale)  # (B, H / W, T, D_v)
    return _heads_to_sequence(out, group, W, layout)
