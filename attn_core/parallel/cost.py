"""What a distributed attention costs one rank, counted as it runs: bytes sent and received, scores computed.

Every communication call of :mod:`attn_core.parallel` goes through :mod:`.comm`, which
reports the bytes of the tensors it sends and receives here; every block of attention the
ring computes reports its ``T_q × T_k`` query-key scores. Counting is off until a
:func:`count_cost` block is open in the process (each rank counts its own):

    with count_cost() as cost:
        out = ring_attention(q, k, v, is_causal=True)
    cost.bytes_sent, cost.bytes_received, cost.scores

Bytes are the *logical* traffic of the call (what this rank hands to and receives from
other ranks), not what a backend's algorithm moves on the wire (an all-gather may relay
through other ranks); a rank's message to itself is not counted. The formulas to compare
with are in :mod:`.formulas`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

__all__ = ["Cost", "count_cost", "record_bytes", "record_scores"]


@dataclass
class Cost:
    """One rank's counts inside a :func:`count_cost` block.

    Attributes:
        bytes_sent: Bytes of the tensors this rank sent to other ranks.
        bytes_received: Bytes of the tensors it received from other ranks.
        scores: Query-key scores computed by attention blocks (``Σ T_q · T_k``): the work.
        blocks: Attention blocks computed (calls of the block attention).
        calls: Communication calls by kind (``"ring_shift"``, ``"all_to_all"``, ...).
    """

    bytes_sent: int = 0
    bytes_received: int = 0
    scores: int = 0
    blocks: int = 0
    calls: Counter = field(default_factory=Counter)


_OPEN: list[Cost] = []  # the records of the open count_cost blocks, innermost last


@contextmanager
def count_cost() -> Iterator[Cost]:
    """Count this process's communication and attention work while the block runs.

    Blocks nest; every open block counts everything inside it.

    Yields:
        The :class:`Cost` record, filled in as the block runs.
    """
    cost = Cost()
    _OPEN.append(cost)
    try:
        yield cost
    finally:
        _OPEN.remove(cost)


def record_bytes(kind: str, sent: int, received: int) -> None:
    """Add one communication call's bytes to every open record (called by :mod:`.comm`)."""
    for cost in _OPEN:
        cost.bytes_sent += sent
        cost.bytes_received += received
        cost.calls[kind] += 1


def record_scores(T_q: int, T_k: int) -> None:
    """Add one attention block of ``T_q`` queries and ``T_k`` keys to every open record."""
    for cost in _OPEN:
        cost.scores += T_q * T_k
        cost.blocks += 1
