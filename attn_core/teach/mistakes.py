"""Deliberately wrong implementations, kept for teaching: each shows a mistake the book demonstrates.

Nothing in ``attn_core`` builds a model from these. A chapter calls one to show its
wrong output next to the right one, and a test holds that the mistake really is caught
(the test that would catch it in a real code base fails on it). Each docstring names
the mistake and where the right version lives.

Shape legend:
    B    batch size
    H    heads
    T    positions
    D    width of one head
"""

from __future__ import annotations

import math

import torch

from ..ops.masks import causal_mask

__all__ = ["leaky_shaped_attention"]


def leaky_shaped_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor, gamma: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Shaped attention with a plausible causality bug. Wrong on purpose: do not use.

    Two plausible mistakes: the causal mask is applied out of place and its result thrown
    away (``masked_fill`` returns a new tensor), and the centring matrix is built uniform
    over *all* positions instead of causally (the encoder's ``C``, copied into a decoder).
    At initialisation (``W_Q = 0``, ``β = γ``) the two mistakes cancel, so the
    block is the identity and looks right; once the scores are not all equal, every
    position reads the future. The simplified-block lesson and ``tests/test_teach_mistakes.py``
    catch it with the causality test. The softmax is written out here *because* the bug lives in it.
    The right version is :class:`attn_core.ShapedAttention`.

    Shapes:
        q, k, v: ``(B, H, T, D)``; alpha, beta, gamma: ``(H,)``
        returns: output ``(B, H, T, D)``, A ``(B, H, T, T)``
    """
    T = q.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, T, T)
    scores.masked_fill(~causal_mask(T, device=q.device), float("-inf"))  # BUG: result discarded
    probs = torch.softmax(scores, dim=-1)
    C = torch.full((T, T), 1.0 / T, dtype=q.dtype, device=q.device)  # BUG: uniform over all T positions
    eye = torch.eye(T, dtype=q.dtype, device=q.device)
    a, b, g = (t.view(-1, 1, 1) for t in (alpha, beta, gamma))  # (H,) -> (H, 1, 1)
    A = a * eye + b * probs - g * C  # (B, H, T, T)
    return A @ v, A
