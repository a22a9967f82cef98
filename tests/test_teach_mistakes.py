"""attn_core.teach.mistakes: each deliberate mistake is wrong in the way its chapter says, and a test catches it."""

from __future__ import annotations

import torch

from attn_core import ShapedAttention
from attn_core.teach.mistakes import leaky_shaped_attention
from conftest import leaks, randn, randomise_shaped_queries


def _module_and_leaky_copy(seed: int = 0):
    """A shaped-attention module with random queries, and the buggy function on the same weights."""
    torch.manual_seed(seed)
    attn = ShapedAttention(12, 3).double().eval()
    randomise_shaped_queries(attn, seed=seed, gains=True)

    def leaky(x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        split = lambda t: t.view(B, T, 3, 4).transpose(1, 2)  # (B, T, 12) -> (B, 3, T, 4)
        out, _ = leaky_shaped_attention(
            split(attn.q_proj(x)), split(attn.k_proj(x)), split(x), attn.alpha, attn.beta, attn.gamma
        )
        return out.transpose(1, 2).reshape(B, T, 12)

    return attn, leaky


def test_leaky_version_fails_causality_and_fixed_version_passes():
    attn, leaky = _module_and_leaky_copy()
    assert leaks(leaky, randn(2, 6, 12))
    assert not leaks(attn, randn(2, 6, 12))
    # The same weights: the bug's matrix has weight on future keys, the module's is lower-triangular.
    x = torch.randn(1, 6, 12, dtype=torch.float64)
    _, A = attn(x, return_weights=True)
    assert (A.triu(1) == 0).all()
    split = lambda t: t.view(1, 6, 3, 4).transpose(1, 2)  # (1, 6, 12) -> (1, 3, 6, 4)
    _, A_bug = leaky_shaped_attention(
        split(attn.q_proj(x)), split(attn.k_proj(x)), split(x), attn.alpha, attn.beta, attn.gamma
    )
    assert (A_bug.triu(1).abs() > 1e-3).any()
    assert not torch.allclose(A_bug, A, atol=1e-3)


def test_leaky_version_looks_right_at_init():
    # With W_Q = 0 and β = γ the two mistakes cancel: A = I, so only a causality test
    # with trained (or random) queries reveals the bug.
    g = torch.Generator().manual_seed(0)
    k, v = torch.randn(2, 3, 6, 4, generator=g, dtype=torch.float64), torch.randn(2, 3, 6, 4, dtype=torch.float64)
    ones = torch.ones(3, dtype=torch.float64)
    out, A = leaky_shaped_attention(torch.zeros_like(k), k, v, ones, ones, ones)
    assert torch.allclose(A, torch.eye(6, dtype=torch.float64).expand_as(A), atol=1e-12)
    assert torch.allclose(out, v, atol=1e-12)
