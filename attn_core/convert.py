"""Hugging Face causal LMs into attn_core: :func:`from_hf` copies the families of :data:`SUPPORTED_MODEL_TYPES`.

:func:`config_from_hf` reads a Hugging Face model configuration into a
:class:`~attn_core.DecoderConfig`, and :func:`from_hf` builds the
:class:`~attn_core.DecoderLM` and copies every weight into it. What attn_core cannot
compute *exactly* is refused with a ``ValueError`` that names it: activations other than SiLU,
attention dropout, rope scaling in Gemma 2 or in Gemma 3's sliding layers, rope scaling other
than YaRN with ``mscale_all_dim`` in DeepSeek-V3 and any in DeepSeek-V3.2 (its indexer's RoPE).
Rope scaling converts (Gemma 3's global layers' too, DeepSeek-V3's YaRN in MLA with its softmax
scale) (issue 28): Hugging Face's ``rope_parameters`` (PI ``"linear"``, ``"dynamic"`` NTK,
``"yarn"`` with its temperature, Llama 3.1's ``"llama3"``, ``"longrope"``) become
``DecoderConfig.rope_scaling`` (:func:`~attn_core.rope_scaling.scaling_from_hf`).
SmolLM3's NoPE layers (``no_rope_layers``) become ``DecoderConfig.rope_layers``.
Mixtures of experts convert (chapter 19): Mixtral (``MixtralForCausalLM``:
top-k logits then softmax), Qwen3-MoE (``Qwen3MoeForCausalLM``: softmax then top-k, optionally
renormalised; QK-norm) and DeepSeek-V3's MoE layers (sigmoid scores, groups, scale, a shared
expert, the ``e_score_correction_bias`` as the selection bias), each block by :func:`copy_moe`. Sliding windows are
converted (Mistral's in every layer, Qwen3's and Gemma's per ``layer_types``).

The families of issue 29 are LLaMA's block with options of the modules that own them, named
per family in :mod:`attn_core.convert_families` (:data:`~attn_core.convert_families.FAMILY_FIELDS`):
Qwen2 (``qkv_bias``), Granite (``attention_scale``, ``embedding_multiplier``,
``residual_multiplier``, ``logit_scale``), Phi-3 (fused ``qkv_proj`` / ``gate_up_proj`` split
here; ``rotary_dim``), Cohere 2 (``parallel_block``, interleaved RoPE in the sliding layers only:
``rope_full_layers=False``, ``logit_scale``) and GLM-4-MoE (``qkv_bias``, ``qk_norm``,
``rotary_dim``, DeepSeek-V3's routing). DeepSeek-V3.2 (``deepseek_v32``) is DeepSeek-V3 with
each MLA layer inside a :class:`~attn_core.SparseAttention` (``index_n_heads``, ``index_head_dim``,
``index_topk``; :func:`copy_indexer`).

Gemma 3's text model (``Gemma3ForCausalLM``, ``model_type="gemma3_text"``) converts into
a :class:`~attn_core.DecoderLM` with Gemma's options: embeddings scaled by
``√hidden_size`` (``scale_embeddings=True``), sandwich norms (``norm_position="sandwich"``:
``input_layernorm`` / ``post_attention_layernorm`` around the attention,
``pre_feedforward_layernorm`` / ``post_feedforward_layernorm`` around the MLP), a GeGLU MLP
with the tanh GELU (``mlp="geglu_tanh"``), QK-norm, and the sliding layers' own RoPE base
(``sliding_rope_base``). Its RMSNorms multiply by ``1 + weight``: every gain (the four
per block, the QK-norms and the final norm) is copied as ``1 + weight``. A
``query_pre_attn_scalar`` other than ``head_dim`` becomes the score scale
(``attention_scale = query_pre_attn_scalar**-0.5``). Refused: soft-capping (attention or
final logits), bidirectional attention, rope scaling in the sliding layers (the full
layers' converts: ``rope_scaling``, Gemma 3 4B-27B's linear ×8).

Gemma 2 (``Gemma2ForCausalLM``, ``model_type="gemma2"``) converts with the same block (scaled
embeddings, ``1 + weight`` gains, sandwich norms, ``geglu_tanh``) but no QK-norm and one RoPE
base in every layer, plus its soft-caps: the attention logits' (``attn_logit_softcapping`` into
``attention_softcap``) and the final logits' (``final_logit_softcapping`` into
``final_softcap``: ``cap · tanh(logits / cap)``), and Gemma 2 27B's ``query_pre_attn_scalar``
(144 for heads of 128) as ``attention_scale``. Refused as for Gemma 3: bidirectional attention,
rope scaling.

OLMo 2 and OLMo 3 (issue 28) convert with ``norm_position="post_sublayer"`` (``x + norm(f(x))``) and
``qk_norm="all_heads"``; OLMo 3 with its windows and a RoPE per layer type (YaRN in the full layers).
Qwen3-Next converts (Gated DeltaNet layers, gated attention, partial RoPE, and MoE layers whose
shared expert has a sigmoid gate: ``shared_expert_gate``, ``shared_expert_d_ff``), and gpt-oss
(YaRN, sinks, windows on alternate layers, clamped SwiGLU experts with biases:
``expert_swiglu_limit``). Llama 4's text model (``llama4_text``, ``Llama4ForCausalLM``) converts: chunked
attention in its RoPE layers (``layer_types`` ``"chunked"``, ``attention_chunk_size``), NoPE layers
whose queries grow with the position (``nope_temperature``), QK-norm where it rotates, interleaved RoPE
(Llama 3.1's scaling if set), dense layers of ``intermediate_size_mlp`` between mixtures of experts that
weight each token before its expert (``router_weight_inputs``) beside a shared expert (``moe_layer_step``).
Kimi Linear, DeepSeek-V4 and Gemma 3n are refused with what they add (:data:`NOT_CONVERTED`).

attn_core does not depend on ``transformers``: this module never imports it. It reads
the model object it is given (its ``config`` and its modules), so any version of
``transformers`` whose model has these attribute names works (4.51 and later, 5.x).

Name map (``L`` = ``model.model.layers[i]``, ``B`` = ``DecoderLM.blocks[i]``):

==========================================  ===========================================
Hugging Face                                 attn_core
==========================================  ===========================================
``model.embed_tokens`` / ``lm_head``        ``tok_emb`` / ``lm_head``
``model.norm``                              ``final_norm``
``L.input_layernorm`` / ``L.post_attention_layernorm``  ``B.attn_norm`` / ``B.mlp_norm``
Gemma ``L.input_layernorm``                  ``B.attn_norm`` (gain ``1 + weight``, as all Gemma's)
Gemma ``L.post_attention_layernorm``         ``B.attn_post_norm``
Gemma ``L.pre_feedforward_layernorm``        ``B.mlp_norm``
Gemma ``L.post_feedforward_layernorm``       ``B.mlp_post_norm``
``L.self_attn.{q,k,v}_proj``, ``o_proj``    ``B.attn.{q,k,v}_proj``, ``out_proj``
``L.self_attn.q_norm`` / ``k_norm`` (Qwen3)  ``B.attn.q_norm`` / ``k_norm``
``L.mlp.{gate,up,down}_proj``               ``B.mlp.{gate,up,down}_proj``
DeepSeek ``q_proj`` or ``q_b_proj``         rows split per head into ``q_up`` / ``q_rope``
DeepSeek ``q_a_proj``, ``q_a_layernorm``    ``q_down``, ``q_norm``
DeepSeek ``kv_a_proj_with_mqa``             rows split into ``kv_down`` / ``k_rope``
DeepSeek ``kv_a_layernorm``                 ``kv_norm``
DeepSeek ``kv_b_proj``                      rows split per head into ``k_up`` / ``v_up``
DeepSeek-V3.2 ``self_attn.indexer``         ``B.attn.indexer`` (``wq_b``, ``wk``, ``k_norm``, ``weights_proj``)
Phi-3 ``qkv_proj``                           rows split into ``q_proj`` / ``k_proj`` / ``v_proj``
Phi-3 ``mlp.gate_up_proj``                   rows split into ``gate_proj`` / ``up_proj``
Cohere 2 ``L.input_layernorm``               ``B.attn_norm`` (its parallel block's one norm)
==========================================  ===========================================

Shape legend:
    H        query heads; ``H_kv`` key/value heads
    d_h      content (no-RoPE) query/key width per head (DeepSeek's ``qk_nope_head_dim``)
    d_r      RoPE width (``qk_rope_head_dim``); ``d_v`` value width (``v_head_dim``)
"""

