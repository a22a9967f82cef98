"""The family record, :class:`Family`, and the LLaMA reading its defaults are.

A :class:`Family` holds what the shared readers ask of a Hugging Face family: how its config
gives positions, windows, the block, attention, experts and its own fields
(:func:`~attn_core.hf.configs.config_from_hf`), and how its weights are laid out
(:func:`~attn_core.hf.convert.from_hf`, :func:`~attn_core.hf.convert.copy_attention`,
:mod:`~attn_core.hf.weights`). Every default is LLaMA's: a family states only where it differs.

Here too are the readers several families pick from (:func:`refuse`, :func:`layer_types`,
:func:`windows_by_layer_type`, :func:`window_in_every_layer`, :func:`rope_per_layer_type`,
:func:`per_head_qk_norm`), so that a family file imports them instead of copying them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..rope import plain_rope, scaling_from_hf

__all__ = [
    "LAYER_NAMES", "Family", "dense", "layer_types", "llama_block", "multi_head", "no_check", "no_fields",
    "no_window", "owns_none", "per_head_qk_norm", "refuse", "rope_per_layer_type", "same",
    "stacked_or_listed_expert", "window_in_every_layer", "windows_by_layer_type",
]  # fmt: skip


def refuse(model_type: str, what: str) -> None:
    """Raise the ValueError of a Hugging Face model that attn_core cannot convert exactly, naming ``what``."""
    raise ValueError(f"cannot convert this {model_type} model exactly: {what}")


# ---------------------------------------------------------------- layer types and windows

#: Hugging Face's ``layer_types`` entries that are attention with or without a window, as attn_core's.
LAYER_NAMES = {"full_attention": "full", "sliding_attention": "sliding"}


def layer_types(hf) -> list[str]:
    """Hugging Face's ``layer_types`` (every layer full if unset), refusing a kind other than full or sliding."""
    kinds = list(getattr(hf, "layer_types", None) or ["full_attention"] * hf.num_hidden_layers)
    if set(kinds) - set(LAYER_NAMES):
        refuse(hf.model_type, f"layer_types {sorted(set(kinds) - set(LAYER_NAMES))}")
    return kinds


def no_window(hf) -> dict:
    """No window (LLaMA's): a stray ``sliding_window`` is refused rather than dropped."""
    window = getattr(hf, "sliding_window", None)
    if window is not None:
        refuse(hf.model_type, f"sliding_window={window} on a {hf.model_type} model")
    return {}


def window_in_every_layer(hf) -> dict:
    """Mistral's window: ``sliding_window`` in every layer when set (Qwen3-MoE's config clears an unused one)."""
    window = getattr(hf, "sliding_window", None)
    return {} if window is None else dict(sliding_window=window)


def windows_by_layer_type(hf) -> dict:
    """Qwen3's windows: ``sliding_window`` in the layers whose ``layer_types`` entry is ``"sliding_attention"``."""
    window = getattr(hf, "sliding_window", None)
    kinds = list(getattr(hf, "layer_types", None) or ["full_attention"] * hf.num_hidden_layers)
    if "sliding_attention" not in kinds or window is None:  # nothing slides: the other kinds are not read
        return {}
    if set(kinds) - set(LAYER_NAMES):
        refuse(hf.model_type, f"layer_types {sorted(set(kinds) - set(LAYER_NAMES))}")
    return dict(sliding_window=window, layer_types=tuple(LAYER_NAMES[k] for k in kinds))


# ---------------------------------------------------------------- positions, block, attention, experts


def rope_per_layer_type(hf, kinds: list[str], default_theta: dict) -> dict:
    """``rope_base``, ``rope_scaling`` and ``sliding_rope_base`` from ``rope_parameters`` keyed by layer type.

    Gemma 3 and OLMo 3 give each layer type its own RoPE: the full layers' (Gemma 3 4B-27B's
    linear ×8, OLMo 3's YaRN) becomes ``rope_base`` and ``rope_scaling``, the sliding layers'
    base ``sliding_rope_base``; scaling in the sliding layers is refused (their RoPE takes none).

    Args:
        hf: The Hugging Face config.
        kinds: Its layer types (:func:`layer_types`).
        default_theta: The base of each layer type whose dict has no ``rope_theta``.
    """
    params = dict(getattr(hf, "rope_parameters", None) or {})
    main = "full_attention" if "full_attention" in kinds else "sliding_attention"  # the layers of rope_base
    bases, scaling = {}, {}
    for kind in sorted(set(kinds)):
        p = dict(params.get(kind) or {})
        if p.get("rope_type", "default") != "default":
            if kind != main:  # the sliding layers' own RoPE (sliding_rope_base) takes no scaling
                refuse(
                    hf.model_type, f"rope scaling {p['rope_type']!r} in the {kind} layers is not implemented (only "
                    f"the {main} layers' RoPE is scaled)",
                )  # fmt: skip
            scaling = dict(rope_scaling=scaling_from_hf(p, max_position_embeddings=hf.max_position_embeddings))
        bases[kind] = float(p.get("rope_theta", default_theta[kind]))
    rope = dict(rope_base=bases[main], **scaling)
    if main == "full_attention" and "sliding_attention" in kinds:
        rope["sliding_rope_base"] = bases["sliding_attention"]
    return rope


