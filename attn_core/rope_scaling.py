"""Context extension for RoPE: rescaled rotation speeds (PI, NTK-aware, dynamic NTK, YaRN, Llama 3.1, LongRoPE).

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
``modeling_rope_utils.py``), computed in float64 instead of float32. A frozen dataclass per
method (:class:`LinearScaling`, :class:`NTKScaling`, :class:`DynamicNTKScaling`,
:class:`YarnScaling`, :class:`Llama3Scaling`, :class:`LongRopeScaling`) holds the
parameters and is what :class:`~attn_core.positional.RotaryEmbedding` takes::

    rope = RotaryEmbedding(64, base=150000.0, scaling=YarnScaling(factor=32.0, original_max_position=4096))

:func:`scaling_from_hf` reads a Hugging Face ``rope_parameters`` dict.

Shape legend:
    R   number of rotated dimensions of a head (``rotary_dim``); ``R/2`` pairs and speeds
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch

from .checks import check_bool, check_instance, check_int, check_number

__all__ = [
    "default_inv_freq",
    "linear_inv_freq",
    "ntk_inv_freq",
    "dynamic_ntk_inv_freq",
    "yarn_mscale",
    "yarn_inv_freq",
    "llama3_inv_freq",
    "longrope_inv_freq",
    "RopeScaling",
    "LinearScaling",
    "NTKScaling",
    "DynamicNTKScaling",
    "YarnScaling",
    "Llama3Scaling",
    "LongRopeScaling",
    "SCALINGS",
    "scaling_from_hf",
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


def _check_factor(factor: float) -> float:
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
    return default_inv_freq(base, dim) / _check_factor(factor), 1.0


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
    dim, factor = _check_dim(dim, minimum=4), _check_factor(factor)
    return default_inv_freq(_check_base(base) * factor ** (dim / (dim - 2)), dim), 1.0


def dynamic_ntk_inv_freq(
    base: float, dim: int, factor: float, max_position: int, seq_len: int | None = None
) -> tuple[torch.Tensor, float]:
    """Dynamic NTK (Hugging Face's ``"dynamic"``): NTK-aware with a factor set by the length seen.

    For a sequence of ``seq_len`` positions (at least ``max_position``; ``None`` means
    ``max_position``), the base becomes ``base·s^(R/(R-2))`` with
    ``s = factor·seq_len/max_position - (factor - 1)``: ``s = 1`` (plain RoPE) up to
    ``max_position``, then growing linearly, by ``factor`` per further ``max_position``
    positions. How :class:`~attn_core.positional.RotaryEmbedding` updates ``seq_len`` as
    it runs is in :class:`DynamicNTKScaling`.

    Returns:
        ``(inv_freq, 1.0)``.

    Shapes:
        inv_freq: ``(R/2,)``, float64
    """
    dim, factor = _check_dim(dim, minimum=4), _check_factor(factor)
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
    dim, factor = _check_dim(dim), _check_factor(factor)
    original_max_position = check_int("original_max_position", original_max_position)
    _check_betas(beta_fast, beta_slow)
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


def _check_betas(beta_fast: float, beta_slow: float) -> None:
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
    factor = _check_factor(factor)
    L = check_int("original_max_position", original_max_position)
    _check_freq_factors(low_freq_factor, high_freq_factor)
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


def _check_freq_factors(low_freq_factor: float, high_freq_factor: float) -> None:
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
    factor = _check_factor(factor)
    short = _check_pair_factors("short_factor", short_factor, dim)
    long = _check_pair_factors("long_factor", long_factor, dim)
    if attention_factor is not None:
        attention_factor = check_number("attention_factor", attention_factor, low=0.0, low_open=True)
    elif factor <= 1.0:
        attention_factor = 1.0
    else:
        attention_factor = math.sqrt(1 + math.log(factor) / math.log(L))
    seq_len = _check_seq_len(seq_len)
    ext = long if seq_len is not None and seq_len > L else short  # (R/2,)
    return default_inv_freq(base, dim) / ext, attention_factor


def _check_pair_factors(name: str, values: Sequence[float], dim: int | None) -> torch.Tensor:
    check_instance(name, values, (list, tuple))
    for v in values:
        check_number(name, v, low=0.0, low_open=True)
    if dim is not None and len(values) != dim // 2:
        raise ValueError(f"{name} needs one factor per rotated pair, dim//2={dim // 2}, got len({name})={len(values)}")
    return torch.tensor([float(v) for v in values], dtype=F64)


# ---------------------------------------------------------------- one dataclass per method


@dataclass(frozen=True)
class RopeScaling:
    """Base of the scalings: what :class:`~attn_core.positional.RotaryEmbedding` asks of one.

    A subclass holds its method's parameters (checked when it is made) and answers two
    questions: :meth:`frequencies` (the speeds and attention factor for a rotated width
    ``R``, possibly for a sequence length) and :meth:`frequency_length` (which length the
    frequencies should be computed for after a call reaching ``seq_len`` positions; ``None``
    for the static methods, whose speeds never change).

    Attributes:
        kind: Hugging Face's ``rope_type`` name of the method.
    """

    kind: ClassVar[str] = ""

    def frequencies(self, base: float, dim: int, seq_len: int | None = None) -> tuple[torch.Tensor, float]:
        """``(inv_freq, attention_factor)`` for ``R = dim`` rotated dimensions.

        Shapes:
            inv_freq: ``(R/2,)``, float64
        """
        raise NotImplementedError

    def frequency_length(self, seq_len: int, current: int | None) -> int | None:
        """The ``seq_len`` to pass to :meth:`frequencies` after a call reaching ``seq_len`` positions.

        ``current`` is what this returned last time (``None`` at first). Static methods: ``None``.
        """
        return None


@dataclass(frozen=True)
class LinearScaling(RopeScaling):
    """Position interpolation (``"linear"``): see :func:`linear_inv_freq`.

    Args:
        factor: Context multiple, ``>= 1``.
    """

    factor: float
    kind: ClassVar[str] = "linear"

    def __post_init__(self) -> None:
        _check_factor(self.factor)

    def frequencies(self, base: float, dim: int, seq_len: int | None = None) -> tuple[torch.Tensor, float]:
        return linear_inv_freq(base, dim, self.factor)


@dataclass(frozen=True)
class NTKScaling(RopeScaling):
    """Static NTK-aware scaling (no Hugging Face ``rope_type``; its ``"dynamic"`` at a fixed length).

    See :func:`ntk_inv_freq`. Equal to :class:`DynamicNTKScaling` ``(f, max_position)`` at
    ``seq_len = max_position·(factor + f - 1)/f``.

    Args:
        factor: Context multiple, ``>= 1``.
    """

    factor: float
    kind: ClassVar[str] = "ntk"

    def __post_init__(self) -> None:
        _check_factor(self.factor)

    def frequencies(self, base: float, dim: int, seq_len: int | None = None) -> tuple[torch.Tensor, float]:
        return ntk_inv_freq(base, dim, self.factor)


@dataclass(frozen=True)
class DynamicNTKScaling(RopeScaling):
    """Dynamic NTK (``"dynamic"``): see :func:`dynamic_ntk_inv_freq`.

    The speeds depend on the sequence length, updated as Hugging Face's
    ``dynamic_rope_update`` does on every call (``seq_len = offset + T``, the last position
    plus one): they are recomputed for ``seq_len`` when it exceeds the longest length used
    so far (initially ``max_position``), and reset to plain RoPE's when a call is shorter
    than ``max_position`` after a longer one. So a sequence decoded past ``max_position``
    holds keys in its cache rotated with older, slower-scaled speeds than the new queries:
    Hugging Face does the same, and the relative-position property no longer holds exactly.

    Args:
        factor: ``>= 1``; the growth of the NTK scale per ``max_position`` extra positions.
        max_position: The length up to which nothing changes (Hugging Face's
            ``config.max_position_embeddings``).
    """

    factor: float
    max_position: int
    kind: ClassVar[str] = "dynamic"

    def __post_init__(self) -> None:
        _check_factor(self.factor)
        check_int("max_position", self.max_position)

    def frequencies(self, base: float, dim: int, seq_len: int | None = None) -> tuple[torch.Tensor, float]:
        return dynamic_ntk_inv_freq(base, dim, self.factor, self.max_position, seq_len)

    def frequency_length(self, seq_len: int, current: int | None) -> int | None:
        current = self.max_position if current is None else current
        if seq_len > current:  # growth: rescale for the new length
            return seq_len
        if seq_len < self.max_position < current:  # a short call after a long one: reset
            return self.max_position
        return current


@dataclass(frozen=True)
class YarnScaling(RopeScaling):
    """YaRN (``"yarn"``): see :func:`yarn_inv_freq` for the parameters."""

    factor: float
    original_max_position: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool = True
    kind: ClassVar[str] = "yarn"

    def __post_init__(self) -> None:
        _check_factor(self.factor)
        check_int("original_max_position", self.original_max_position)
        _check_betas(self.beta_fast, self.beta_slow)
        check_bool("truncate", self.truncate)
        for name in ("attention_factor", "mscale", "mscale_all_dim"):
            if getattr(self, name) is not None:
                check_number(name, getattr(self, name), low=0.0, low_open=name == "attention_factor")

    def frequencies(self, base: float, dim: int, seq_len: int | None = None) -> tuple[torch.Tensor, float]:
        return yarn_inv_freq(
            base,
            dim,
            self.factor,
            self.original_max_position,
            beta_fast=self.beta_fast,
            beta_slow=self.beta_slow,
            attention_factor=self.attention_factor,
            mscale=self.mscale,
            mscale_all_dim=self.mscale_all_dim,
            truncate=self.truncate,
        )


@dataclass(frozen=True)
class Llama3Scaling(RopeScaling):
    """Llama 3.1's scaling (``"llama3"``): see :func:`llama3_inv_freq`."""

    factor: float
    original_max_position: int
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    kind: ClassVar[str] = "llama3"

    def __post_init__(self) -> None:
        _check_factor(self.factor)
        check_int("original_max_position", self.original_max_position)
        _check_freq_factors(self.low_freq_factor, self.high_freq_factor)

    def frequencies(self, base: float, dim: int, seq_len: int | None = None) -> tuple[torch.Tensor, float]:
        return llama3_inv_freq(
            base,
            dim,
            self.factor,
            self.original_max_position,
            low_freq_factor=self.low_freq_factor,
            high_freq_factor=self.high_freq_factor,
        )


@dataclass(frozen=True)
class LongRopeScaling(RopeScaling):
    """LongRoPE (``"longrope"``): see :func:`longrope_inv_freq`.

    The factor set depends on each call's ``seq_len = offset + T``, as Hugging Face's
    ``dynamic_rope_update`` chooses it: long past ``original_max_position``, short
    otherwise (so a decoded sequence crossing that length keeps keys rotated with the
    short factors in its cache, as in Hugging Face). The attention factor is the same for
    both.
    """

    short_factor: Sequence[float]
    long_factor: Sequence[float]
    original_max_position: int
    factor: float = 1.0
    attention_factor: float | None = None
    kind: ClassVar[str] = "longrope"

    def __post_init__(self) -> None:
        for name in ("short_factor", "long_factor"):
            _check_pair_factors(name, getattr(self, name), None)
            object.__setattr__(self, name, tuple(float(v) for v in getattr(self, name)))  # hashable, frozen
        if len(self.short_factor) != len(self.long_factor):
            raise ValueError(
                f"short_factor and long_factor need the same length, got {len(self.short_factor)} and "
                f"{len(self.long_factor)}"
            )
        check_int("original_max_position", self.original_max_position, minimum=2)
        _check_factor(self.factor)
        if self.attention_factor is not None:
            check_number("attention_factor", self.attention_factor, low=0.0, low_open=True)

    def frequencies(self, base: float, dim: int, seq_len: int | None = None) -> tuple[torch.Tensor, float]:
        return longrope_inv_freq(
            base,
            dim,
            self.short_factor,
            self.long_factor,
            self.original_max_position,
            seq_len,
            factor=self.factor,
            attention_factor=self.attention_factor,
        )

    def frequency_length(self, seq_len: int, current: int | None) -> int | None:
        # One representative length per factor set, so the tables are rebuilt only on a switch.
        return self.original_max_position + 1 if seq_len > self.original_max_position else None


SCALINGS: dict[str, type[RopeScaling]] = {
    cls.kind: cls for cls in (LinearScaling, NTKScaling, DynamicNTKScaling, YarnScaling, Llama3Scaling, LongRopeScaling)
}
"""The scalings by :attr:`RopeScaling.kind` (Hugging Face's ``rope_type``, plus ``"ntk"``)."""


def scaling_from_hf(rope_parameters: Mapping[str, object], *, max_position_embeddings: int) -> RopeScaling | None:
    """The scaling a Hugging Face ``config.rope_parameters`` dict describes (``None`` for plain RoPE).

    Reads the keys Hugging Face's ``ROPE_INIT_FUNCTIONS`` read. Hugging Face's config fills
    ``original_max_position_embeddings`` with ``max_position_embeddings`` when a YaRN,
    Llama 3 or LongRoPE dict lacks it: pass the dict of a constructed config. A missing
    YaRN/LongRoPE ``factor`` is ``max_position_embeddings / original_max_position_embeddings``,
    as there. ``rope_theta`` and ``partial_rotary_factor`` are not scalings: give them to
    :class:`~attn_core.positional.RotaryEmbedding` as ``base`` and
    ``rotary_dim = int(head_dim·partial_rotary_factor)``. Configs with one dict per layer type
    (Gemma 3, OLMo 3: ``{"full_attention": {...}, "sliding_attention": {...}}``) need one call
    per layer type.

    Example:
        >>> gpt_oss = {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0,
        ...            "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 4096}
        >>> s = scaling_from_hf(gpt_oss, max_position_embeddings=131072)
        >>> s.kind, s.factor, s.original_max_position, s.truncate
        ('yarn', 32.0, 4096, False)

    Raises:
        ValueError: An unknown ``rope_type`` (e.g. ``"proportional"``), a missing
            required key (named), a bad value, or a dict nested by layer type.
    """
    check_instance("rope_parameters", rope_parameters, Mapping)
    max_position_embeddings = check_int("max_position_embeddings", max_position_embeddings)
    p = dict(rope_parameters)
    nested = sorted(k for k, v in p.items() if isinstance(v, Mapping))
    if nested:
        # Gemma 3, OLMo 3: one dict per layer type. Read as one dict, it would look like plain RoPE.
        raise ValueError(
            f"rope_parameters is nested by layer type ({nested}): pass one layer type's dict, "
            f"e.g. rope_parameters[{nested[0]!r}]"
        )
    kind = p.get("rope_type", p.get("type", "default"))
    if kind == "default":
        return None
    if kind not in SCALINGS or kind == "ntk":
        known = ("default", *(k for k in SCALINGS if k != "ntk"))
        raise ValueError(f"rope_type must be one of {known}, got rope_type={kind!r}")

    def need(key: str) -> object:
        if p.get(key) is None:
            raise ValueError(f"rope_parameters of rope_type={kind!r} need {key!r}, got {sorted(p)}")
        return p[key]

    if kind == "linear":
        return LinearScaling(factor=need("factor"))
    if kind == "dynamic":
        return DynamicNTKScaling(factor=need("factor"), max_position=max_position_embeddings)
    original = need("original_max_position_embeddings")
    if kind == "llama3":
        return Llama3Scaling(
            factor=need("factor"),
            original_max_position=original,
            low_freq_factor=need("low_freq_factor"),
            high_freq_factor=need("high_freq_factor"),
        )
    factor = p.get("factor")
    if factor is None:
        factor = max_position_embeddings / original
    if kind == "yarn":
        return YarnScaling(
            factor=factor,
            original_max_position=original,
            # Hugging Face reads `beta_fast or 32`: a 0 or None means the default.
            beta_fast=p.get("beta_fast") or 32.0,
            beta_slow=p.get("beta_slow") or 1.0,
            attention_factor=p.get("attention_factor"),
            mscale=p.get("mscale"),
            mscale_all_dim=p.get("mscale_all_dim"),
            truncate=p.get("truncate", True),
        )
    return LongRopeScaling(
        short_factor=need("short_factor"),
        long_factor=need("long_factor"),
        original_max_position=original,
        factor=factor,
        attention_factor=p.get("attention_factor"),
    )
