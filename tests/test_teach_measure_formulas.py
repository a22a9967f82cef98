"""attn_core.teach.measure.formulas: score-matrix bytes and attention FLOPs by formula, against PyTorch's counter."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from attn_core import MultiHeadAttention, attention
from attn_core.teach.measure import (
    attention_hbm_bytes,
    attention_layer_flops,
    attention_score_bytes,
    memory_traffic,
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


def test_attention_hbm_bytes_standard_is_algorithm_0():
    """Read Q, K; write S; read S, write P; read P, V; write O: 4·T·D + 4·T² elements per head."""
    T, D = 100, 16
    assert attention_hbm_bytes(2, 3, T, D) == 2 * 3 * (4 * T * D + 4 * T * T) * 4
    assert attention_hbm_bytes(1, 1, T, D, dtype=torch.float16) == (4 * T * D + 4 * T * T) * 2
    # Algorithm 0's four passes over the T×T matrix: the eager explicit path makes at least those.
    q = k = v = torch.empty(1, 1, T, D, device="meta")
    with torch.no_grad():
        eager = memory_traffic(lambda: attention(q, k, v, return_weights=True)[0]).total
    assert eager >= attention_hbm_bytes(1, 1, T, D)


def test_attention_hbm_bytes_tiled_reads_keys_once_per_query_block():
    T, D, b = 256, 64, 64  # 4 query blocks
    q_and_o, lse = 2 * T * D * 4, T * 4
    full = attention_hbm_bytes(1, 1, T, D, block_size=b)
    assert full == q_and_o + 4 * (2 * T * D * 4) + lse  # every query block reads all of K and V
    causal = attention_hbm_bytes(1, 1, T, D, block_size=b, causal=True)
    assert causal == q_and_o + (1 + 2 + 3 + 4) * (2 * b * D * 4) + lse  # key blocks up to the diagonal
    assert attention_hbm_bytes(1, 1, T, D, block_size=T) == 4 * T * D * 4 + lse  # one block: each read once
    # The T×T term: 2·D/b per element instead of Algorithm 0's 4, so far less traffic at long T.
    assert attention_hbm_bytes(1, 1, 8192, D, block_size=128) < attention_hbm_bytes(1, 1, 8192, D) / 3.5
    # Heads and batch multiply everything, the statistics included.
    assert attention_hbm_bytes(2, 3, T, D, block_size=b) == 6 * full


def test_attention_hbm_bytes_bad_input():
    with pytest.raises(ValueError, match="block_size must be >= 1"):
        attention_hbm_bytes(1, 1, 8, 4, block_size=0)
    with pytest.raises(TypeError, match="head_dim must be an int"):
        attention_hbm_bytes(1, 1, 8, 4.0)
    with pytest.raises(TypeError, match="dtype must be a torch.dtype"):
        attention_hbm_bytes(1, 1, 8, 4, dtype="float16")
