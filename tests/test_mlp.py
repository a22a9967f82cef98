"""attn_core.mlp: FeedForward and SwiGLU against their formulas, the hidden-width defaults, bad input."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attn_core import (
    FeedForward,
    SwiGLU,
    swiglu_hidden_dim,
)


# --------------------------------------------------------------------------- MLPs
def test_feedforward_matches_formula_and_default_width():
    ff = FeedForward(8)
    assert ff.d_ff == 32
    x = torch.randn(2, 3, 8)
    expected = F.linear(F.gelu(F.linear(x, ff.up_proj.weight, ff.up_proj.bias)), ff.down_proj.weight, ff.down_proj.bias)
    assert torch.allclose(ff(x), expected, atol=1e-6)


def test_swiglu_matches_formula_and_width():
    sw = SwiGLU(8, 24)
    x = torch.randn(2, 3, 8)
    expected = sw.down_proj(F.silu(sw.gate_proj(x)) * sw.up_proj(x))
    assert torch.allclose(sw(x), expected, atol=1e-6)
    assert swiglu_hidden_dim(4096, 256) == 11008  # LLaMA-7B
    assert SwiGLU(48).d_ff == swiglu_hidden_dim(48) == 128  # ⅔·4·48 = 128 exactly
    assert SwiGLU(64).d_ff == 176  # ⅔·4·64 = 170.7 -> rounded up to a multiple of 8
    # Three matrices of width ⅔·4d cost what two of width 4d cost.
    d = 96
    gelu = sum(p.numel() for p in FeedForward(d, bias=False).parameters())
    swiglu = sum(p.numel() for p in SwiGLU(d).parameters())
    assert gelu == swiglu == 8 * d * d


@pytest.mark.parametrize("cls", [FeedForward, SwiGLU])
@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(d_model=0), "d_model=0"),
        (dict(d_model=8, d_ff=0), "d_ff=0"),
        (dict(d_model=8, dropout=1.0), "dropout=1.0"),
    ],
)
def test_mlp_bad_input(cls, kwargs, message):
    with pytest.raises(ValueError, match=message):
        cls(**kwargs)
