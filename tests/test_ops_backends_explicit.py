"""attn_core.ops.backends.explicit: the reference path, step by step, against formulas written out here."""

from __future__ import annotations

import torch

from attn_core.ops.backends import explicit
from attn_core.ops.backends.call import Call
from attn_core.ops.masks import causal_mask
from conftest import qkv

F64 = torch.float64


def test_equals_the_formula_with_grouped_heads_a_window_and_sinks():
    q, k, v = qkv(2, 4, 6, 8, H_kv=2, dtype=F64)
    sinks = torch.tensor([-1.0, 0.0, 1.0, 2.0], dtype=F64)
    out, weights = explicit.explicit_attention(q, k, v, None, True, 0.3, 0.0, 2, window=3, sinks=sinks)
    k_, v_ = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)  # (B, H, T, D)
    scores = (q @ k_.transpose(-1, -2) * 0.3).masked_fill(~causal_mask(6, window=3), float("-inf"))
    with_sink = torch.cat([scores, sinks[:, None, None].expand(2, 4, 6, 1)], dim=-1)
    expected_weights = torch.softmax(with_sink, dim=-1)[..., :-1]
    torch.testing.assert_close(weights, expected_weights, rtol=0, atol=1e-14)
    torch.testing.assert_close(out, expected_weights @ v_, rtol=0, atol=1e-14)


def test_a_fully_masked_row_gives_zeros_and_softcap_bounds_the_scores():
    q, k, v = qkv(1, 1, 3, 4, dtype=F64)
    mask = torch.tensor([[False] * 3, [True] * 3, [True] * 3])
    out, weights = explicit.explicit_attention(q, k, v, mask, False, 0.5, 0.0, 1)
    assert torch.equal(out[0, 0, 0], torch.zeros(4)) and torch.equal(weights[0, 0, 0], torch.zeros(3))
    _, capped = explicit.explicit_attention(q * 100, k, v, None, False, 1.0, 0.0, 1, softcap=1.0)
    assert capped.max() / capped.min() < torch.e**2 * (1 + 1e-6)  # scores in (-1, 1), nearly saturated here


def test_run_returns_the_weights_only_when_asked():
    q, k, v = qkv(1, 2, 5, 4, dtype=F64)
    out = explicit.run(Call(q, k, v, is_causal=True))
    out2, weights = explicit.run(Call(q, k, v, is_causal=True, weights=True))
    assert torch.equal(out, out2) and weights.shape == (1, 2, 5, 5)
