"""Checks for the exercises of chapter 8 (positional encoding)."""

from __future__ import annotations

import math
from typing import Callable

import torch

from ...positions.positional import ALiBi, SinusoidalPositionalEncoding
from ...positions.rope import RotaryEmbedding
from ._common import compare, report

__all__ = ["check_sinusoidal", "check_rope_rotation", "check_alibi_slopes"]


def _as_tensor(got: object) -> object:
    """Accept lists and numpy arrays as well as tensors (float64 for the comparison)."""
    if isinstance(got, torch.Tensor):
        return got
    try:
        return torch.as_tensor(got, dtype=torch.float64)
    except Exception:
        return got  # compare() reports the wrong type


def _close(got: object, expected: torch.Tensor, atol: float) -> bool:
    """Silent version of ``compare``: only a failing case prints (through ``compare``)."""
    return (
        isinstance(got, torch.Tensor)
        and got.shape == expected.shape
        and bool(((got.detach().double() - expected.double()).abs() <= atol).all())
    )


def check_sinusoidal(fn: Callable[[int, int], torch.Tensor]) -> bool:
    """Exercise 8.1: ``fn(T, d_model)`` returns the sinusoidal encodings of positions ``0..T-1``.

    Shapes:
        fn's output: ``(T, d_model)``, sines in even and cosines in odd dimensions.
    """
    for T, d in ((5, 4), (50, 16)):
        try:
            got = _as_tensor(fn(T, d))
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report("8.1 sinusoidal", False, f"{type(e).__name__}: {e}")
        expected = SinusoidalPositionalEncoding(d).encodings(T, dtype=torch.float64)  # (T, d)
        if not _close(got, expected, 1e-5):
            return compare(f"8.1 sinusoidal (T={T}, d_model={d})", got, expected, atol=1e-5)
    return report("8.1 sinusoidal", True, "(T=5, d_model=4) and (T=50, d_model=16) match")


def check_rope_rotation(fn: Callable[[torch.Tensor, int], torch.Tensor]) -> bool:
    """Exercise 8.2: ``fn(x, offset)`` applies RoPE with interleaved pairs ``(2i, 2i+1)``
    and base 10000 to ``x``, whose rows are positions ``offset, offset + 1, ...``.

    Shapes:
        x: ``(..., T, D)``; fn's output: ``(..., T, D)``
    """
    g = torch.Generator().manual_seed(80)
    x = torch.randn(2, 3, 5, 8, generator=g, dtype=torch.float64)
    rope = RotaryEmbedding(8, layout="interleaved")
    for offset in (0, 7):
        try:
            got = fn(x, offset)
        except Exception as e:
            return report("8.2 RoPE", False, f"{type(e).__name__}: {e}")
        expected = rope(x, offset)
        if isinstance(got, torch.Tensor) and got.shape == x.shape:
            half = RotaryEmbedding(8, layout="half")(x, offset)
            if torch.allclose(got.double(), half, atol=1e-6):
                return report("8.2 RoPE", False, "that is the split-halves layout; pair (2i, 2i+1) instead")
        if not _close(got, expected, 1e-6):
            return compare(f"8.2 RoPE (offset={offset})", got, expected, atol=1e-6)
    return report("8.2 RoPE", True, "offsets 0 and 7 match")


def check_alibi_slopes(fn: Callable[[int], object]) -> bool:
    """Exercise 8.3: ``fn(n_heads)`` returns ALiBi's head slopes, also for counts that are
    not a power of two (the paper's recipe).

    Shapes:
        fn's output: ``(n_heads,)`` (a tensor or a list)
    """
    for n in (8, 4, 16, 6, 12, 1):
        try:
            got = _as_tensor(fn(n))
        except Exception as e:
            return report("8.3 ALiBi slopes", False, f"n_heads={n}: {type(e).__name__}: {e}")
        expected = torch.tensor(ALiBi.slopes_for(n), dtype=torch.float64)
        if not _close(got, expected, 1e-7):
            return compare(f"8.3 ALiBi slopes (n_heads={n})", got, expected, atol=1e-7)
    return report("8.3 ALiBi slopes", True, "n_heads = 8, 4, 16, 6, 12, 1 all match")


# ---- issue 25: an exercise that needs a derivation ----

__all__ += ["check_alibi_reach"]


def _alibi_reach(slope: float, share: float) -> int:
    # Flat content: key at distance d gets weight ∝ exp(-slope·d), d = 0, 1, 2, ...
    # The nearest k keys hold 1 - exp(-slope·k) of it; the smallest k reaching `share`.
    return math.ceil(math.log(1.0 / (1.0 - share)) / slope)


def check_alibi_reach(fn: Callable[[float, float], int]) -> bool:
    """Exercise 8.1: ``fn(slope, share)`` is how many recent keys hold ``share`` of the weight.

    An ALiBi head with slope ``m`` and flat content scores, its query at the end of an
    unbounded past, gives the key at distance ``d`` a weight proportional to
    ``exp(-m·d)``. ``fn`` returns the smallest ``k`` such that the keys at distances
    ``0 .. k-1`` hold at least ``share`` of the total: ``ceil(ln(1/(1-share)) / m)``.
    The cases stay away from the integer boundaries, so rounding cannot decide them.
    """
    name = "8.1 ALiBi reach"
    cases = ((1 / 2, 0.5), (1 / 4, 0.9), (1 / 16, 0.5), (1 / 16, 0.99), (1 / 256, 0.9), (2**-0.5, 0.75))
    for slope, share in cases:
        try:
            got = fn(slope, share)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        want = _alibi_reach(slope, share)
        if isinstance(got, bool) or not isinstance(got, int):
            return report(name, False, f"fn({slope:g}, {share}) must be an int (a number of keys), got {got!r}")
        if got != want:
            hint = ""
            if got == want - 1:
                hint = " (rounded down: those keys hold less than the share)"
            elif got == math.ceil(math.log(2) / slope):
                hint = " (that is the half-weight distance, whatever the share)"
            return report(name, False, f"fn({slope:g}, {share}) = {got}, expected {want}{hint}")
    return report(
        name, True, f"{len(cases)} cases, e.g. slope 1/256 keeps 90% within {_alibi_reach(1 / 256, 0.9)} keys"
    )


