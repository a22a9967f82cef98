"""Hugging Face model configurations into :class:`~attn_core.DecoderConfig`: :func:`config_from_hf`.

:func:`config_from_hf` reads a Hugging Face ``model.config`` of :data:`SUPPORTED_MODEL_TYPES`
into a :class:`~attn_core.DecoderConfig` (its parts assembled by :func:`assemble_config`);
:func:`~attn_core.hf.convert.from_hf` then builds the model and copies the weights. What
attn_core cannot compute *exactly* is refused with a ``ValueError`` that names it
(:func:`refuse`): activations other than SiLU, attention dropout, rope scaling in Gemma 2 or
in Gemma 3's sliding layers, rope scaling other than YaRN with ``mscale_all_dim`` in
DeepSeek-V3 and any in DeepSeek-V3.2 (its indexer's RoPE). Kimi Linear, DeepSeek-V4 and
Gemma 3n are refused with what they add (:data:`NOT_CONVERTED`).

What is read, per family:

* RoPE: Hugging Face's ``rope_parameters`` (``rope_theta``/``rope_scaling`` in 4.x) become
  ``positions.rope_base`` and ``positions.rope_scaling`` (PI, dynamic NTK, YaRN, Llama 3.1's,
  LongRoPE; :func:`~attn_core.hf.rope.scaling_from_hf`); Gemma 3 and OLMo 3 have a RoPE
  per layer type (``positions.sliding_rope_base``); SmolLM3's ``no_rope_layers`` become
  ``positions.rope_layers``.
* Windows: Mistral's in every layer, Qwen3's, Gemma's, OLMo 3's and gpt-oss's per
  ``layer_types`` (``pattern``).
* Mixtures of experts (``moe``): Mixtral (top-k logits then softmax), Qwen3-MoE (softmax then
  top-k, optionally renormalised), DeepSeek-V3 and GLM-4-MoE (sigmoid scores, groups, scale, a
  shared expert), Qwen3-Next (a gated shared expert), gpt-oss (clamped experts, a router bias)
  and Llama 4 (inputs weighted, every ``moe_layer_step``-th layer).
* Gemma 2/3: scaled embeddings, sandwich norms, ``geglu_tanh``, QK-norm (3), soft-caps (2),
  ``query_pre_attn_scalar`` as ``attention_scale``.
* The LLaMA-like families of :mod:`attn_core.hf.families` (Qwen2, Granite, Phi-3, Cohere 2,
  GLM-4-MoE, OLMo 2/3, Qwen3-Next, SmolLM3, Llama 4, gpt-oss): their own fields, which win.

attn_core does not depend on ``transformers``: this module reads the attributes of the
config object it is given, so any version whose configs have these names works.
"""

from __future__ import annotations

from dataclasses import fields

from ..config import PARTS, DecoderConfig
from .families import FAMILY_FIELDS
from .rope import scaling_from_hf

