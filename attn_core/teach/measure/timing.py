"""Timing that holds up on a shared, noisy machine: warm-up, interleaved rounds, medians.

Used by the measurements of memory and speed and by the ``benchmarks`` package. The rules:

* **Warm-up** calls first (allocator, kernel selection, caches), never timed.
* **Interleaved rounds**: every round runs each function once, in a rotated order, so
  that a slow minute of the machine hits all of them alike instead of one.
* **Medians** over the rounds, not means: one interruption does not move a median.
* **Ratios** to a baseline twice: from the medians, and as the median of the per-round
  ratios (each round's functions ran within moments of each other). They agree on a
  quiet machine; the second is the more robust on a busy one.
* **Noise** is stated, not hidden: :func:`ratio_summary` gives the quartiles of the
  per-round ratios and a 95% bootstrap interval on their median, and its verdict is
  "slower"/"faster" only when the interval lies on one side of 1, "equivalent" when it
  lies within ±10% of 1, and "indistinguishable" otherwise.
* On a machine shared with other programs, ``clock="cpu"`` counts the CPU seconds of
  this process (``time.process_time``) instead of wall seconds: other programs' work
  does not inflate it (with several threads it sums them: it measures work, not latency).
* On CUDA, ``torch.cuda.synchronize()`` brackets every timed call: kernels run
  asynchronously, and without it one would time the launch, not the work.

Shape legend:
    n    side of the square matrices of :func:`matmul_throughput`
"""

from __future__ import annotations

import random
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from ...checks import check_choice, check_int

