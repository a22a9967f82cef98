"""Cohere 2 (``cohere2``: Command R7B, Command A).

``parallel_block`` (attention and MLP from one norm), ``norm="layernorm"`` (its bias-free
LayerNorm: attn_core's bias is copied as zeros), ``rope_layout="interleaved"``, RoPE in the
sliding layers only (``rope_full_layers=False``; no sliding layer: no positions at all),
windows per ``layer_types`` and ``logit_scale``.
"""

from __future__ import annotations

from .base import Family, windows_by_layer_type

__all__ = ["COHERE2", "cohere2_fields"]


def cohere2_fields(hf) -> dict:
    """Parallel blocks, bias-free LayerNorm, interleaved RoPE in the sliding layers, scaled logits."""
    fields = dict(
        norm="layernorm",
        norm_eps=float(hf.layer_norm_eps),
        parallel_block=True,
        rope_layout="interleaved",  # Cohere pairs neighbouring dimensions (repeat_interleave, x[::2], x[1::2])
        logit_scale=float(hf.logit_scale),
    )
    kinds = list(getattr(hf, "layer_types", None) or ["full_attention"] * hf.num_hidden_layers)
    if "sliding_attention" not in kinds:  # no sliding layer: no RoPE anywhere
        fields.update(positional="none", rope_base=10000.0, rope_layout="half")
    elif "full_attention" in kinds:  # the global layers are position-free
        fields.update(rope_full_layers=False)
    return fields


COHERE2 = Family("cohere2", windows=windows_by_layer_type, fields=cohere2_fields)
