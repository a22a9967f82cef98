"""Qwen3-Next (``qwen3_next``): Gated DeltaNet layers between gated full-attention layers, and experts.

``layer_types`` with ``"linear"`` layers (Gated DeltaNet: ``linear_n_heads``,
``linear_head_dim``, ``linear_n_value_heads``, ``linear_value_head_dim``,
``linear_conv_size``), gated full attention (``attention_gate="elementwise"``, per-head
``qk_norm``), ``rotary_dim``; ``1 + weight`` norm gains (``norm_offset``). Its mixtures of
experts have one shared expert behind a sigmoid gate (``shared_expert_gate``); dense layers
(``mlp_only_layers``, ``decoder_sparse_step``) must come before them.
"""

from __future__ import annotations

from ..rope import partial_rotary
from .base import Family, refuse

__all__ = ["QWEN3_NEXT", "qwen3_next_fields", "qwen3_next_moe"]


def qwen3_next_fields(hf) -> dict:
    """Its layer types, the gate and QK-norm of its full layers, its linear layers' sizes, partial RoPE."""
    names = {"linear_attention": "linear", "full_attention": "full"}
    kinds = list(hf.layer_types)
    if set(kinds) - set(names):
        raise ValueError(f"layer_types must be 'linear_attention' or 'full_attention', got {sorted(set(kinds))}")
    return dict(
        layer_types=tuple(names[k] for k in kinds), attention_gate="elementwise", qk_norm=True,
        linear_n_heads=hf.linear_num_key_heads, linear_head_dim=hf.linear_key_head_dim,
        linear_n_value_heads=hf.linear_num_value_heads, linear_value_head_dim=hf.linear_value_head_dim,
        linear_conv_size=hf.linear_conv_kernel_dim, **partial_rotary(hf),
    )  # fmt: skip


def qwen3_next_moe(hf) -> dict:
    """Its experts and gated shared expert, in every layer from the first sparse one; {} with none."""
    dense = set(hf.mlp_only_layers or [])
    moe = [i for i in range(hf.num_hidden_layers) if i not in dense and hf.num_experts > 0
           and (i + 1) % hf.decoder_sparse_step == 0]  # fmt: skip
    if not moe:
        return {}
    if moe != list(range(moe[0], hf.num_hidden_layers)):
        refuse(hf.model_type, f"mixture-of-experts layers {moe}: dense layers after MoE ones (attn_core's come first)")
    return dict(
        n_experts=hf.num_experts, experts_per_token=hf.num_experts_per_tok, moe_d_ff=hf.moe_intermediate_size,
        router_normalize=bool(hf.norm_topk_prob), n_shared_experts=1,
        shared_expert_d_ff=hf.shared_expert_intermediate_size, shared_expert_gate=True, first_dense_layers=moe[0],
    )  # fmt: skip


QWEN3_NEXT = Family("qwen3_next", fields=qwen3_next_fields, moe=qwen3_next_moe, norm_offset=1.0)
