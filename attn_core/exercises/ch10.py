"""Checks for the exercises of chapter 10 (the transformer block)."""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from ..blocks import DecoderConfig, parameter_count, swiglu_hidden_dim
from ._common import compare, report

__all__ = ["check_swiglu", "check_swiglu_hidden_dim", "check_parameter_formula"]


def check_swiglu(fn: Callable[..., torch.Tensor]) -> bool:
    """Exercise 10.1: ``fn(x, W_gate, W_up, W_down)`` is ``(silu(x W_gate) * (x W_up)) W_down``.

    Shapes:
        x: ``(B, T, d)``; W_gate, W_up: ``(d, f)``; W_down: ``(f, d)``; fn's output: ``(B, T, d)``
    """
    g = torch.Generator().manual_seed(100)
    x = torch.randn(2, 3, 6, generator=g, dtype=torch.float64)
    W_gate, W_up, W_down = (torch.randn(*s, generator=g, dtype=torch.float64) for s in ((6, 16), (6, 16), (16, 6)))
    try:
        got = fn(x, W_gate, W_up, W_down)
    except Exception as e:  # a learner's bug should print, not stop the notebook
        return report("10.1 SwiGLU", False, f"{type(e).__name__}: {e}")
    return compare("10.1 SwiGLU", got, (F.silu(x @ W_gate) * (x @ W_up)) @ W_down, atol=1e-10)


def check_swiglu_hidden_dim(fn: Callable[[int, int], int]) -> bool:
    """Exercise 10.2: ``fn(d_model, multiple_of)`` is LLaMA's hidden width, ⅔·4·d rounded up."""
    cases = ((4096, 256), (64, 8), (48, 8), (768, 64), (5120, 256), (100, 1))
    for d, m in cases:
        try:
            got = fn(d, m)
        except Exception as e:
            return report("10.2 SwiGLU width", False, f"{type(e).__name__}: {e}")
        if got != swiglu_hidden_dim(d, m):
            return report("10.2 SwiGLU width", False, f"fn({d}, {m}) = {got!r}, expected {swiglu_hidden_dim(d, m)}")
    return report("10.2 SwiGLU width", True, f"{len(cases)} cases, e.g. fn(4096, 256) = 11008 (LLaMA-7B)")


def check_parameter_formula(fn: Callable[[DecoderConfig], int]) -> bool:
    """Exercise 10.3: ``fn(config)`` counts the parameters of ``DecoderLM(config)`` for standard MHA/GQA blocks.

    Covers tied and untied heads, learned and rotary positions, GELU and SwiGLU,
    LayerNorm and RMSNorm, biases, grouped key/value heads and post-norm (an embedding norm instead of a final one).
    """
    configs = [
        DecoderConfig.gpt2_like(),
        DecoderConfig.llama_like(),
        DecoderConfig.gpt2_like(vocab_size=50257, n_layers=12, d_model=768, n_heads=12, max_len=1024),
        DecoderConfig.llama_like(n_layers=3, d_model=96, n_heads=6, n_kv_heads=3, d_ff=200, tie_weights=True),
        DecoderConfig.gpt2_like(norm_position="post", bias=False, positional="rope"),
    ]
    for c in configs:
        try:
            got = fn(c)
        except Exception as e:
            return report("10.3 parameter count", False, f"{type(e).__name__}: {e}")
        if got != parameter_count(c):
            return report("10.3 parameter count", False, f"got {got!r}, expected {parameter_count(c):,} for {c}")
    return report("10.3 parameter count", True, f"{len(configs)} configurations, GPT-2 small = 124,439,808")
