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
* **Noise** is stated, not hidden: :func:`ratio_summary` gives the quartiles of the
  per-round ratios, and calls a difference only when they all lie on one side of 1.
* On a machine shared with other programs, ``clock="cpu"`` counts the CPU seconds of
  this process (``time.process_time``) instead of wall seconds: other programs' work
  does not inflate it (with several threads it sums them: it measures work, not latency).
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

from ..checks import check_choice, check_int

__all__ = [
    "Timing",
    "time_interleaved",
    "paired_ratio",
    "paired_ratios",
    "RatioSummary",
    "ratio_summary",
    "matmul_throughput",
    "sync",
    "CLOCKS",
]

CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}  # clock= of time_interleaved


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
    clock: str = "wall",
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
        clock: ``"wall"`` (``time.perf_counter``) or ``"cpu"`` (``time.process_time``: the
            CPU seconds of this process, which other programs on a busy machine do not
            inflate; CPU work only).

    Returns:
        Name -> :class:`Timing`.

    Raises:
        TypeError: ``rounds`` or ``warmup`` is not an int.
        ValueError: ``rounds < 1``, ``warmup < 0``, an unknown ``clock``, or
            ``clock="cpu"`` with a CUDA device.
    """
    check_int("rounds", rounds)
    check_int("warmup", warmup, minimum=0)
    check_choice("clock", clock, CLOCKS)
    if clock == "cpu" and torch.device(device).type != "cpu":
        raise ValueError(f"clock='cpu' times CPU work only, got device={str(device)!r}")
    now = CLOCKS[clock]
    names = list(fns)
    for name in names:
        for _ in range(warmup):
            fns[name]()
        sync(device)
    inner = {name: 1 for name in names}  # calls per timed sample
    for name in names if min_seconds > 0 else []:
        t0 = now()
        fns[name]()
        sync(device)
        inner[name] = max(1, int(min_seconds / max(now() - t0, 1e-9)))
    timings = {name: Timing(name) for name in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]  # rotate who goes first
        for name in order:
            fn, n = fns[name], inner[name]
            sync(device)
            t0 = now()
            for _ in range(n):
                fn()
            sync(device)
            timings[name].seconds.append((now() - t0) / n)
    return timings


def paired_ratio(a: Timing, b: Timing) -> float:
    """Median over rounds of ``a``'s time divided by ``b``'s time in the same round."""
    if len(a.seconds) != len(b.seconds):
        raise ValueError(f"timings of different lengths: {len(a.seconds)} and {len(b.seconds)} rounds")
    return statistics.median(paired_ratios(a, b))


def paired_ratios(a: Timing, b: Timing) -> list[float]:
    """``a``'s time divided by ``b``'s time in the same round, one ratio per round."""
    if len(a.seconds) != len(b.seconds):
        raise ValueError(f"timings of different lengths: {len(a.seconds)} and {len(b.seconds)} rounds")
    return [x / y for x, y in zip(a.seconds, b.seconds)]


@dataclass(frozen=True)
class RatioSummary:
    """The per-round ratios of two timings: their median and the spread around it.

    Attributes:
        median: Median of the per-round ratios.
        low: Their lower quartile (the minimum for fewer than 4 rounds).
        high: Their upper quartile (the maximum for fewer than 4 rounds).
        rounds: The number of rounds.
    """

    median: float
    low: float
    high: float
    rounds: int

    @property
    def verdict(self) -> str:
        """``"slower"`` if even the lower quartile is above 1, ``"faster"`` if even the upper
        one is below 1, ``"indistinguishable"`` when 1 lies within the spread (the noise)."""
        if self.low > 1:
            return "slower"
        if self.high < 1:
            return "faster"
        return "indistinguishable"

    def __str__(self) -> str:
        return f"{self.median:.2f} [{self.low:.2f}-{self.high:.2f}]"


def ratio_summary(a: Timing, b: Timing) -> RatioSummary:
    """Median and quartiles of ``a``'s time over ``b``'s, round by round.

    The quartiles are the noise of the comparison: the difference between ``a`` and
    ``b`` is real only when both lie on the same side of 1 (:attr:`RatioSummary.verdict`).

    Raises:
        ValueError: The timings have different numbers of rounds.
    """
    ratios = paired_ratios(a, b)
    if len(ratios) < 4:
        low, high = min(ratios), max(ratios)
    else:
        low, _, high = statistics.quantiles(ratios, n=4)
    return RatioSummary(statistics.median(ratios), low, high, len(ratios))


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
