"""Checks for the exercises of chapter 9 (normalisation)."""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from ._common import compare, report

__all__ = ["check_rms_norm"]


def _inputs(seed: int, *shape: int, scale: float = 1.0, shift: float = 0.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64) * scale + shift


def _run(name: str, fn: Callable, *args):
    """Call the learner's function; a crash becomes a printed verdict, not an exception."""
    try:
        return True, fn(*args)
    except Exception as e:  # a learner's bug should print, not stop the notebook
        return False, report(name, False, f"{type(e).__name__}: {e}")


def check_rms_norm(fn: Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]) -> bool:
    """Exercise 9.2: ``fn(x, weight, eps)`` is RMSNorm: ``x / sqrt(mean(x²) + eps) * weight``.

    Shapes:
        x: ``(..., d)``; weight: ``(d,)``; fn's output: ``(..., d)``
    """
    x = _inputs(93, 2, 3, 8, scale=3.0, shift=1.5)
    weight = _inputs(94, 8)
    for eps in (1e-6, 0.5):
        ok, got = _run("9.2 RMS norm", fn, x, weight, eps)
        if not ok:
            return False
        expected = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
        if not compare(f"9.2 RMS norm (eps={eps})", got, expected, atol=1e-8):
            return False
    return True


# ---- issue 25: an exercise that needs a test design ----

__all__ += ["PLACEMENTS", "check_placement_probe"]

#: The four places a norm can sit around one sub-layer ``f``, as :func:`check_placement_probe` names them.
PLACEMENTS = {
    "pre": "x + f(norm(x))  (GPT-2, LLaMA)",
    "post": "norm(x + f(x))  (the original transformer, BERT)",
    "sandwich": "x + norm2(f(norm1(x)))  (Gemma 2/3)",
    "olmo2": "x + norm(f(x))  (OLMo 2)",
}


def _placement_steps(d: int, seed: int) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    # One sub-layer wired each way; RMSNorms with gain 1 (as at initialisation), and a
    # stand-in sub-layer f with weights drawn from `seed`.
    g = torch.Generator().manual_seed(seed)
    W1 = torch.randn(d, 3 * d, generator=g, dtype=torch.float64) / d**0.5
    W2 = torch.randn(3 * d, d, generator=g, dtype=torch.float64) / (3 * d) ** 0.5
    shift = torch.randn(d, generator=g, dtype=torch.float64)

    def f(t: torch.Tensor) -> torch.Tensor:  # (..., d) -> (..., d), with a bias
        return F.gelu(t @ W1) @ W2 + shift

    def norm(t: torch.Tensor) -> torch.Tensor:  # RMSNorm, gain 1
        return F.rms_norm(t, (d,), eps=1e-6)

    return {
        "pre": lambda x: x + f(norm(x)),
        "post": lambda x: norm(x + f(x)),
        "sandwich": lambda x: x + norm(f(norm(x))),
        "olmo2": lambda x: x + norm(f(x)),
    }


def check_placement_probe(fn: Callable[[Callable[[torch.Tensor], torch.Tensor], int], str]) -> bool:
    """Exercise 9.1: ``fn(step, d_model)`` tells where the norm sits in a residual step.

    ``step`` maps a ``(B, T, d_model)`` float64 stream to the stream after one sub-layer,
    wired one of four ways (:data:`PLACEMENTS`): ``"pre"``, ``"post"``, ``"sandwich"`` or
    ``"olmo2"``. Its norms are RMSNorms with gain 1. ``fn`` may call ``step`` on any
    input it makes, and returns the name. The check hides each wiring behind a fresh
    sub-layer, twice, at two widths.
    """
    name = "9.1 where is the norm?"
    wrong = []
    for d, seed in ((16, 0), (64, 1)):
        for placement, step in _placement_steps(d, seed).items():
            try:
                got = fn(step, d)
            except Exception as e:  # a learner's bug should print, not stop the notebook
                return report(name, False, f"{type(e).__name__}: {e}")
            if got != placement:
                wrong.append(f"{placement} (d={d}) called {got!r}")
    if wrong:
        return report(name, False, "; ".join(wrong))
    return report(name, True, "8 hidden sub-layers, each placement named")