from __future__ import annotations

import torch
from torch import nn

from .checks import check_instance
from .config import DecoderConfig
from .convert_families import FAMILY_FIELDS, unfused_attention, unfused_mlp
from .gated_deltanet import GatedDeltaNet
from .mla import MultiHeadLatentAttention
from .model import DecoderLM
from .moe import MixtureOfExperts
from .multihead import MultiHeadAttention
from .rope_scaling import scaling_from_hf
from .sparse_attention import LightningIndexer, SparseAttention

__all__ = [
    "config_from_hf",
    "from_hf",
    "copy_attention",
    "copy_gated_deltanet",
    "copy_moe",
    "copy_indexer",
    "transformers_names",
    "SUPPORTED_MODEL_TYPES",
    "NOT_CONVERTED",
    "OFFSET_NORM_TYPES",
]

#: The Hugging Face ``config.model_type`` values :func:`from_hf` converts.
SUPPORTED_MODEL_TYPES = (
    "llama", "mistral", "qwen3", "deepseek_v3", "deepseek_v32", "gemma2", "gemma3_text", "mixtral", "qwen3_moe",
    *FAMILY_FIELDS,
)  # fmt: skip


#: Model types the chapters discuss that :func:`from_hf` refuses, and why: what each adds
#: that a :class:`~attn_core.DecoderLM` does not compute. Their attention layers alone
#: convert with :func:`copy_attention` where it says so.
NOT_CONVERTED = {
    "kimi_linear": "its Kimi Delta Attention layers (KDA: a delta rule whose forget gate has one decay per "
    "channel, from a low-rank f_a_proj/f_b_proj) are not attn_core's GatedDeltaNet (one decay per head), and "
    "its full layers are MLA without RoPE",
    "deepseek_v4": "its attention compresses past keys (the HCA and CSA compressors, with their own caches), "
    "its residual stream is split into hyper-connections and some MoE layers route by a token hash; "
    "DecoderLM has none of these",
    "gemma3n_text": "its layers add AltUp (several predicted copies of the residual stream), LAuReL's low-rank "
    "residual, per-layer token embeddings, activation sparsity in the first MLPs and KV sharing between "
    "its last layers in another pattern; DecoderLM has none of the first four",
}


def _rope_scaling(t: str, hf, kind: str) -> dict:
    """``rope_scaling`` of the DecoderConfig (issue 28): Hugging Face's ``rope_parameters`` (``rope_scaling`` in 4.x)
    read by :func:`~attn_core.rope_scaling.scaling_from_hf`; {} for plain RoPE."""
    if kind == "default":
        return {}
    params = dict(getattr(hf, "rope_parameters", None) or getattr(hf, "rope_scaling", None) or {})
    if t == "deepseek_v3" and (kind == "yarn" or not params.get("mscale_all_dim")):  # DeepSeek's YaRN: MLA's scale
        return dict(rope_scaling=scaling_from_hf(params, max_position_embeddings=hf.max_position_embeddings))
    if t in ("deepseek_v3", "deepseek_v32"):
        _refuse(
            t,
            f"rope scaling {kind!r} "
            + (
                "in DeepSeek-V3.2 (its lightning indexer's RoPE is not scaled here)"
                if t == "deepseek_v32"
                else "with mscale_all_dim (Hugging Face multiplies the softmax scale by mscale^2 for this type too; "
                "attn_core only for YaRN)"
            ),
        )
    params = dict(getattr(hf, "rope_parameters", None) or getattr(hf, "rope_scaling", None) or {})
    return dict(rope_scaling=scaling_from_hf(params, max_position_embeddings=hf.max_position_embeddings))


def _rope(hf) -> tuple[float, str]:
    """RoPE's base and type, from ``rope_parameters`` (transformers 5) or ``rope_theta``/``rope_scaling`` (4.x)."""
    params = dict(getattr(hf, "rope_parameters", None) or {})
    scaling = getattr(hf, "rope_scaling", None) or {}
    kind = params.get("rope_type") or scaling.get("rope_type") or scaling.get("type") or "default"
    base = params.get("rope_theta", getattr(hf, "rope_theta", 10000.0))
    return float(base), kind


def _refuse(model_type: str, what: str) -> None:
    raise ValueError(f"cannot convert this {model_type} model exactly: {what}")


def _windows(model_type: str, hf) -> dict:
    """``sliding_window`` / ``layer_types`` of the DecoderConfig: Mistral slides in every layer, Qwen3 per layer."""
    window = getattr(hf, "sliding_window", None)
    if model_type in ("mistral", "mixtral", "qwen3_moe", "phi3"):  # Qwen3-MoE's config clears an unused window
        return {} if window is None else dict(sliding_window=window)
    if model_type == "smollm3" and not getattr(hf, "use_sliding_window", False):
        kinds = list(getattr(hf, "layer_types", None) or [])
        if "sliding_attention" in kinds:  # HF builds a sliding mask for them but its layers do not slide
            _refuse(model_type, "layer_types with 'sliding_attention' but use_sliding_window=False")
        return {}
    if model_type in ("qwen2", "qwen3", "cohere2", "smollm3", "olmo3", "gpt_oss"):
        kinds = list(getattr(hf, "layer_types", None) or ["full_attention"] * hf.num_hidden_layers)
        if "sliding_attention" not in kinds or window is None:
            return {}
        names = {"full_attention": "full", "sliding_attention": "sliding"}
        if set(kinds) - set(names):
            _refuse(model_type, f"layer_types {sorted(set(kinds) - set(names))}")
        return dict(sliding_window=window, layer_types=tuple(names[k] for k in kinds))
    if window is not None:  # LLaMA and DeepSeek-V3 have no window: refuse a stray one rather than drop it
        _refuse(model_type, f"sliding_window={window} on a {model_type} model")
    return {}


