"""Gemma 2 (``gemma2``) and Gemma 3's text model (``gemma3_text``).

Both: embeddings scaled by √d, a norm on each side of each sub-layer (``norm_position="sandwich"``),
a GeGLU MLP with tanh-approximated GELU (``geglu_tanh``), RMSNorms that multiply by
``1 + weight`` (copied as such: ``norm_offset``), ``query_pre_attn_scalar`` as
``attention_scale`` where it is not the head width, sliding layers per ``layer_types``. Gemma 2:
one RoPE base, soft-capped attention and final logits. Gemma 3: QK-norm per head, a RoPE per
layer type (the full layers' may be scaled, the sliding ones' base is ``sliding_rope_base``), no
soft-caps. Refused: another activation, bidirectional attention, rope scaling in Gemma 2 or in
Gemma 3's sliding layers, soft-capping in Gemma 3.
"""

from __future__ import annotations

from ..rope import rope_base_and_type
from .base import LAYER_NAMES, Family, layer_types, per_head_qk_norm, refuse, rope_per_layer_type

__all__ = ["GEMMA2", "GEMMA3"]


def _block(hf) -> dict:
    """Gemma's block, after refusing another activation."""
    act = getattr(hf, "hidden_activation", None)
    if act != "gelu_pytorch_tanh":
        refuse(hf.model_type, f"hidden_activation={act!r} (attn_core's geglu_tanh MLP is 'gelu_pytorch_tanh')")
    head_dim = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
    scalar = getattr(hf, "query_pre_attn_scalar", head_dim)
    style = dict(mlp="geglu_tanh", norm_position="sandwich", scale_embeddings=True)
    if scalar != head_dim:  # Gemma 2 27B: heads of 128 scaled by 1/sqrt(144)
        style["attention_scale"] = float(scalar) ** -0.5
    return style


def _causal(hf) -> None:
    """Refuse bidirectional attention (Gemma 3 as an encoder): a DecoderLM is causal."""
    if getattr(hf, "use_bidirectional_attention", False):
        refuse(hf.model_type, "use_bidirectional_attention=True (DecoderLM is causal)")


def _gemma2_block(hf) -> dict:
    """Gemma's block with Gemma 2's soft-caps on the attention and final logits (None: not capped)."""
    style = _block(hf)
    style.update(
        attention_softcap=getattr(hf, "attn_logit_softcapping", None),
        final_softcap=getattr(hf, "final_logit_softcapping", None),
    )
    _causal(hf)
    return style


def _gemma3_block(hf) -> dict:
    """Gemma's block; Gemma 3 has no soft-caps, so soft-capping fields that are set are refused."""
    style = _block(hf)
    for name in ("attn_logit_softcapping", "final_logit_softcapping"):
        if getattr(hf, name, None) is not None:
            refuse(hf.model_type, f"{name}={getattr(hf, name)} (soft-capping is not converted)")
    _causal(hf)
    return style


def _windows(hf) -> dict:
    """``sliding_window`` in the ``"sliding_attention"`` layers."""
    kinds = layer_types(hf)
    if "sliding_attention" not in kinds:
        return {}
    return dict(sliding_window=hf.sliding_window, layer_types=tuple(LAYER_NAMES[k] for k in kinds))


def _gemma2_positions(hf) -> dict:
    """One RoPE base; rope scaling is refused."""
    layer_types(hf)  # another layer type is refused before the RoPE, as Gemma 3's reading does
    base, kind = rope_base_and_type(hf)
    if kind != "default":
        refuse(hf.model_type, f"rope scaling {kind!r} is not implemented (only plain RoPE, rope_type='default')")
    return dict(rope_base=base)


def _gemma3_positions(hf) -> dict:
    """A RoPE per layer type; Gemma 3's own bases where ``rope_parameters`` gives none."""
    defaults = getattr(hf, "default_theta", {"global": 1e6, "local": 1e4})
    theta = {"full_attention": defaults["global"], "sliding_attention": defaults["local"]}
    return rope_per_layer_type(hf, layer_types(hf), theta)


GEMMA2 = Family("gemma2", block=_gemma2_block, positions=_gemma2_positions, windows=_windows, norm_offset=1.0)
GEMMA3 = Family(
    "gemma3_text", block=_gemma3_block, positions=_gemma3_positions, windows=_windows, attention=per_head_qk_norm,
    norm_offset=1.0,
)  # fmt: skip
