"""The config fields of the families :func:`~attn_core.hf.convert.from_hf` converts beyond LLaMA's.

Each function reads a Hugging Face config and returns the :class:`~attn_core.DecoderConfig`
fields that family sets on top of the LLaMA-like ones :func:`~attn_core.hf.configs.config_from_hf`
builds (plain RoPE, SwiGLU, pre-norm RMSNorm); :data:`FAMILY_FIELDS` is the table. What a
family computes is an option of the module that owns it; this module only names which:

=========  =====================================================================================
qwen2      ``qkv_bias`` (biases on q, k, v; none on the output projection or the MLP)
granite    ``attention_scale`` = ``attention_multiplier`` (scores times it, not 1/√D),
           ``embedding_multiplier``, ``residual_multiplier`` (each branch times it before the
           residual addition) and ``logit_scale`` = ``1 / logits_scaling``
phi3       its fused ``qkv_proj`` and ``gate_up_proj`` are split while copying
           (:func:`unfused_attention`, :func:`unfused_mlp`: views, no copy); a sliding window in every
           layer when ``sliding_window`` is set; ``rotary_dim`` for a ``partial_rotary_factor``
glm4_moe   ``qkv_bias`` (no bias on the output projection), ``qk_norm`` (``use_qk_norm``),
           ``rotary_dim`` (``partial_rotary_factor`` 0.5: half of each head rotated); its
           experts route as DeepSeek-V3's (sigmoid, groups, selection bias, shared experts,
           dense first layers)
smollm3    LLaMA's block with NoPE layers: ``rope_layers`` from ``no_rope_layers`` (1: the layer uses
           RoPE, 0: no positions; every fourth layer by default), a window only with
           ``use_sliding_window``
olmo2      ``norm_position="post_sublayer"`` (``x + norm(f(x))``: no norm before a sub-layer, Hugging
           Face's ``post_attention_layernorm`` / ``post_feedforward_layernorm`` after it) and
           ``qk_norm="all_heads"`` (one RMSNorm over the whole query / key projection)
olmo3      OLMo 2's block with sliding windows per ``layer_types`` and a RoPE per layer type (YaRN
           in the full layers: ``rope_scaling``; the sliding layers' base ``sliding_rope_base``)
qwen3_next ``layer_types`` with ``"linear"`` layers (Gated DeltaNet: ``linear_n_heads``,
           ``linear_head_dim``, ``linear_n_value_heads``, ``linear_value_head_dim``,
           ``linear_conv_size``), gated full attention (``attention_gate="elementwise"``, per-head
           ``qk_norm``), ``rotary_dim``; ``1 + weight`` norm gains (its mixtures of experts, with the
           sigmoid-gated shared expert, are read by the converter)
gpt_oss    ``attention_sinks``, ``bias`` (its YaRN, windows and clamped experts are read by the converter)
llama4_text ``layer_types`` ``"chunked"`` (its RoPE layers) with ``attention_chunk_size``, ``rope_layers``
           (``no_rope_layers``), ``rope_layout="interleaved"`` (its complex RoPE rotates neighbouring
           pairs), ``qk_norm`` in the RoPE layers only (``use_qk_norm``: Hugging Face's gain-free L2
           norm after RoPE is a unit-gain RMSNorm before it, ``nope_qk_norm=False``), the NoPE layers'
           ``nope_temperature`` (``attn_temperature_tuning``: ``(floor_scale, attn_scale)``), dense
           layers of ``intermediate_size_mlp``; its mixtures of experts (``router_weight_inputs``,
           one shared expert, ``moe_layer_step``) are read by the converter
cohere2    ``parallel_block`` (attention and MLP from one norm), ``norm="layernorm"`` (its
           bias-free LayerNorm: attn_core's bias is copied as zeros), ``rope_layout="interleaved"``,
           RoPE in the sliding layers only (``rope_full_layers=False``) and ``logit_scale``
=========  =====================================================================================

attn_core does not import ``transformers``: these functions read attributes of the config
object they are given.
"""

from __future__ import annotations

import types

__all__ = [
    "FAMILY_FIELDS", "qwen2_fields", "granite_fields", "phi3_fields", "cohere2_fields", "glm4_moe_fields",
    "smollm3_fields", "olmo_fields", "qwen3_next_fields", "llama4_fields",
    "unfused_attention", "unfused_mlp",
]  # fmt: skip


