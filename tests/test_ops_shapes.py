"""attn_core.ops.shapes: split_heads / merge_heads are inverse reshapes; head_mask gives 3-D masks a head axis."""

from __future__ import annotations

import torch

from attn_core.ops.shapes import head_mask, merge_heads, split_heads
from conftest import randn


def test_split_heads_puts_each_heads_features_on_its_own_axis():
    x = torch.arange(2 * 3 * 8.0).view(2, 3, 8)  # (B, T, H·D) with H = 4, D = 2
    h = split_heads(x, 4)
    assert h.shape == (2, 4, 3, 2)
    torch.testing.assert_close(h[1, 2, 0], x[1, 0, 4:6])  # head 2 = features 4..5
    assert h.data_ptr() == x.data_ptr(), "a view, no copy"


def test_merge_heads_inverts_split_heads_also_for_non_contiguous_inputs():
    x = randn(2, 5, 12)
    torch.testing.assert_close(merge_heads(split_heads(x, 3)), x, rtol=0, atol=0)
    y = randn(2, 3, 5, 4)  # (B, H, T, D)
    merged = merge_heads(y.transpose(-2, -1).transpose(-2, -1))  # the same values, strided
    assert merged.shape == (2, 5, 12)
    torch.testing.assert_close(merged[:, :, 4:8], y[:, 1], rtol=0, atol=0)


def test_head_mask_adds_a_head_axis_only_to_per_example_masks():
    m3 = torch.ones(2, 4, 5, dtype=torch.bool)
    assert head_mask(m3).shape == (2, 1, 4, 5)
    m2, m4 = torch.ones(4, 5, dtype=torch.bool), torch.ones(2, 3, 4, 5, dtype=torch.bool)
    assert head_mask(m2) is m2 and head_mask(m4) is m4 and head_mask(None) is None
