"""Benchmark subjects: one causal self-attention layer, computed the ways people compute it.

The book's speed comparison sets side by side ways of computing the *same* causal
multi-head self-attention layer (Raschka's comparison). Two of them, "einsum" and "fused QKV, explicit", are written
the way tutorials write attention, with their own softmax-matmul: that is what is being
measured. They are benchmark subjects, not modules to build models from; every model in
``attn_core`` calls :func:`attn_core.ops.attention.attention`.

Shape legend:
    B    batch size
    T    sequence length
    d    model width (``d_model``)
    H    heads, ``D = d // H`` head width
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from ...checks import check_instance
from ...layers.multihead import MultiHeadAttention
from ...ops.efficient import tiled_attention

__all__ = ["attention_implementations"]


def attention_implementations(
    layer: MultiHeadAttention, *, include_tiled: bool = False, tiled_block_size: int = 256
) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """Several implementations of one causal self-attention layer, all with ``layer``'s weights.

    Every function maps ``x`` to the same output (to float rounding), so a benchmark
    compares speed on equal work:

    * ``attn_core explicit``: ``layer(x, return_weights=True)``, the explicit path (the
      ``(B, H, T, T)`` weights are materialised and returned);
    * ``einsum``: projections and both attention products as ``torch.einsum``;
    * ``fused QKV, explicit``: one ``d → 3d`` projection, then matmul, mask, softmax, matmul;
    * ``fused QKV + SDPA``: one ``d → 3d`` projection,
      ``scaled_dot_product_attention(is_causal=True)``, the output projection: the leanest
      composition of PyTorch primitives for this layer (the baseline);
    * ``nn.MultiheadAttention`` with ``need_weights=True`` and ``need_weights=False``,
      given a causal mask;
    * ``attn_core fast path``: ``layer(x)``;
    * ``attn_core tiled`` (if ``include_tiled``): the projections and :func:`tiled_attention`.

    Args:
        layer: A causal :class:`~attn_core.MultiHeadAttention` without biases and with
            ``n_kv_heads == n_heads``, in eval mode.
        include_tiled: Add the plain-PyTorch tiled implementation (slow: Python loops).
        tiled_block_size: Its block size.

    Returns:
        Name -> function ``x -> output``; call under ``torch.no_grad()`` to time inference.

    Shapes:
        x: ``(B, T, d_model)``; each output: ``(B, T, d_model)``

    Raises:
        TypeError: ``layer`` is not a :class:`~attn_core.MultiHeadAttention`.
        ValueError: ``layer`` is not causal, has grouped key/value heads, biases or RoPE.
    """
    check_instance("layer", layer, MultiHeadAttention)
    if not layer.causal or layer.n_kv_heads != layer.n_heads or layer.q_proj.bias is not None or layer.rope is not None:
        raise ValueError(
            f"layer must be causal multi-head attention without biases or RoPE, got causal={layer.causal}, "
            f"n_heads={layer.n_heads}, n_kv_heads={layer.n_kv_heads}, bias={layer.q_proj.bias is not None}, "
            f"rope={layer.rope is not None}"
        )
    d, H, D = layer.d_model, layer.n_heads, layer.head_dim
    w_q, w_k, w_v, w_o = (p.weight for p in (layer.q_proj, layer.k_proj, layer.v_proj, layer.out_proj))
    w_qkv = torch.cat((w_q, w_k, w_v)).detach()  # (3d, d): the three projections as one matrix
    scale = 1.0 / math.sqrt(D)
    torch_mha = torch.nn.MultiheadAttention(d, H, bias=False, batch_first=True).to(w_q.device, w_q.dtype).eval()
    with torch.no_grad():
        torch_mha.in_proj_weight.copy_(w_qkv)
        torch_mha.out_proj.weight.copy_(w_o)
    masks: dict[tuple, torch.Tensor] = {}

    def future(T: int, device) -> torch.Tensor:
        """Boolean ``(T, T)``, True above the diagonal: nn.MultiheadAttention's convention (True = blocked)."""
        if (T, device) not in masks:
            masks[(T, device)] = torch.ones(T, T, dtype=torch.bool, device=device).triu(1)
        return masks[(T, device)]

    def einsum(x):
        B, T, _ = x.shape
        q = torch.einsum("btc,hdc->bhtd", x, w_q.view(H, D, d))  # (B, H, T, D): W_q split into heads
        k = torch.einsum("btc,hdc->bhtd", x, w_k.view(H, D, d))
        v = torch.einsum("btc,hdc->bhtd", x, w_v.view(H, D, d))
        s = torch.einsum("bhqd,bhkd->bhqk", q, k) * scale  # (B, H, T, T)
        a = torch.softmax(s.masked_fill(future(T, x.device), float("-inf")), dim=-1)
        z = torch.einsum("bhqk,bhkd->bqhd", a, v)  # (B, T, H, D)
        return torch.einsum("bqc,ec->bqe", z.reshape(B, T, d), w_o)  # (B, T, H·D) -> (B, T, d)

    def fused_explicit(x):
        B, T, _ = x.shape
        qkv = (x @ w_qkv.T).view(B, T, 3, H, D).permute(2, 0, 3, 1, 4)  # (B, T, 3d) -> (3, B, H, T, D)
        q, k, v = qkv.unbind(0)
        s = (q @ k.transpose(-2, -1)) * scale  # (B, H, T, T)
        a = torch.softmax(s.masked_fill(future(T, x.device), float("-inf")), dim=-1)
        return (a @ v).transpose(1, 2).reshape(B, T, d) @ w_o.T  # (B, H, T, D) -> (B, T, d)

    def fused_sdpa(x):
        B, T, _ = x.shape
        qkv = (x @ w_qkv.T).view(B, T, 3, H, D).permute(2, 0, 3, 1, 4)  # (B, T, 3d) -> (3, B, H, T, D)
        q, k, v = qkv.unbind(0)
        z = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, D)
        return z.transpose(1, 2).reshape(B, T, d) @ w_o.T  # (B, H, T, D) -> (B, T, d)

    def torch_weights(x):
        return torch_mha(x, x, x, attn_mask=future(x.shape[1], x.device), need_weights=True)[0]

    def torch_no_weights(x):
        T = x.shape[1]
        return torch_mha(x, x, x, attn_mask=future(T, x.device), need_weights=False, is_causal=True)[0]

    def tiled(x):
        B, T, _ = x.shape
        qkv = (x @ w_qkv.T).view(B, T, 3, H, D).permute(2, 0, 3, 1, 4)  # (B, T, 3d) -> (3, B, H, T, D)
        z = tiled_attention(*qkv.unbind(0), is_causal=True, block_size=tiled_block_size)  # (B, H, T, D)
        return z.transpose(1, 2).reshape(B, T, d) @ w_o.T

    impls = {
        "attn_core explicit": lambda x: layer(x, return_weights=True)[0],
        "einsum": einsum,
        "fused QKV, explicit": fused_explicit,
        "fused QKV + SDPA": fused_sdpa,
        "nn.MultiheadAttention (need_weights=True)": torch_weights,
        "nn.MultiheadAttention (need_weights=False)": torch_no_weights,
        "attn_core fast path": layer,
    }
    if include_tiled:
        impls["attn_core tiled"] = tiled
    return impls
