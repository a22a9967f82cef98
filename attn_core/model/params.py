"""The parameter count of a :class:`~attn_core.DecoderLM`, from its configuration alone.

:func:`parameter_breakdown` counts each component (embedding, attention, MLP, norms, ...)
by formula and :func:`parameter_count` sums them; a test holds both equal to the count of
the module built from the same configuration, and the real-model presets of
:class:`~attn_core.DecoderConfig` to their published sizes (on the meta device, so an
8B-parameter model costs no memory).

Shape legend:
    V        vocabulary size
    L        number of layers (blocks)
    d        ``d_model``, the width of the residual stream; ``f`` the MLP hidden width
    H        query heads, ``H_kv`` key/value heads, ``D`` head width
"""

from __future__ import annotations

from ..checks import check_instance
from ..config import DecoderConfig
from ..layers.gating import gate_width

__all__ = ["parameter_count", "parameter_breakdown", "active_parameter_count"]


def _norm_params(kind: str, d: int) -> int:
    return 2 * d if kind == "layernorm" else d  # gain (+ bias for LayerNorm)


def _mlp_params(kind: str, d_model: int, d_ff: int, bias: bool) -> int:
    if kind in ("gelu", "gelu_tanh"):  # up (d -> f) and down (f -> d)
        return 2 * d_model * d_ff + ((d_ff + d_model) if bias else 0)
    return 3 * d_model * d_ff + ((2 * d_ff + d_model) if bias else 0)  # gate, up, down (swiglu, geglu_tanh)


def _expert_params(c: DecoderConfig) -> int:
    """One routed expert: a SwiGLU of width ``moe_d_ff``."""
    return _mlp_params("swiglu", c.d_model, c.resolved_moe_d_ff, c.bias)


def _router_params(c: DecoderConfig) -> int:
    """The router's ``d -> E`` projection (+ its bias, gpt-oss); the selection bias is a buffer, not counted."""
    return c.d_model * c.moe.n_experts + (c.moe.n_experts if c.moe.router_bias else 0)


def _layer_mlp_params(c: DecoderConfig, i: int) -> int:
    """Layer ``i``'s MLP: dense, or ``E`` experts, the shared ones (one SwiGLU ``n_shared · f`` wide) and the router."""
    if not c.is_moe_layer(i):
        return _mlp_params(c.mlp, c.d_model, c.resolved_d_ff, c.bias)
    width = (
        c.moe.n_shared_experts * c.resolved_moe_d_ff if c.moe.shared_expert_d_ff is None else c.moe.shared_expert_d_ff
    )
    shared = _mlp_params("swiglu", c.d_model, width, c.bias) if c.moe.n_shared_experts else 0
    gate = c.d_model if c.moe.shared_expert_gate else 0  # Qwen3-Next's shared-expert gate, d -> 1 without bias
    return c.moe.n_experts * _expert_params(c) + shared + gate + _router_params(c)


def active_parameter_count(config: DecoderConfig, *, count_embedding: bool = True) -> int:
    """Parameters one token uses: the total minus the routed experts it does not go to (``E − k`` per MoE layer).

    Publishers differ on the embedding matrix (a lookup reads one row of it): Mixtral's
    12.9B counts it, gpt-oss's 3.6B / 5.1B and DeepSeek-V3's 37B do not. With
    ``count_embedding=False`` the token embedding is left out (a tied one still counts
    once, as the output projection).

    Args:
        config: The model's configuration.
        count_embedding: Count the ``V · d`` input embedding.
    """
    check_instance("config", config, DecoderConfig)
    c = config
    total = parameter_count(c)
    idle = (
        sum(c.is_moe_layer(i) for i in range(c.n_layers)) * (c.moe.n_experts - c.moe.experts_per_token) if c.moe else 0
    )
    active = total - idle * _expert_params(c) if c.moe else total
    if not count_embedding and not c.tie_weights:
        active -= c.vocab_size * c.d_model
    return active


def _mla_attention_params(c: DecoderConfig) -> int:
    """DeepSeek-V2/V3's latent attention, with RMSNorms on the latents."""
    d, H, D, d_c, r = c.d_model, c.n_heads, c.resolved_head_dim, c.d_latent, c.resolved_rope_dim
    D_v = c.resolved_v_head_dim
    if c.d_q_latent is None:
        q = d * H * (D + r)  # W_Q: d -> H·(D + d_r)
    else:  # W_DQ, its RMSNorm, W_UQ (content) and W_QR (RoPE part)
        q = d * c.d_q_latent + c.d_q_latent + c.d_q_latent * H * (D + r)
    kv = d * d_c + d_c + d_c * H * (D + D_v)  # W_DKV, its RMSNorm, W_UK, W_UV
    total = q + kv + d * r + H * D_v * d  # + W_KR (shared RoPE key), W_O
    if c.bias:  # every projection but W_UK and W_UV
        total += (c.d_q_latent or 0) + H * (D + r) + d_c + r + d
    return total


