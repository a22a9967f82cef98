"""Mistral (``mistral``) and Mixtral (``mixtral``): LLaMA with a window in every layer, Mixtral with experts.

Mixtral's router takes a softmax over the experts, keeps the top k and renormalises them: the
same weights as a softmax over the top k logits (``router_topk_first``).
"""

from __future__ import annotations

from .base import Family, window_in_every_layer

__all__ = ["MISTRAL", "MIXTRAL", "mixtral_moe"]


def mixtral_moe(hf) -> dict:
    """Mixtral's experts: ``num_local_experts`` SwiGLU experts of ``intermediate_size``, top-k logits then softmax."""
    return dict(n_experts=hf.num_local_experts, experts_per_token=hf.num_experts_per_tok, router_topk_first=True)


MISTRAL = Family("mistral", windows=window_in_every_layer)
MIXTRAL = Family("mixtral", windows=window_in_every_layer, moe=mixtral_moe)
