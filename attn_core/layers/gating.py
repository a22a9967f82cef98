"""The output gate of gated attention: a sigmoid of the layer's input scales each head's output.

Qiu et al. (2025, "Gated Attention for Large Language Models", arXiv 2505.06708) put a
gate after the attention of every head, before the output projection:

    out_h = attention_h(x) ⊙ σ(x W_g,h)

computed from the same input ``x`` the queries come from. ``"elementwise"`` gives every
channel of every head its own gate (Qwen3-Next's form, where ``q_proj`` produces the
queries and the gate logits together); ``"headwise"`` gives each head one scalar. Since
``σ(·) ∈ (0, 1)``, a head can now output (almost) nothing for a token without first
parking its attention on a sink token: the paper finds the first-token sink and the
huge activations that come with it largely disappear.

:class:`~attn_core.MultiHeadAttention` builds the gate's projection when given
``gate="elementwise"`` or ``gate="headwise"`` and calls :func:`output_gate`.

Shape legend:
    B    batch size
    H    query heads
    T    positions (queries)
    D    width of one head; ``G`` the gate width per head, ``D`` or 1
"""

from __future__ import annotations

import torch

from ..checks import check_choice, check_int, check_tensor

__all__ = ["GATE_KINDS", "gate_width", "output_gate"]

#: The gates :class:`~attn_core.MultiHeadAttention` accepts (``gate=None``: no gate).
GATE_KINDS = ("elementwise", "headwise")


def gate_width(kind: str, head_dim: int) -> int:
    """Gate logits per head: ``head_dim`` for ``"elementwise"``, 1 for ``"headwise"``.

    Raises:
        ValueError: ``kind`` is not one of :data:`GATE_KINDS`, or ``head_dim < 1``.
    """
    check_choice("gate", kind, GATE_KINDS)
    check_int("head_dim", head_dim)
    return head_dim if kind == "elementwise" else 1


def output_gate(out: torch.Tensor, gate_logits: torch.Tensor) -> torch.Tensor:
    """``out · sigmoid(gate_logits)``: gate each head's attention output.

    Args:
        out: The attention output, heads split.
        gate_logits: One logit per channel (``G = D``, elementwise) or per head
            (``G = 1``, headwise), for every query position.

    Returns:
        The gated output, same shape and dtype as ``out``.

    Shapes:
        out: ``(B, H, T, D)``
        gate_logits: ``(B, H, T, G)``, ``G`` = ``D`` or 1
        output: ``(B, H, T, D)``

    Raises:
        TypeError: Non-tensor or non-floating inputs.
        ValueError: A gate whose width is neither ``D`` nor 1, or whose other
            dimensions differ from ``out``'s (the message gives both shapes).
    """
    check_tensor("out", out, ("B", "H", "T", "D"), floating=True)
    check_tensor("gate_logits", gate_logits, ("B", "H", "T", "G"), floating=True)
    D, G = out.shape[-1], gate_logits.shape[-1]
    if gate_logits.shape[:-1] != out.shape[:-1] or G not in (D, 1):
        raise ValueError(
            f"gate_logits must have shape (B, H, T, D) or (B, H, T, 1) to gate out of shape {tuple(out.shape)}, "
            f"got gate_logits.shape={tuple(gate_logits.shape)} (gate width {G}, head width D={D})"
        )
    return out * torch.sigmoid(gate_logits).to(out.dtype)  # (B, H, T, D); a width-1 gate broadcasts over D
