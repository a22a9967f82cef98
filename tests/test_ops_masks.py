"""attn_core.ops.masks: causal and padding masks built from positions."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attn_core import causal_mask, padding_mask
from attn_core.ops.masks import check_window, position_mask


def test_causal_square_is_lower_triangular():
    assert torch.equal(causal_mask(4), torch.ones(4, 4, dtype=torch.bool).tril())


@settings(max_examples=30, deadline=None)
@given(T_q=st.integers(1, 12), extra=st.integers(0, 12))
def test_causal_is_bottom_right_aligned(T_q, extra):
    T_k = T_q + extra
    m = causal_mask(T_q, T_k)
    assert m.shape == (T_q, T_k) and m.dtype == torch.bool
    # The last query sees every key; query i sees keys 0 .. T_k - T_q + i.
    assert m[-1].all()
    assert torch.equal(m.sum(-1), torch.arange(T_k - T_q + 1, T_k + 1))
    # It is the bottom rows of the square mask of the full sequence.
    assert torch.equal(m, causal_mask(T_k)[-T_q:])


def test_causal_differs_from_torch_top_left_when_T_q_lt_T_k():
    top_left = torch.ones(2, 4, dtype=torch.bool).tril()  # what is_causal=True uses
    assert not torch.equal(causal_mask(2, 4), top_left)


def test_masks_work_past_any_fixed_length():
    # No buffer sized by a maximum context: long inputs work.
    assert causal_mask(5000, 5000)[4999].all()


def test_padding_mask_values_and_shape():
    m = padding_mask([3, 0, 5], 5)
    assert m.shape == (3, 1, 5) and m.dtype == torch.bool
    assert m[:, 0].int().tolist() == [[1, 1, 1, 0, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]]
    assert torch.equal(padding_mask(torch.tensor([3, 0, 5]), 5), m)


def test_bad_input():
    with pytest.raises(ValueError, match="T_k >= T_q .* got T_q=4, T_k=2"):
        causal_mask(4, 2)
    with pytest.raises(ValueError, match="T_q must be >= 1, got T_q=0"):
        causal_mask(0)
    with pytest.raises(TypeError, match="T_q must be an int, got float"):
        causal_mask(2.0)
    with pytest.raises(ValueError, match=r"every length must be in \[0, T=4\], got lengths=\[5, 2\]"):
        padding_mask([5, 2], 4)
    with pytest.raises(TypeError, match="lengths must be ints"):
        padding_mask([1.5], 4)
    with pytest.raises(TypeError, match="lengths must be an integer tensor, got dtype=torch.float32"):
        padding_mask(torch.tensor([1.0]), 4)


def test_padding_mask_lengths_must_be_one_dimensional():
    with pytest.raises(ValueError, match=r"lengths must have shape \(B\), got \(1, 2\)"):
        padding_mask(torch.tensor([[1, 2]]), 4)


# --------------------------------------------------------------------------- windows (chapter 15)
@pytest.mark.parametrize("T_q,T_k,window", [(6, 6, 1), (6, 6, 3), (3, 9, 4), (1, 7, 2), (5, 5, 9)])
def test_window_mask_is_the_band_of_the_reference_formula(T_q, T_k, window):
    """Query i (absolute position T_k - T_q + i) sees key j iff i - window < j <= i: Mistral's/HF's rule."""
    got = causal_mask(T_q, T_k, window=window)
    expected = torch.tensor(
        [[0 <= (T_k - T_q + i) - j < window for j in range(T_k)] for i in range(T_q)], dtype=torch.bool
    )
    assert torch.equal(got, expected)
    assert (got.sum(-1) <= window).all()


def test_window_of_the_whole_sequence_is_the_causal_mask():
    assert torch.equal(causal_mask(4, 7, window=7), causal_mask(4, 7))


def test_sink_tokens_stay_visible_inside_a_window():
    m = causal_mask(6, window=2, sink_tokens=1)
    assert m[:, 0].all() and m[5].tolist() == [True, False, False, False, True, True]


def test_position_mask_takes_any_key_order_and_ignores_empty_slots():
    k_pos = torch.tensor([4, 5, 2, 3, -1])  # a ring buffer's slots, one empty
    m = position_mask(torch.tensor([5]), k_pos, window=3)
    assert m.tolist() == [[True, True, False, True, False]]


def test_window_composes_with_padding():
    allowed = causal_mask(5, window=2) & padding_mask([3, 5], 5)  # (B, T, T)
    assert allowed[0, 4].tolist() == [False, False, False, False, False]  # padded query sees only padding
    assert allowed[1, 4].tolist() == [False, False, False, True, True]


@pytest.mark.parametrize("window", [0, -3])
def test_window_must_be_positive(window):
    with pytest.raises(ValueError, match=f"window must be >= 1.*window={window}"):
        causal_mask(4, window=window)


def test_window_type_and_sink_tokens_are_checked():
    with pytest.raises(TypeError, match="window must be an int or None, got window=2.5"):
        causal_mask(4, window=2.5)
    with pytest.raises(ValueError, match="sink_tokens"):
        position_mask(torch.arange(3), torch.arange(3), window=2, sink_tokens=-1)
    assert check_window(None) is None and check_window(3) == 3
