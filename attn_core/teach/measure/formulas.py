"""Sizes and operation counts of attention by formula: no tensor is built.

Shape legend:
    B    batch size (``batch``)
    H    heads
    T    sequence length; ``T_q`` queries, ``T_k`` keys
    D    head width (``head_dim``)
    d    model width (``d_model``)
"""

from __future__ import annotations

import torch

from ...checks import check_instance, check_int

__all__ = ["attention_score_bytes", "attention_layer_flops", "attention_hbm_bytes"]


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


def attention_hbm_bytes(
    batch: int,
    heads: int,
    T: int,
    head_dim: int,
    *,
    block_size: int | None = None,
    causal: bool = False,
    dtype: torch.dtype = torch.float32,
) -> int:
    """Bytes one attention forward pass moves between slow memory (HBM) and the chip, by formula.

    The IO analysis of Dao et al. (2022, arXiv:2205.14135), per batch element and head:

    * ``block_size=None``, **standard attention** (their Algorithm 0): read Q and K, write
      ``S = QKᵀ``; read S, write ``P = softmax(S)``; read P and V, write O. That is
      ``4·T·D`` elements of inputs and output plus ``4·T²`` for the score matrix, which
      goes to HBM and back twice (the mask, where there is one, does not shrink it).
    * ``block_size=b``, **a fused tiled kernel** (FlashAttention, in FlashAttention-2's
      loop order): each block of ``b`` queries is read once and stays in fast memory
      (SRAM) while every key/value block it needs streams past it; its output is written
      once, with one float32 softmax statistic per query (the log-sum-exp, kept for the
      backward pass). The ``T×T`` scores never reach HBM. Elements:
      ``2·T·D`` (Q, O) + ``2·D·Σ keys read per query block`` (K, V), where a query block
      reads all ``T`` keys, or with ``causal`` only the key blocks up to its diagonal.
      K and V are re-read once per query block: the traffic still grows like ``T²``, but
      with the factor ``2D/b`` in place of 4, and ``b`` is bounded by the SRAM size.

    Shapes:
        Q, K, V, O: ``(batch, heads, T, head_dim)``; S, P: ``(batch, heads, T, T)``

    Raises:
        TypeError: a non-int size or a non-dtype ``dtype``.
        ValueError: a size below 1.
    """
    for name, value in (("batch", batch), ("heads", heads), ("T", T), ("head_dim", head_dim)):
        check_int(name, value)
    check_instance("dtype", dtype, torch.dtype)
    size = torch.empty((), dtype=dtype).element_size()
    if block_size is None:
        elements = 4 * T * head_dim + 4 * T * T
        return batch * heads * elements * size
    b = check_int("block_size", block_size)
    keys_read = 0
    for start in range(0, T, b):
        end = min(start + b, T)  # this query block: positions start .. end-1
        keys_read += min(T, -(-end // b) * b) if causal else T  # key blocks up to the diagonal, whole blocks
    elements = 2 * T * head_dim + 2 * head_dim * keys_read
    return batch * heads * (elements * size + T * 4)  # + the float32 log-sum-exp per query
