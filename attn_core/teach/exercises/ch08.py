"""Checks for the exercises of chapter 8 (positional encoding)."""

from __future__ import annotations

import math
from typing import Callable

import torch

from ...positions.positional import ALiBi, SinusoidalPositionalEncoding
from ...positions.rope import RotaryEmbedding
from ._common import compare, describe, report

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
    """Exercise 8.4: ``fn(x, offset)`` applies RoPE with interleaved pairs ``(2i, 2i+1)``
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
            return report("8.4 RoPE by hand", False, f"{type(e).__name__}: {e}")
        expected = rope(x, offset)
        if isinstance(got, torch.Tensor) and got.shape == x.shape:
            half = RotaryEmbedding(8, layout="half")(x, offset)
            if torch.allclose(got.double(), half, atol=1e-6):
                return report("8.4 RoPE by hand", False, "that is the split-halves layout; pair (2i, 2i+1) instead")
        if not _close(got, expected, 1e-6):
            return compare(f"8.4 RoPE by hand (offset={offset})", got, expected, atol=1e-6)
    return report("8.4 RoPE by hand", True, "(2, 3, 5, 8) inputs at offsets 0 and 7 match")


def check_alibi_slopes(fn: Callable[[int], object]) -> bool:
    """Exercise 8.3: ``fn(n_heads)`` returns ALiBi's head slopes, also for counts that are
    not a power of two (the recipe of the ALiBi authors' code).

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


def _rope_terms_variant(q: torch.Tensor, k: torch.Tensor, *, pairs: str = "half") -> tuple[torch.Tensor, torch.Tensor]:
    """``(a, b)`` of the closed form in the given pairing (the hints' plausible wrong versions).

    Shapes:
        q, k: ``(D,)``; a, b: ``(D/2,)``
    """
    D = q.shape[-1]
    if pairs == "half":
        q1, q2, k1, k2 = q[: D // 2], q[D // 2 :], k[: D // 2], k[D // 2 :]  # (D/2,) each
    else:
        q1, q2, k1, k2 = q[0::2], q[1::2], k[0::2], k[1::2]
    return q1 * k1 + q2 * k2, q2 * k1 - q1 * k2


def _as_pair(got: object, half: int) -> tuple[torch.Tensor, torch.Tensor] | str:
    """The learner's ``(a, b)`` as two float64 vectors of length ``half``, or why not."""
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return f"expected a pair (a, b) of vectors, got {type(got).__name__}"
    a, b = (_as_tensor(x) for x in got)
    for name, x in (("a", a), ("b", b)):
        if not isinstance(x, torch.Tensor) or tuple(x.shape) != (half,):
            shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            return f"{name} must have one entry per pair, shape ({half},), got {shape}"
    return a.detach().double(), b.detach().double()


def check_rope_relative_score(fn: Callable[[torch.Tensor, torch.Tensor], object]) -> bool:
    """Exercise 8.2: ``fn(q, k)`` returns ``(a, b)``, the coefficients of the RoPE score
    ``sum_i a_i cos(δ θ_i) + b_i sin(δ θ_i)`` of ``q`` at any position ``m`` and ``k`` at
    ``m + δ``.

    RoPE here is ``RotaryEmbedding(D)``: base 10000, the ``"half"`` layout (pairs
    ``(x_i, x_{i + D/2})``). The check measures the dot product of the rotated vectors at
    12 distances, each at three positions ``m``, and compares it with the learner's sum
    (12 distances for ``D/2 = 4`` pairs, so only the right coefficients fit them all).

    Shapes:
        q, k: ``(D,)`` float64; fn's output: two vectors of shape ``(D/2,)``
    """
    name = "8.2 RoPE score from the distance"
    g = torch.Generator().manual_seed(82)
    D = 8
    rope = RotaryEmbedding(D)
    theta = rope.inv_freq  # (D/2,): the library's speeds, float64
    deltas = (0, 1, 2, 3, -3, 5, 17, -40, 100, -250, 1000, -3000)
    for _ in range(3):
        q = torch.randn(D, generator=g, dtype=torch.float64)
        k = torch.randn(D, generator=g, dtype=torch.float64)
        try:
            got = _as_pair(fn(q.clone(), k.clone()), D // 2)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        if isinstance(got, str):
            return report(name, False, got)
        a, b = got
        for delta in deltas:
            angle = delta * theta  # (D/2,)
            mine = (a * angle.cos() + b * angle.sin()).sum().item()
            for m in (3000, 3005, 10000):  # positions m and m + delta, both >= 0
                qm = rope(q[None], offset=m)[0]  # (D,): q at position m
                kn = rope(k[None], offset=m + delta)[0]  # (D,): k at position m + delta
                want = (qm @ kn).item()
                if abs(mine - want) > 1e-8:
                    right_a, right_b = _rope_terms_variant(q, k)
                    inter_a, inter_b = _rope_terms_variant(q, k, pairs="interleaved")
                    hint = ""
                    if torch.allclose(a, right_a) and torch.allclose(b, -right_b):
                        hint = ": b has the wrong sign, which is the score for -delta"
                    elif torch.allclose(a, right_b) and torch.allclose(b, right_a):
                        hint = ": a and b swapped (which term is even in delta?)"
                    elif torch.allclose(a, inter_a) and torch.allclose(b, inter_b):
                        hint = ": that pairs neighbours (2i, 2i+1); this RoPE pairs the halves"
                    elif torch.allclose(a, right_a) and not b.abs().max() > 0:
                        hint = ": with no sine term the score would be the same at -delta"
                    return report(name, False, f"delta={delta}, m={m}: your sum {mine:.6f}, measured {want:.6f}{hint}")
    return report(name, True, f"{len(deltas)} distances, -3000..1000, 3 positions each")


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


# ---- read08b: a RoPE pitfall the chapter does not show ----

__all__ += ["check_rope_per_head"]


def _heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """``(T, H·D) -> (H, T, D)``: the head split of a multi-head layer."""
    T = x.shape[0]
    return x.view(T, n_heads, -1).transpose(0, 1)


def _scores_rotated_before_split(q: torch.Tensor, k: torch.Tensor, n_heads: int, layout: str) -> torch.Tensor:
    """The bug: one rotation over the whole width ``d_model``, then the head split.

    Shapes:
        q, k: ``(T, d_model)``; output: ``(H, T, T)``
    """
    rope = RotaryEmbedding(q.shape[-1], layout=layout)
    return _heads(rope(q), n_heads) @ _heads(rope(k), n_heads).transpose(-1, -2)


def _scores_per_head(q: torch.Tensor, k: torch.Tensor, n_heads: int, layout: str = "half") -> torch.Tensor:
    """The head split, then every head rotated on its own (``RotaryEmbedding(D)``).

    Shapes:
        q, k: ``(T, d_model)``; output: ``(H, T, T)``
    """
    rope = RotaryEmbedding(q.shape[-1] // n_heads, layout=layout)
    return rope(_heads(q, n_heads)) @ rope(_heads(k, n_heads)).transpose(-1, -2)


def check_rope_per_head(fn: Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]) -> bool:
    """Exercise 8.4: ``fn(q, k, n_heads)`` gives every head's RoPE scores, rotated per head.

    ``q, k`` are a layer's projected queries and keys at positions ``0..T-1``; ``fn``
    splits them into ``n_heads`` heads of width ``D = d_model / n_heads``, rotates each
    head with ``RotaryEmbedding(D)`` (split-halves layout, base 10000) and returns the raw
    dot products ``q·k`` (no ``1/sqrt(D)``). Two widths, to 1e-5 (float32 passes); the verdict
    names the usual wrong versions (rotated over ``d_model`` before the split, in either
    layout; not rotated; the interleaved layout).

    Shapes:
        q, k: ``(T, d_model)``; fn's output: ``(H, T, T)``
    """
    name = "8.4 RoPE per head"
    g = torch.Generator().manual_seed(84)
    for d_model, n_heads in ((16, 2), (32, 4)):
        q, k = torch.randn(2, 7, d_model, generator=g, dtype=torch.float64).unbind(0)  # (T, d_model)
        want = _scores_per_head(q, k, n_heads)  # (H, T, T)
        try:
            got = fn(q.clone(), k.clone(), n_heads)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            return report(name, False, f"d_model={d_model}, H={n_heads}: {describe(got)}, not {tuple(want.shape)}")
        got = got.detach().double()
        if torch.allclose(got, want, atol=1e-5):  # float32 answers too
            continue
        known = {
            "rotated over d_model before the split (half layout): pair (i, i + d_model/2) "
            "joins two heads, so no head's scores depend on n - m alone": _scores_rotated_before_split(
                q, k, n_heads, "half"
            ),
            "rotated over d_model before the split (interleaved): each head is relative, but "
            "with d_model's speeds, not RotaryEmbedding(D)'s": _scores_rotated_before_split(
                q, k, n_heads, "interleaved"
            ),
            "not rotated at all: the scores carry no position": _heads(q, n_heads)
            @ _heads(k, n_heads).transpose(-1, -2),
            "rotated per head, but in the interleaved layout; keep the split halves": _scores_per_head(
                q, k, n_heads, "interleaved"
            ),
        }
        for why, scores in known.items():
            if torch.allclose(got, scores, atol=1e-5):
                return report(name, False, why)
        err = (got - want).abs().max().item()
        return report(name, False, f"d_model={d_model}, H={n_heads}: max abs difference {err:.3g}")
    return report(name, True, "each head rotated on its own; (16, 2 heads), (32, 4 heads)")
