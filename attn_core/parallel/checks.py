"""Checks that every rank agrees before any data moves: one error on every rank, never a hang.

A distributed call with bad input on one rank is worse than a wrong answer: the other ranks
wait for a message that never comes. So the functions of :mod:`attn_core.parallel` check
their arguments in two steps, both before any tensor is sent:

1. each rank checks its own arguments, keeping an error instead of raising it;
2. the ranks exchange what they hold (each tensor's shape, dtype and device type, the
   settings, and the local error if any) with one ``torch.distributed.all_gather_object``,
   and every rank raises when any rank failed or when the ranks disagree (a shard of
   another length, another dtype, another ``is_causal``), naming each rank's value.

Every rank reaches the exchange, so every rank raises. What remains is a rank that never
calls at all: the process group's timeout (set by :func:`attn_core.parallel.launch.run_on_ranks`)
ends that wait with an error instead of a hang.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
import torch.distributed as dist

__all__ = ["group_size_and_rank", "agree_across_ranks"]


def group_size_and_rank(group: dist.ProcessGroup | None = None) -> tuple[int, int]:
    """``(W, rank)`` of this process in ``group``.

    Raises:
        RuntimeError: ``torch.distributed`` is not initialised (run inside
            :func:`attn_core.parallel.launch.run_on_ranks`, or call ``init_process_group``).
        ValueError: This process is not a member of ``group``.
    """
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(
            "torch.distributed is not initialised: run the function in processes started by "
            "attn_core.parallel.launch.run_on_ranks, or call torch.distributed.init_process_group first"
        )
    rank = dist.get_rank(group)
    if rank < 0:
        raise ValueError(
            f"this process (global rank {dist.get_rank()}) is not a member of the group it was given "
            f"(a group of {dist.get_world_size(group)} ranks)"
        )
    return dist.get_world_size(group), rank


def _describe(value: object) -> object:
    """What the ranks compare about one argument: a tensor's shape, dtype and device type; else the value."""
    if isinstance(value, torch.Tensor):
        return (tuple(value.shape), str(value.dtype).replace("torch.", ""), value.device.type)
    return value


def agree_across_ranks(
    name: str,
    arguments: Mapping[str, object],
    *,
    group: dist.ProcessGroup | None = None,
    local_check: Callable[[], None] | None = None,
) -> tuple[int, int]:
    """Check one call's arguments on every rank at once; raise the same kind of error everywhere.

    A collective: every rank of ``group`` must call it (the functions of this package do,
    first thing). ``local_check`` runs here and its ``TypeError``/``ValueError`` is held
    back until every rank has reported; then every rank raises: the rank whose check
    failed its own error, the others a ``ValueError`` naming that rank and its message.
    Otherwise every argument must be the same on every rank (tensors: shape, dtype and
    device type), or every rank raises a ``ValueError`` that lists each rank's value.

    Args:
        name: The calling function, for the messages.
        arguments: The arguments to compare, by name (tensors and plain settings).
        group: The process group.
        local_check: This rank's own checks (raising ``TypeError`` or ``ValueError``).

    Returns:
        ``(W, rank)`` of this process in ``group``.

    Raises:
        RuntimeError, ValueError: As :func:`group_size_and_rank`.
        TypeError, ValueError: This rank's check failed (its own error).
        ValueError: Another rank's check failed, or the ranks disagree.
    """
    W, rank = group_size_and_rank(group)
    error: Exception | None = None
    try:
        if local_check is not None:
            local_check()
    except (TypeError, ValueError) as e:
        error = e
    mine = {
        "error": None if error is None else f"{type(error).__name__}: {error}",
        "arguments": {key: _describe(value) for key, value in arguments.items()},
    }
    reports: list = [None] * W
    dist.all_gather_object(reports, mine, group=group)
    if error is not None:
        raise error
    failed = [(r, report["error"]) for r, report in enumerate(reports) if report["error"] is not None]
    if failed:
        r, message = failed[0]
        raise ValueError(f"{name}: rank {r} refused its arguments, so every rank stops: {message}")
    for key in arguments:
        values = [report["arguments"][key] for report in reports]
        if any(value != values[0] for value in values):
            listing = ", ".join(f"rank {r}: {value}" for r, value in enumerate(values))
            what = "(shape, dtype, device)" if isinstance(arguments[key], torch.Tensor) else "value"
            raise ValueError(f"{name} needs the same {key} {what} on every rank, got {listing}")
    return W, rank
