"""Memory-efficient attention in plain PyTorch: online softmax and a tiled (FlashAttention-style) forward.

The explicit attention path (:func:`attn_core.attention` with ``return_weights=True``)
materialises the score matrix ``S = Q Kᵀ`` of shape ``(T_q, T_k)`` per head: memory that
grows with the *square* of the sequence length. FlashAttention (Dao et al., 2022) never
stores ``S``. It cuts the queries and keys into blocks and, for one block of queries,
visits the key blocks one after the other, keeping per query only

* ``m``: the largest score seen so far,
* ``l``: the sum of ``exp(score - m)`` seen so far,
* ``acc``: the sum of ``exp(score - m) · v`` seen so far.

When a new block raises the maximum from ``m`` to ``m'``, the old sums are rescaled by
``exp(m - m')``: this is the *online softmax* of Milakov & Gimelshein (2018). After the
last key block, ``acc / l`` is exactly ``softmax(S) V``. Peak memory is one tile of
scores, ``(block_q, block_k)`` per head, whatever the sequence length.

This module is the one place in ``attn_core`` with its own softmax-matmul: the tiled
algorithm *is* the lesson. It is written for clarity, in Python loops over
blocks; PyTorch's fused kernels (``scaled_dot_product_attention``) do the same in
compiled code and are what :func:`attn_core.attention` calls on its fast path. The tools
that *measure* the difference (peak memory, operator lists, FLOPs, timing) are in
:mod:`attn_core.teach.measure`.

Shape legend:
    ...   leading batch dimensions, typically ``(B, H)``
    H     query heads; ``H_kv`` key/value heads (``H_kv`` divides ``H``: GQA/MQA)
    T_q   queries, ``T_k`` keys (= values)
    D     query/key width per head, ``D_v`` value width per head
    N     length of the axis a softmax runs over; ``b`` a block's length
"""

from __future__ import annotations

import math

import torch

from ..checks import check_int, check_tensor
from .attention import check_qkv

__all__ = ["online_softmax", "tiled_attention"]

DEFAULT_BLOCK_SIZE = 128


def online_softmax(x: torch.Tensor, dim: int = -1, *, block_size: int = DEFAULT_BLOCK_SIZE) -> torch.Tensor:
    """Softmax computed by streaming over blocks of ``x`` (Milakov & Gimelshein, 2018).

    A plain softmax reads ``x`` twice before it can write anything: once for the maximum
    (for numerical safety) and once for the sum of exponentials. The online form keeps a
    running maximum ``m`` and a running sum ``l`` in *one* pass: when a block brings a
    larger maximum ``m'``, the sum so far is rescaled, ``l ← l·exp(m - m') + Σ exp(x - m')``.
    A second pass writes ``exp(x - m) / l``. Equal to :func:`torch.softmax` (a test holds
    it); ``-inf`` entries get weight 0, and a slice that is all ``-inf`` gives zeros
    rather than NaN (the convention of :func:`attn_core.attention`).

    Args:
        x: Scores.
        dim: The axis to normalise over.
        block_size: Entries of that axis read per step.

    Returns:
        ``softmax(x, dim)``, in ``x``'s dtype (computed in at least float32).

    Shapes:
        x: ``(..., N, ...)``, ``N`` along ``dim``; output: the same as ``x``

    Raises:
        TypeError: ``x`` is not a floating-point tensor; ``block_size`` not an int.
        ValueError: ``block_size < 1``; ``dim`` out of range.
    """
    check_tensor("x", x, floating=True)
    check_int("block_size", block_size)
    if x.dim() == 0 or not -x.dim() <= dim < x.dim():
        raise ValueError(f"dim={dim} is out of range for x of shape {tuple(x.shape)}")
    work = x.movedim(dim, -1).to(torch.promote_types(x.dtype, torch.float32))  # (..., N)
    m = work.new_full(work.shape[:-1] + (1,), float("-inf"))  # (..., 1) running maximum
    l = work.new_zeros(work.shape[:-1] + (1,))  # (..., 1) running sum of exp(x - m)
    for start in range(0, work.shape[-1], block_size):
        block = work[..., start : start + block_size]  # (..., b)
        m_new = torch.maximum(m, block.amax(dim=-1, keepdim=True))  # (..., 1)
        # While every entry so far is -inf, m_new is -inf and x - m_new would be NaN:
        # subtract 0 instead (exp(-inf - 0) = 0, which is right).
        m_safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        l = l * torch.exp(m - m_safe) + torch.exp(block - m_safe).sum(dim=-1, keepdim=True)
        m = m_new
    m_safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    # An all -inf row has l = 0: divide by 1 instead, giving exp(-inf) / 1 = 0, not NaN.
    out = torch.exp(work - m_safe) / torch.where(l > 0, l, torch.ones_like(l))  # (..., N)
    return out.to(x.dtype).movedim(-1, dim)


