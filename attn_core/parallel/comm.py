"""The communication of :mod:`attn_core.parallel`: thin wrappers over ``torch.distributed`` that count bytes.

Nothing is home-made underneath: a ring shift is ``torch.distributed.batch_isend_irecv``
of one send to the next rank and one receive from the previous; an all-to-all is
``torch.distributed.all_to_all``; an all-gather is ``torch.distributed.all_gather``. Each
wrapper reports its bytes to :mod:`.cost` (this rank's tensors sent to and received from
*other* ranks), which is how the traffic of each scheme is measured rather than assumed.

:class:`AllToAll` makes the all-to-all differentiable: its backward pass is the all-to-all
of the gradients, in the opposite direction. :class:`AllGather` makes the all-gather
differentiable: each rank's gradient is the sum of every rank's gradient for its piece
(a reduce-scatter, made here of an all-to-all and a sum).

Shape legend:
    W    world size (ranks in the group)
    ...  any shape; a list "W ×" holds one tensor per rank, indexed by rank
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

from .cost import record_bytes

__all__ = ["RingShift", "ring_shift", "all_to_all", "all_gather", "AllToAll", "AllGather", "nbytes"]


def nbytes(tensors: Sequence[torch.Tensor]) -> int:
    """The bytes of the tensors' elements."""
    return sum(t.numel() * t.element_size() for t in tensors)


class RingShift:
    """A ring shift in flight: each tensor is being sent to the next rank while the previous rank's arrive.

    Made by :func:`ring_shift`; :meth:`wait` returns the received tensors. Between the two,
    the caller computes: the communication overlaps with the work.
    """

    def __init__(self, requests: list, received: list[torch.Tensor]):
        self._requests, self._received = requests, received

    def wait(self) -> list[torch.Tensor]:
        """Block until every send and receive of the shift has completed; return the received tensors."""
        for request in self._requests:
            request.wait()
        return self._received


def ring_shift(tensors: Sequence[torch.Tensor], *, group: dist.ProcessGroup | None = None) -> RingShift:
    """Start sending each tensor to rank ``r + 1`` and receiving one of the same shape from rank ``r - 1``.

    Every rank of the group must call it with tensors of the same shapes and dtypes. One
    ``torch.distributed.batch_isend_irecv`` call: the sends and receives are posted
    together, so no rank waits for its neighbour to finish a blocking send (the deadlock of
    a ring of blocking sends).

    Args:
        tensors: What this rank passes on.
        group: The process group (default: the whole world).

    Returns:
        A :class:`RingShift`; its ``wait()`` gives the tensors from rank ``r - 1``.

    Shapes:
        tensors: any; received: the same shapes
    """
    W, rank = dist.get_world_size(group), dist.get_rank(group)
    if W == 1:
        return RingShift([], [t for t in tensors])
    # Ranks of the group as global ranks: P2POp takes global ranks.
    nxt = dist.get_global_rank(group, (rank + 1) % W) if group is not None else (rank + 1) % W
    prv = dist.get_global_rank(group, (rank - 1) % W) if group is not None else (rank - 1) % W
    tensors = [t.contiguous() for t in tensors]
    received = [torch.empty_like(t) for t in tensors]
    ops = [dist.P2POp(dist.isend, t, nxt, group) for t in tensors]
    ops += [dist.P2POp(dist.irecv, t, prv, group) for t in received]
    requests = dist.batch_isend_irecv(ops)
    record_bytes("ring_shift", nbytes(tensors), nbytes(received))
    return RingShift(requests, received)


