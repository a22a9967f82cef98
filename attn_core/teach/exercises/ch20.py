"""Checks for the exercises of chapter 20 (long context: positions beyond RoPE).

* 20.1 derives where YaRN's ramp lies: how many pairs keep their speed and how many are
  interpolated, for a base, a rotated width and a training length;
* 20.2 derives the NTK-aware base that slows the slowest pair by exactly the factor;
* 20.3 writes partial RoPE (only the first ``rotary_dim`` dimensions rotated, Hugging
  Face's ``"half"`` pairing within them);
* 20.4 predicts by how much YaRN's attention factor multiplies the logits.

Every reference is computed from :mod:`attn_core.positions.rope_scaling` and
:class:`attn_core.positions.rope.RotaryEmbedding`, never from a copy of their formulas.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from ...positions.rope import RotaryEmbedding
from ...positions.rope_freqs import default_inv_freq, ntk_inv_freq, yarn_inv_freq, yarn_mscale
from ._common import report

__all__ = ["check_yarn_ramp", "check_ntk_base", "check_partial_rope", "check_yarn_logit_scale"]

# (base, rotated width R, original context L): a toy, Llama 2's and gpt-oss's shapes.
_RAMP_CASES = [(500.0, 16, 16), (10000.0, 128, 4096), (150000.0, 64, 4096), (10000.0, 64, 2048), (1e6, 128, 32768)]


def _ramp_counts(base: float, dim: int, L: int) -> tuple[int, int]:
    """Pairs whose speed YaRN keeps exactly, and pairs it divides by exactly the factor."""
    factor = 8.0
    ratio = yarn_inv_freq(base, dim, factor, L)[0] / default_inv_freq(base, dim)  # (R/2,)
    kept = int(torch.isclose(ratio, torch.ones_like(ratio), rtol=1e-12, atol=0).sum())
    interpolated = int(torch.isclose(ratio, torch.full_like(ratio, 1 / factor), rtol=1e-12, atol=0).sum())
    return kept, interpolated


def check_yarn_ramp(fn: Callable[..., tuple[int, int]]) -> bool:
    """Exercise 20.1: ``fn(base, dim, L)`` returns ``(kept, interpolated)`` for YaRN's defaults.

    With ``beta_fast = 32``, ``beta_slow = 1`` and the ramp's ends rounded outwards
    (``truncate=True``, Hugging Face's default): ``kept`` is the number of pairs whose speed
    is unchanged, ``interpolated`` the number divided by the full factor. Pair ``i`` turns
    ``L·θ_i/(2π)`` times over the original context, with ``θ_i = base^(-2i/R)``.
    """
    name = "20.1 YaRN's ramp"
    for base, dim, L in _RAMP_CASES:
        want = _ramp_counts(base, dim, L)
        try:
            got = fn(base, dim, L)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        if not isinstance(got, tuple) or len(got) != 2 or tuple(got) != want:
            hint = ""
            if isinstance(got, tuple) and len(got) == 2 and tuple(got) == want[::-1]:
                hint = " (kept and interpolated swapped?)"
            return report(name, False, f"base={base:g}, dim={dim}, L={L}: got {got!r}, expected {want}{hint}")
    return report(name, True, f"{len(_RAMP_CASES)} shapes, from the toy of this chapter to a 32k-context model")


def check_ntk_base(fn: Callable[..., float]) -> bool:
    """Exercise 20.2: ``fn(base, dim, factor)`` is the NTK-aware base.

    The base that leaves pair 0 at speed 1 and divides the slowest pair's speed
    (``i = R/2 - 1``) by exactly ``factor``.
    """
    name = "20.2 NTK-aware base"
    cases = [(10000.0, 128, 4.0), (500.0, 16, 4.0), (10000.0, 8, 2.0), (1e6, 64, 16.0)]
    for base, dim, factor in cases:
        try:
            got = fn(base, dim, factor)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        if not isinstance(got, (int, float)) or isinstance(got, bool):
            return report(name, False, f"expected a number, got {type(got).__name__}")
        want = ntk_inv_freq(base, dim, factor)[0]  # (R/2,)
        speeds = default_inv_freq(float(got), dim) if got > 1 else None
        if speeds is None or not torch.allclose(speeds, want, rtol=1e-9, atol=0):
            slowest = default_inv_freq(base, dim)[-1] / factor
            have = "no RoPE (base <= 1)" if speeds is None else f"{speeds[-1].item():.4g}"
            return report(
                name,
                False,
                f"base={base:g}, dim={dim}, factor={factor:g}: got base {got:.6g}; its slowest speed "
                f"{have}, wanted {slowest.item():.4g}",
            )
    return report(name, True, f"{len(cases)} cases: the slowest pair slowed by exactly the factor")


def check_partial_rope(fn: Callable[..., torch.Tensor]) -> bool:
    """Exercise 20.3: ``fn(x, rotary_dim, base)`` rotates only the first ``rotary_dim`` dimensions.

    ``x`` is ``(T, D)`` at positions ``0..T-1``; pairs ``(i, i + R/2)`` within the first
    ``R = rotary_dim`` dimensions, speeds ``base^(-2i/R)``; the last ``D - R`` pass through.
    Compared with :class:`attn_core.positions.rope.RotaryEmbedding` ``(D, rotary_dim=R)``.

    Shapes:
        x: ``(T, D)``; fn's output: ``(T, D)``
    """
    name = "20.3 partial RoPE"
    for T, D, R, base in ((7, 8, 4, 10000.0), (5, 16, 8, 100.0), (6, 12, 12, 500.0), (4, 10, 2, 50.0)):
        g = torch.Generator().manual_seed(T * 100 + D)
        x = torch.randn(T, D, generator=g, dtype=torch.float64)
        want = RotaryEmbedding(D, base=base, rotary_dim=R)(x)
        try:
            got = fn(x.clone(), R, base)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            return report(name, False, f"expected a tensor of shape {tuple(want.shape)}, got {shape}")
        err = (got.double() - want).abs()
        if err.max().item() > 1e-9:
            tail = err[:, R:].max().item() if R < D else 0.0
            hint = " (the last D - R dimensions must pass unchanged)" if tail > 1e-9 else ""
            return report(name, False, f"T={T}, D={D}, R={R}: max abs difference {err.max().item():.2e}{hint}")
    return report(name, True, "4 shapes (R = D included), equal to RotaryEmbedding within 1e-9")


def check_yarn_logit_scale(fn: Callable[[float], float]) -> bool:
    """Exercise 20.4: ``fn(factor)`` is what YaRN multiplies the rotated part of ``q·k`` by.

    Hugging Face multiplies cos and sin by ``0.1·ln(factor) + 1``.
    """
    name = "20.4 YaRN's logit scale"
    for factor in (1.0, 2.0, 4.0, 32.0, 40.0):
        want = yarn_mscale(factor) ** 2
        try:
            got = fn(factor)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        if not isinstance(got, (int, float)) or isinstance(got, bool) or not math.isclose(got, want, rel_tol=1e-9):
            return report(name, False, f"factor={factor:g}: got {got!r}, expected {want:.6g}")
    return report(name, True, "factors 1 to 40: queries and keys are each scaled, so the logits by the square")
