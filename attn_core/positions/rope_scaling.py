"""Context extension for RoPE: one frozen dataclass per scaling rule.

A model trained with RoPE on sequences of length ``L`` has not seen the angles the slow
pairs reach past ``L``; every scaling rule changes the rotation speeds (and some the size
of the logits) so that a longer context stays in familiar territory. The formulas are the
functions of :mod:`attn_core.positions.rope_freqs`; here a frozen dataclass per method
(:class:`LinearScaling`, :class:`NTKScaling`, :class:`DynamicNTKScaling`,
:class:`YarnScaling`, :class:`Llama3Scaling`, :class:`LongRopeScaling`) holds the
parameters, checks them when made, and is what :class:`~attn_core.positions.rope.RotaryEmbedding`
takes::

    rope = RotaryEmbedding(64, base=150000.0, scaling=YarnScaling(factor=32.0, original_max_position=4096))

:func:`deepseek_softmax_factor` is the factor DeepSeek puts on its softmax scale under YaRN. Hugging
Face's ``rope_parameters`` dicts are read into these by :func:`attn_core.hf.rope.scaling_from_hf`.

Shape legend:
    R   number of rotated dimensions of a head (``rotary_dim``); ``R/2`` pairs and speeds
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch

from ..checks import check_bool, check_int, check_number
from .rope_freqs import (
    check_llama3_freq_factors,
    check_pair_factors,
    check_scaling_factor,
    check_yarn_betas,
    dynamic_ntk_inv_freq,
    linear_inv_freq,
    llama3_inv_freq,
    longrope_inv_freq,
    ntk_inv_freq,
    yarn_inv_freq,
    yarn_mscale,
)

__all__ = [
    "RopeScaling",
    "LinearScaling",
    "NTKScaling",
    "DynamicNTKScaling",
    "YarnScaling",
    "Llama3Scaling",
    "LongRopeScaling",
    "SCALINGS",
    "deepseek_softmax_factor",
]


# ---------------------------------------------------------------- one dataclass per method


@dataclass(frozen=True)
class RopeScaling:
    """Base of the scalings: what :class:`~attn_core.positions.rope.RotaryEmbedding` asks of one.

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
        check_scaling_factor(self.factor)

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
        check_scaling_factor(self.factor)

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
        check_scaling_factor(self.factor)
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
        check_scaling_factor(self.factor)
        check_int("original_max_position", self.original_max_position)
        check_yarn_betas(self.beta_fast, self.beta_slow)
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
        check_scaling_factor(self.factor)
        check_int("original_max_position", self.original_max_position)
        check_llama3_freq_factors(self.low_freq_factor, self.high_freq_factor)

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
            check_pair_factors(name, getattr(self, name), None)
            object.__setattr__(self, name, tuple(float(v) for v in getattr(self, name)))  # hashable, frozen
        if len(self.short_factor) != len(self.long_factor):
            raise ValueError(
                f"short_factor and long_factor need the same length, got {len(self.short_factor)} and "
                f"{len(self.long_factor)}"
            )
        check_int("original_max_position", self.original_max_position, minimum=2)
        check_scaling_factor(self.factor)
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


def deepseek_softmax_factor(scaling: RopeScaling | None) -> float:
    """What DeepSeek's attention multiplies its softmax scale by under rope scaling: ``yarn_mscale(factor,
    mscale_all_dim)²`` for YaRN with a non-zero ``mscale_all_dim`` (Hugging Face's ``yarn_apply_mscale``), else 1.

    Example:
        >>> round(deepseek_softmax_factor(YarnScaling(40.0, 4096, mscale=1.0, mscale_all_dim=1.0)), 4)
        1.8739
    """
    if isinstance(scaling, YarnScaling) and scaling.mscale_all_dim:
        return yarn_mscale(scaling.factor, scaling.mscale_all_dim) ** 2
    return 1.0