def llama_block(hf) -> dict:
    """LLaMA's block: a SwiGLU MLP, RMSNorm before each sub-layer."""
    return dict(mlp="swiglu", norm_position="pre")


def multi_head(hf) -> dict:
    """Multi-head attention's fields: key/value heads (GQA), a head width other than ``d_model / H``, no QK-norm."""
    H = hf.num_attention_heads
    head_dim = getattr(hf, "head_dim", None) or hf.hidden_size // H
    return dict(
        n_kv_heads=getattr(hf, "num_key_value_heads", None) or H,
        head_dim=None if head_dim * H == hf.hidden_size else head_dim,
        qk_norm=False,
    )


def per_head_qk_norm(hf) -> dict:
    """Multi-head attention with an RMSNorm on each query and key head (Qwen3's, Gemma 3's)."""
    return dict(multi_head(hf), qk_norm=True)


def dense(hf) -> dict:
    """No mixture of experts: every MLP dense."""
    return {}


def no_fields(hf) -> dict:
    """Nothing beyond the LLaMA reading."""
    return {}


def same(module):
    """A Hugging Face module whose weights are laid out as attn_core's: itself."""
    return module


def no_check(attn, hf_attn) -> None:
    """Nothing to check beyond what every attention layer is checked for."""


def owns_none(experts) -> bool:
    """Experts of the shared layouts (:func:`stacked_or_listed_expert`): no family claims them."""
    return False


def stacked_or_listed_expert(experts, e: int) -> tuple:
    """Expert ``e``'s gate, up and down weights ``(f, d)``, ``(f, d)``, ``(d, f)`` and biases (none).

    Transformers 5 stacks the experts: ``gate_up_proj`` ``(E, 2f, d)`` (the gate's rows first)
    and ``down_proj`` ``(E, d, f)``; 4.x has a list of experts named ``gate_proj/up_proj/down_proj``
    (Qwen3-MoE, DeepSeek) or ``w1/w3/w2`` (Mixtral).
    """
    stacked = getattr(experts, "gate_up_proj", None)
    if stacked is not None:
        gate, up = stacked[e].chunk(2, dim=0)  # (2f, d) -> the gate's f rows, then the up projection's
        return gate, up, experts.down_proj[e], {}
    src = experts[e]
    names = ("gate_proj", "up_proj", "down_proj") if hasattr(src, "gate_proj") else ("w1", "w3", "w2")
    return (*(getattr(src, n).weight for n in names), {})


# ---------------------------------------------------------------- the record


@dataclass(frozen=True)
class Family:
    """What a Hugging Face family is to the converter: the hooks the shared readers call, LLaMA's by default.

    Config hooks take the Hugging Face config and return :class:`~attn_core.DecoderConfig` fields
    by name (:func:`~attn_core.hf.configs.assemble_config` puts them into parts), refusing with
    :func:`refuse` what attn_core does not compute exactly. ``config_from_hf`` calls them in
    this order, so that a config with two faults names the same one every time.

    Attributes:
        model_type: Hugging Face's ``config.model_type``.
        block: ``mlp``, ``norm_position`` and the block's other options (Gemma's sandwich norms).
        positions: ``rope_base``, ``rope_scaling``, ``sliding_rope_base``.
        windows: ``sliding_window`` and ``layer_types``.
        fields: The family's own fields, which win over every other hook's.
        moe: The mixture-of-experts fields; ``{}`` when every MLP is dense.
        attention: The attention's fields: heads, head width, QK-norm (DeepSeek's: MLA's).
        norm_offset: Added to every stored norm gain (1 where the RMSNorm multiplies by ``1 + weight``).
        qk_norm_gain: False where the QK-norm has no gain (Llama 4's L2 norm: the gains are set to 1).
        mlp_name: The decoder layer's attribute that holds its MLP.
        attention_view: A Hugging Face attention layer seen with separate ``q_proj``, ``k_proj``, ``v_proj``.
        mlp_view: A Hugging Face MLP seen with separate ``gate_proj``, ``up_proj``, ``down_proj``.
        check_attention: ``(attn, hf_attn)``: raise a ValueError where ``attn`` would compute something
            else than the family's layer, beyond the checks every layer gets.
        owns_experts: Whether a Hugging Face experts module is laid out as this family's (its
            modules keep no config, so the family is told by their form).
        expert: ``(experts, e)``: expert ``e``'s gate, up and down weights and a dict of their biases.
        experts_weigh_inputs: Whether the router's weight scales a token before its expert.
    """

    model_type: str
    block: Callable[[Any], dict] = llama_block
    positions: Callable[[Any], dict] = plain_rope
    windows: Callable[[Any], dict] = no_window
    fields: Callable[[Any], dict] = no_fields
    moe: Callable[[Any], dict] = dense
    attention: Callable[[Any], dict] = multi_head
    norm_offset: float = 0.0
    qk_norm_gain: bool = True
    mlp_name: str = "mlp"
    attention_view: Callable[[Any], Any] = same
    mlp_view: Callable[[Any], Any] = same
    check_attention: Callable[[Any, Any], None] = no_check
    owns_experts: Callable[[Any], bool] = owns_none
    expert: Callable[[Any, int], tuple] = stacked_or_listed_expert
    experts_weigh_inputs: bool = False
