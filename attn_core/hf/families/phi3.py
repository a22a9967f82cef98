"""Phi-3 / Phi-4-mini (``phi3``): LLaMA with fused projections, a window in every layer, partial RoPE.

Its fused ``qkv_proj`` and ``gate_up_proj`` are split while copying (:func:`unfused_attention`,
:func:`unfused_mlp`: views into the fused weights, no copy); a sliding window in every layer when
``sliding_window`` is set; ``rotary_dim`` for a ``partial_rotary_factor``; LongRoPE as any
LLaMA scaling.
"""

from __future__ import annotations

import types

from ..rope import partial_rotary
from .base import Family, window_in_every_layer

__all__ = ["PHI3", "unfused_attention", "unfused_mlp"]


def _rows(weight, bias, lo: int, hi: int) -> types.SimpleNamespace:
    """Rows ``lo:hi`` of a linear layer, as an object with ``weight``, ``bias``, ``in_features``, ``out_features``."""
    return types.SimpleNamespace(
        weight=weight[lo:hi], bias=None if bias is None else bias[lo:hi], in_features=weight.shape[1],
        out_features=hi - lo,
    )  # fmt: skip


def unfused_attention(hf_attn) -> types.SimpleNamespace:
    """Phi-3's attention with separate ``q_proj``, ``k_proj``, ``v_proj``: ``qkv_proj``'s rows are H·D query,
    then H_kv·D key, then H_kv·D value rows. ``o_proj``, ``head_dim``, ``scaling`` and ``config`` come along.

    Shapes:
        qkv_proj.weight: ``((H + 2·H_kv)·D, d)``; the views ``(H·D, d)``, ``(H_kv·D, d)``, ``(H_kv·D, d)``
    """
    D, H_kv = hf_attn.head_dim, hf_attn.num_key_value_heads
    w, b = hf_attn.qkv_proj.weight, hf_attn.qkv_proj.bias
    q_rows, kv_rows = w.shape[0] - 2 * H_kv * D, H_kv * D
    return types.SimpleNamespace(
        q_proj=_rows(w, b, 0, q_rows), k_proj=_rows(w, b, q_rows, q_rows + kv_rows),
        v_proj=_rows(w, b, q_rows + kv_rows, w.shape[0]), o_proj=hf_attn.o_proj, head_dim=D,
        scaling=hf_attn.scaling, config=getattr(hf_attn, "config", None),
    )  # fmt: skip


def unfused_mlp(hf_mlp):
    """Phi-3's MLP with separate ``gate_proj`` and ``up_proj``: ``gate_up_proj``'s first half of rows is the
    gate's (``Phi3MLP`` chunks its output in that order); an MLP without a fused projection is returned as it is.

    Shapes:
        gate_up_proj.weight: ``(2f, d)``; the views ``(f, d)`` each
    """
    fused = getattr(hf_mlp, "gate_up_proj", None)
    if not hasattr(fused, "weight"):
        return hf_mlp
    f = fused.weight.shape[0] // 2
    return types.SimpleNamespace(
        gate_proj=_rows(fused.weight, fused.bias, 0, f), up_proj=_rows(fused.weight, fused.bias, f, 2 * f),
        down_proj=hf_mlp.down_proj,
    )  # fmt: skip


PHI3 = Family(
    "phi3", windows=window_in_every_layer, fields=partial_rotary, attention_view=unfused_attention, mlp_view=unfused_mlp
)