def tiled_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
    block_size_k: int | None = None,
) -> torch.Tensor:
    """Scaled dot-product attention, one ``(block_q, block_k)`` tile of scores at a time.

    The FlashAttention forward pass (Dao et al., 2022, in its FlashAttention-2 loop
    order): for each block of queries, visit the key blocks in order and update the
    running maximum ``m``, normaliser ``l`` and unnormalised output ``acc`` with the
    online softmax; divide by ``l`` at the end. The result equals
    ``attn_core.attention(q, k, v, is_causal=is_causal, scale=scale)`` to float32
    rounding, but no tensor larger than one tile of scores ``(..., H, block_q, block_k)``
    is ever allocated for the scores.

    With ``is_causal``, key blocks that lie entirely in a query block's future are
    skipped (about half the work), and only blocks crossing the diagonal are masked.
    The diagonal is aligned bottom-right, as in :func:`attn_core.attention`, so that
    ``T_q < T_k`` (new queries after cached keys) is right.

    Gradients flow through the loop by ordinary autograd (which stores every tile: the
    memory saving is for the forward pass, e.g. inference; FlashAttention's backward
    pass recomputes the tiles instead).

    Args:
        q: Queries.
        k: Keys; may have fewer heads than ``q`` (grouped-query attention), head ``h``
            then reads key/value head ``h // (H // H_kv)``.
        v: Values.
        is_causal: Block attention to future keys (bottom-right aligned).
        scale: Multiplies the scores; default ``1/√D``.
        block_size: Queries per block (``block_q``), and keys per block unless
            ``block_size_k`` is given.
        block_size_k: Keys per block (``block_k``).

    Returns:
        The attention output, in the inputs' dtype (accumulated in at least float32).

    Shapes:
        q: ``(..., H, T_q, D)``
        k: ``(..., H_kv, T_k, D)``
        v: ``(..., H_kv, T_k, D_v)``
        output: ``(..., H, T_q, D_v)``

    Raises:
        TypeError: Non-tensor or non-floating inputs, mismatched dtypes, non-int block sizes.
        ValueError: Mismatched ranks or widths, head counts that do not divide, block
            sizes below 1, a non-positive ``scale``, ``is_causal`` with ``T_q > T_k``.
    """
    # The checks of the reference (same messages); no mask, no dropout here.
    groups = check_qkv(q, k, v, scale=scale)
    block_q = check_int("block_size", block_size)
    block_k = block_q if block_size_k is None else check_int("block_size_k", block_size_k)
    T_q, T_k, D_v = q.shape[-2], k.shape[-2], v.shape[-1]
    if is_causal and T_q > T_k:
        # The same rule as attn_core.causal_mask: the queries are the last T_q of T_k positions.
        raise ValueError(
            f"is_causal needs T_k >= T_q (queries are the last T_q of T_k positions), got T_q={T_q}, T_k={T_k}"
        )
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    work = torch.promote_types(q.dtype, torch.float32)  # accumulate half inputs in float32
    if groups > 1:
        # GQA without copying K/V: a group axis of G query heads per key/value head, over
        # which the key/value tiles broadcast (as in the explicit path of attn_core.ops.attention).
        q = q.unflatten(-3, (k.shape[-3], groups))  # (..., H_kv, G, T_q, D)
        k, v = k.unsqueeze(-3), v.unsqueeze(-3)  # (..., H_kv, 1, T_k, D)
    # Query i may attend key j iff j <= i + offset (bottom-right aligned diagonal).
    offset = T_k - T_q
    key_pos = torch.arange(T_k, device=q.device)  # (T_k,)
    out_blocks = []
    for i0 in range(0, T_q, block_q):
        i1 = min(i0 + block_q, T_q)
        q_blk = q[..., i0:i1, :].to(work) * scale  # (..., b_q, D): scaling q once is cheaper than every tile
        batch_shape = torch.broadcast_shapes(q_blk.shape[:-2], k.shape[:-2])
        m = q_blk.new_full((*batch_shape, i1 - i0, 1), float("-inf"))  # (..., b_q, 1) running max
        l = q_blk.new_zeros((*batch_shape, i1 - i0, 1))  # (..., b_q, 1) running normaliser
        acc = q_blk.new_zeros((*batch_shape, i1 - i0, D_v))  # (..., b_q, D_v) unnormalised output
        # Causal: keys beyond the last query's diagonal are in the future of every query here.
        k_end = min(T_k, i1 + offset) if is_causal else T_k
        for j0 in range(0, max(k_end, 0), block_k):
            j1 = min(j0 + block_k, k_end)
            s = q_blk @ k[..., j0:j1, :].to(work).transpose(-2, -1)  # (..., b_q, b_k): one tile of scores
            if is_causal and j1 - 1 > i0 + offset:
                # The tile crosses the diagonal: mask the keys after each query's position.
                q_pos = torch.arange(i0, i1, device=q.device)[:, None]  # (b_q, 1)
                allowed = key_pos[None, j0:j1] <= q_pos + offset  # (b_q, b_k)
                s = s.masked_fill(~allowed, float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))  # (..., b_q, 1)
            # Rows that have seen only masked keys keep m = -inf; subtract 0 there so that
            # exp(-inf - (-inf)) never makes a NaN (it is exp(-inf - 0) = 0 instead).
            m_safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
            p = torch.exp(s - m_safe)  # (..., b_q, b_k) unnormalised weights of this tile
            correction = torch.exp(m - m_safe)  # (..., b_q, 1) rescales what came before
            l = l * correction + p.sum(dim=-1, keepdim=True)
            acc = acc * correction + p @ v[..., j0:j1, :].to(work)  # (..., b_q, D_v)
            m = m_new
        # l > 0 for every query (each sees at least its own diagonal key); the guard keeps
        # a NaN out should a row ever have no key at all.
        out_blocks.append(acc / torch.where(l > 0, l, torch.ones_like(l)))
    out = torch.cat(out_blocks, dim=-2)  # (..., [H_kv, G,] T_q, D_v)
    if groups > 1:
        out = out.flatten(-4, -3)  # (..., H_kv, G, T_q, D_v) -> (..., H, T_q, D_v)
    return out.to(v.dtype)
