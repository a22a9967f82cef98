"""attn_core.measure.formulas: score-matrix bytes and attention FLOPs by formula, against PyTorch's counter."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from attn_core import MultiHeadAttention
from attn_core.measure import (
    attention_layer_flops,
    attention_score_bytes,
)


def test_attention_score_bytes():
    assert attention_score_bytes(8, 12, 1024) == 8 * 12 * 1024 * 1024 * 4
    assert attention_score_bytes(1, 2, 3, 5, dtype=torch.float16) == 1 * 2 * 3 * 5 * 2
    with pytest.raises(ValueError, match="heads must be >= 1"):
        attention_score_bytes(1, 0, 4)
    with pytest.raises(TypeError, match="dtype must be a torch.dtype"):
        attention_score_bytes(1, 1, 4, dtype="float32")


def test_attention_layer_flops_matches_flop_counter():
    layer = MultiHeadAttention(24, 3)
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        layer(torch.zeros(2, 7, 24), return_weights=True)
    assert attention_layer_flops(2, 7, 24, causal=False) == counter.get_total_flops()
    causal = attention_layer_flops(2, 7, 24, causal=True)
    assert causal == 8 * 2 * 7 * 24**2 + 4 * 2 * 28 * 24  # 28 = 7·8/2 query/key pairs
