"""Measuring attention: timing, peak tensor memory, operator lists, FLOP and byte counts.

The tools chapters 12-14 and the ``benchmarks`` package measure with; none of them is
part of a model.

* :mod:`~attn_core.measure.timing`: interleaved rounds, medians and paired ratios that
  hold up on a shared, noisy machine.
* :mod:`~attn_core.measure.dispatch`: :func:`peak_tensor_memory` and :func:`aten_ops`,
  which watch what PyTorch runs inside a function.
* :mod:`~attn_core.measure.formulas`: :func:`attention_score_bytes` and
  :func:`attention_layer_flops`, by formula.
* :mod:`~attn_core.measure.implementations`: :func:`attention_implementations`, the
  subjects of chapter 13's speed comparison.
"""

from .dispatch import aten_ops, peak_tensor_memory
from .formulas import attention_layer_flops, attention_score_bytes
from .implementations import attention_implementations
from .timing import Timing, matmul_throughput, paired_ratio, sync, time_interleaved

__all__ = [
    "Timing",
    "time_interleaved",
    "paired_ratio",
    "matmul_throughput",
    "sync",
    "peak_tensor_memory",
    "aten_ops",
    "attention_score_bytes",
    "attention_layer_flops",
    "attention_implementations",
]
