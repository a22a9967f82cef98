"""Measuring attention: timing, peak tensor memory, operator lists, FLOP and byte counts.

The tools the book's measuring chapters and the ``benchmarks`` package use; none of them is
part of a model. Part of :mod:`attn_core.teach` (floor 6): it may import every floor of the
library, and nothing in the library imports it.

* :mod:`~attn_core.teach.measure.timing`: interleaved rounds, medians and paired ratios that
  hold up on a shared, noisy machine.
* :mod:`~attn_core.teach.measure.dispatch`: :func:`peak_tensor_memory`, :func:`aten_ops`,
  :func:`launched_ops`, :func:`memory_traffic` and :func:`saved_tensor_bytes`, which watch
  what PyTorch runs inside a function.
* :mod:`~attn_core.teach.measure.formulas`: :func:`attention_score_bytes`,
  :func:`attention_layer_flops` and :func:`attention_hbm_bytes`, by formula.
* :mod:`~attn_core.teach.measure.implementations`: :func:`attention_implementations`, the
  subjects of the speed comparison of attention implementations.
"""

from .dispatch import Traffic, aten_ops, launched_ops, memory_traffic, peak_tensor_memory, saved_tensor_bytes
from .formulas import attention_hbm_bytes, attention_layer_flops, attention_score_bytes
from .implementations import attention_implementations
from .timing import (
    RatioSummary,
    Timing,
    assert_ratio,
    matmul_throughput,
    paired_ratio,
    paired_ratios,
    ratio_summary,
    sync,
    time_interleaved,
)

__all__ = [
    "Timing",
    "time_interleaved",
    "paired_ratio",
    "paired_ratios",
    "RatioSummary",
    "ratio_summary",
    "assert_ratio",
    "matmul_throughput",
    "sync",
    "peak_tensor_memory",
    "aten_ops",
    "launched_ops",
    "Traffic",
    "memory_traffic",
    "saved_tensor_bytes",
    "attention_score_bytes",
    "attention_layer_flops",
    "attention_hbm_bytes",
    "attention_implementations",
]
