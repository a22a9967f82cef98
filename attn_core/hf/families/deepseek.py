"""DeepSeek-V3 (``deepseek_v3``) and DeepSeek-V3.2 (``deepseek_v32``): latent attention and routed experts.

* Attention: multi-head latent attention (``attention="mla"``: ``kv_lora_rank``,
  ``q_lora_rank``, the content, RoPE and value head widths, ``rope_interleave``); V3.2 adds
  DeepSeek Sparse Attention's lightning indexer (``index_n_heads``, ``index_head_dim``,
  ``index_topk``).
* RoPE: plain, or YaRN (MLA multiplies its softmax scale by YaRN's ``mscale`` squared). Another
  scaling with ``mscale_all_dim`` is refused (Hugging Face scales the softmax for it too), and
  any scaling in V3.2 (its indexer's RoPE is not scaled here).
* Experts (:func:`deepseek_moe`, GLM-4-MoE's too): sigmoid scores with a selection bias,
  groups, a routed scale and shared experts, the first ``first_k_dense_replace`` layers dense.
"""

from __future__ import annotations

from ..rope import plain_rope, rope_base_and_type, rope_parameters
from .base import Family, refuse

__all__ = ["DEEPSEEK_V3", "DEEPSEEK_V32", "deepseek_moe", "mla", "mla_with_indexer"]


def _v3_positions(hf) -> dict:
    """One RoPE, scaled by YaRN or by a type without ``mscale_all_dim``."""
    _, kind = rope_base_and_type(hf)
    if kind not in ("default", "yarn") and rope_parameters(hf).get("mscale_all_dim"):
        refuse(
            hf.model_type,
            f"rope scaling {kind!r} with mscale_all_dim (Hugging Face multiplies the softmax scale by mscale^2 for "
            "this type too; attn_core only for YaRN)",
        )
    return plain_rope(hf)


def _v32_positions(hf) -> dict:
    """One plain RoPE: scaling is refused."""
    _, kind = rope_base_and_type(hf)
    if kind != "default":
        refuse(
            hf.model_type,
            f"rope scaling {kind!r} in DeepSeek-V3.2 (its lightning indexer's RoPE is not scaled here)",
        )
    return plain_rope(hf)


def mla(hf) -> dict:
    """Multi-head latent attention's fields."""
    return dict(
        attention="mla",
        d_latent=hf.kv_lora_rank,
        d_q_latent=hf.q_lora_rank,
        head_dim=hf.qk_nope_head_dim,
        rope_dim=hf.qk_rope_head_dim,
        v_head_dim=hf.v_head_dim,
        rope_layout="interleaved" if getattr(hf, "rope_interleave", True) else "half",
    )


def mla_with_indexer(hf) -> dict:
    """DeepSeek Sparse Attention: MLA and its lightning indexer, which picks ``index_topk`` keys per query."""
    indexer = dict(index_n_heads=hf.index_n_heads, index_head_dim=hf.index_head_dim, index_topk=hf.index_topk)
    return dict(mla(hf), **indexer)


def deepseek_moe(hf) -> dict:
    """DeepSeek-V3's experts (GLM-4-MoE's too); {} where no layer has them.

    The dense layers come first: ``first_k_dense_replace`` of them, or (V3.2) the ``"dense"``
    entries of ``mlp_layer_types`` before the first ``"sparse"`` one; a dense layer after a
    sparse one is refused.
    """
    dense, L = hf.first_k_dense_replace, hf.num_hidden_layers
    kinds = list(getattr(hf, "mlp_layer_types", None) or [])  # DeepSeek-V3.2: "dense" / "sparse" per layer
    if kinds:
        dense = next((i for i, k in enumerate(kinds) if k != "dense"), L)
        if any(k != "sparse" for k in kinds[dense:]):
            refuse(hf.model_type, f"mlp_layer_types={kinds}: dense layers after MoE ones (attn_core's come first)")
    if not getattr(hf, "n_routed_experts", 0) or dense is None or dense >= L:
        return {}
    return dict(
        n_experts=hf.n_routed_experts, experts_per_token=hf.num_experts_per_tok,
        n_shared_experts=hf.n_shared_experts or 0, moe_d_ff=hf.moe_intermediate_size, router_scoring="sigmoid",
        router_normalize=bool(hf.norm_topk_prob), router_scale=float(hf.routed_scaling_factor),
        router_groups=hf.n_group or 1, router_topk_groups=hf.topk_group or 1, first_dense_layers=dense,
    )  # fmt: skip


DEEPSEEK_V3 = Family("deepseek_v3", positions=_v3_positions, attention=mla, moe=deepseek_moe)
DEEPSEEK_V32 = Family("deepseek_v32", positions=_v32_positions, attention=mla_with_indexer, moe=deepseek_moe)
