"""Layer ``i`` of a :class:`~attn_core.DecoderLM`, built from ``(config, i)``.

:func:`make_layer` asks the config once what layer ``i`` is (:meth:`DecoderConfig.layer`,
a :class:`~attn_core.config.LayerSpec`) and builds its block: a
:class:`~attn_core.SimplifiedBlock`, or a :class:`~attn_core.TransformerBlock` whose
attention (:func:`make_attention`: multi-head, latent with or without a sparse indexer,
or a Gated DeltaNet) and MLP (dense, or :func:`make_moe`'s mixture of experts) are built
here and passed in. Hugging Face builds its layers the same way
(``LlamaDecoderLayer(config, layer_idx)``).

What several layers share comes in from the model: the RoPE module(s) and, for a layer
that reuses another's keys and values, that layer's attention (``kv_source``).

Shape legend:
    d        ``d_model``, the width of the residual stream
"""

from __future__ import annotations

from torch import nn

from ..config import DecoderConfig, LayerSpec
from ..layers.gated_deltanet import GatedDeltaNet
from ..layers.indexer import LightningIndexer
from ..layers.mla import MultiHeadLatentAttention
from ..layers.multihead import MultiHeadAttention
from ..layers.simplified import SimplifiedBlock
from ..layers.sparse_attention import SparseAttention
from ..modules.moe import MixtureOfExperts
from .blocks import make_block

__all__ = ["make_attention", "make_layer", "make_moe"]


def make_layer(
    config: DecoderConfig, i: int, *, rope: nn.Module | None = None, kv_source: nn.Module | None = None
) -> nn.Module:
    """Layer ``i`` of a model of ``config``: its block, with attention and MLP built for that layer.

    Args:
        config: The architecture.
        i: The layer's index.
        rope: The RoPE module this layer rotates with (the model's, shared by the layers), or
            None; ``config.layer(i).rope`` says which the model passes.
        kv_source: The attention of layer ``config.layer(i).kv_source``, whose keys and values
            this layer reuses (cross-layer KV sharing), else None.

    Returns:
        A :class:`~attn_core.TransformerBlock` (or one of its kinds) or a
        :class:`~attn_core.SimplifiedBlock`.

    Shapes:
        the block maps ``(B, T, d)`` to ``(B, T, d)``
    """
    c = config
    if c.block != "standard":  # He & Hofmann's blocks build their own shaped attention
        return SimplifiedBlock(
            c.d_model, c.n_heads, parallel=c.block == "sas-p", d_ff=c.d_ff, mlp=c.mlp, norm=c.norm, rope=rope,
            value_proj=i == 0, beta_ff=c.beta_ff, bias=c.bias, dropout=c.dropout,
        )  # fmt: skip
    spec = c.layer(i)
    attention = make_attention(c, spec, rope=rope, kv_source=kv_source)
    return make_block(
        c.d_model,
        attention.n_heads if spec.kind == "linear" else c.n_heads,
        attention=attention,
        mlp_module=make_moe(c) if spec.moe else None,  # a mixture of experts in the dense MLP's place
        d_ff=c.d_ff,
        mlp=c.mlp,
        norm=c.norm,
        norm_position=c.norm_position,
        dropout=c.dropout,
        bias=c.bias,
        norm_eps=c.norm_eps,
        residual_scale=c.residual_multiplier,
        parallel=c.parallel_block,
    )


def make_attention(
    config: DecoderConfig, spec: LayerSpec, *, rope: nn.Module | None = None, kv_source: nn.Module | None = None
) -> nn.Module:
    """The token-mixing sub-layer of the layer ``spec`` describes (standard blocks).

    Multi-head latent attention (wrapped in :class:`~attn_core.SparseAttention` with
    ``config.indexer``), a :class:`~attn_core.GatedDeltaNet` for a ``"linear"`` layer, else
    :class:`~attn_core.MultiHeadAttention` with the layer's window, chunk, QK-norm and
    temperature.

    Shapes:
        the module maps ``(B, T, d)`` to ``(B, T, d)``
    """
    c = config
    eps = {} if c.norm_eps is None else {"norm_eps": c.norm_eps}  # else each module's own default
    if c.attention == "mla":
        p = c.positions
        attention = MultiHeadLatentAttention(
            c.d_model, c.n_heads, d_latent=c.d_latent, d_q_latent=c.d_q_latent, head_dim=c.head_dim,
            rope_dim=c.resolved_rope_dim, causal=True, rope_base=p.rope_base, rope_layout=p.rope_layout,
            rope_scaling=p.rope_scaling, v_head_dim=c.v_head_dim, bias=c.bias, dropout=c.dropout,
        )  # fmt: skip
        if c.indexer is None:
            return attention
        ix = c.indexer  # DeepSeek-V3.2: the indexer picks the keys MLA attends to
        indexer = LightningIndexer(
            c.d_model, ix.index_n_heads, ix.index_head_dim, d_query=c.d_q_latent, rope_dim=c.resolved_rope_dim,
            rope_base=p.rope_base,
        )  # fmt: skip
        return SparseAttention(attention, indexer, ix.index_topk)
    if spec.kind == "linear":  # Gated DeltaNet in the attention's place
        h_k, d_k, h_v, d_v = c.resolved_linear_sizes
        return GatedDeltaNet(
            c.d_model, h_k, d_k, n_value_heads=h_v, value_head_dim=d_v, conv_size=c.linear.linear_conv_size, **eps
        )
    return MultiHeadAttention(
        c.d_model,
        c.n_heads,
        n_kv_heads=c.resolved_n_kv_heads,
        causal=True,
        bias=c.bias,
        dropout=c.dropout,
        rope=rope,
        head_dim=c.head_dim,
        qk_norm=spec.qk_norm,
        **eps,
        gate=c.attention_gate,
        softcap=c.attention_softcap,
        window=spec.window,
        sinks=c.attention_sinks,
        qkv_bias=c.qkv_bias,
        scale=c.attention_scale,
        chunk=spec.chunk,
        temperature=spec.temperature,
        kv_source=kv_source,
    )


def make_moe(config: DecoderConfig) -> MixtureOfExperts:
    """The mixture-of-experts MLP of ``config.moe``: its router, experts and capacity.

    Shapes:
        the module maps ``(..., d)`` to ``(..., d)``
    """
    c, m = config, config.moe
    return MixtureOfExperts(
        c.d_model, m.n_experts, m.experts_per_token, d_ff=c.resolved_moe_d_ff, n_shared=m.n_shared_experts,
        capacity_factor=m.capacity_factor, bias=c.bias, router_bias=m.router_bias, scoring=m.router_scoring,
        topk_first=m.router_topk_first, normalize=m.router_normalize, scale=m.router_scale, n_groups=m.router_groups,
        topk_groups=m.router_topk_groups, swiglu_limit=m.expert_swiglu_limit, shared_d_ff=m.shared_expert_d_ff,
        shared_gate=m.shared_expert_gate, weight_inputs=m.router_weight_inputs,
    )  # fmt: skip
