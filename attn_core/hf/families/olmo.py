"""OLMo 2 (``olmo2``) and OLMo 3 (``olmo3``): a norm after each sub-layer, QK-norm over all heads.

OLMo 2: ``norm_position="post_sublayer"`` (``x + norm(f(x))``: no norm before a sub-layer,
Hugging Face's ``post_attention_layernorm`` / ``post_feedforward_layernorm`` after it) and
``qk_norm="all_heads"`` (one RMSNorm over the whole query / key projection). OLMo 3: OLMo 2's
block with sliding windows per ``layer_types`` and a RoPE per layer type (YaRN in the full
layers: ``rope_scaling``; the sliding layers' base ``sliding_rope_base``).
"""

from __future__ import annotations

from .base import Family, layer_types, rope_per_layer_type, windows_by_layer_type

__all__ = ["OLMO2", "OLMO3", "olmo_fields"]


def olmo_fields(hf) -> dict:
    """A norm after each sub-layer only, QK-norm over all heads at once."""
    return dict(norm_position="post_sublayer", qk_norm="all_heads")


def _olmo3_positions(hf) -> dict:
    """A RoPE per layer type, both of base ``default_theta`` where ``rope_parameters`` gives none."""
    theta = float(getattr(hf, "default_theta", 10000.0))
    return rope_per_layer_type(hf, layer_types(hf), {"full_attention": theta, "sliding_attention": theta})


OLMO2 = Family("olmo2", fields=olmo_fields)
OLMO3 = Family("olmo3", positions=_olmo3_positions, windows=windows_by_layer_type, fields=olmo_fields)
