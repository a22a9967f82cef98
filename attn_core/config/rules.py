"""The rules that tie a :class:`~attn_core.config.DecoderConfig`'s parts to its core, each written once.

A part checks itself (:mod:`~attn_core.config.parts`); what needs the core sizes or another
part is checked here, when the config is made: the options of the standard blocks'
multi-head attention, what the positions need from the heads and the layer pattern, one
pattern entry per layer, the MoE's SwiGLU experts and the indexer's MLA. Each rule takes the
config being made (typed ``object``: importing :class:`~attn_core.config.DecoderConfig` here
would close an import cycle, since the config calls these rules).
"""

from __future__ import annotations

from dataclasses import fields

from .parts import LinearLayers

__all__ = ["check_moe_and_indexer", "check_pattern", "check_positions", "check_standard_mha_options"]


def check_standard_mha_options(config: object) -> None:
    """The one rule for every option of the standard blocks' multi-head attention."""
    p, pat = config.positions, config.pattern
    options = {
        "qkv_bias": config.qkv_bias,
        "attention_scale": config.attention_scale is not None,
        "parallel_block": config.parallel_block,
        "attention_gate": config.attention_gate is not None,
        "attention_softcap": config.attention_softcap is not None,
        "attention_sinks": config.attention_sinks,
        "positional": p.positional == "alibi",
        "rotary_dim": p.rotary_dim is not None,
        "rope_layers": p.rope_layers is not None,
        "sliding_rope_base": p.sliding_rope_base is not None,
        "rope_full_layers": not p.rope_full_layers,
        "nope_temperature": p.nope_temperature is not None,
        "layer_types": pat.layer_types is not None,
        "sliding_window": pat.sliding_window is not None,
        "kv_share": pat.kv_share is not None,
    }
    used = [name for name, on in options.items() if on]
    if used and (config.attention != "mha" or config.block != "standard"):
        values = (f"positions.{n}" if hasattr(p, n) else f"pattern.{n}" if hasattr(pat, n) else n for n in used)
        shown = ", ".join(f"{v.split('.')[-1]}={_value(config, v)!r}" for v in values)
        raise ValueError(
            f"{shown}: options of the standard blocks' multi-head attention; they need attention='mha' "
            f"and block='standard', got attention={config.attention!r}, block={config.block!r}"
        )


def _value(config: object, path: str) -> object:
    """The value at ``"part.field"`` or ``"field"``."""
    obj = config
    for name in path.split("."):
        obj = getattr(obj, name)
    return obj