__all__ = ["NOT_CONVERTED", "SUPPORTED_MODEL_TYPES", "assemble_config", "config_from_hf", "refuse"]

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
    """``rope_scaling`` of the DecoderConfig: Hugging Face's ``rope_parameters`` (``rope_scaling`` in 4.x)
    read by :func:`~attn_core.hf.rope.scaling_from_hf`; {} for plain RoPE."""
    if kind == "default":
        return {}
    params = dict(getattr(hf, "rope_parameters", None) or getattr(hf, "rope_scaling", None) or {})
    if t == "deepseek_v3" and (kind == "yarn" or not params.get("mscale_all_dim")):  # DeepSeek's YaRN: MLA's scale
        return dict(rope_scaling=scaling_from_hf(params, max_position_embeddings=hf.max_position_embeddings))
    if t in ("deepseek_v3", "deepseek_v32"):
        refuse(
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


def refuse(model_type: str, what: str) -> None:
    """Raise the ValueError of a Hugging Face model that attn_core cannot convert exactly, naming ``what``."""
    raise ValueError(f"cannot convert this {model_type} model exactly: {what}")


def _windows(model_type: str, hf) -> dict:
    """``sliding_window`` / ``layer_types`` of the DecoderConfig: Mistral slides in every layer, Qwen3 per layer."""
    window = getattr(hf, "sliding_window", None)
    if model_type in ("mistral", "mixtral", "qwen3_moe", "phi3"):  # Qwen3-MoE's config clears an unused window
        return {} if window is None else dict(sliding_window=window)
    if model_type == "smollm3" and not getattr(hf, "use_sliding_window", False):
        kinds = list(getattr(hf, "layer_types", None) or [])
        if "sliding_attention" in kinds:  # HF builds a sliding mask for them but its layers do not slide
            refuse(model_type, "layer_types with 'sliding_attention' but use_sliding_window=False")
        return {}
    if model_type in ("qwen2", "qwen3", "cohere2", "smollm3", "olmo3", "gpt_oss"):
        kinds = list(getattr(hf, "layer_types", None) or ["full_attention"] * hf.num_hidden_layers)
        if "sliding_attention" not in kinds or window is None:
            return {}
        names = {"full_attention": "full", "sliding_attention": "sliding"}
        if set(kinds) - set(names):
            refuse(model_type, f"layer_types {sorted(set(kinds) - set(names))}")
        return dict(sliding_window=window, layer_types=tuple(names[k] for k in kinds))
    if window is not None:  # LLaMA and DeepSeek-V3 have no window: refuse a stray one rather than drop it
        refuse(model_type, f"sliding_window={window} on a {model_type} model")
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
        refuse(t, NOT_CONVERTED[t].format(**{**fields, **vars(hf_config)}))
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
        scaling = _rope_scaling(t, hf_config, kind)  # PI, dynamic NTK, YaRN, Llama 3.1, LongRoPE
        rope, windows, style = (
            dict(rope_base=base, **scaling),
            _windows(t, hf_config),
            dict(mlp="swiglu", norm_position="pre"),
        )
    if style["mlp"] == "swiglu" and getattr(hf_config, "hidden_act", "silu") != "silu":
        refuse(t, f"hidden_act={hf_config.hidden_act!r} (attn_core's SwiGLU uses SiLU)")
    if getattr(hf_config, "attention_dropout", 0.0):
        refuse(t, f"attention_dropout={hf_config.attention_dropout} (attn_core's dropout also drops residuals)")
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
        mla = dict(
            attention="mla",
            d_latent=hf_config.kv_lora_rank,
            d_q_latent=hf_config.q_lora_rank,
            head_dim=hf_config.qk_nope_head_dim,
            rope_dim=hf_config.qk_rope_head_dim,
            v_head_dim=hf_config.v_head_dim,
            rope_layout="interleaved" if getattr(hf_config, "rope_interleave", True) else "half",
        )
        return assemble_config({**common, **moe, **mla})
    head_dim = getattr(hf_config, "head_dim", None) or d // H
    attention = dict(
        n_kv_heads=getattr(hf_config, "num_key_value_heads", None) or H,
        head_dim=None if head_dim * H == d else head_dim,
        qk_norm=t in ("qwen3", "gemma3_text", "qwen3_moe"),  # per head; OLMo's over all heads: its family's
    )
    return assemble_config({**common, **windows, **moe, **attention, **family})


def _moe_fields(t: str, hf) -> dict:
    """The mixture-of-experts fields of the DecoderConfig: Mixtral, Qwen3-MoE, DeepSeek-V3; {} if dense."""
    if t == "gpt_oss":  # clamped SwiGLU experts with biases, top-k logits then softmax, a router bias
        if hf.swiglu_alpha != 1.702:
            refuse(t, f"swiglu_alpha={hf.swiglu_alpha} (DecoderConfig's clamped experts have alpha 1.702)")
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
            refuse(t, f"mixture-of-experts layers {moe}: dense layers after MoE ones (attn_core's come first)")
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
            refuse(t, f"moe_layers={moe}: attn_core's are every moe_layer_step-th layer (interleave_moe_layer_step)")
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
            refuse(
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
                refuse(t, f"mlp_layer_types={kinds}: dense layers after MoE ones (attn_core's come first)")
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
        refuse(t, f"hidden_activation={act!r} (attn_core's geglu_tanh MLP is 'gelu_pytorch_tanh')")
    head_dim = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
    scalar = getattr(hf, "query_pre_attn_scalar", head_dim)
    style = dict(mlp="geglu_tanh", norm_position="sandwich", scale_embeddings=True)
    if scalar != head_dim:  # Gemma 2 27B: heads of 128 scaled by 1/sqrt(144)
        style["attention_scale"] = float(scalar) ** -0.5
    if t == "gemma3_text":
        for name in ("attn_logit_softcapping", "final_logit_softcapping"):
            if getattr(hf, name, None) is not None:
                refuse(t, f"{name}={getattr(hf, name)} (soft-capping is not converted)")
    if getattr(hf, "use_bidirectional_attention", False):
        refuse(t, "use_bidirectional_attention=True (DecoderLM is causal)")
    kinds = _layer_types(t, hf)
    windows = {}
    if "sliding_attention" in kinds:
        windows = dict(sliding_window=hf.sliding_window, layer_types=tuple(_LAYER_NAMES[k] for k in kinds))
    if t == "gemma2":  # one RoPE base; both soft-caps (None: not capped)
        base, kind = _rope(hf)
        if kind != "default":
            refuse(t, f"rope scaling {kind!r} is not implemented (only plain RoPE, rope_type='default')")
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
        refuse(t, f"layer_types {sorted(set(kinds) - set(_LAYER_NAMES))}")
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
                refuse(
                    t, f"rope scaling {p['rope_type']!r} in the {kind} layers is not implemented (only the "
                    f"{main} layers' RoPE is scaled)",
                )  # fmt: skip
            scaling = dict(rope_scaling=scaling_from_hf(p, max_position_embeddings=hf.max_position_embeddings))
        bases[kind] = float(p.get("rope_theta", default_theta[kind]))
    rope = dict(rope_base=bases[main], **scaling)
    if main == "full_attention" and "sliding_attention" in kinds:
        rope["sliding_rope_base"] = bases["sliding_attention"]
    return rope


def assemble_config(values: dict) -> DecoderConfig:
    """The :class:`~attn_core.DecoderConfig` of ``values``, keyed by field name: the names of a part's
    fields (``rope_base``, ``n_experts``, ...) go into that part, the others are the config's own.

    The readers of Hugging Face configs collect one name per value, as Hugging Face does;
    this puts each into its part once (:data:`~attn_core.config.PARTS`), so that no reader needs to
    know which part holds it.
    """
    core = dict(values)
    for name, part in PARTS.items():
        mine = {f.name: core.pop(f.name) for f in fields(part) if f.name in core}
        if mine:
            core[name] = part(**mine)
    return DecoderConfig(**core)
