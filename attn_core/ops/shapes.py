"""The wiring every attention layer shares: splitting heads, merging them, giving a mask its head axis.

Every multi-head layer in ``attn_core`` projects ``(B, T, H·D)``, splits it into ``H``
heads of width ``D`` for :func:`attn_core.ops.attention.attention`, and merges the heads back
before its output projection. The three helpers here are that wiring, written once.

Shape legend:
    B    batch size
    T    positions; ``T_q`` queries, ``T_k`` keys
    H    heads (query heads, or key/value heads for keys and values)
    D    width of one head
"""

from __future__ import annotations

import torch

__all__ = ["split_heads", "merge_heads", "head_mask"]


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Cut the last axis into ``n_heads`` heads and move the head axis before the positions.

    Shapes:
        x: ``(B, T, H·D)``; output: ``(B, H, T, D)``, a view (no copy)
    """
    B, T, width = x.shape
    # (B, T, H·D) -> (B, T, H, D) -> (B, H, T, D)
    return x.view(B, T, n_heads, width // n_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """Concatenate the heads back into one vector per position: the inverse of :func:`split_heads`.

    ``reshape``, not ``view``: after the transpose the heads are not contiguous (SDPA's
    output happens to be, the explicit path's is not), and ``reshape`` copies only then.

    Shapes:
        x: ``(B, H, T, D)``; output: ``(B, T, H·D)``
    """
    B, H, T, D = x.shape
    return x.transpose(1, 2).reshape(B, T, H * D)  # (B, H, T, D) -> (B, T, H, D) -> (B, T, H·D)


def head_mask(mask: torch.Tensor | None) -> torch.Tensor | None:
    """Give a per-example mask ``(B, T_q, T_k)`` a head axis, so that it is the same for every head.

    Masks of shape ``(T_q, T_k)`` and ``(B, H, T_q, T_k)`` already broadcast against the
    scores ``(B, H, T_q, T_k)`` and are returned as they are, like ``None``.

    Shapes:
        mask: ``(B, T_q, T_k)``; output: ``(B, 1, T_q, T_k)``
    """
    if isinstance(mask, torch.Tensor) and mask.dim() == 3:
        return mask.unsqueeze(1)  # (B, T_q, T_k) -> (B, 1, T_q, T_k): the same for every head
    return mask
