"""Cutting a sequence into per-rank shards along T, and joining them again.

Context parallelism gives each of ``W`` ranks a shard of the sequence. Two layouts:

* ``"contiguous"``: ``T`` cut into ``W`` chunks; rank ``r`` holds chunk ``r``.
* ``"zigzag"``: ``T`` cut into ``2W`` chunks; rank ``r`` holds chunks ``r`` and
  ``2W - 1 - r``, in that order. Under a causal mask the early chunks attend to few keys
  and the late ones to many; pairing an early chunk with a late one gives every rank the
  same work (the zig-zag layout of ring-flash-attention; Striped Attention, Brandon et al.
  2023, balances with a finer interleaving).

``T`` must be divisible by the number of chunks (``W``, or ``2W`` for zig-zag): there is
no padding, a length that does not divide raises a ``ValueError`` naming ``T``, ``W`` and
the layout. The chunk rule is written once, in :func:`shard_chunks`; everything else here
(positions, cutting, joining) reads it.

Shape legend:
    T    sequence length, ``T / W`` per shard
    W    world size: the number of ranks sharing the sequence
    ...  any other axes of ``x`` (typically ``(B, H, T, D)``, cut along ``dim=-2``)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

from ..checks import check_choice, check_int, check_tensor
from .comm import all_gather

__all__ = [
    "LAYOUTS",
    "shard_chunks",
    "chunk_length",
    "shard_positions",
    "shard_sequence",
    "gather_sequence",
    "all_gather_sequence",
]

LAYOUTS = ("contiguous", "zigzag")


def shard_chunks(rank: int, world_size: int, layout: str = "contiguous") -> tuple[int, ...]:
    """The chunks of the sequence that rank ``rank`` holds, in the order its shard stores them.

    Args:
        rank: The rank, in ``[0, world_size)``.
        world_size: The number of ranks ``W``.
        layout: ``"contiguous"`` (``W`` chunks, one per rank) or ``"zigzag"`` (``2W``
            chunks, rank ``r`` holds ``r`` and ``2W - 1 - r``).

    Returns:
        The chunk indices: ``(rank,)`` or ``(rank, 2W - 1 - rank)``.

    Raises:
        TypeError: ``rank`` or ``world_size`` not an int.
        ValueError: ``world_size < 1``, ``rank`` outside ``[0, world_size)``, an unknown layout.
    """
    world_size = check_int("world_size", world_size)
    rank = check_int("rank", rank, minimum=0)
    if rank >= world_size:
        raise ValueError(f"rank must be in [0, world_size), got rank={rank} with world_size={world_size}")
    check_choice("layout", layout, LAYOUTS)
    return (rank,) if layout == "contiguous" else (rank, 2 * world_size - 1 - rank)


def chunk_length(T: int, world_size: int, layout: str = "contiguous") -> int:
    """The length of one chunk: ``T / W`` (contiguous) or ``T / 2W`` (zig-zag).

    Raises:
        ValueError: ``T`` not divisible by the number of chunks, naming ``T``, ``W`` and the
            layout; an unknown layout.
    """
    T, world_size = check_int("T", T), check_int("world_size", world_size)
    check_choice("layout", layout, LAYOUTS)
    n_chunks = world_size * (1 if layout == "contiguous" else 2)
    if T % n_chunks:
        raise ValueError(
            f"T={T} is not divisible by the {n_chunks} chunks of the {layout!r} layout for world_size={world_size} "
            f"(no padding: use a length that is a multiple of {n_chunks})"
        )
    return T // n_chunks


def shard_positions(
    T: int, rank: int, world_size: int, *, layout: str = "contiguous", device: torch.device | str | None = None
) -> torch.Tensor:
    """The global positions of the tokens in rank ``rank``'s shard, in the shard's order.

    What a rank needs to build its causal mask or its RoPE angles.

    Returns:
        A long tensor of ``T / W`` positions.

    Shapes:
        output: ``(T / W,)``

    Raises:
        ValueError: As :func:`chunk_length` and :func:`shard_chunks`.
    """
    c = chunk_length(T, world_size, layout)
    return torch.cat([torch.arange(i * c, (i + 1) * c, device=device) for i in shard_chunks(rank, world_size, layout)])


def shard_sequence(
    x: torch.Tensor, rank: int, world_size: int, *, layout: str = "contiguous", dim: int = -2
) -> torch.Tensor:
    """Rank ``rank``'s shard of ``x`` along the sequence axis ``dim``.

    Differentiable (slices and a concatenation), so a gradient on a shard flows back to
    the full tensor.

    Args:
        x: The full tensor, e.g. queries ``(B, H, T, D)``.
        rank: Which shard.
        world_size: Into how many shards ``T`` is cut.
        layout: ``"contiguous"`` or ``"zigzag"`` (see the module docstring).
        dim: The sequence axis.

    Returns:
        The shard, a contiguous tensor.

    Shapes:
        x: ``(..., T, D)`` (with the default ``dim=-2``); output: ``(..., T / W, D)``

    Raises:
        TypeError: ``x`` not a tensor.
        ValueError: ``T`` not divisible by the layout's number of chunks (naming ``T``,
            ``world_size`` and ``layout``); a rank out of range; an unknown layout; ``dim``
            out of range.
    """
    check_tensor("x", x)
    if not -x.dim() <= dim < x.dim():
        raise ValueError(f"dim={dim} is out of range for x of shape {tuple(x.shape)}")
    c = chunk_length(x.shape[dim], world_size, layout)
    pieces = [x.narrow(dim, i * c, c) for i in shard_chunks(rank, world_size, layout)]  # each (..., c, D)
    return torch.cat(pieces, dim=dim).contiguous()  # (..., T / W, D)


def gather_sequence(shards: Sequence[torch.Tensor], *, layout: str = "contiguous", dim: int = -2) -> torch.Tensor:
    """Join every rank's shard, listed by rank, into the full sequence: the inverse of :func:`shard_sequence`.

    Differentiable. For the collective form, where each rank holds only its own shard,
    see :func:`all_gather_sequence`.

    Args:
        shards: Rank ``r``'s shard at index ``r``; ``W = len(shards)``.
        layout: The layout the shards were cut with.
        dim: The sequence axis.

    Returns:
        The full tensor.

    Shapes:
        shards: W × ``(..., T / W, D)``; output: ``(..., T, D)``

    Raises:
        TypeError: A shard that is not a tensor.
        ValueError: No shards; shards of different shapes (each rank's named); a shard length
            that the layout cannot split (zig-zag: odd); an unknown layout.
    """
    shards = list(shards)
    if not shards:
        raise ValueError("gather_sequence needs at least one shard, got none")
    for r, s in enumerate(shards):
        check_tensor(f"shards[{r}]", s)
    if any(s.shape != shards[0].shape for s in shards):
        shapes = ", ".join(f"rank {r}: {tuple(s.shape)}" for r, s in enumerate(shards))
        raise ValueError(f"gather_sequence needs shards of one shape, got {shapes}")
    W = len(shards)
    c = chunk_length(shards[0].shape[dim] * W, W, layout)
    chunks: list[torch.Tensor | None] = [None] * (W * (1 if layout == "contiguous" else 2))
    for r, s in enumerate(shards):
        for j, i in enumerate(shard_chunks(r, W, layout)):
            chunks[i] = s.narrow(dim, j * c, c)  # (..., c, D): global chunk i
    return torch.cat(chunks, dim=dim)  # (..., T, D)


def all_gather_sequence(
    shard: torch.Tensor, *, group: dist.ProcessGroup | None = None, layout: str = "contiguous", dim: int = -2
) -> torch.Tensor:
    """The full sequence on every rank, from each rank's own shard (a collective: every rank calls it).

    ``torch.distributed.all_gather`` of the shards, then :func:`gather_sequence`. Not
    differentiable (for looking at results, e.g. comparing with one-device attention).
    The shards must have one shape on every rank.

    Shapes:
        shard: ``(..., T / W, D)``; output: ``(..., T, D)``

    Raises:
        TypeError: ``shard`` not a tensor.
        ValueError: As :func:`gather_sequence`.
    """
    check_tensor("shard", shard)
    return gather_sequence(all_gather(shard.detach(), group=group), layout=layout, dim=dim)