def _indexer_params(c: DecoderConfig) -> int:
    """DeepSeek-V3.2's indexer: W_q (query latent -> H_I·D_I), W_k (d -> D_I), its LayerNorm, W_w (d -> H_I)."""
    if c.indexer is None:
        return 0
    H_I, D_I, d = c.indexer.index_n_heads, c.indexer.index_head_dim, c.d_model
    return (c.d_q_latent or d) * H_I * D_I + d * D_I + 2 * D_I + d * H_I


def _shaped_attention_params(c: DecoderConfig, first: bool) -> int:
    d = c.d_model
    qk = 2 * d * d + (2 * d if c.bias else 0)  # W_Q, W_K
    return qk + (d * d if first else 0) + 3 * c.n_heads  # first layer's W_V; α, β, γ per head


def parameter_breakdown(config: DecoderConfig) -> dict[str, int]:
    """The parameters of ``DecoderLM(config)`` by component, from the formula alone.

    Keys: ``embedding``, ``positions``, ``attention``, ``mlp``, ``norms``, ``gains``
    (the simplified blocks' ``β_FF``), ``lm_head`` (0 when tied). A tied output
    projection shares the embedding matrix and is counted once.
    """
    check_instance("config", config, DecoderConfig)
    c = config
    d, L, V = c.d_model, c.n_layers, c.vocab_size
    mlp = sum(_layer_mlp_params(c, i) for i in range(L))  # dense, or a mixture of experts
    if c.block == "standard":
        if c.attention == "mha":
            H, kv, D = c.n_heads, c.resolved_n_kv_heads, c.resolved_head_dim
            per_layer = d * H * D + 2 * d * kv * D + H * D * d  # W_Q, W_K, W_V, W_O
            if c.bias:
                per_layer += H * D + 2 * kv * D + d
            elif c.qkv_bias:  # Qwen2: the query/key/value projections' biases, none on W_O
                per_layer += H * D + 2 * kv * D
            if c.qk_norm == "all_heads":  # OLMo 2/3: one gain per query and key value of a token
                per_layer += (H + kv) * D
            elif c.qk_norm:
                per_layer += 2 * D  # the gains of the query and key RMSNorms
            if c.attention_gate is not None:  # W_g: d -> H·(D or 1), plus its bias
                per_layer += (d + (1 if c.bias else 0)) * H * gate_width(c.attention_gate, D)
            attention = L * per_layer
            if c.attention_sinks:
                attention += L * H  # one sink logit per head and layer (gpt-oss)
            if c.qk_norm and not c.positions.nope_qk_norm:  # Llama 4: no QK-norm gains in the layers without RoPE
                gains = (H + kv) * D if c.qk_norm == "all_heads" else 2 * D
                attention -= sum(not c.layer(i).qk_norm for i in range(L)) * gains
            if (
                c.pattern.kv_share is not None
            ):  # a layer that reuses another's K/V has no W_K, W_V (nor their biases, k-norm)
                readers = sum(j != i for i, j in enumerate(c.pattern.kv_share))
                kv_bias = 2 * kv * D if c.bias or c.qkv_bias else 0
                k_norm = (kv * D if c.qk_norm == "all_heads" else D) if c.qk_norm else 0
                attention -= readers * (2 * d * kv * D + kv_bias + k_norm)
        else:
            attention = L * (_mla_attention_params(c) + _indexer_params(c))
        norms_per_layer, gains = (4 if c.norm_position == "sandwich" else 2), 0  # sandwich: + a norm after each
        if c.parallel_block:  # attention and MLP read one norm
            norms_per_layer = 1
    else:
        attention = sum(_shaped_attention_params(c, first=(i == 0)) for i in range(L))
        norms_per_layer = 2 if c.block == "sas" else 1  # SAS-P shares one norm for both branches
        gains = L  # β_FF per block
    # One extra norm either way: before the logits (pre-norm) or on the embeddings (post-norm).
    extra_norm = 1
    return {
        "embedding": V * d,
        "positions": c.max_len * d if c.positions.positional == "learned" else 0,
        "attention": attention,
        "mlp": mlp,
        "norms": (L * norms_per_layer + extra_norm) * _norm_params(c.norm, d),
        "gains": gains,
        "lm_head": 0 if c.tie_weights else V * d,
    }


def parameter_count(config: DecoderConfig) -> int:
    """Total parameters of ``DecoderLM(config)``, by formula (a tied head counted once)."""
    return sum(parameter_breakdown(config).values())
