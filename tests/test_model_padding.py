"""attn_core.model.padding.

Left padding's attention mask, per-row positions and the checks, against hand-computed values.

End to end (a padded batch decodes as each prompt alone) is tests/test_batched_generate.py.
"""

from __future__ import annotations

import pytest
import torch

from attn_core.config import DecoderConfig, LayerPattern
from attn_core.model.padding import (
    absolute_encodings,
    check_attention_mask,
    check_padding_support,
    check_relative_positions,
    padding_keys_mask,
    positions_from_mask,
)
from attn_core.positions.positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding


def test_positions_from_mask():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]]).bool()
    assert positions_from_mask(mask, 5).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]
    assert positions_from_mask(mask, 2).tolist() == [[1, 2], [3, 4]]


def test_padding_keys_mask_repeats_the_row_for_every_query():
    mask = torch.tensor([[False, True, True], [True, True, True]])
    keys = padding_keys_mask(mask, 2)
    assert keys.shape == (2, 2, 3)
    assert keys.tolist() == [[[False, True, True]] * 2, [[True, True, True]] * 2]


def test_check_attention_mask_accepts_ints_and_bools():
    out = check_attention_mask(torch.tensor([[0, 1, 1]]), 1, 3)
    assert out.dtype == torch.bool and out.tolist() == [[False, True, True]]
    assert check_attention_mask(torch.ones(2, 4, dtype=torch.bool), 2, 4).all()


def test_check_attention_mask_bad_input():
    with pytest.raises(TypeError, match="attention_mask must be boolean or integer .* got torch.float32"):
        check_attention_mask(torch.ones(1, 3), 1, 3)
    with pytest.raises(ValueError, match=r"attention_mask must have shape \(B, past \+ T\) = \(2, 3\), got \(1, 3\)"):
        check_attention_mask(torch.ones(1, 3, dtype=torch.long), 2, 3)
    with pytest.raises(ValueError, match=r"attention_mask must hold 0 \(padding\) and 1 \(token\), got \[0, 1, 2\]"):
        check_attention_mask(torch.tensor([[0, 1, 2]]), 1, 3)
    with pytest.raises(TypeError):
        check_attention_mask([[1, 1]], 1, 2)


def test_check_padding_support_names_every_reason():
    check_padding_support(DecoderConfig.llama_like())  # RoPE, full attention: supported
    with pytest.raises(ValueError, match="static caches build their own mask"):
        check_padding_support(DecoderConfig.llama_like(), static=True)
    with pytest.raises(ValueError, match="rolling cache takes no mask") as info:
        check_padding_support(DecoderConfig.llama_like(pattern=LayerPattern(sliding_window=4)), static=True)
    assert str(info.value).startswith("attention_mask is not supported for this model: ")
    assert "static caches" in str(info.value), "every reason, not the first one"


def test_absolute_encodings_gathers_each_rows_positions():
    pe = SinusoidalPositionalEncoding(4)
    x = torch.zeros(2, 2, 4, dtype=torch.float64)
    ids = torch.tensor([[0, 1], [2, 3]])
    table = pe.encodings(4, dtype=torch.float64)  # (4, d_model)
    out = absolute_encodings(pe, ids, 4, x)
    torch.testing.assert_close(out, table[ids], rtol=0, atol=0)
    learned = LearnedPositionalEmbedding(8, 4)
    torch.testing.assert_close(absolute_encodings(learned, ids, 4, x.float()), learned.encodings(4)[ids])
    with pytest.raises(ValueError, match=r"position_ids must be in \[0, past \+ T = 4\), got min=0, max=4"):
        absolute_encodings(pe, torch.tensor([[0, 4]]), 4, x[:1])


def test_check_relative_positions_allows_whole_row_shifts_only():
    check_relative_positions(torch.tensor([[3, 4, 5], [0, 1, 2]]), 0, None, "rope")  # each row shifted as a whole
    pad = torch.tensor([[False, True, True], [True, True, True]])
    check_relative_positions(torch.tensor([[0, 0, 1], [0, 1, 2]]), 0, pad, "rope")  # the pad's position is free
    with pytest.raises(ValueError, match=r"positional='alibi' depends only on q - k, so the layers use 2..4"):
        check_relative_positions(torch.tensor([[2, 3, 5]]), 2, None, "alibi")