def all_to_all(
    chunks: Sequence[torch.Tensor], *, group: dist.ProcessGroup | None = None, fallback: bool = False
) -> list[torch.Tensor]:
    """Send ``chunks[j]`` to rank ``j``; return what each rank sent to this one, indexed by rank.

    ``torch.distributed.all_to_all``. Some backends and versions lack it (gloo gained
    all-to-all late, and ``all_to_all_single`` is missing on some gloo builds): then, or
    with ``fallback=True``, the same exchange is made from point-to-point operations, one
    ``batch_isend_irecv`` of a send to and a receive from every other rank, as PyTorch's
    documentation of ``batch_isend_irecv`` suggests for arbitrary exchanges. Both give the
    same result (a test holds them equal).

    Args:
        chunks: ``W`` tensors, ``chunks[j]`` for rank ``j``; every rank's ``chunks[j]``
            must have the shape of what rank ``j`` expects to receive (here: one shape for all).
        group: The process group.
        fallback: Use the point-to-point exchange even when ``all_to_all`` exists.

    Returns:
        ``W`` tensors: index ``j`` is the chunk rank ``j`` sent here.

    Shapes:
        chunks: W × ``(...)``; output: W × ``(...)``

    Raises:
        ValueError: Not exactly one chunk per rank.
    """
    W, rank = dist.get_world_size(group), dist.get_rank(group)
    if len(chunks) != W:
        raise ValueError(f"all_to_all needs one chunk per rank: {W} ranks, got {len(chunks)} chunks")
    chunks = [c.contiguous() for c in chunks]
    received = [torch.empty_like(c) for c in chunks]
    others = [j for j in range(W) if j != rank]
    record_bytes("all_to_all", nbytes([chunks[j] for j in others]), nbytes([received[j] for j in others]))
    if not fallback:
        try:
            dist.all_to_all(received, chunks, group=group)
            return received
        except (RuntimeError, NotImplementedError) as error:  # the backend lacks all_to_all
            if "support" not in str(error).lower() and not isinstance(error, NotImplementedError):
                raise
    received[rank] = chunks[rank].clone()  # this rank's own chunk stays here
    ops = []
    for j in others:
        peer = dist.get_global_rank(group, j) if group is not None else j
        ops += [dist.P2POp(dist.isend, chunks[j], peer, group), dist.P2POp(dist.irecv, received[j], peer, group)]
    for request in dist.batch_isend_irecv(ops) if ops else []:
        request.wait()
    return received


def all_gather(tensor: torch.Tensor, *, group: dist.ProcessGroup | None = None) -> list[torch.Tensor]:
    """Every rank's ``tensor``, indexed by rank (``torch.distributed.all_gather``).

    Every rank must pass a tensor of the same shape and dtype.

    Shapes:
        tensor: ``(...)``; output: W × ``(...)``
    """
    W = dist.get_world_size(group)
    tensor = tensor.contiguous()
    gathered = [torch.empty_like(tensor) for _ in range(W)]
    dist.all_gather(gathered, tensor, group=group)
    record_bytes("all_gather", nbytes([tensor]) * (W - 1), nbytes([tensor]) * (W - 1))
    return gathered


class AllToAll(torch.autograd.Function):
    """A differentiable :func:`all_to_all`: ``AllToAll.apply(group, *chunks)`` returns the received chunks.

    The chunk this rank sent to rank ``j`` becomes part of rank ``j``'s result, so its
    gradient is on rank ``j``: the backward pass sends every gradient back where its chunk
    came from, which is again an all-to-all.

    Shapes:
        chunks: W × ``(...)``; output: a tuple of W × ``(...)``
    """

    @staticmethod
    def forward(ctx, group, *chunks):
        ctx.group = group
        return tuple(all_to_all(chunks, group=group))

    @staticmethod
    def backward(ctx, *grads):
        return (None, *all_to_all(grads, group=ctx.group))


class AllGather(torch.autograd.Function):
    """A differentiable :func:`all_gather`: ``AllGather.apply(group, tensor)`` returns every rank's tensor.

    Every rank uses every piece, so the gradient of this rank's piece is the sum over the
    ranks of their gradients for it: each rank sends its gradient for piece ``j`` to rank
    ``j`` (:func:`all_to_all`) and sums what it receives (a reduce-scatter).

    Shapes:
        tensor: ``(...)``; output: a tuple of W × ``(...)``
    """

    @staticmethod
    def forward(ctx, group, tensor):
        ctx.group = group
        return tuple(all_gather(tensor, group=group))

    @staticmethod
    def backward(ctx, *grads):
        return None, torch.stack(all_to_all(grads, group=ctx.group)).sum(dim=0)
