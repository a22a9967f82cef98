"""Hugging Face model configurations into :class:`~attn_core.DecoderConfig`: :func:`config_from_hf`.

:func:`config_from_hf` reads a Hugging Face ``model.config`` of
:data:`~attn_core.hf.families.SUPPORTED_MODEL_TYPES` into a :class:`~attn_core.DecoderConfig`
(its parts assembled by :func:`assemble_config`); :func:`~attn_core.hf.convert.from_hf` then
builds the model and copies the weights. The reading is LLaMA's: the sizes, the norm, tied
embeddings and biases are read here for every family; positions, windows, the block, attention,
experts and the family's own fields are its :class:`~attn_core.hf.families.base.Family`'s hooks
(what each family reads is said in its file under :mod:`attn_core.hf.families`). What attn_core
cannot compute *exactly* is refused with a ``ValueError`` that names it
(:func:`~attn_core.hf.families.base.refuse`): here, activations other than SiLU in a SwiGLU MLP
and attention dropout; the families refuse their own. The model types of
:data:`~attn_core.hf.families.NOT_CONVERTED` are refused with what they add.

attn_core does not depend on ``transformers``: this module reads the attributes of the
config object it is given, so any version whose configs have these names works.
"""

from __future__ import annotations

from dataclasses import fields

from ..config import PARTS, DecoderConfig
from .families import FAMILIES, NOT_CONVERTED, SUPPORTED_MODEL_TYPES, Family
from .families.base import refuse

__all__ = ["assemble_config", "config_from_hf"]


def config_from_hf(hf_config) -> DecoderConfig:
    """The :class:`~attn_core.DecoderConfig` of a Hugging Face config of a supported family.

    Args:
        hf_config: ``model.config`` of a Hugging Face causal LM (any object with its attributes).

    Returns:
        A config whose :class:`~attn_core.DecoderLM` computes what the Hugging Face model
        computes (its ``max_len`` is ``max_position_embeddings``).

    Raises:
        ValueError: A model type other than :data:`~attn_core.hf.families.SUPPORTED_MODEL_TYPES` (for
            those in :data:`~attn_core.hf.families.NOT_CONVERTED`, the message says what they add),
            or a feature attn_core does not compute exactly (named in the message).
    """
    family = _family(hf_config)
    t = family.model_type
    # The hooks run in the order of Family's attributes, so that a config with two faults names the same one.
    block, positions, windows = family.block(hf_config), family.positions(hf_config), family.windows(hf_config)
    if block["mlp"] == "swiglu" and getattr(hf_config, "hidden_act", "silu") != "silu":
        refuse(t, f"hidden_act={hf_config.hidden_act!r} (attn_core's SwiGLU uses SiLU)")
    if getattr(hf_config, "attention_dropout", 0.0):
        refuse(t, f"attention_dropout={hf_config.attention_dropout} (attn_core's dropout also drops residuals)")
    common = _llama_fields(hf_config)
    own = family.fields(hf_config)  # the family's own fields win over every other reading
    moe, attention = family.moe(hf_config), family.attention(hf_config)
    return assemble_config({**common, **block, **positions, **windows, **moe, **attention, **own})


def _family(hf_config) -> Family:
    """The family of ``hf_config``'s ``model_type``, or the ValueError that says why it is not converted."""
    t = getattr(hf_config, "model_type", None)
    if t in NOT_CONVERTED:
        rope = getattr(hf_config, "rope_parameters", None) or {}  # transformers 5 keeps the factor there
        unknown = {"num_local_experts": "?", "num_experts_per_tok": "?", "partial_rotary_factor": "?"}
        unknown["partial_rotary_factor"] = rope.get("partial_rotary_factor", unknown["partial_rotary_factor"])
        refuse(t, NOT_CONVERTED[t].format(**{**unknown, **vars(hf_config)}))
    if t not in FAMILIES:
        raise ValueError(f"model_type={t!r} is not supported; from_hf converts {', '.join(SUPPORTED_MODEL_TYPES)}")
    return FAMILIES[t]


def _llama_fields(hf) -> dict:
    """What every family reads as LLaMA does: the sizes, RMSNorm and its epsilon, tied embeddings, one bias switch."""
    return dict(
        vocab_size=hf.vocab_size,
        n_layers=hf.num_hidden_layers,
        d_model=hf.hidden_size,
        n_heads=hf.num_attention_heads,
        d_ff=hf.intermediate_size,
        max_len=hf.max_position_embeddings,
        positional="rope",
        norm="rmsnorm",
        tie_weights=bool(getattr(hf, "tie_word_embeddings", False)),
        norm_eps=float(getattr(hf, "rms_norm_eps", None) or getattr(hf, "layer_norm_eps", 1e-6)),
        # One bias switch in attn_core: the projections HF leaves without a bias get zeros.
        bias=bool(getattr(hf, "attention_bias", False) or getattr(hf, "mlp_bias", False)),
    )


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