def check_positions(config: object) -> None:
    """What the positions need from the core and the pattern (widths, layers, QK-norm)."""
    p, kinds = config.positions, config.resolved_layer_types
    if p.positional == "sinusoidal" and config.d_model % 2 != 0:
        raise ValueError(
            f"positional='sinusoidal' needs an even d_model (sine/cosine pairs), got d_model={config.d_model}"
        )
    if config.scale_embeddings and p.positional == "sinusoidal":
        raise ValueError(
            "scale_embeddings=True with positional='sinusoidal': sinusoidal positions already scale the "
            "embeddings by sqrt(d_model); leave scale_embeddings=False"
        )
    if p.positional == "alibi":  # a ring slot, a shared key or a recurrent layer takes no score bias
        for name, used in (("sliding_window", config.pattern.sliding_window), ("kv_share", config.pattern.kv_share),
                           ("layer_types", "linear" in kinds)):  # fmt: skip
            if used:
                raise ValueError(
                    f"positional='alibi' is not supported with {name}={getattr(config.pattern, name)!r} "
                    f"(sliding layers, shared keys/values and 'linear' layers take no score bias)"
                )
    if p.rotary_dim is not None and p.rotary_dim > config.resolved_head_dim:
        raise ValueError(f"rotary_dim must be even and at most head_dim={config.resolved_head_dim}, got {p.rotary_dim}")
    if p.rope_layers is not None and len(p.rope_layers) != config.n_layers:
        raise ValueError(
            f"rope_layers must give True (RoPE) or False (no positions) per layer ({config.n_layers}), "
            f"got {p.rope_layers!r}"
        )
    if p.rope_scaling is not None:
        if config.indexer is not None:
            raise ValueError("rope_scaling with a lightning indexer (index_n_heads): the indexer's RoPE is not scaled")
        rotated = config.resolved_rope_dim if config.attention == "mla" else p.rotated_width(config.resolved_head_dim)
        p.rope_scaling.frequencies(p.rope_base, rotated)  # fail here, not when the model is built
    if (not p.rope_full_layers or p.sliding_rope_base is not None) and "sliding" not in kinds:
        name = "rope_full_layers" if not p.rope_full_layers else "sliding_rope_base"
        raise ValueError(
            f"{name}={getattr(p, name)!r} is about the 'sliding' layers' RoPE, but no layer is 'sliding' "
            f"(layer_types={config.pattern.layer_types!r}, sliding_window={config.pattern.sliding_window!r})"
        )
    if not p.nope_qk_norm and not config.qk_norm:
        raise ValueError("nope_qk_norm=False leaves out the NoPE layers' QK-norm, but qk_norm=False")
    nope = any(not config.layer_has_rope(i) and kinds[i] != "linear" for i in range(config.n_layers))
    if p.nope_temperature is not None and not nope:
        raise ValueError(
            f"nope_temperature={p.nope_temperature} is for the attention layers without RoPE, and every "
            "attention layer has RoPE"
        )


def check_pattern(config: object) -> None:
    """The pattern gives one entry per layer; the linear sizes configure existing ``"linear"`` layers."""
    pat = config.pattern
    for name in ("layer_types", "kv_share"):
        value = getattr(pat, name)
        if value is not None and len(value) != config.n_layers:
            raise ValueError(f"{name} must give one entry per layer ({config.n_layers}), got {value!r}")
    if pat.types(config.n_layers).count("chunked") and (config.attention != "mha" or config.block != "standard"):
        raise ValueError(
            f"chunked layers: options of the standard blocks' multi-head attention, got "
            f"attention={config.attention!r}, block={config.block!r}"
        )
    if "linear" not in config.resolved_layer_types:
        set_ = [f.name for f in fields(LinearLayers) if getattr(config.linear, f.name) != f.default]
        if set_:
            raise ValueError(f"{', '.join(set_)} configure 'linear' layers, but layer_types={pat.layer_types!r}")
        return
    config.linear.sizes(config.n_heads, config.resolved_head_dim)  # value heads a multiple of key heads


def check_moe_and_indexer(config: object) -> None:
    """MoE: SwiGLU experts in standard blocks, at least one MoE layer. Indexer: MLA in standard blocks."""
    m = config.moe
    if m is not None:
        if config.mlp != "swiglu" or config.block != "standard":
            raise ValueError(
                f"n_experts={m.n_experts}: the experts are SwiGLUs in standard blocks; got mlp={config.mlp!r}, "
                f"block={config.block!r}"
            )
        if not any(m.is_moe_layer(i) for i in range(config.n_layers)):
            raise ValueError(
                f"first_dense_layers={m.first_dense_layers}, moe_layer_step={m.moe_layer_step} leave no "
                f"mixture-of-experts layer of n_layers={config.n_layers}; leave moe=None for a dense model"
            )
    ix = config.indexer
    if ix is None:
        return
    if config.attention != "mla" or config.block != "standard":
        raise ValueError(
            f"index_n_heads={ix.index_n_heads}: the lightning indexer reads MLA's query latent; it needs "
            f"attention='mla' and block='standard', got attention={config.attention!r}, block={config.block!r}"
        )
    if config.resolved_rope_dim > ix.index_head_dim:
        raise ValueError(
            f"the indexer rotates the first rope_dim={config.resolved_rope_dim} of its index_head_dim="
            f"{ix.index_head_dim} dimensions: index_head_dim must be at least rope_dim"
        )
