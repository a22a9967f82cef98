"""attn_core.ops.backends.call: what every backend receives, and the window and sinks checks shared with the kernels."""

from __future__ import annotations

import math

import pytest
import torch

from attn_core.ops.backends.call import NEEDS, Call, check_window_and_sinks, need_names
from conftest import qkv


def test_needs_are_the_options_asked_for():
    q, k, v = qkv(1, 2, 5, 16)
    assert NEEDS == ("mask", "dropout", "window", "sinks", "softcap", "weights")
    assert Call(q, k, v, is_causal=True).needs == 0  # causality is no need: every backend computes it
    full = Call(q, k, v, torch.ones(5, 5, dtype=torch.bool), True, None, 0.1, 3, torch.zeros(2), 5.0, True)
    assert need_names(full.needs) == set(NEEDS) and full.needs == 0b111111
    for i, name in enumerate(NEEDS):
        options = dict(mask=torch.ones(5, 5), dropout_p=0.1, window=3, sinks=torch.zeros(2), softcap=5.0, weights=True)
        call = Call(q, k, v, **{("dropout_p" if name == "dropout" else name): options.pop(
            "dropout_p" if name == "dropout" else name)})  # fmt: skip
        assert call.needs == 1 << i and need_names(call.needs) == {name}


def test_scale_as_given_and_the_number():
    q, k, v = qkv(1, 2, 5, 16)
    default = Call(q, k, v)
    assert default.scale is None and default.softmax_scale == 1.0 / math.sqrt(16)  # SDPA applies its own default
    given = Call(q, k, v, scale=3)
    assert given.scale == given.softmax_scale == 3.0 and type(given.scale) is float
    assert (Call(q, k, v).T_q, Call(q, k, v).T_k, Call(q, k, v, T_q=7, T_k=9).T_q) == (5, 5, 7)


def test_check_window_and_sinks():
    q, _, _ = qkv(1, 2, 5, 16)
    assert check_window_and_sinks(None, None, is_causal=False, q=q) is None
    assert check_window_and_sinks(3, torch.zeros(2), is_causal=True, q=q) == 3
    with pytest.raises(ValueError, match="window=3 is a causal sliding window: pass is_causal=True with it"):
        check_window_and_sinks(3, None, is_causal=False, q=q)
    with pytest.raises(ValueError, match=r"window must be >= 1 .*got window=0"):
        check_window_and_sinks(0, None, is_causal=True, q=q)
    with pytest.raises(TypeError, match="window must be an int or None, got window=2.0"):
        check_window_and_sinks(2.0, None, is_causal=True, q=q)
    with pytest.raises(ValueError, match=r"sinks needs one logit per query head: got sinks.shape=\(3,\) for 2 heads"):
        check_window_and_sinks(None, torch.zeros(3), is_causal=True, q=q)
    with pytest.raises(TypeError, match="sinks must be a floating-point tensor"):
        check_window_and_sinks(None, torch.zeros(2, dtype=torch.long), is_causal=True, q=q)