def config_from_hf(hf_config) -> DecoderConfig:
    """The :class:`~attn_core.DecoderConfig` of a Hugging Face config of :data:`SUPPORTED_MODEL_TYPES`.

    Args:
        hf_config: ``model.config`` of a Hugging Face causal LM (any object with its attributes).

    Returns:
        A config whose :class:`~attn_core.DecoderLM` computes what the Hugging Face model
        computes (its ``max_len`` is ``max_position_embeddings``).

    Raises:
        ValueError: A model type other than :data:`SUPPORTED_MODEL_TYPES` (for those in
            :data:`NOT_CONVERTED`, the message says what they add), or a feature attn_core
            does not compute exactly (named in the message).
    """
    t = getattr(hf_config, "model_type", None)
    if t in NOT_CONVERTED:
        rope = getattr(hf_config, "rope_parameters", None) or {}  # transformers 5 keeps the factor there
        fields = {"num_local_experts": "?", "num_experts_per_tok": "?", "partial_rotary_factor": "?"}
        fields["partial_rotary_factor"] = rope.get("partial_rotary_factor", fields["partial_rotary_factor"])
        _refuse(t, NOT_CONVERTED[t].format(**{**fields, **vars(hf_config)}))
    if t not in SUPPORTED_MODEL_TYPES:
        raise ValueError(f"model_type={t!r} is not supported; from_hf converts {', '.join(SUPPORTED_MODEL_TYPES)}")
    if t in ("gemma2", "gemma3_text"):
        rope, windows, style = _gemma(t, hf_config)
    elif t == "olmo3":  # a RoPE per layer type (YaRN in the full layers), windows in the sliding ones
        theta = float(getattr(hf_config, "default_theta", 10000.0))
        kinds = _layer_types(t, hf_config)
        rope = _rope_per_layer_type(t, hf_config, kinds, {"full_attention": theta, "sliding_attention": theta})
        windows, style = _windows(t, hf_config), dict(mlp="swiglu")  # OLMo's norms: olmo_fields
    else:
        base, kind = _rope(hf_config)
        scaling = _rope_scaling(t, hf_config, kind)  # PI, dynamic NTK, YaRN, Llama 3.1, LongRoPE (issue 28)
        rope, windows, style = (
            dict(rope_base=base, **scaling),
            _windows(t, hf_config),
            dict(mlp="swiglu", norm_position="pre"),
        )
    if style["mlp"] == "swiglu" and getattr(hf_config, "hidden_act", "silu") != "silu":
        _refuse(t, f"hidden_act={hf_config.hidden_act!r} (attn_core's SwiGLU uses SiLU)")
    if getattr(hf_config, "attention_dropout", 0.0):
        _refuse(t, f"attention_dropout={hf_config.attention_dropout} (attn_core's dropout also drops residuals)")
    d, H = hf_config.hidden_size, hf_config.num_attention_heads
    common = dict(
        vocab_size=hf_config.vocab_size,
        n_layers=hf_config.num_hidden_layers,
        d_model=d,
        n_heads=H,
        d_ff=hf_config.intermediate_size,
        max_len=hf_config.max_position_embeddings,
        positional="rope",
        norm="rmsnorm",
        **style,
        tie_weights=bool(getattr(hf_config, "tie_word_embeddings", False)),
        **rope,
        norm_eps=float(getattr(hf_config, "rms_norm_eps", None) or getattr(hf_config, "layer_norm_eps", 1e-6)),
        # One bias switch in attn_core: the projections HF leaves without a bias get zeros.
        bias=bool(getattr(hf_config, "attention_bias", False) or getattr(hf_config, "mlp_bias", False)),
    )
    # Qwen2, Granite, Phi-3, Cohere 2, GLM-4-MoE: LLaMA's fields and the family's own (which win)
    family = FAMILY_FIELDS[t](hf_config) if t in FAMILY_FIELDS else {}
    moe = _moe_fields(t, hf_config)
    if t in ("deepseek_v3", "deepseek_v32"):
        if t == "deepseek_v32":  # DeepSeek Sparse Attention: the lightning indexer and its top-k
            moe.update(index_n_heads=hf_config.index_n_heads, index_head_dim=hf_config.index_head_dim)
            moe.update(index_topk=hf_config.index_topk)
        return DecoderConfig(
            **common,
            **moe,
            attention="mla",
            d_latent=hf_config.kv_lora_rank,
            d_q_latent=hf_config.q_lora_rank,
            head_dim=hf_config.qk_nope_head_dim,
            rope_dim=hf_config.qk_rope_head_dim,
            v_head_dim=hf_config.v_head_dim,
            rope_layout="interleaved" if getattr(hf_config, "rope_interleave", True) else "half",
        )
    head_dim = getattr(hf_config, "head_dim", None) or d // H
    attention = dict(
        n_kv_heads=getattr(hf_config, "num_key_value_heads", None) or H,
        head_dim=None if head_dim * H == d else head_dim,
        qk_norm=t in ("qwen3", "gemma3_text", "qwen3_moe"),  # per head; OLMo's over all heads: its family's
    )
    return DecoderConfig(**{**common, **windows, **moe, **attention, **family})


