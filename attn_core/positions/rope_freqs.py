"""The frequency tables of RoPE context extension: rescaled rotation speeds as functions.

A model trained with RoPE on sequences of length ``L`` has seen, for pair ``i`` of a head,
angles up to ``L·θ_i`` only. The fast pairs (large ``θ_i``) have turned many times and
seen every angle; the slow ones have not completed one turn, and past ``L`` they show the
model angles it never saw. Every method here changes the speeds ``θ_i`` (and some the
size of the logits) so that a longer context ``factor·L`` stays in familiar territory:

* **Position interpolation** (PI, Chen et al. 2023, arXiv 2306.15595; ``"linear"`` in
  Hugging Face): every speed divided by ``factor``, i.e. positions squeezed by ``factor``.
  Neighbouring tokens become ``factor`` times harder to tell apart.
* **NTK-aware** (bloc97, 2023): a larger base, ``base·factor^(R/(R-2))``: the slowest pair
  is slowed by exactly ``factor`` (interpolated), the fastest is left almost unchanged.
* **Dynamic NTK** (emozilla, 2023; ``"dynamic"``): NTK-aware with a factor that grows with
  the sequence actually seen: nothing changes up to ``max_position``.
* **YaRN** (Peng et al. 2023, arXiv 2309.00071): per pair, by how many turns it makes in
  the original context: pairs turning more than ``beta_fast`` times keep their speed,
  pairs turning fewer than ``beta_slow`` times are interpolated by ``factor``, a linear ramp
  in between; plus an attention temperature: cos and sin are multiplied by
  ``0.1·ln(factor) + 1``, so the logits (a query-key product) by its square.
* **Llama 3.1** (Meta, 2024; ``"llama3"``): the same idea by wavelength: wavelengths below
  ``L/high_freq_factor`` kept, above ``L/low_freq_factor`` divided by ``factor``, smoothly
  interpolated in between.
* **LongRoPE** (Ding et al. 2024, arXiv 2402.13753; Phi-3): searched per-pair factors, one
  set for short and one for long sequences, and ``sqrt(1 + ln(factor)/ln(L))`` on cos/sin.

Each method is a function returning ``(inv_freq, attention_factor)``: the speeds in
float64 and the number Hugging Face multiplies cos and sin by (1.0 where the method has
none). The same formulas as Hugging Face's ``ROPE_INIT_FUNCTIONS`` (transformers 5.23,
``modeling_rope_utils.py``), computed in float64 instead of float32. The frozen
dataclasses of :mod:`attn_core.positions.rope_scaling` hold each method's parameters and call these;
the ``check_*`` functions here are the argument checks both share.

Shape legend:
    R   number of rotated dimensions of a head (``rotary_dim``); ``R/2`` pairs and speeds
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ..checks import check_bool, check_instance, check_int, check_number

__all__ = [
    "default_inv_freq",
    "linear_inv_freq",
    "ntk_inv_freq",
    "dynamic_ntk_inv_freq",
    "yarn_mscale",
    "yarn_inv_freq",
    "llama3_inv_freq",
    "longrope_inv_freq",
    "check_scaling_factor",
    "check_yarn_betas",
    "check_llama3_freq_factors",
    "check_pair_factors",
]


F64 = torch.float64


# ---------------------------------------------------------------- argument checks


def _check_dim(dim: int, *, minimum: int = 2) -> int:
    check_int("dim", dim)
    if dim % 2 != 0 or dim < minimum:
        raise ValueError(f"dim (the rotated width R) must be even and >= {minimum}, got dim={dim}")
    return dim


def _check_base(base: float) -> float:
    return check_number("base", base, low=1.0, low_open=True)


def check_scaling_factor(factor: float) -> float:
    """``factor`` as a float: a context-extension factor, at least 1.

    Raises:
        ValueError: ``factor`` below 1 or not a number.
    """
    # A factor below 1 would *shorten* the context (Hugging Face only warns); refuse it.
    return check_number("factor", factor, low=1.0)


def _check_seq_len(seq_len: int | None) -> int | None:
    return None if seq_len is None else check_int("seq_len", seq_len)


# ---------------------------------------------------------------- the formulas


def default_inv_freq(base: float, dim: int) -> torch.Tensor:
    """Plain RoPE's speeds ``θ_i = base^(-2i/R)`` for ``i = 0 .. R/2 - 1``, in float64.

    Shapes:
        output: ``(R/2,)``
    """
    base, dim = _check_base(base), _check_dim(dim)
    i = torch.arange(0, dim, 2, dtype=F64)  # (R/2,)
    return base ** (-i / dim)


def linear_inv_freq(base: float, dim: int, factor: float) -> tuple[torch.Tensor, float]:
    """Position interpolation (Chen et al. 2023): every speed divided by ``factor``.

    Dividing the speeds is dividing the positions: position ``m`` gets the angles plain
    RoPE gives position ``m/factor``, so ``factor·L`` positions fill the trained range ``L``.

    Returns:
        ``(inv_freq, 1.0)``.

    Shapes:
        inv_freq: ``(R/2,)``, float64
    """
    return default_inv_freq(base, dim) / check_scaling_factor(factor), 1.0


def ntk_inv_freq(base: float, dim: int, factor: float) -> tuple[torch.Tensor, float]:
    """NTK-aware scaling (bloc97, 2023): the base becomes ``base·factor^(R/(R-2))``.

    The exponent is chosen so that the slowest pair (``i = R/2 - 1``, speed
    ``base^(-(R-2)/R)``) is slowed by exactly ``factor``, as PI would, while pair 0 keeps
    speed 1: the high frequencies, which tell neighbours apart, are left alone.

    Returns:
        ``(inv_freq, 1.0)``.

    Shapes:
        inv_freq: ``(R/2,)``, float64

    Raises:
        ValueError: ``dim < 4`` (one pair has no "slowest" to solve for), ``factor < 1``.
    """
    dim, factor = _check_dim(dim, minimum=4), check_scaling_factor(factor)
    return default_inv_freq(_check_base(base) * factor ** (dim / (dim - 2)), dim), 1.0


def dynamic_ntk_inv_freq(
    base: float, dim: int, factor: float, max_position: int, seq_len: int | None = None
) -> tuple[torch.Tensor, float]:
    """Dynamic NTK (Hugging Face's ``"dynamic"``): NTK-aware with a factor set by the length seen.

    For a sequence of ``seq_len`` positions (at least ``max_position``; ``None`` means
    ``max_position``), the base becomes ``base·s^(R/(R-2))`` with
    ``s = factor·seq_len/max_position - (factor - 1)``: ``s = 1`` (plain RoPE) up to
    ``max_position``, then growing linearly, by ``factor`` per further ``max_position``
    positions. How :class:`~attn_core.positions.rope.RotaryEmbedding` updates ``seq_len`` as
    it runs is in :class:`DynamicNTKScaling`.

    Returns:
        ``(inv_freq, 1.0)``.

    Shapes:
        inv_freq: ``(R/2,)``, float64
    """
    dim, factor = _check_dim(dim, minimum=4), check_scaling_factor(factor)
    max_position = check_int("max_position", max_position)
    seq_len = max(_check_seq_len(seq_len) or max_position, max_position)
    scale = factor * seq_len / max_position - (factor - 1)
    return default_inv_freq(_check_base(base) * scale ** (dim / (dim - 2)), dim), 1.0


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's attention temperature term ``0.1·mscale·ln(factor) + 1`` (1 for ``factor <= 1``).

    Hugging Face multiplies cos and sin by it, i.e. queries and keys each, so the logits
    grow by its square: the paper's ``1/t`` with ``sqrt(1/t) = 0.1·ln(s) + 1``. It offsets
    the flatter attention (higher entropy) that interpolated positions cause.
    """
    factor = check_number("factor", factor, low=0.0, low_open=True)
    return 1.0 if factor <= 1 else 0.1 * check_number("mscale", mscale) * math.log(factor) + 1.0


def _yarn_correction_range(
    beta_fast: float, beta_slow: float, dim: int, base: float, original_max_position: int, truncate: bool
) -> tuple[float, float]:
    """The pair indices where YaRN's ramp starts and ends (Hugging Face's ``find_correction_range``)."""

    def pair_turning(turns: float) -> float:
        # Pair i turns L·θ_i / 2π times over the original context L; solved for i (possibly
        # fractional): i = R·ln(L / (2π·turns)) / (2·ln(base)).
        return dim * math.log(original_max_position / (turns * 2 * math.pi)) / (2 * math.log(base))

    low, high = pair_turning(beta_fast), pair_turning(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    # The upper clamp is R - 1 although indices stop at R/2 - 1: Hugging Face's bound, kept.
    return max(low, 0), min(high, dim - 1)


def yarn_inv_freq(
    base: float,
    dim: int,
    factor: float,
    original_max_position: int,
    *,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
    attention_factor: float | None = None,
    mscale: float | None = None,
    mscale_all_dim: float | None = None,
    truncate: bool = True,
) -> tuple[torch.Tensor, float]:
    """YaRN (Peng et al. 2023): per-pair interpolation by turns, and an attention temperature.

    Pair ``i`` turns ``L·θ_i/2π`` times over the original context ``L``. Pairs turning more
    than ``beta_fast`` times keep their speed (they have seen every angle: extrapolation is
    safe); pairs turning fewer than ``beta_slow`` times are divided by ``factor`` (PI); in
    between, a linear ramp over the pair index mixes the two. The ramp's ends are rounded
    outwards when ``truncate`` (gpt-oss sets ``truncate=False``).

    The attention factor, by precedence: ``attention_factor`` if given; else
    ``yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)`` if both are given
    and non-zero (DeepSeek's variant); else ``yarn_mscale(factor)``.

    Returns:
        ``(inv_freq, attention_factor)``.

    Shapes:
        inv_freq: ``(R/2,)``, float64

    Raises:
        ValueError: ``factor < 1``, ``beta_fast <= beta_slow``, ``beta_slow <= 0``, a
            non-positive ``original_max_position`` or ``attention_factor``.
    """
    dim, factor = _check_dim(dim), check_scaling_factor(factor)
    original_max_position = check_int("original_max_position", original_max_position)
    check_yarn_betas(beta_fast, beta_slow)
    truncate = check_bool("truncate", truncate)
    if attention_factor is not None:
        attention_factor = check_number("attention_factor", attention_factor, low=0.0, low_open=True)
    elif mscale and mscale_all_dim:
        attention_factor = yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)
    else:
        attention_factor = yarn_mscale(factor)
    low, high = _yarn_correction_range(beta_fast, beta_slow, dim, _check_base(base), original_max_position, truncate)
    if low == high:
        high += 0.001  # Hugging Face's guard against a zero-width ramp
    # 0 up to pair `low` (keep the speed), 1 from pair `high` (interpolate), linear between.
    ramp = ((torch.arange(dim // 2, dtype=F64) - low) / (high - low)).clamp(0, 1)  # (R/2,)
    inv_freq = default_inv_freq(base, dim)  # (R/2,)
    return inv_freq / factor * ramp + inv_freq * (1 - ramp), attention_factor


def check_yarn_betas(beta_fast: float, beta_slow: float) -> None:
    """Check YaRN's turn thresholds: both positive, ``beta_fast > beta_slow``.

    Raises:
        ValueError: A non-positive threshold, or ``beta_fast <= beta_slow`` (both named).
    """
    beta_slow = check_number("beta_slow", beta_slow, low=0.0, low_open=True)
    beta_fast = check_number("beta_fast", beta_fast, low=0.0, low_open=True)
    if beta_fast <= beta_slow:
        raise ValueError(
            f"beta_fast (turns above which a pair keeps its speed) must exceed beta_slow, "
            f"got beta_fast={beta_fast:g}, beta_slow={beta_slow:g}"
        )


def llama3_inv_freq(
    base: float,
    dim: int,
    factor: float,
    original_max_position: int,
    *,
    low_freq_factor: float = 1.0,
    high_freq_factor: float = 4.0,
) -> tuple[torch.Tensor, float]:
    """Llama 3.1's frequency-dependent scaling (Meta 2024), by wavelength ``λ_i = 2π/θ_i``.

    With ``L = original_max_position``: ``λ < L/high_freq_factor`` keeps its speed;
    ``λ > L/low_freq_factor`` is divided by ``factor``; in between the speed is
    ``(1 - s)·θ/factor + s·θ`` with ``s = (L/λ - low_freq_factor)/(high_freq_factor -
    low_freq_factor)``, which runs from 0 to 1 across the band. Llama 3.1: factor 8,
    low 1, high 4, ``L = 8192``. With ``high_freq_factor == low_freq_factor`` there is no band:
    a step at ``λ = L/low_freq_factor`` (Llama 4 Scout: factor 16, low and high 1). No attention factor.

    Returns:
        ``(inv_freq, 1.0)``.

    Shapes:
        inv_freq: ``(R/2,)``, float64

    Raises:
        ValueError: ``factor < 1``, ``low_freq_factor <= 0`` or ``> high_freq_factor``,
            a non-positive ``original_max_position``.
    """
    factor = check_scaling_factor(factor)
    L = check_int("original_max_position", original_max_position)
    check_llama3_freq_factors(low_freq_factor, high_freq_factor)
    inv_freq = default_inv_freq(base, dim)  # (R/2,)
    wavelen = 2 * math.pi / inv_freq  # (R/2,)
    long_waves = wavelen > L / low_freq_factor
    short_waves = wavelen < L / high_freq_factor
    scaled = torch.where(long_waves, inv_freq / factor, inv_freq)
    if high_freq_factor == low_freq_factor:  # Llama 4: no band in between (Hugging Face's would divide by 0)
        return scaled, 1.0
    smooth = (L / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)  # (R/2,)
    medium = ~long_waves & ~short_waves
    return torch.where(medium, (1 - smooth) * inv_freq / factor + smooth * inv_freq, scaled), 1.0


def check_llama3_freq_factors(low_freq_factor: float, high_freq_factor: float) -> None:
    """Check Llama 3.1's wavelength factors: both positive, ``high_freq_factor >= low_freq_factor``.

    Raises:
        ValueError: A non-positive factor, or ``high_freq_factor < low_freq_factor`` (both named).
    """
    low = check_number("low_freq_factor", low_freq_factor, low=0.0, low_open=True)
    high = check_number("high_freq_factor", high_freq_factor, low=0.0, low_open=True)
    if high < low:
        raise ValueError(
            f"high_freq_factor must be >= low_freq_factor, got high_freq_factor={high:g}, low_freq_factor={low:g}"
        )


def longrope_inv_freq(
    base: float,
    dim: int,
    short_factor: Sequence[float],
    long_factor: Sequence[float],
    original_max_position: int,
    seq_len: int | None = None,
    *,
    factor: float = 1.0,
    attention_factor: float | None = None,
) -> tuple[torch.Tensor, float]:
    """LongRoPE (Ding et al. 2024; Phi-3): searched per-pair factors, short and long.

    Speed ``θ_i / long_factor[i]`` when ``seq_len > original_max_position``, else
    ``θ_i / short_factor[i]`` (``seq_len=None`` counts as short). The attention factor is
    ``attention_factor`` if given, else ``sqrt(1 + ln(factor)/ln(original_max_position))``
    (1 when ``factor <= 1``); ``factor`` is the context ratio (Phi-3: ``max_position /
    original_max_position``) and serves only for it.

    Returns:
        ``(inv_freq, attention_factor)``.

    Shapes:
        short_factor, long_factor: ``R/2`` numbers each; inv_freq: ``(R/2,)``, float64

    Raises:
        ValueError: A factor list whose length is not ``R/2`` or with a non-positive entry,
            ``factor < 1``, ``original_max_position < 2`` (its log divides), a non-positive
            ``attention_factor`` or ``seq_len``.
    """
    dim = _check_dim(dim)
    L = check_int("original_max_position", original_max_position, minimum=2)
    factor = check_scaling_factor(factor)
    short = check_pair_factors("short_factor", short_factor, dim)
    long = check_pair_factors("long_factor", long_factor, dim)
    if attention_factor is not None:
        attention_factor = check_number("attention_factor", attention_factor, low=0.0, low_open=True)
    elif factor <= 1.0:
        attention_factor = 1.0
    else:
        attention_factor = math.sqrt(1 + math.log(factor) / math.log(L))
    seq_len = _check_seq_len(seq_len)
    ext = long if seq_len is not None and seq_len > L else short  # (R/2,)
    return default_inv_freq(base, dim) / ext, attention_factor


def check_pair_factors(name: str, values: Sequence[float], dim: int | None) -> torch.Tensor:
    """LongRoPE's per-pair factors ``values`` as a float64 tensor, all positive, ``dim//2`` of them.

    ``dim=None`` checks the values only (the length is checked once ``R`` is known).

    Shapes:
        returns: ``(R/2,)``, float64

    Raises:
        ValueError: A non-positive factor, or the wrong count (``name`` and ``dim//2`` named).
        TypeError: ``values`` not a list or tuple.
    """
    check_instance(name, values, (list, tuple))
    for v in values:
        check_number(name, v, low=0.0, low_open=True)
    if dim is not None and len(values) != dim // 2:
        raise ValueError(f"{name} needs one factor per rotated pair, dim//2={dim // 2}, got len({name})={len(values)}")
    return torch.tensor([float(v) for v in values], dtype=F64)
