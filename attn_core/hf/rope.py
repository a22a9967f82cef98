"""Hugging Face's RoPE settings read into attn_core's: :func:`scaling_from_hf` and the readers of a config.

Hugging Face keeps a model's RoPE in ``config.rope_parameters`` (transformers 5: ``rope_type``,
``rope_theta`` and the scaling's keys in one dict) or in ``rope_theta`` and ``rope_scaling``
(4.x). :func:`scaling_from_hf` turns one such dict into a scaling of
:mod:`attn_core.positions.rope_scaling`; :func:`rope_parameters` and :func:`rope_base_and_type`
read a config of either version; :func:`plain_rope` gives the positions of a model with one RoPE
in every layer (LLaMA's, the default of :class:`~attn_core.hf.families.base.Family`) and
:func:`partial_rotary` the rotated width of a ``partial_rotary_factor``.

These read Hugging Face's names, so they live with the converter (floor 5), not with the
positional encodings they produce: :mod:`attn_core.positions` never imports ``hf``.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..checks import check_instance, check_int
from ..positions.rope_scaling import (
    SCALINGS,
    DynamicNTKScaling,
    LinearScaling,
    Llama3Scaling,
    LongRopeScaling,
    RopeScaling,
    YarnScaling,
)

__all__ = ["partial_rotary", "plain_rope", "rope_base_and_type", "rope_parameters", "scaling_from_hf"]


def rope_parameters(hf) -> dict:
    """A config's RoPE dict: ``rope_parameters`` (transformers 5) or ``rope_scaling`` (4.x); ``{}`` if neither."""
    return dict(getattr(hf, "rope_parameters", None) or getattr(hf, "rope_scaling", None) or {})


def rope_base_and_type(hf) -> tuple[float, str]:
    """RoPE's base and type, from ``rope_parameters`` (transformers 5) or ``rope_theta``/``rope_scaling`` (4.x)."""
    params = dict(getattr(hf, "rope_parameters", None) or {})
    scaling = getattr(hf, "rope_scaling", None) or {}
    kind = params.get("rope_type") or scaling.get("rope_type") or scaling.get("type") or "default"
    base = params.get("rope_theta", getattr(hf, "rope_theta", 10000.0))
    return float(base), kind


def plain_rope(hf) -> dict:
    """``rope_base`` and ``rope_scaling`` of one RoPE in every layer (LLaMA's): PI, dynamic NTK, YaRN, Llama 3.1's
    or LongRoPE as :func:`scaling_from_hf` reads them; no ``rope_scaling`` for plain RoPE."""
    base, kind = rope_base_and_type(hf)
    if kind == "default":
        return dict(rope_base=base)
    scaling = scaling_from_hf(rope_parameters(hf), max_position_embeddings=hf.max_position_embeddings)
    return dict(rope_base=base, rope_scaling=scaling)


def partial_rotary(hf) -> dict:
    """``rotary_dim`` for a ``partial_rotary_factor`` other than 1 (Hugging Face's ``int(head_dim · factor)``)."""
    factor = dict(getattr(hf, "rope_parameters", None) or {}).get("partial_rotary_factor", None)
    factor = getattr(hf, "partial_rotary_factor", 1.0) if factor is None else factor
    if factor == 1.0:
        return {}
    head_dim = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
    return dict(rotary_dim=int(head_dim * factor))


def scaling_from_hf(rope_parameters: Mapping[str, object], *, max_position_embeddings: int) -> RopeScaling | None:
    """The scaling a Hugging Face ``config.rope_parameters`` dict describes (``None`` for plain RoPE).

    Reads the keys Hugging Face's ``ROPE_INIT_FUNCTIONS`` read. Hugging Face's config fills
    ``original_max_position_embeddings`` with ``max_position_embeddings`` when a YaRN,
    Llama 3 or LongRoPE dict lacks it: pass the dict of a constructed config. A missing
    YaRN/LongRoPE ``factor`` is ``max_position_embeddings / original_max_position_embeddings``,
    as there. ``rope_theta`` and ``partial_rotary_factor`` are not scalings: give them to
    :class:`~attn_core.positions.rope.RotaryEmbedding` as ``base`` and
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
