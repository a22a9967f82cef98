"""Qwen2 (``qwen2``), Qwen3 (``qwen3``) and Qwen3-MoE (``qwen3_moe``).

=========  =====================================================================================
qwen2      ``qkv_bias`` (biases on q, k, v; none on the output projection or the MLP), windows
           per ``layer_types``
qwen3      an RMSNorm on each query and key head (``qk_norm``), windows per ``layer_types``
qwen3_moe  Qwen3's attention with a window in every layer when set; experts routed by a softmax
           then top-k, optionally renormalised (``router_normalize``), every layer a mixture
=========  =====================================================================================

Qwen3-Next, with its linear layers and gated shared expert, is :mod:`.qwen3_next`.
"""

from __future__ import annotations

from .base import Family, per_head_qk_norm, refuse, window_in_every_layer, windows_by_layer_type

__all__ = ["QWEN2", "QWEN3", "QWEN3_MOE", "qwen2_fields", "qwen3_moe_moe"]


def qwen2_fields(hf) -> dict:
    """Qwen2 / 2.5: biases on the query, key and value projections only (whatever the config says)."""
    return dict(bias=False, qkv_bias=True)


def qwen3_moe_moe(hf) -> dict:
    """Qwen3-MoE's experts: ``num_experts`` of ``moe_intermediate_size`` in every layer; {} with none."""
    if hf.decoder_sparse_step != 1 or list(hf.mlp_only_layers or []):
        refuse(
            hf.model_type,
            f"decoder_sparse_step={hf.decoder_sparse_step}, mlp_only_layers={hf.mlp_only_layers}: dense layers "
            "between MoE layers (attn_core's dense MLPs come first: first_dense_layers)",
        )
    if not hf.num_experts:
        return {}
    return dict(
        n_experts=hf.num_experts, experts_per_token=hf.num_experts_per_tok, moe_d_ff=hf.moe_intermediate_size,
        router_normalize=bool(hf.norm_topk_prob),
    )  # fmt: skip


QWEN2 = Family("qwen2", windows=windows_by_layer_type, fields=qwen2_fields)
QWEN3 = Family("qwen3", windows=windows_by_layer_type, attention=per_head_qk_norm)
QWEN3_MOE = Family("qwen3_moe", windows=window_in_every_layer, attention=per_head_qk_norm, moe=qwen3_moe_moe)