__all__ = [
    "Timing",
    "time_interleaved",
    "paired_ratio",
    "paired_ratios",
    "RatioSummary",
    "ratio_summary",
    "assert_ratio",
    "EQUIVALENCE_MARGIN",
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


EQUIVALENCE_MARGIN = 0.10  # two timings within ±10% of each other are "equivalent"
CONFIDENCE = 0.95  # of the interval on a ratio
_BOOTSTRAP_RESAMPLES = 2000


def _bootstrap_median_interval(ratios: list[float]) -> tuple[float, float]:
    """A percentile-bootstrap interval on the median of the per-round ratios.

    Resample the rounds with replacement, take each resample's median, and keep the middle
    ``CONFIDENCE`` of those medians. The generator is seeded: the same timings always give
    the same interval (the timings themselves are what varies from run to run).
    """
    rng = random.Random(0)
    n = len(ratios)
    medians = sorted(statistics.median(rng.choices(ratios, k=n)) for _ in range(_BOOTSTRAP_RESAMPLES))
    tail = (1 - CONFIDENCE) / 2
    return medians[int(tail * _BOOTSTRAP_RESAMPLES)], medians[int((1 - tail) * _BOOTSTRAP_RESAMPLES) - 1]


@dataclass(frozen=True)
class RatioSummary:
    """The per-round ratios of two timings: their median, spread and confidence interval.

    The book's one rule for a timing verdict (every timed chapter and
    ``benchmarks``): time in interleaved rounds (:func:`time_interleaved`), take the
    median of the per-round ratios, put a 95% bootstrap interval on it, and call

    * ``"equivalent"`` when the whole interval lies within ±``margin`` (10%) of 1,
    * ``"slower"`` when it lies above 1, ``"faster"`` when it lies below 1,
    * ``"indistinguishable"`` otherwise (1 is inside the interval, and so is a
      difference larger than the margin: the noise cannot tell).

    Attributes:
        median: Median of the per-round ratios.
        low: Their lower quartile (the minimum for fewer than 4 rounds).
        high: Their upper quartile (the maximum for fewer than 4 rounds).
        rounds: The number of rounds.
        ci_low: Lower end of the 95% bootstrap interval on the median.
        ci_high: Upper end of that interval.
        margin: The equivalence margin of :attr:`verdict`.
    """

    median: float
    low: float
    high: float
    rounds: int
    ci_low: float
    ci_high: float
    margin: float = EQUIVALENCE_MARGIN

    @property
    def verdict(self) -> str:
        """``"equivalent"``, ``"slower"``, ``"faster"`` or ``"indistinguishable"`` (see the class)."""
        if 1 / (1 + self.margin) <= self.ci_low and self.ci_high <= 1 + self.margin:
            return "equivalent"
        if self.ci_low > 1:
            return "slower"
        if self.ci_high < 1:
            return "faster"
        return "indistinguishable"

    def __str__(self) -> str:
        return f"{self.median:.2f}× (95% CI {self.ci_low:.2f}-{self.ci_high:.2f})"


def ratio_summary(a: Timing, b: Timing, *, margin: float = EQUIVALENCE_MARGIN) -> RatioSummary:
    """Median, quartiles and 95% interval of ``a``'s time over ``b``'s, round by round.

    Args:
        a, b: Timings of the same rounds (from one :func:`time_interleaved` call).
        margin: The relative difference below which the two count as equivalent.

    Raises:
        ValueError: The timings have different numbers of rounds, or ``margin <= 0``.
    """
    if not margin > 0:
        raise ValueError(f"margin must be > 0, got margin={margin}")
    ratios = paired_ratios(a, b)
    if len(ratios) < 4:
        low, high = min(ratios), max(ratios)
    else:
        low, _, high = statistics.quantiles(ratios, n=4)
    ci_low, ci_high = _bootstrap_median_interval(ratios)
    return RatioSummary(statistics.median(ratios), low, high, len(ratios), ci_low, ci_high, margin)


def assert_ratio(
    summary: RatioSummary,
    *,
    label: str,
    above: float | None = None,
    below: float | None = None,
    verdict: str | None = None,
    quiet: bool = False,
) -> RatioSummary:
    """Assert what a timing shows and print it: ``label: <median> (held above <bound>), 95% CI <lo>-<hi>``.

    The timing claims of the lessons, in one format. The median of the per-round ratios
    stands in the value slot that the lessons' nbval sanitize file masks (as for
    :func:`attn_core.teach.compare.assert_above`), and so do the interval's ends: a timing's digits
    cannot be the same on two machines, or two runs. What is compared is the label, the
    bounds and the verdict, which the call asserts.

    Args:
        summary: From :func:`ratio_summary`.
        label: What the ratio is (``"MHA time / MQA time"``).
        above, below: Bounds on the median ratio; at least one. Choose them with a margin
            that holds on a loaded machine and on another CPU.
        verdict: If given, :attr:`RatioSummary.verdict` must equal it, and it is printed.
        quiet: Assert only.

    Returns:
        ``summary``.

    Raises:
        AssertionError: A bound or the verdict does not hold (the message gives the measurement).
        ValueError: Neither bound is given, or ``verdict`` is not one of the four verdicts.
    """
    if above is None and below is None:
        raise ValueError(f"{label}: give a bound (above= or below=) that the median ratio is held to")
    verdicts = ("equivalent", "slower", "faster", "indistinguishable")
    if verdict is not None and verdict not in verdicts:
        raise ValueError(f"verdict must be one of {verdicts}, got verdict={verdict!r}")
    m = summary.median
    if above is not None and below is not None:
        held = f"between {above:g} and {below:g}"
    else:
        held = f"above {above:g}" if above is not None else f"below {below:g}"
    if (above is not None and not m > above) or (below is not None and not m < below):
        raise AssertionError(f"{label}: median ratio {m:.3g} ({summary}) is not {held}")
    if verdict is not None and summary.verdict != verdict:
        raise AssertionError(f"{label}: verdict {summary.verdict!r} ({summary}), expected {verdict!r}")
    if not quiet:
        tail = f", {verdict}" if verdict is not None else ""
        print(f"{label}: {m:.3g} (held {held}), 95% CI {summary.ci_low:.3g}-{summary.ci_high:.3g}{tail}")
    return summary


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