def _moe_fields(t: str, hf) -> dict:
    """The mixture-of-experts fields of the DecoderConfig (chapter 19): Mixtral, Qwen3-MoE, DeepSeek-V3; {} if dense."""
    if t == "gpt_oss":  # clamped SwiGLU experts with biases, top-k logits then softmax, a router bias
        if hf.swiglu_alpha != 1.702:
            _refuse(t, f"swiglu_alpha={hf.swiglu_alpha} (DecoderConfig's clamped experts have alpha 1.702)")
        return dict(
            n_experts=hf.num_local_experts, experts_per_token=hf.num_experts_per_tok, moe_d_ff=hf.intermediate_size,
            router_topk_first=True, router_bias=True, expert_swiglu_limit=float(hf.swiglu_limit),
        )  # fmt: skip
    if t == "qwen3_next":
        dense = set(hf.mlp_only_layers or [])
        moe = [i for i in range(hf.num_hidden_layers) if i not in dense and hf.num_experts > 0
               and (i + 1) % hf.decoder_sparse_step == 0]  # fmt: skip
        if not moe:
            return {}
        if moe != list(range(moe[0], hf.num_hidden_layers)):
            _refuse(t, f"mixture-of-experts layers {moe}: dense layers after MoE ones (attn_core's come first)")
        return dict(
            n_experts=hf.num_experts, experts_per_token=hf.num_experts_per_tok, moe_d_ff=hf.moe_intermediate_size,
            router_normalize=bool(hf.norm_topk_prob), n_shared_experts=1,
            shared_expert_d_ff=hf.shared_expert_intermediate_size, shared_expert_gate=True, first_dense_layers=moe[0],
        )  # fmt: skip
    if t == "llama4_text":  # top-k logits, sigmoid, the token scaled before its expert; one shared expert
        moe = list(hf.moe_layers)
        if not moe:
            return {}
        step = moe[0] + 1
        if moe != list(range(step - 1, hf.num_hidden_layers, step)):
            _refuse(t, f"moe_layers={moe}: attn_core's are every moe_layer_step-th layer (interleave_moe_layer_step)")
        return dict(
            n_experts=hf.num_local_experts, experts_per_token=hf.num_experts_per_tok, moe_d_ff=hf.intermediate_size,
            router_scoring="sigmoid", router_weight_inputs=True, n_shared_experts=1,
            shared_expert_d_ff=hf.intermediate_size, moe_layer_step=step,
        )  # fmt: skip
    if t == "mixtral":
        return dict(
            n_experts=hf.num_local_experts, experts_per_token=hf.num_experts_per_tok, router_topk_first=True
        )  # its router: softmax, top-k, renormalise = top-k logits, then softmax (the same weights)
    if t == "qwen3_moe":
        if hf.decoder_sparse_step != 1 or list(hf.mlp_only_layers or []):
            _refuse(
                t,
                f"decoder_sparse_step={hf.decoder_sparse_step}, mlp_only_layers={hf.mlp_only_layers}: dense layers "
                "between MoE layers (attn_core's dense MLPs come first: first_dense_layers)",
            )
        if not hf.num_experts:
            return {}
        return dict(
            n_experts=hf.num_experts, experts_per_token=hf.num_experts_per_tok, moe_d_ff=hf.moe_intermediate_size,
            router_normalize=bool(hf.norm_topk_prob),
        )  # fmt: skip
    if t in ("deepseek_v3", "deepseek_v32", "glm4_moe"):  # GLM-4-MoE routes as DeepSeek-V3
        dense, L = hf.first_k_dense_replace, hf.num_hidden_layers
        kinds = list(getattr(hf, "mlp_layer_types", None) or [])  # DeepSeek-V3.2: "dense" / "sparse" per layer
        if kinds:
            dense = next((i for i, k in enumerate(kinds) if k != "dense"), L)
            if any(k != "sparse" for k in kinds[dense:]):
                _refuse(t, f"mlp_layer_types={kinds}: dense layers after MoE ones (attn_core's come first)")
        if not getattr(hf, "n_routed_experts", 0) or dense is None or dense >= L:
            return {}
        return dict(
            n_experts=hf.n_routed_experts, experts_per_token=hf.num_experts_per_tok,
            n_shared_experts=hf.n_shared_experts or 0, moe_d_ff=hf.moe_intermediate_size, router_scoring="sigmoid",
            router_normalize=bool(hf.norm_topk_prob), router_scale=float(hf.routed_scaling_factor),
            router_groups=hf.n_group or 1, router_topk_groups=hf.topk_group or 1, first_dense_layers=dense,
        )  # fmt: skip
    return {}


def _gemma(t: str, hf) -> tuple[dict, dict, dict]:
    """Gemma 2's or 3's RoPE bases, sliding layers and block style, after refusing what attn_core does not compute.

    Gemma 2 has one RoPE base and soft-caps its attention and final logits; Gemma 3 has a base
    per layer type and no soft-caps (its soft-capping fields, if set, are refused).
    """
    act = getattr(hf, "hidden_activation", None)
    if act != "gelu_pytorch_tanh":
        _refuse(t, f"hidden_activation={act!r} (attn_core's geglu_tanh MLP is 'gelu_pytorch_tanh')")
    head_dim = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
    scalar = getattr(hf, "query_pre_attn_scalar", head_dim)
    style = dict(mlp="geglu_tanh", norm_position="sandwich", scale_embeddings=True)
    if scalar != head_dim:  # Gemma 2 27B: heads of 128 scaled by 1/sqrt(144)
        style["attention_scale"] = float(scalar) ** -0.5
    if t == "gemma3_text":
        for name in ("attn_logit_softcapping", "final_logit_softcapping"):
            if getattr(hf, name, None) is not None:
                _refuse(t, f"{name}={getattr(hf, name)} (soft-capping is not converted)")
    if getattr(hf, "use_bidirectional_attention", False):
        _refuse(t, "use_bidirectional_attention=True (DecoderLM is causal)")
    kinds = _layer_types(t, hf)
    windows = {}
    if "sliding_attention" in kinds:
        windows = dict(sliding_window=hf.sliding_window, layer_types=tuple(_LAYER_NAMES[k] for k in kinds))
    if t == "gemma2":  # one RoPE base; both soft-caps (None: not capped)
        base, kind = _rope(hf)
        if kind != "default":
            _refuse(t, f"rope scaling {kind!r} is not implemented (only plain RoPE, rope_type='default')")
        style.update(
            attention_softcap=getattr(hf, "attn_logit_softcapping", None),
            final_softcap=getattr(hf, "final_logit_softcapping", None),
        )
        return dict(rope_base=base), windows, style
    defaults = getattr(hf, "default_theta", {"global": 1e6, "local": 1e4})  # Gemma 3's own defaults
    rope = _rope_per_layer_type(
        t, hf, kinds, {"full_attention": defaults["global"], "sliding_attention": defaults["local"]}
    )
    return rope, windows, style


_LAYER_NAMES = {"full_attention": "full", "sliding_attention": "sliding"}


def _layer_types(t: str, hf) -> list[str]:
    """Hugging Face's ``layer_types`` (every layer full if unset), refusing a kind other than full or sliding."""
    kinds = list(getattr(hf, "layer_types", None) or ["full_attention"] * hf.num_hidden_layers)
    if set(kinds) - set(_LAYER_NAMES):
        _refuse(t, f"layer_types {sorted(set(kinds) - set(_LAYER_NAMES))}")
    return kinds