def qwen2_fields(hf) -> dict:
    """Qwen2 / 2.5: biases on the query, key and value projections only (whatever the config says)."""
    return dict(bias=False, qkv_bias=True)


def granite_fields(hf) -> dict:
    """Granite's four multipliers (IBM Granite 3.x): scores, embeddings, residual branches, logits."""
    return dict(
        attention_scale=float(hf.attention_multiplier),
        embedding_multiplier=float(hf.embedding_multiplier),
        residual_multiplier=float(hf.residual_multiplier),
        logit_scale=1.0 / float(hf.logits_scaling),  # Granite divides its logits by logits_scaling
    )


def _rotary_dim(hf) -> dict:
    """``rotary_dim`` for a ``partial_rotary_factor`` other than 1 (Hugging Face's ``int(head_dim · factor)``)."""
    factor = dict(getattr(hf, "rope_parameters", None) or {}).get("partial_rotary_factor", None)
    factor = getattr(hf, "partial_rotary_factor", 1.0) if factor is None else factor
    if factor == 1.0:
        return {}
    head_dim = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
    return dict(rotary_dim=int(head_dim * factor))


def phi3_fields(hf) -> dict:
    """Phi-3 / Phi-4-mini: LLaMA's fields (its fused projections are a matter of copying), partial RoPE if set."""
    return _rotary_dim(hf)


def glm4_moe_fields(hf) -> dict:
    """GLM-4.5 / 4.6 (``glm4_moe``): q/k/v biases, optional QK-norm, RoPE on part of each head.

    Its mixture of experts (sigmoid scores, groups, a selection bias, shared experts, the
    first ``first_k_dense_replace`` layers dense) is DeepSeek-V3's and is read with it.
    """
    return dict(
        bias=False, qkv_bias=bool(hf.attention_bias), qk_norm=bool(getattr(hf, "use_qk_norm", False)), **_rotary_dim(hf)
    )


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


def smollm3_fields(hf) -> dict:
    """SmolLM3: LLaMA's block whose ``no_rope_layers[i] == 0`` layers have no positions (NoPE)."""
    flags = tuple(bool(v) for v in hf.no_rope_layers)  # 1 = the layer rotates (the name says the opposite)
    if len(flags) < hf.num_hidden_layers:  # Llama 4's may be longer ("at least the same length")
        raise ValueError(
            f"no_rope_layers must give 0 or 1 per layer ({hf.num_hidden_layers}), got {list(hf.no_rope_layers)}"
        )
    flags = flags[: hf.num_hidden_layers]
    return {} if all(flags) else dict(rope_layers=flags)


def llama4_fields(hf) -> dict:
    """Llama 4's text model: chunked RoPE layers, NoPE layers with a query temperature, QK-norm where it rotates."""
    names = {"chunked_attention": "chunked", "full_attention": "full"}
    kinds = list(hf.layer_types)
    if set(kinds) - set(names) or len(kinds) != hf.num_hidden_layers:
        raise ValueError(
            f"layer_types must give 'chunked_attention' or 'full_attention' per layer ({hf.num_hidden_layers}), "
            f"got {kinds}"
        )
    fields = dict(smollm3_fields(hf), rope_layout="interleaved", d_ff=hf.intermediate_size_mlp)
    if "chunked_attention" in kinds:
        if hf.attention_chunk_size is None:
            raise ValueError(f"layer_types has 'chunked_attention' layers but attention_chunk_size=None: {kinds}")
        fields.update(layer_types=tuple(names[k] for k in kinds), attention_chunk_size=int(hf.attention_chunk_size))
    if hf.use_qk_norm:  # Llama4TextL2Norm (no gain) after RoPE, in the RoPE layers only
        fields.update(qk_norm=True, nope_qk_norm=False)
    if hf.attn_temperature_tuning and "rope_layers" in fields:  # only the NoPE layers take it
        fields.update(nope_temperature=(float(hf.floor_scale), float(hf.attn_scale)))
    return fields


