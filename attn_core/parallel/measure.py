"""Each scheme measured in spawned processes: every rank's bytes and scores, and its error against one device.

:func:`measure_schemes` starts ``W`` processes (:func:`attn_core.parallel.launch.run_on_ranks`),
builds the same random ``q, k, v`` on every rank, and runs each scheme on the rank's shard,
forward and backward, inside :func:`attn_core.parallel.cost.count_cost`. Each rank reports
what it sent, received and computed, and how far its output and gradients are from its
shard of one-device :func:`attn_core.attention`. The numbers to hold them against are in
:mod:`.formulas`.

The worker, :func:`scheme_costs`, is a module-level function of an installed module, so
spawned processes can import it: a notebook calls :func:`measure_schemes` and never
defines a worker of its own.

Shape legend:
    B    batch size
    H    query heads; ``H_kv`` key/value heads
    T    sequence length; ``T / W`` per rank
    D    width per head
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

from ..checks import check_bool, check_choice, check_int
from ..ops.attention import attention
from .allgather import allgather_attention
from .cost import count_cost
from .launch import run_on_ranks
from .ring import ring_attention
from .sharding import LAYOUTS, shard_sequence
from .ulysses import ulysses_attention

__all__ = ["SCHEMES", "measure_schemes", "scheme_costs"]

# Name -> (function, layout). The names are those of attn_core.parallel.formulas.SCHEMES.
SCHEMES = {
    "ring": (ring_attention, "contiguous"),
    "ring-zigzag": (ring_attention, "zigzag"),
    "ulysses": (ulysses_attention, "contiguous"),
    "allgather": (allgather_attention, "contiguous"),
}

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def scheme_costs(config: dict, group: dist.ProcessGroup | None = None) -> dict:
    """One rank's measurements of every scheme in ``config`` (run by :func:`measure_schemes` in each process).

    Args:
        config: The sizes and settings (the keys :func:`measure_schemes` fills in; ``"layout"``
            optional).
        group: The ranks that share the sequence (default: the whole world).

    Returns:
        Scheme name -> ``{"bytes_sent", "bytes_received", "scores", "blocks", "output_error"}``
        for this rank, and with ``config["backward"]`` also ``"backward_bytes_sent"``,
        ``"backward_bytes_received"`` and ``"grad_error"`` (the largest over dQ, dK, dV).
    """
    rank, W = dist.get_rank(group), dist.get_world_size(group)
    g = torch.Generator().manual_seed(config["seed"])
    B, H, H_kv, T, D = (config[key] for key in ("batch", "heads", "kv_heads", "T", "head_dim"))
    dtype = DTYPES[config["dtype"]]
    q = torch.randn(B, H, T, D, generator=g, dtype=dtype)  # (B, H, T, D)
    k, v = (torch.randn(B, H_kv, T, D, generator=g, dtype=dtype) for _ in range(2))  # (B, H_kv, T, D)
    d_out = torch.randn(B, H, T, D, generator=g, dtype=dtype)  # a cotangent for the backward pass
    full = [t.clone().requires_grad_() for t in (q, k, v)]
    reference = attention(*full, is_causal=config["is_causal"])  # (B, H, T, D): one device
    ref_grads = torch.autograd.grad(reference, full, d_out)
    report = {}
    for name in config["schemes"]:
        fn, layout = SCHEMES[name]
        layout = config.get("layout") or layout  # every scheme on one layout's shards, when asked
        shards = (shard_sequence(t, rank, W, layout=layout) for t in (q, k, v))  # (B, *, T / W, D)
        local = [shard.requires_grad_() for shard in shards]
        with count_cost() as forward:
            out = fn(*local, group=group, is_causal=config["is_causal"], layout=layout)  # (B, H, T / W, D)
        row = {
            "bytes_sent": forward.bytes_sent,
            "bytes_received": forward.bytes_received,
            "scores": forward.scores,
            "blocks": forward.blocks,
            "output_error": (out - shard_sequence(reference, rank, W, layout=layout)).abs().max().item(),
        }
        if config["backward"]:
            with count_cost() as backward:
                grads = torch.autograd.grad(out, local, shard_sequence(d_out, rank, W, layout=layout))
            row["backward_bytes_sent"] = backward.bytes_sent
            row["backward_bytes_received"] = backward.bytes_received
            row["grad_error"] = max(
                (a - shard_sequence(b, rank, W, layout=layout)).abs().max().item() for a, b in zip(grads, ref_grads)
            )
        report[name] = row
    return report


def measure_schemes(
    world_size: int,
    *,
    batch: int = 1,
    heads: int = 4,
    kv_heads: int | None = None,
    T: int = 64,
    head_dim: int = 16,
    is_causal: bool = True,
    schemes: Sequence[str] = tuple(SCHEMES),
    backward: bool = True,
    layout: str | None = None,
    dtype: str = "float64",
    seed: int = 0,
    timeout: float = 120.0,
) -> dict[str, list[dict]]:
    """Run each scheme in ``world_size`` spawned gloo processes; return every rank's counts and errors.

    Args:
        world_size: The number of processes ``W``.
        batch, heads, T, head_dim: The attention's sizes (``T`` divisible by ``2W`` for zig-zag).
        kv_heads: Key/value heads (GQA); default ``heads``.
        is_causal: Causal attention.
        schemes: Names from :data:`SCHEMES`.
        backward: Also run the backward pass (its bytes and the gradients' error).
        layout: Run every scheme on shards of this layout (``"contiguous"`` or ``"zigzag"``);
            default: each scheme's own (:data:`SCHEMES`).
        dtype: ``"float64"`` (errors at rounding level, about 1e-15) or ``"float32"``.
        seed: Of the random ``q, k, v`` (the same on every rank).
        timeout: Seconds the whole run may take.

    Returns:
        Scheme name -> one dict per rank (see :func:`scheme_costs`), indexed by rank.

    Raises:
        TypeError, ValueError: Bad sizes or names (before any process starts); a scheme's own
            errors (raised with the rank, as :func:`run_on_ranks` does).
    """
    world_size = check_int("world_size", world_size)
    kv_heads = heads if kv_heads is None else kv_heads
    sizes = {"batch": batch, "heads": heads, "kv_heads": kv_heads, "T": T, "head_dim": head_dim, "seed": seed}
    for key, value in sizes.items():
        check_int(key, value, minimum=0 if key == "seed" else 1)
    for name in schemes:
        check_choice("schemes", name, tuple(SCHEMES))
    config = dict(
        sizes,
        is_causal=check_bool("is_causal", is_causal),
        backward=check_bool("backward", backward),
        dtype=check_choice("dtype", dtype, tuple(DTYPES)),
        layout=None if layout is None else check_choice("layout", layout, LAYOUTS),
        schemes=list(schemes),
    )
    reports = run_on_ranks(scheme_costs, world_size, config, timeout=timeout)
    return {name: [report[name] for report in reports] for name in schemes}