def _rope_per_layer_type(t: str, hf, kinds: list[str], default_theta: dict) -> dict:
    """``rope_base``, ``rope_scaling`` and ``sliding_rope_base`` from ``rope_parameters`` keyed by layer type.

    Gemma 3 and OLMo 3 give each layer type its own RoPE: the full layers' (Gemma 3 4B-27B's
    linear ×8, OLMo 3's YaRN) becomes ``rope_base`` and ``rope_scaling``, the sliding layers'
    base ``sliding_rope_base``; scaling in the sliding layers is refused (their RoPE takes none).
    """
    params = dict(getattr(hf, "rope_parameters", None) or {})
    main = "full_attention" if "full_attention" in kinds else "sliding_attention"  # the layers of rope_base
    bases, scaling = {}, {}
    for kind in sorted(set(kinds)):
        p = dict(params.get(kind) or {})
        if p.get("rope_type", "default") != "default":
            if kind != main:  # the sliding layers' own RoPE (sliding_rope_base) takes no scaling
                _refuse(
                    t, f"rope scaling {p['rope_type']!r} in the {kind} layers is not implemented (only the "
                    f"{main} layers' RoPE is scaled)",
                )  # fmt: skip
            scaling = dict(rope_scaling=scaling_from_hf(p, max_position_embeddings=hf.max_position_embeddings))
        bases[kind] = float(p.get("rope_theta", default_theta[kind]))
    rope = dict(rope_base=bases[main], **scaling)
    if main == "full_attention" and "sliding_attention" in kinds:
        rope["sliding_rope_base"] = bases["sliding_attention"]
    return rope


@torch.no_grad()
def _copy(dst: nn.Linear | nn.Module, src: nn.Module | torch.Tensor, *, bias: torch.Tensor | None = None) -> None:
    """Copy a weight (and bias; zeros where the source has none) into ``dst``, checking shapes."""
    weight = src if isinstance(src, torch.Tensor) else src.weight
    if dst.weight.shape != weight.shape:
        raise ValueError(f"shape mismatch: {tuple(weight.shape)} into {tuple(dst.weight.shape)}")
    dst.weight.copy_(weight)
    if getattr(dst, "bias", None) is not None:
        src_bias = bias if bias is not None else getattr(src, "bias", None)
        if src_bias is None:
            dst.bias.zero_()
        else:
            dst.bias.copy_(src_bias)


@torch.no_grad()
def _copy_norm(dst: nn.Module, src: nn.Module, offset: float) -> None:
    """Copy a norm's gain: its stored weight, plus ``offset`` (1 for Gemma's ``(1 + weight)`` RMSNorms)."""
    _copy(dst, src.weight + offset if offset else src.weight)


#: Model types whose RMSNorm multiplies by ``(1 + weight)`` (the weight starts at 0): their
#: stored gains are one less than attn_core's.
OFFSET_NORM_TYPES = ("gemma", "gemma2", "gemma3", "gemma3_text", "qwen3_next")


def _hf_model_type(hf_attn: nn.Module) -> str | None:
    return getattr(getattr(hf_attn, "config", None), "model_type", None)


def _check_attention_kinds(attn: object, hf_attn: object) -> None:
    """``attn`` an attn_core attention layer, ``hf_attn`` a Hugging Face attention layer (not its decoder layer)."""
    check_instance("attn", attn, (MultiHeadAttention, MultiHeadLatentAttention))
    check_instance("hf_attn", hf_attn, nn.Module)
    if hasattr(hf_attn, "self_attn"):  # a decoder layer: the usual slip
        raise TypeError(
            f"hf_attn is a decoder layer ({type(hf_attn).__name__}), not its attention: pass layer.self_attn"
        )
    has_q = any(hasattr(hf_attn, name) for name in ("q_proj", "q_a_proj", "q_b_proj", "qkv_proj"))
    if not has_q or not hasattr(hf_attn, "o_proj"):
        raise TypeError(
            f"hf_attn must be a Hugging Face attention layer (with q_proj/o_proj, e.g. LlamaAttention), "
            f"got {type(hf_attn).__name__}"
        )


def _check_same_widths(attn: nn.Module, hf_attn: nn.Module) -> None:
    """The Hugging Face layer's widths, read off its projections, must be the layer's: compared before the score scale.

    Otherwise another head width shows up first as another score scale (1/sqrt(head_dim)).
    """
    name = type(hf_attn).__name__
    D = getattr(hf_attn, "head_dim", attn.head_dim)
    hf = {
        "d_model": hf_attn.q_proj.in_features,
        "head_dim": D,
        "n_heads": hf_attn.o_proj.in_features // D,  # not q_proj's: Qwen3-Next's makes the query and the gate
        "n_kv_heads": hf_attn.k_proj.out_features // D,
    }
    ours = {"d_model": attn.d_model, "head_dim": attn.head_dim, "n_heads": attn.n_heads, "n_kv_heads": attn.n_kv_heads}
    for key, value in hf.items():
        if value != ours[key]:
            raise ValueError(
                f"{name} has {key}={value}, the layer {key}={ours[key]}: build the layer with {key}={value}"
            )


def _check_same_attention(attn: nn.Module, hf_attn: nn.Module) -> None:
    """Refuse to copy into a layer that would compute something else (a missing sink, cap, window, gate, scale)."""
    name = type(hf_attn).__name__
    has_sinks = getattr(hf_attn, "sinks", None) is not None
    if has_sinks != (attn.sinks is not None):
        raise ValueError(
            f"{name} {'has' if has_sinks else 'has no'} learned sinks: build the layer with sinks={has_sinks}"
        )
    cap = getattr(hf_attn, "attn_logit_softcapping", None)
    if cap != attn.softcap:
        raise ValueError(f"{name} soft-caps its logits at {cap}, the layer at softcap={attn.softcap}")
    if hasattr(hf_attn, "sliding_window") and hf_attn.sliding_window != attn.window:
        raise ValueError(f"{name} has sliding_window={hf_attn.sliding_window}, the layer window={attn.window}")
    ours = attn.head_dim**-0.5 if attn.scale is None else attn.scale
    scaling = getattr(hf_attn, "scaling", ours)
    if abs(scaling - ours) > 1e-12 * scaling:
        raise ValueError(
            f"{name} scales its scores by {scaling:.6g}, the layer by {ours:.6g}: build it with scale={scaling!r} "
            "(Gemma's query_pre_attn_scalar**-0.5, Granite's attention_multiplier)"
        )
    if name == "Llama4TextAttention":  # RoPE or not, its chunk, its temperature, its QK-norm
        _check_llama4_attention(attn, hf_attn)
    gated = hf_attn.q_proj.weight.shape[0] == 2 * attn.n_heads * attn.head_dim
    if gated != (attn.gate_proj is not None) or (gated and attn.gate_proj.out_features != attn.n_heads * attn.head_dim):
        raise ValueError(
            f"{name} {'makes an' if gated else 'has no'} output gate per query element: "
            f"build the layer with gate={'elementwise' if gated else None!r}"
        )


def _check_llama4_attention(attn: nn.Module, hf_attn: nn.Module) -> None:
    """A ``Llama4TextAttention`` layer's RoPE, chunk, temperature and QK-norm must be the layer's."""
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


