"""Timing and reporting helpers shared by the benchmark suites.

Timings on a shared, noisy machine need care; the rules used here:

* **Warm-up** calls first (allocator, kernel selection, caches), never timed.
* **Interleaved rounds**: every round runs each implementation once, in a rotated
  order, so that a slow minute of the machine hits all of them alike instead of one.
* **Medians** over the rounds, not means: one interruption does not move a median.
* **Ratios** to a baseline are computed twice: from the medians, and as the median of
  the per-round ratios (each round's implementations ran within seconds of each
  other). They agree on a quiet machine; the second is the more robust on a busy one.
* On CUDA, ``torch.cuda.synchronize()`` brackets every timed call (kernels are
  asynchronous: without it one would time the launch, not the work).
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

__all__ = ["Timing", "time_interleaved", "paired_ratio", "machine_info", "matmul_throughput", "sync", "format_table"]


def sync(device: torch.device | str) -> None:
    """Wait for queued GPU work (a no-op on CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class Timing:
    """Seconds per call of one implementation, over the rounds."""

    name: str
    seconds: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median: how noisy the measurement was."""
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
    """Time every function of ``fns`` in interleaved rounds; return their :class:`Timing` s.

    Args:
        fns: Name -> a function of no arguments doing one unit of work.
        rounds: Timed rounds (each function runs once per round, or several times when
            one call is shorter than ``min_seconds``; the time per call is recorded).
        warmup: Untimed calls of each function before the first round.
        min_seconds: Repeat short calls within a round until this much time has passed,
            so that timer resolution and call overhead do not dominate.
        device: Where the work runs (CUDA work is synchronised around each timing).
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got rounds={rounds}")
    names = list(fns)
    for name in names:
        for _ in range(warmup):
            fns[name]()
        sync(device)
    # How many calls make one timed sample: enough to last min_seconds.
    inner = {name: 1 for name in names}
    for name in names if min_seconds > 0 else []:
        t0 = time.perf_counter()
        fns[name]()
        sync(device)
        once = time.perf_counter() - t0
        inner[name] = max(1, int(min_seconds / max(once, 1e-9)))
    timings = {name: Timing(name) for name in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]  # rotate who goes first
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
    return statistics.median(x / y for x, y in zip(a.seconds, b.seconds))


def matmul_throughput(
    *, n: int = 2048, rounds: int = 7, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32
) -> float:
    """This machine's measured dense matmul throughput in GFLOP/s (``n×n @ n×n``, median).

    The yardstick for "achieved GFLOP/s as a fraction of what the hardware does": an
    attention implementation cannot be faster than the matrix products it is made of.
    """
    g = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
    with torch.inference_mode():
        t = time_interleaved({"matmul": lambda: a @ b}, rounds=rounds, warmup=2, min_seconds=0.05, device=device)
    return 2 * n**3 / t["matmul"].median / 1e9


def machine_info(device: torch.device | str = "cpu") -> dict:
    """What the numbers were measured on."""
    info = {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or _cpu_model(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "mkl": torch.backends.mkl.is_available(),
        "mkldnn": torch.backends.mkldnn.is_available(),
        "cuda": torch.cuda.is_available(),
    }
    if torch.cuda.is_available():
        info["cuda_device"] = torch.cuda.get_device_name(0)
        info["cuda_version"] = torch.version.cuda
    return info


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def format_table(rows: list[dict], columns: list[tuple[str, str, str]]) -> str:
    """A plain-text table: ``columns`` are ``(key, header, format spec)``."""
    cells = [[h for _, h, _ in columns]]
    for row in rows:
        cells.append([("" if row.get(k) is None else format(row[k], spec)) for k, _, spec in columns])
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    lines = []
    for j, r in enumerate(cells):
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
