"""Timing that holds up on a shared, noisy machine: warm-up, interleaved rounds, medians.

Used by chapters 12-14 and by the ``benchmarks`` package (which also import it as
``attn_core.timing``, its old name). The rules:

* **Warm-up** calls first (allocator, kernel selection, caches), never timed.
* **Interleaved rounds**: every round runs each function once, in a rotated order, so
  that a slow minute of the machine hits all of them alike instead of one.
* **Medians** over the rounds, not means: one interruption does not move a median.
* **Ratios** to a baseline twice: from the medians, and as the median of the per-round
  ratios (each round's functions ran within moments of each other). They agree on a
  quiet machine; the second is the more robust on a busy one.
* On CUDA, ``torch.cuda.synchronize()`` brackets every timed call: kernels run
  asynchronously, and without it one would time the launch, not the work.

Shape legend:
    n    side of the square matrices of :func:`matmul_throughput`
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..checks import check_int

__all__ = ["Timing", "time_interleaved", "paired_ratio", "matmul_throughput", "sync"]


def sync(device: torch.device | str) -> None:
    """Wait for queued GPU work (a no-op on the CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class Timing:
    """Seconds per call of one function, one entry per round.

    Attributes:
        name: The function's name.
        seconds: Seconds per call, one per round.
    """

    name: str
    seconds: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        """Median seconds per call."""
        return statistics.median(self.seconds)

    @property
    def spread(self) -> float:
        """Interquartile range over the median (range over median for fewer than 4 rounds)."""
        if len(self.seconds) < 4:
            return (max(self.seconds) - min(self.seconds)) / self.median
        q = statistics.quantiles(self.seconds, n=4)
        return (q[2] - q[0]) / self.median


def time_interleaved(
    fns: dict[str, Callable[[], object]],
    *,
    rounds: int,
    warmup: int = 1,
    min_seconds: float = 0.0,
    device: torch.device | str = "cpu",
) -> dict[str, Timing]:
    """Time every function of ``fns`` in interleaved rounds.

    Args:
        fns: Name -> a function of no arguments doing one unit of work.
        rounds: Timed rounds; each function runs once per round (or, see
            ``min_seconds``, a fixed number of times, and the time per call is recorded).
        warmup: Untimed calls of each function before the first round.
        min_seconds: Repeat a short call within a round until about this much time has
            passed, so that timer resolution and call overhead do not dominate.
        device: Where the work runs (CUDA work is synchronised around each timing).

    Returns:
        Name -> :class:`Timing`.

    Raises:
        TypeError: ``rounds`` or ``warmup`` is not an int.
        ValueError: ``rounds < 1`` or ``warmup < 0``.
    """
    check_int("rounds", rounds)
    check_int("warmup", warmup, minimum=0)
    names = list(fns)
    for name in names:
        for _ in range(warmup):
            fns[name]()
        sync(device)
    inner = {name: 1 for name in names}  # calls per timed sample
    for name in names if min_seconds > 0 else []:
        t0 = time.perf_counter()
        fns[name]()
        sync(device)
        inner[name] = max(1, int(min_seconds / max(time.perf_counter() - t0, 1e-9)))
    timings = {name: Timing(name) for name in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]  # rotate who goes first
        for name in order:
            fn, n = fns[name], inner[name]
            sync(device)
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            sync(device)
            timings[name].seconds.append((time.perf_counter() - t0) / n)
    return timings


def paired_ratio(a: Timing, b: Timing) -> float:
    """Median over rounds of ``a``'s time divided by ``b``'s time in the same round."""
    if len(a.seconds) != len(b.seconds):
        raise ValueError(f"timings of different lengths: {len(a.seconds)} and {len(b.seconds)} rounds")
    return statistics.median(x / y for x, y in zip(a.seconds, b.seconds))


def matmul_throughput(
    *, n: int = 2048, rounds: int = 7, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32
) -> float:
    """This machine's measured dense matmul throughput in GFLOP/s (median over rounds).

    The yardstick for "achieved GFLOP/s as a fraction of what the hardware does": an
    attention layer is made of matrix products, and cannot run faster than they do.

    Shapes:
        the timed product: ``(n, n) @ (n, n)``, ``2·n³`` floating-point operations
    """
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
    with torch.inference_mode():
        t = time_interleaved({"matmul": lambda: a @ b}, rounds=rounds, warmup=2, min_seconds=0.05, device=device)
    return 2 * n**3 / t["matmul"].median / 1e9