def copy_attention(attn: nn.Module, hf_attn: nn.Module) -> None:
    """Copy a Hugging Face attention layer's weights into an attn_core one of the same shape.

    Into a :class:`~attn_core.MultiHeadAttention`: ``LlamaAttention``, ``MistralAttention``,
    ``Qwen3Attention`` (``qk_norm=True``), ``GptOssAttention`` (``window=`` on its sliding
    layers, ``sinks=True``: the learned sink logits are copied), ``Gemma2Attention``
    (``softcap=``) and ``Qwen3NextAttention`` (``qk_norm=True, gate="elementwise"``: its
    ``q_proj`` makes each head's query and gate together, and are split here). Gemma's and
    Qwen3-Next's RMSNorm multiply by ``1 + weight``; the gains are copied as ``1 + weight``.
    ``Llama4TextAttention``: into a layer with its ``chunk`` (chunked layers), ``temperature``
    (NoPE layers) and, where it has ``use_qk_norm``'s gain-free L2 norm, ``qk_norm=True`` (gains set to 1).
    RoPE is the layer's own (``rope=``); give it the model's base (Gemma 3's local layers
    have their own).

    ``Phi3Attention``'s fused ``qkv_proj`` is split into its query, key and value rows; a
    layer built with ``scale=`` (Gemma 2 27B, Granite) must scale as the Hugging Face one does.

    Into a :class:`~attn_core.MultiHeadLatentAttention`: ``DeepseekV3Attention`` and
    ``DeepseekV32Attention`` (its indexer: :func:`copy_indexer`), whose
    fused projections are split per head (content and RoPE query rows; latent and
    RoPE-key rows; key and value rows of ``kv_b_proj``).

    Raises:
        TypeError: ``attn`` is not an attn_core attention layer, or ``hf_attn`` not a Hugging
            Face attention layer (a decoder layer, say: pass its ``.self_attn``).
        ValueError: The shapes do not match, or the layer would compute something else
            (sinks, soft-capping, window, score scale or gate not as the Hugging Face
            layer's), naming the difference.
    """
    _check_attention_kinds(attn, hf_attn)
    if isinstance(getattr(hf_attn, "qkv_proj", None), nn.Module):  # Phi-3: one fused projection
        hf_attn = unfused_attention(hf_attn)
    if not hasattr(attn, "d_latent"):  # multi-head attention and its GQA/MQA forms
        _check_same_widths(attn, hf_attn)
        _check_same_attention(attn, hf_attn)
        q_proj = hf_attn.q_proj
        if attn.gate_proj is None:
            _copy(attn.q_proj, q_proj)
        else:  # Qwen3-Next: per head, D query rows then D gate rows
            H, D = attn.n_heads, attn.head_dim
            w = q_proj.weight.view(H, 2, D, -1)  # (H·2D, d) -> (H, 2, D, d)
            b = None if q_proj.bias is None else q_proj.bias.view(H, 2, D)  # (H·2D,) -> (H, 2, D)
            _copy(attn.q_proj, w[:, 0].reshape(H * D, -1), bias=None if b is None else b[:, 0].reshape(-1))
            _copy(attn.gate_proj, w[:, 1].reshape(H * D, -1), bias=None if b is None else b[:, 1].reshape(-1))
        for name in ("k_proj", "v_proj"):
            _copy(getattr(attn, name), getattr(hf_attn, name))
        _copy(attn.out_proj, hf_attn.o_proj)
        if attn.q_norm is not None and hasattr(hf_attn, "qk_norm"):  # Llama 4: an L2 norm without a gain
            with torch.no_grad():
                attn.q_norm.weight.fill_(1.0)
                attn.k_norm.weight.fill_(1.0)
        elif attn.q_norm is not None:
            offset = 1.0 if _hf_model_type(hf_attn) in OFFSET_NORM_TYPES else 0.0
            _copy(attn.q_norm, hf_attn.q_norm.weight + offset)
            _copy(attn.k_norm, hf_attn.k_norm.weight + offset)
        if attn.sinks is not None:
            with torch.no_grad():
                attn.sinks.copy_(hf_attn.sinks)
        return
    H, d_h, d_r, d_v, d_c = attn.n_heads, attn.head_dim, attn.rope_dim, attn.v_head_dim, attn.d_latent
    q = hf_attn.q_proj if getattr(hf_attn, "q_proj", None) is not None else hf_attn.q_b_proj
    w_q = q.weight.view(H, d_h + d_r, -1)  # (H·(d_h + d_r), in) -> (H, d_h + d_r, in): per head, content then RoPE
    _copy(attn.q_up, w_q[:, :d_h].reshape(H * d_h, -1))
    _copy(attn.q_rope, w_q[:, d_h:].reshape(H * d_r, -1))
    if attn.q_down is not None:
        _copy(attn.q_down, hf_attn.q_a_proj)
        _copy(attn.q_norm, hf_attn.q_a_layernorm)
    kv_a = hf_attn.kv_a_proj_with_mqa  # (d_c + d_r, d): the latent's rows, then the shared RoPE key's
    kv_bias = kv_a.bias if kv_a.bias is not None else kv_a.weight.new_zeros(d_c + d_r)
    _copy(attn.kv_down, kv_a.weight[:d_c], bias=kv_bias[:d_c])
    _copy(attn.k_rope, kv_a.weight[d_c:], bias=kv_bias[d_c:])
    _copy(attn.kv_norm, hf_attn.kv_a_layernorm)
    w_kv = hf_attn.kv_b_proj.weight.view(H, d_h + d_v, d_c)  # (H·(d_h + d_v), d_c) -> (H, d_h + d_v, d_c)
    _copy(attn.k_up, w_kv[:, :d_h].reshape(H * d_h, d_c))
    _copy(attn.v_up, w_kv[:, d_h:].reshape(H * d_v, d_c))
    _copy(attn.out_proj, hf_attn.o_proj)