# ---- issue 25: derivations checked numerically ----

__all__ += ["check_rope_relative_score", "check_sinusoidal_shift"]


def _rope_score_variant(q: torch.Tensor, k: torch.Tensor, delta: int, *, sign: float = 1.0, pairs: str = "half"):
    """``(R_m q)·(R_{m+δ} k)`` in closed form (and its plausible wrong versions, for the hints)."""
    D = q.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)  # (D/2,)
    if pairs == "half":
        q1, q2, k1, k2 = q[: D // 2], q[D // 2 :], k[: D // 2], k[D // 2 :]  # (D/2,) each
    else:
        q1, q2, k1, k2 = q[0::2], q[1::2], k[0::2], k[1::2]
    angle = sign * delta * theta  # (D/2,)
    return ((q1 * k1 + q2 * k2) * angle.cos() + (q2 * k1 - q1 * k2) * angle.sin()).sum().item()


def check_rope_relative_score(fn: Callable[[torch.Tensor, torch.Tensor, int], float]) -> bool:
    """Exercise 8.2: ``fn(q, k, delta)`` is the RoPE score of ``q`` at position ``m`` and
    ``k`` at ``m + delta``, from ``delta`` alone.

    RoPE here is ``RotaryEmbedding(D)``: base 10000, the ``"half"`` layout (pairs
    ``(x_i, x_{i + D/2})``). The answer is a sum over the ``D/2`` pairs of a cosine and a
    sine term of ``delta·θ_i``; the check compares it with the dot product of the rotated
    vectors at three positions ``m``, for positive and negative ``delta``.

    Shapes:
        q, k: ``(D,)`` float64; fn's output: a number
    """
    name = "8.2 RoPE score from the distance"
    g = torch.Generator().manual_seed(82)
    D = 8
    rope = RotaryEmbedding(D)
    for delta in (0, 1, 3, -3, 17, -250):
        q = torch.randn(D, generator=g, dtype=torch.float64)
        k = torch.randn(D, generator=g, dtype=torch.float64)
        try:
            got = float(fn(q.clone(), k.clone(), delta))
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        for m in (250, 255, 1000):  # positions m and m + delta, both >= 0
            qm = rope(q[None], offset=m)[0]  # (D,): q at position m
            kn = rope(k[None], offset=m + delta)[0]  # (D,): k at position m + delta
            want = (qm @ kn).item()
            if abs(got - want) > 1e-8:
                hint = ""
                if abs(got - _rope_score_variant(q, k, delta, sign=-1.0)) < 1e-8:
                    hint = ": that is the score for -delta (the sine term's sign)"
                elif abs(got - _rope_score_variant(q, k, delta, pairs="interleaved")) < 1e-8:
                    hint = ": that pairs neighbours (2i, 2i+1); this RoPE pairs the halves"
                elif abs(got - (q @ k).item()) < 1e-8:
                    hint = ": that is the unrotated score q·k"
                return report(name, False, f"delta={delta}, m={m}: got {got:.6f}, expected {want:.6f}{hint}")
    return report(name, True, "6 distances from -250 to 17, each at positions 250, 255 and 1000")


def check_sinusoidal_shift(fn: Callable[[int, int], torch.Tensor]) -> bool:
    """Exercise 8.3: ``fn(d_model, k)`` is the matrix ``M`` with ``PE[p + k] = M @ PE[p]`` for every ``p``.

    ``PE`` is ``SinusoidalPositionalEncoding(d_model)`` (sines in even, cosines in odd
    dimensions). ``M`` depends on ``k`` only, not on ``p``: the linear map Vaswani et al.
    give as their reason for choosing sinusoids. Checked for every ``p`` in ``0..63``
    (``p + k ≥ 0``), at two widths and three shifts, one negative.

    Shapes:
        fn's output: ``(d_model, d_model)``
    """
    name = "8.3 shift the sinusoids"
    for d, k in ((4, 1), (16, 5), (16, -3)):
        try:
            M = _as_tensor(fn(d, k))
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        if not isinstance(M, torch.Tensor) or M.shape != (d, d):
            shape = tuple(M.shape) if isinstance(M, torch.Tensor) else type(M).__name__
            return report(name, False, f"d_model={d}, k={k}: expected a ({d}, {d}) matrix, got {shape}")
        pe = SinusoidalPositionalEncoding(d).encodings(64 + abs(k), dtype=torch.float64)  # (T, d)
        p = torch.arange(max(0, -k), 64)  # positions with p + k in range
        got = pe[p] @ M.detach().double().T  # (P, d): M @ PE[p] for every p
        err = (got - pe[p + k]).abs().max().item()
        if not err <= 1e-8:
            hint = ""
            back = pe[p + k] @ M.detach().double().T  # (P, d): M @ PE[p + k]
            if (back - pe[p]).abs().max() <= 1e-8:  # M takes p + k back to p
                hint = " (that shifts by -k: the sine terms' signs are swapped, or M is transposed)"
            return report(name, False, f"d_model={d}, k={k}: M @ PE[p] is off PE[p + k] by up to {err:.2e}{hint}")
    return report(name, True, "PE[p + k] = M @ PE[p] for every p, 3 shifts, 2 widths")
