"""Where a head lives in a layer's weights: the helpers of exercises 3.1 to 3.3 (private to :mod:`.ch03`)."""

from __future__ import annotations

import copy

import torch

from ...layers.multihead import MultiHeadAttention
from ...ops.attention import attention as attn_core_attention

__all__ = ["head_terms", "random_layer", "surgery"]


def random_layer(seed: int, d_model: int = 12, n_heads: int = 3, bias: bool = True) -> MultiHeadAttention:
    """A float64 layer with every weight and bias random (biases start at zero otherwise)."""
    with torch.random.fork_rng(devices=[]):  # the check must not move the notebook's RNG
        torch.manual_seed(seed)
        layer = MultiHeadAttention(d_model, n_heads, bias=bias).double()
        with torch.no_grad():
            for p in layer.parameters():
                p.normal_(0.0, 0.4)
    return layer.eval()


def head_terms(layer: MultiHeadAttention, x: torch.Tensor) -> torch.Tensor:
    """Each head's term ``z^(h) W_O^(h)`` of the output (no output bias).

    Shapes:
        x: ``(B, T, d_model)``; output: ``(B, H, T, d_model)``
    """
    H = layer.n_heads
    D = layer.q_proj.weight.shape[0] // H
    q, k, v = (p(x).unflatten(-1, (H, D)).transpose(1, 2) for p in (layer.q_proj, layer.k_proj, layer.v_proj))
    z = attn_core_attention(q, k, v)  # (B, H, T, D)
    w_o = layer.out_proj.weight.T.reshape(H, D, -1)  # (H·D, d_model) -> (H, D, d_model)
    return torch.einsum("bhtd,hdm->bhtm", z, w_o)


def surgery(layer: MultiHeadAttention, h: int, how: str) -> MultiHeadAttention:
    """The wrong (and one right) ways to switch head ``h`` off, for the hints."""
    out = copy.deepcopy(layer)
    D = layer.q_proj.weight.shape[0] // layer.n_heads
    rows = slice(h * D, (h + 1) * D)
    with torch.no_grad():
        if how in ("q", "k", "v", "v_and_bias"):
            proj = getattr(out, ("v" if how == "v_and_bias" else how) + "_proj")
            proj.weight[rows] = 0.0
            if how == "v_and_bias":
                proj.bias[rows] = 0.0
        elif how == "out_rows":
            out.out_proj.weight[rows] = 0.0  # output features, not head h's inputs
        elif how == "out_cols_next":
            nxt = (h + 1) % layer.n_heads
            out.out_proj.weight[:, nxt * D : (nxt + 1) * D] = 0.0
    return out