def from_hf(model: nn.Module) -> DecoderLM:
    """A :class:`~attn_core.DecoderLM` with the weights of a Hugging Face causal LM.

    Works with the ``...ForCausalLM`` objects of :data:`SUPPORTED_MODEL_TYPES` (LLaMA, Mistral,
    Qwen2, Qwen3, DeepSeek-V3 and V3.2, Gemma 2 and 3, Mixtral, Qwen3-MoE, Granite, Phi-3,
    Cohere 2, GLM-4-MoE, SmolLM3, OLMo 2 and 3, Qwen3-Next, gpt-oss, Llama 4's text model; random-initialised or from
    ``from_pretrained``); the result has the model's dtype and device and is in eval mode. Its logits
    equal the Hugging Face model's up to rounding (float64: ~1e-14 measured, held below 1e-10; see
    ``tests/test_parity_hf.py`` and ``tests/test_convert*.py``).

    Args:
        model: The Hugging Face model (``transformers`` itself is not imported here).

    Raises:
        TypeError: ``model`` is not an ``nn.Module`` with a ``config``, or is the base model
            without its language-model head (``LlamaModel`` for ``LlamaForCausalLM``).
        ValueError: What :func:`config_from_hf` refuses.
    """
    if not isinstance(model, nn.Module) or not hasattr(model, "config"):
        raise TypeError(
            f"model must be a Hugging Face causal LM (an nn.Module with .config), got {type(model).__name__}"
        )
    if not isinstance(getattr(model, "model", None), nn.Module):
        base = type(model).__name__
        causal = base[: -len("Model")] + "ForCausalLM" if base.endswith("Model") else "the ...ForCausalLM class"
        raise TypeError(
            f"model must be a causal LM with its head (e.g. {causal}), got the base model {base}: "
            f"load it with AutoModelForCausalLM.from_pretrained(...)"
        )
    c = config_from_hf(model.config)
    weight = model.get_input_embeddings().weight
    ours = DecoderLM(c).to(dtype=weight.dtype, device=weight.device)
    core = model.model
    offset = 1.0 if model.config.model_type in OFFSET_NORM_TYPES else 0.0  # Gemma's gains are 1 + weight
    _copy(ours.tok_emb, core.embed_tokens)
    _copy_norm(ours.final_norm, core.norm, offset)
    if not c.tie_weights:
        _copy(ours.lm_head, model.lm_head)
    for block, layer in zip(ours.blocks, core.layers, strict=True):
        if c.norm_position == "post_sublayer":  # OLMo 2/3: a norm after each sub-layer, none before
            _copy_norm(block.attn_post_norm, layer.post_attention_layernorm, offset)
            _copy_norm(block.mlp_post_norm, layer.post_feedforward_layernorm, offset)
        else:
            _copy_norm(block.attn_norm, layer.input_layernorm, offset)
        if c.norm_position == "sandwich":  # Gemma 2 and 3: a norm on each side of each sub-layer
            _copy_norm(block.attn_post_norm, layer.post_attention_layernorm, offset)
            _copy_norm(block.mlp_norm, layer.pre_feedforward_layernorm, offset)
            _copy_norm(block.mlp_post_norm, layer.post_feedforward_layernorm, offset)
        elif not c.parallel_block and c.norm_position != "post_sublayer":  # Cohere's parallel block has one norm
            _copy_norm(block.mlp_norm, layer.post_attention_layernorm, offset)
        hf_mlp = layer.feed_forward if hasattr(layer, "feed_forward") else layer.mlp  # Llama 4's name
        if isinstance(block.mlp, MixtureOfExperts):
            copy_moe(block.mlp, hf_mlp)
        else:
            _copy_mlp(block.mlp, hf_mlp)
        if isinstance(block.attn, GatedDeltaNet):  # Qwen3-Next's linear layers
            copy_gated_deltanet(block.attn, layer.linear_attn)
        elif isinstance(block.attn, SparseAttention):  # DeepSeek-V3.2: MLA and its lightning indexer
            copy_attention(block.attn.attn, layer.self_attn)
            copy_indexer(block.attn.indexer, layer.self_attn.indexer)
        else:
            copy_attention(block.attn, layer.self_attn)
    return ours.eval()


def copy_indexer(ours: LightningIndexer, hf: nn.Module) -> LightningIndexer:
    """Copy Hugging Face's ``DeepseekV32Indexer`` into a :class:`~attn_core.LightningIndexer` of the same sizes.

    Names: ``wq_b`` -> ``q_proj``, ``wk`` -> ``k_proj``, ``k_norm`` (a LayerNorm with bias) ->
    ``k_norm``, ``weights_proj`` -> ``weights_proj``.

    Raises:
        TypeError: ``ours`` is not a :class:`~attn_core.LightningIndexer`.
        ValueError: A shape that differs (another head count or width).
    """
    check_instance("ours", ours, LightningIndexer)
    _copy(ours.q_proj, hf.wq_b)
    _copy(ours.k_proj, hf.wk)
    _copy(ours.k_norm, hf.k_norm)
    _copy(ours.weights_proj, hf.weights_proj)
    return ours


def _copy_mlp(ours: nn.Module, hf_mlp: nn.Module) -> None:
    """A gated MLP: ``gate_proj``, ``up_proj``, ``down_proj`` (Phi-3's fused ``gate_up_proj`` seen split)."""
    hf_mlp = unfused_mlp(hf_mlp)
    for name in ("gate_proj", "up_proj", "down_proj"):
        _copy(getattr(ours, name), getattr(hf_mlp, name))