def qwen3_next_fields(hf) -> dict:
    """Qwen3-Next: Gated DeltaNet layers between gated full-attention layers, RoPE on part of each head."""
    names = {"linear_attention": "linear", "full_attention": "full"}
    kinds = list(hf.layer_types)
    if set(kinds) - set(names):
        raise ValueError(f"layer_types must be 'linear_attention' or 'full_attention', got {sorted(set(kinds))}")
    return dict(
        layer_types=tuple(names[k] for k in kinds), attention_gate="elementwise", qk_norm=True,
        linear_n_heads=hf.linear_num_key_heads, linear_head_dim=hf.linear_key_head_dim,
        linear_n_value_heads=hf.linear_num_value_heads, linear_value_head_dim=hf.linear_value_head_dim,
        linear_conv_size=hf.linear_conv_kernel_dim, **_rotary_dim(hf),
    )  # fmt: skip


def gpt_oss_fields(hf) -> dict:
    """gpt-oss: learned sinks in every layer, biases everywhere (its mixture of experts: the converter's)."""
    return dict(attention_sinks=True, bias=True)


def olmo_fields(hf) -> dict:
    """OLMo 2 / OLMo 3: a norm after each sub-layer only, QK-norm over all heads at once."""
    return dict(norm_position="post_sublayer", qk_norm="all_heads")


#: The families :func:`~attn_core.hf.configs.config_from_hf` builds as LLaMA plus these fields.
FAMILY_FIELDS = {
    "qwen2": qwen2_fields, "granite": granite_fields, "phi3": phi3_fields, "cohere2": cohere2_fields,
    "glm4_moe": glm4_moe_fields, "smollm3": smollm3_fields, "olmo2": olmo_fields, "olmo3": olmo_fields,
    "qwen3_next": qwen3_next_fields, "gpt_oss": gpt_oss_fields, "llama4_text": llama4_fields,
}  # fmt: skip


# Weight layouts: fused projections seen as separate ones (views into the fused weight, no copy).
def _rows(weight, bias, lo: int, hi: int) -> types.SimpleNamespace:
    """Rows ``lo:hi`` of a linear layer, as an object with ``weight``, ``bias``, ``in_features``, ``out_features``."""
    return types.SimpleNamespace(
        weight=weight[lo:hi], bias=None if bias is None else bias[lo:hi], in_features=weight.shape[1],
        out_features=hi - lo,
    )  # fmt: skip


def unfused_attention(hf_attn) -> types.SimpleNamespace:
    """Phi-3's attention with separate ``q_proj``, ``k_proj``, ``v_proj``: ``qkv_proj``'s rows are H·D query,
    then H_kv·D key, then H_kv·D value rows. ``o_proj``, ``head_dim``, ``scaling`` and ``config`` come along.

    Shapes:
        qkv_proj.weight: ``((H + 2·H_kv)·D, d)``; the views ``(H·D, d)``, ``(H_kv·D, d)``, ``(H_kv·D, d)``
    """
    D, H_kv = hf_attn.head_dim, hf_attn.num_key_value_heads
    w, b = hf_attn.qkv_proj.weight, hf_attn.qkv_proj.bias
    q_rows, kv_rows = w.shape[0] - 2 * H_kv * D, H_kv * D
    return types.SimpleNamespace(
        q_proj=_rows(w, b, 0, q_rows), k_proj=_rows(w, b, q_rows, q_rows + kv_rows),
        v_proj=_rows(w, b, q_rows + kv_rows, w.shape[0]), o_proj=hf_attn.o_proj, head_dim=D,
        scaling=hf_attn.scaling, config=getattr(hf_attn, "config", None),
    )  # fmt: skip


def unfused_mlp(hf_mlp):
    """Phi-3's MLP with separate ``gate_proj`` and ``up_proj``: ``gate_up_proj``'s first half of rows is the
    gate's (``Phi3MLP`` chunks its output in that order); an MLP without a fused projection is returned as it is.

    Shapes:
        gate_up_proj.weight: ``(2f, d)``; the views ``(f, d)`` each
    """
    fused = getattr(hf_mlp, "gate_up_proj", None)
    if not hasattr(fused, "weight"):
        return hf_mlp
    f = fused.weight.shape[0] // 2
    return types.SimpleNamespace(
        gate_proj=_rows(fused.weight, fused.bias, 0, f), up_proj=_rows(fused.weight, fused.bias, f, 2 * f),
        down_proj=hf_mlp.down_proj,
    )  # fmt: skip
