"""Granite (``granite``, IBM Granite 3.x): LLaMA with four multipliers.

``attention_scale`` = ``attention_multiplier`` (scores times it, not 1/√D),
``embedding_multiplier``, ``residual_multiplier`` (each branch times it before the residual
addition) and ``logit_scale`` = ``1 / logits_scaling``.
"""

from __future__ import annotations

from .base import Family

__all__ = ["GRANITE", "granite_fields"]


def granite_fields(hf) -> dict:
    """Granite's four multipliers: scores, embeddings, residual branches, logits."""
    return dict(
        attention_scale=float(hf.attention_multiplier),
        embedding_multiplier=float(hf.embedding_multiplier),
        residual_multiplier=float(hf.residual_multiplier),
        logit_scale=1.0 / float(hf.logits_scaling),  # Granite divides its logits by logits_scaling
    )


GRANITE = Family("granite", fields=granite_fields)
