"""LLaMA (``llama``): the reading every other family starts from.

One RoPE in every layer (plain or scaled: PI, dynamic NTK, YaRN, Llama 3.1's, LongRoPE), a
SwiGLU MLP, RMSNorm before each sub-layer, multi-head attention with grouped key/value heads,
no window: the defaults of :class:`~attn_core.hf.families.base.Family`, so the record states
nothing else.
"""

from __future__ import annotations

from .base import Family

__all__ = ["LLAMA"]

LLAMA = Family("llama")
