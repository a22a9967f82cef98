"""Reporting helpers shared by the benchmark suites; the timing itself is :mod:`attn_core.teach.measure.timing`.

See :mod:`attn_core.teach.measure.timing` for how timings are taken on a noisy machine (warm-up,
interleaved rounds, medians, per-round ratios, CUDA synchronisation).
"""

from __future__ import annotations

import os
import platform

import torch

from attn_core.teach.measure.timing import (
    Timing,
    matmul_throughput,
    paired_ratio,
    ratio_summary,
    sync,
    time_interleaved,
)

__all__ = [
    "Timing",
    "time_interleaved",
    "paired_ratio",
    "ratio_summary",
    "machine_info",
    "matmul_throughput",
    "sync",
    "format_table",
]


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
