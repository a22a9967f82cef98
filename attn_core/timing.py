"""The old path of :mod:`attn_core.measure.timing`, which chapters 12-14 import: the same functions."""

from .measure.timing import Timing, matmul_throughput, paired_ratio, sync, time_interleaved

__all__ = ["Timing", "time_interleaved", "paired_ratio", "matmul_throughput", "sync"]
