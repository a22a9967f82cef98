"""The config fields of the families :func:`~attn_core.convert.from_hf` converts beyond LLaMA's (issue 29).

Each function reads a Hugging Face config and returns the :class:`~attn_core.DecoderConfig`
fields that family sets on top of the LLaMA-like ones :func:`~attn_core.convert.config_from_hf`
builds (plain RoPE, SwiGLU, pre-norm RMSNorm); :data:`FAMILY_FIELDS` is the table. What a
family computes is an option of the module that owns it; this module only names which:

=========  =====================================================================================
granite    ``attention_scale`` = ``attention_multiplier`` (scores times it, not 1/√D),
           ``embedding_multiplier``, ``residual_multiplier`` (each branch times it before the
           residual addition) and ``logit_scale`` = ``1 / logits_scaling``
phi3       nothing new: its fused ``qkv_proj`` and ``gate_up_proj`` are split while copying
           (:func:`~attn_core.convert.copy_attention`, ``_copy_mlp``); a sliding window in every
           layer when ``sliding_window`` is set
cohere2    ``parallel_block`` (attention and MLP from one norm), ``norm="layernorm"`` (its
           bias-free LayerNorm: attn_core's bias is copied as zeros), ``rope_layout="interleaved"``,
           RoPE in the sliding layers only (``rope_full_layers=False``) and ``logit_scale``
=========  =====================================================================================

attn_core does not import ``transformers``: these functions read attributes of the config
object they are given.
"""

from __future__ import annotations

__all__ = ["FAMILY_FIELDS", "granite_fields", "phi3_fields", "cohere2_fields"]


def _refuse(model_type: str, what: str) -> None:
    raise ValueError(f"cannot convert this {model_type} model exactly: {what}")


def granite_fields(hf) -> dict:
    """Granite's four multipliers (IBM Granite 3.x): scores, embeddings, residual branches, logits."""
    return dict(
        attention_scale=float(hf.attention_multiplier),
        embedding_multiplier=float(hf.embedding_multiplier),
        residual_multiplier=float(hf.residual_multiplier),
        logit_scale=1.0 / float(hf.logits_scaling),  # Granite divides its logits by logits_scaling
    )


def phi3_fields(hf) -> dict:
    """Phi-3: LLaMA's fields (its fused projections are a matter of copying); RoPE over whole heads only."""
    factor = dict(getattr(hf, "rope_parameters", None) or {}).get("partial_rotary_factor", 1.0)
    if factor != 1.0:
        _refuse("phi3", f"partial_rotary_factor={factor}: RoPE on part of each head is not in DecoderLM yet")
    return {}


def cohere2_fields(hf) -> dict:
    """Cohere 2 (Command R7B, Command A): parallel blocks, bias-free LayerNorm, interleaved RoPE in sliding layers."""
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


#: The families :func:`~attn_core.convert.config_from_hf` builds as LLaMA plus these fields.
FAMILY_FIELDS = {"granite": granite_fields, "phi3": phi3_fields, "cohere2": cohere2_fields}
