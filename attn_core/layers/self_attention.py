"""Single-head self-attention with trainable projections: the smallest attention layer.

It projects its input and calls :func:`attn_core.ops.attention.attention`, like every layer in
``attn_core``; :class:`~attn_core.MultiHeadAttention` is its multi-head generalisation.

Shape legend:
    B        batch size
    T        sequence length
"""

from __future__ import annotations

import torch
from torch import nn

from ..checks import check_bool, check_int, check_tensor
from ..ops.attention import attention

__all__ = ["SelfAttention"]


class SelfAttention(nn.Module):
    """Single-head self-attention with trainable query, key and value projections.

    The smallest trainable attention layer: every token is projected to a
    query, a key and a value of width ``d_out``, and attends to every token.

    Args:
        d_in: Width of the input vectors.
        d_out: Width of the queries, keys, values and output.
        bias: Give the projections a bias.
        causal: Block attention to future tokens (a decoder's causal mask).

    Shapes:
        x: ``(B, T, d_in)``
        output: ``(B, T, d_out)``; weights ``(B, T, T)``
    """

    def __init__(self, d_in: int, d_out: int, *, bias: bool = False, causal: bool = False) -> None:
        super().__init__()
        check_int("d_in", d_in)
        check_int("d_out", d_out)
        self.d_in, self.d_out, self.causal = d_in, d_out, check_bool("causal", causal)
        check_bool("bias", bias)
        self.q_proj = nn.Linear(d_in, d_out, bias=bias)
        self.k_proj = nn.Linear(d_in, d_out, bias=bias)
        self.v_proj = nn.Linear(d_in, d_out, bias=bias)

    def forward(
        self, x: torch.Tensor, *, mask: torch.Tensor | None = None, return_weights: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Attend from every token of ``x`` to every token of ``x``.

        Args:
            x: Input sequence.
            mask: Boolean, ``True`` = may attend, broadcastable to ``(B, T, T)``.
            return_weights: Also return the attention weights.

        Shapes:
            x: ``(B, T, d_in)``
            output: ``(B, T, d_out)``
            weights: ``(B, T, T)``
        """
        check_tensor("x", x, ("B", "T", ("d_in", self.d_in)), like=self.q_proj.weight)
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)  # each (B, T, d_out)
        return attention(q, k, v, mask=mask, is_causal=self.causal, return_weights=return_weights)

    def extra_repr(self) -> str:
        return f"d_in={self.d_in}, d_out={self.d_out}, causal={self.causal}"
