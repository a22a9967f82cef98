"""Llama 4's text model (``llama4_text``): chunked RoPE layers, NoPE layers, experts that weigh their inputs.

``layer_types`` ``"chunked"`` (its RoPE layers) with ``attention_chunk_size``, ``rope_layers``
(``no_rope_layers``, read as SmolLM3's), ``rope_layout="interleaved"`` (its complex RoPE rotates
neighbouring pairs), ``qk_norm`` in the RoPE layers only (``use_qk_norm``: Hugging Face's
gain-free L2 norm after RoPE is a unit-gain RMSNorm before it, ``nope_qk_norm=False``; its
gains are set to 1, ``qk_norm_gain=False``), the NoPE layers' ``nope_temperature``
(``attn_temperature_tuning``: ``(floor_scale, attn_scale)``), dense layers of
``intermediate_size_mlp``. Its mixtures of experts (``Llama4TextMoe``, every
``moe_layer_step``-th layer, from its ``feed_forward``) scale each token by its router weight
before the expert (``router_weight_inputs``) and add one shared expert; the experts
(``Llama4TextExperts``) compute ``x @ W``: ``gate_up_proj`` ``(E, d, 2f)`` with the gate's
columns first, ``down_proj`` ``(E, f, d)``.
"""

from __future__ import annotations

from .base import Family, refuse
from .smollm3 import smollm3_fields

__all__ = ["LLAMA4", "check_llama4_attention", "llama4_expert", "llama4_fields", "llama4_moe"]


def llama4_fields(hf) -> dict:
    """Chunked RoPE layers, NoPE layers with a query temperature, QK-norm where it rotates."""
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


def llama4_moe(hf) -> dict:
    """Top-k logits, sigmoid, the token scaled before its expert; one shared expert; every ``step``-th layer."""
    moe = list(hf.moe_layers)
    if not moe:
        return {}
    step = moe[0] + 1
    if moe != list(range(step - 1, hf.num_hidden_layers, step)):
        refuse(
            hf.model_type,
            f"moe_layers={moe}: attn_core's are every moe_layer_step-th layer (interleave_moe_layer_step)",
        )
    return dict(
        n_experts=hf.num_local_experts, experts_per_token=hf.num_experts_per_tok, moe_d_ff=hf.intermediate_size,
        router_scoring="sigmoid", router_weight_inputs=True, n_shared_experts=1,
        shared_expert_d_ff=hf.intermediate_size, moe_layer_step=step,
    )  # fmt: skip


def check_llama4_attention(attn, hf_attn) -> None:
    """A ``Llama4TextAttention`` layer's RoPE, chunk, temperature and QK-norm must be the layer's.

    Raises:
        ValueError: One of them differs, named with the layer's index.
    """
    name, config = type(hf_attn).__name__, hf_attn.config
    rope = bool(hf_attn.use_rope)
    chunked = config.layer_types[hf_attn.layer_idx] == "chunked_attention"
    expected = {
        "rope": (rope, attn.rope is not None),
        "chunk": (config.attention_chunk_size if chunked else None, attn.chunk),
        "temperature": (
            (float(hf_attn.floor_scale), float(hf_attn.attn_scale)) if hf_attn.attn_temperature_tuning and not rope
            else None,
            attn.temperature,
        ),
        "qk_norm": (hasattr(hf_attn, "qk_norm"), attn.q_norm is not None),
    }  # fmt: skip
    for key, (theirs, ours) in expected.items():
        if theirs != ours:
            raise ValueError(f"{name} (layer {hf_attn.layer_idx}) has {key}={theirs!r}, the layer {key}={ours!r}")


def _owns_experts(experts) -> bool:
    # Llama4TextExperts keeps no config and no bias: only its class tells its layout from the stacked ones.
    return type(experts).__name__ == "Llama4TextExperts"


def llama4_expert(experts, e: int) -> tuple:
    """Expert ``e``'s gate, up and down weights ``(f, d)``, ``(f, d)``, ``(d, f)`` (no biases)."""
    gate, up = experts.gate_up_proj[e].t().chunk(2, dim=0)  # (d, 2f) -> (2f, d) -> the gate's f rows, then up's
    return gate, up, experts.down_proj[e].t(), {}  # (f, d) -> (d, f)


LLAMA4 = Family(
    "llama4_text", fields=llama4_fields, moe=llama4_moe, qk_norm_gain=False, mlp_name="feed_forward",
    check_attention=check_llama4_attention, owns_experts=_owns_experts, expert=llama4_expert,
    experts_weigh_inputs=True,
)  # fmt: skip