@torch.no_grad()
def copy_moe(ours: MixtureOfExperts, hf: nn.Module) -> MixtureOfExperts:
    """Copy a Hugging Face sparse-MoE block into :class:`~attn_core.MixtureOfExperts` (Mixtral, Qwen3-MoE,
    DeepSeek-V3, gpt-oss, Qwen3-Next).

    Transformers 5 stacks the experts: ``experts.gate_up_proj`` ``(E, 2f, d)`` (the gate's
    rows first) and ``experts.down_proj`` ``(E, d, f)``; 4.x has a list of experts with
    ``gate_proj/up_proj/down_proj`` (Qwen3-MoE, DeepSeek) or ``w1/w3/w2`` (Mixtral). The
    router is ``gate.weight`` ``(E, d)``; DeepSeek-V3's ``gate.e_score_correction_bias``
    becomes the ``selection_bias``, its ``shared_experts`` the ``shared`` SwiGLU.

    gpt-oss (``GptOssMLP``): the router is ``router`` (weight and bias), and its experts are
    stored transposed with biases, gate and up *interleaved*: ``gate_up_proj`` ``(E, d, 2f)``
    whose even columns are the gate's and odd ones the up projection's,
    ``gate_up_proj_bias`` ``(E, 2f)`` likewise, ``down_proj`` ``(E, f, d)``, ``down_proj_bias``
    ``(E, d)``. Qwen3-Next (``Qwen3NextSparseMoeBlock``): one ``shared_expert`` and its
    ``shared_expert_gate`` ``(1, d)``. Llama 4 (``Llama4TextMoe``, into a ``MixtureOfExperts(scoring=
    "sigmoid", n_shared=1, weight_inputs=True)``): the router is ``router``, the experts
    ``gate_up_proj`` ``(E, d, 2f)`` (the gate's columns first) and ``down_proj`` ``(E, f, d)``.

    Raises:
        ValueError: A shape that does not match (another number of experts, widths), or
            shared experts (or their gate) on one side only.
    """
    router = getattr(hf, "router", None) if getattr(hf, "gate", None) is None else hf.gate
    _copy(ours.router.proj, router)
    correction = getattr(router, "e_score_correction_bias", None)
    if correction is not None:
        ours.router.selection_bias.copy_(correction)
    experts = hf.experts
    stacked = getattr(experts, "gate_up_proj", None)
    interleaved = getattr(experts, "gate_up_proj_bias", None) is not None  # gpt-oss: x @ W + b, columns alternate
    # Llama 4: x @ W too, (E, d, 2f) with the gate's f columns first (its own class, no bias, no flag).
    transposed = not interleaved and type(experts).__name__ == "Llama4TextExperts"
    if transposed != ours.weight_inputs:  # Llama 4 scales each token before its expert, the others after
        raise ValueError(
            f"{type(experts).__name__} {'weights its inputs' if transposed else 'weights its outputs'}: build the "
            f"MixtureOfExperts with weight_inputs={transposed}"
        )
    for e, expert in enumerate(ours.experts):
        bias = {}
        if transposed:
            gate, up = stacked[e].t().chunk(2, dim=0)  # (d, 2f) -> (2f, d) -> the gate's f rows, then up's
            down = experts.down_proj[e].t()  # (f, d) -> (d, f)
        elif interleaved:
            w, b = stacked[e], experts.gate_up_proj_bias[e]  # (d, 2f), (2f,)
            gate, up, down = w[:, 0::2].t(), w[:, 1::2].t(), experts.down_proj[e].t()  # (f, d), (f, d), (d, f)
            bias = dict(gate=b[0::2], up=b[1::2], down=experts.down_proj_bias[e])
        elif stacked is not None:
            gate, up = stacked[e].chunk(2, dim=0)  # (2f, d) -> the gate's f rows, then the up projection's
            down = experts.down_proj[e]
        else:
            src = experts[e]
            names = ("gate_proj", "up_proj", "down_proj") if hasattr(src, "gate_proj") else ("w1", "w3", "w2")
            gate, up, down = (getattr(src, n).weight for n in names)
        _copy(expert.gate_proj, gate, bias=bias.get("gate"))
        _copy(expert.up_proj, up, bias=bias.get("up"))
        _copy(expert.down_proj, down, bias=bias.get("down"))
    shared = getattr(hf, "shared_experts", None)  # DeepSeek's
    shared = getattr(hf, "shared_expert", None) if shared is None else shared  # Qwen3-Next's
    if (shared is None) != (ours.shared is None):
        raise ValueError(f"shared experts: Hugging Face has {shared is not None}, ours {ours.shared is not None}")
    if shared is not None:
        for name in ("gate_proj", "up_proj", "down_proj"):
            _copy(getattr(ours.shared, name), getattr(shared, name))
    gate = getattr(hf, "shared_expert_gate", None)
    if (gate is None) != (ours.shared_gate is None):
        raise ValueError(
            f"shared expert gate: Hugging Face has {gate is not None}, ours {ours.shared_gate is not None}"
        )
    if gate is not None:
        _copy(ours.shared_gate, gate)
    return ours


def transformers_names(*names: str, module: str = "transformers") -> tuple | None:
    """The named objects of ``transformers`` (or of ``module`` inside it), or ``None`` after printing why not.

    For the chapters' parity cells, which must run wherever ``transformers`` is missing or
    too old (its version in Colab varies): they compare only when every name exists.

    Example:
        >>> found = transformers_names("LlamaConfig", "LlamaForCausalLM")
        >>> if found is not None:
        ...     LlamaConfig, LlamaForCausalLM = found
    """
    import importlib

    try:
        mod = importlib.import_module(module)
    except ImportError as err:
        print(f"skipped: {module} cannot be imported ({err.__class__.__name__}); pip install transformers")
        return None
    missing = [n for n in names if not hasattr(mod, n)]
    if missing:
        version = getattr(importlib.import_module("transformers"), "__version__", "?")
        print(f"skipped: transformers {version} has no {', '.join(missing)} in {module}; a newer release has")
        return None
    return tuple(getattr(mod, n) for n in names)


def copy_gated_deltanet(ours: GatedDeltaNet, hf: nn.Module) -> GatedDeltaNet:
    """Copy the weights of Hugging Face's ``Qwen3NextGatedDeltaNet`` into ``ours`` (never imports transformers).

    Hugging Face fuses the projections per query/key head: ``in_proj_qkvz`` rows are, for
    each of the ``H_k`` heads, ``[q (D_k), k (D_k), v (r·D_v), z (r·D_v)]``, and
    ``in_proj_ba`` rows ``[b (r), a (r)]``; they are unfused here into our six projections.
    The convolution, ``A_log``, ``dt_bias``, the norm's gain and ``out_proj`` copy as they are.

    Raises:
        TypeError: ``ours`` is not a :class:`GatedDeltaNet`.
        ValueError: The two layers' sizes differ (the message names both).
    """
    check_instance("ours", ours, GatedDeltaNet)
    sizes = {
        "d_model": (ours.d_model, hf.hidden_size), "n_heads": (ours.n_heads, hf.num_k_heads),
        "head_dim": (ours.head_dim, hf.head_k_dim), "n_value_heads": (ours.n_value_heads, hf.num_v_heads),
        "value_head_dim": (ours.value_head_dim, hf.head_v_dim), "conv_size": (ours.conv_size, hf.conv_kernel_size),
    }  # fmt: skip
    for name, (mine, theirs) in sizes.items():
        if mine != theirs:
            raise ValueError(f"{name} differs: ours has {name}={mine}, the Hugging Face layer {theirs}")
    H_k, D_k, D_v = ours.n_heads, ours.head_dim, ours.value_head_dim
    r = ours.n_value_heads // H_k
    with torch.no_grad():
        fused = hf.in_proj_qkvz.weight.reshape(H_k, 2 * D_k + 2 * r * D_v, ours.d_model)  # rows grouped per k-head
        q, k, v, z = fused.split([D_k, D_k, r * D_v, r * D_v], dim=1)
        for proj, w in ((ours.q_proj, q), (ours.k_proj, k), (ours.v_proj, v), (ours.gate_proj, z)):
            proj.weight.copy_(w.reshape(-1, ours.d_model))  # (H·width, d_model), heads in order
        b, a = hf.in_proj_ba.weight.reshape(H_k, 2 * r, ours.d_model).split([r, r], dim=1)
        ours.beta_proj.weight.copy_(b.reshape(-1, ours.d_model))  # (H_v, d_model)
        ours.decay_proj.weight.copy_(a.reshape(-1, ours.d_model))
        ours.conv.weight.copy_(hf.conv1d.weight)  # (C_conv, 1, K), channels [q | k | v] in both
        ours.A_log.copy_(hf.A_log)
        ours.dt_bias.copy_(hf.dt_bias)
        ours.norm.weight.copy_(hf.norm.weight)
        ours.out_proj.weight.copy_(hf.out_proj.weight)
    return ours
