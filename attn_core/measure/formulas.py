"""Sizes and operation counts of attention by formula: no tensor is built.

Shape legend:
    B    batch size (``batch``)
    H    heads
    T    sequence length; ``T_q`` queries, ``T_k`` keys
    d    model width (``d_model``)
"""

from __future__ import annotations

import torch

from ..checks import check_instance, check_int

__all__ = ["attention_score_bytes", "attention_layer_flops"]


def attention_score_bytes(
    batch: int, heads: int, T_q: int, T_k: int | None = None, *, dtype: torch.dtype = torch.float32
) -> int:
    """Bytes of one materialised score matrix ``(B, H, T_q, T_k)``: what the explicit path stores per copy.

    The explicit path holds several such tensors at its peak (the scores, the masked
    scores, the weights); the tiled path holds one ``(B, H, block_q, block_k)`` tile.

    Shapes:
        the counted tensor: ``(batch, heads, T_q, T_k)``
    """
    for name, value in (("batch", batch), ("heads", heads), ("T_q", T_q)):
        check_int(name, value)
    T_k = T_q if T_k is None else check_int("T_k", T_k)
    check_instance("dtype", dtype, torch.dtype)
    return batch * heads * T_q * T_k * torch.empty((), dtype=dtype).element_size()


def attention_layer_flops(batch: int, T: int, d_model: int, *, causal: bool = True) -> int:
    """Floating-point operations (2 per multiply-add) of one self-attention layer's forward pass.

    Counts the four projections (``8·B·T·d²``) and the two attention products
    (``4·B·P·d``, where ``P`` is the number of query/key pairs that *must* be computed:
    ``T(T+1)/2`` causal, ``T²`` otherwise). An implementation that computes the masked
    half anyway does more work than this count: its achieved rate is lower.
    """
    for name, value in (("batch", batch), ("T", T), ("d_model", d_model)):
        check_int(name, value)
    pairs = T * (T + 1) // 2 if causal else T * T
    return 8 * batch * T * d_model**2 + 4 * batch * pairs * d_model
