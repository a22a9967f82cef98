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
algorithm *is* the lesson (chapter 13). It is written for clarity, in Python loops over
blocks; PyTorch's fused kernels (``scaled_dot_product_attention``) do the same in
compiled code and are what :func:`attn_core.attention` calls on its fast path.

Shape legend:
    ...   leading batch dimensions, typically ``(B, H)``
    H     query heads; ``H_kv`` key/value heads (``H_kv`` divides ``H``: GQA/MQA)
    T_q   queries, ``T_k`` keys (= values)
    D     query/key width per head, ``D_v`` value width per head
    N     length of the axis a softmax runs over; ``b`` a block's length
"""

from __future__ import annotations

import math
import weakref
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ._checks import check_int
from .attention import MultiHeadAttention
from .core import _validate as _validate_qkv

__all__ = [
    "online_softmax",
    "tiled_attention",
    "attention_score_bytes",
    "peak_tensor_memory",
    "aten_ops",
    "attention_implementations",
    "attention_layer_flops",
]

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
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if not x.dtype.is_floating_point:
        raise TypeError(f"x must be a floating-point tensor, got dtype={x.dtype}")
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
    groups = _validate_qkv(q, k, v, None, scale, 0.0)
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
        # which the key/value tiles broadcast (as in the explicit path of attn_core.core).
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
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {type(dtype).__name__}")
    return batch * heads * T_q * T_k * torch.empty((), dtype=dtype).element_size()


class _LiveTensorBytes(TorchDispatchMode):
    """Counts the bytes of tensor storage created by PyTorch operators and still alive.

    Every operator call passes through :meth:`__torch_dispatch__`; each storage an
    output lives in is counted once, when first seen, and uncounted when the last
    tensor that points into it is garbage-collected (a ``weakref.finalize``). Storages
    first seen as *inputs* existed before the measurement and are never counted.
    """

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, list[int]] = {}  # storage id -> [bytes, tensors alive]
        # Storages that existed before (inputs, weights): views of them cost nothing. The
        # reference keeps each alive, so that its address cannot be reused for a new one.
        self.external: dict[int, torch.UntypedStorage] = {}
        self.current = self.peak = 0

    def _release(self, key: int) -> None:
        entry = self.live[key]
        entry[1] -= 1
        if entry[1] == 0:
            self.current -= entry[0]
            del self.live[key]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for t in tree_flatten((args, kwargs))[0]:
            if isinstance(t, torch.Tensor):
                storage = t.untyped_storage()
                # The storage's C++ address identifies it, also for views and meta tensors.
                if storage._cdata not in self.live:
                    self.external.setdefault(storage._cdata, storage)
        out = func(*args, **kwargs)
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            key = storage._cdata
            if key in self.external:
                continue  # a view of (or an in-place write to) memory allocated before the call
            if key in self.live:
                self.live[key][1] += 1  # a view or an in-place result: no new memory
            else:
                self.live[key] = [storage.nbytes(), 1]
                self.current += storage.nbytes()
                self.peak = max(self.peak, self.current)
            weakref.finalize(t, self._release, key)
        return out


def peak_tensor_memory(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """Peak bytes of tensors that ``fn(*args, **kwargs)`` allocates and holds at the same time.

    The method: a ``TorchDispatchMode`` sees the output of every PyTorch operator that
    runs inside ``fn``; it adds a storage's size when the storage first appears and
    subtracts it when the last tensor using it is freed, and it records the maximum of
    that running sum. Tensors that exist before the call (the inputs, the weights) are
    not counted; the result is, while it is alive. Scratch memory *inside* a single
    fused kernel (e.g. the tile buffers of ``scaled_dot_product_attention``) is not
    visible: this measures what a Python-level algorithm allocates. Tensors kept by
    autograd for the backward pass stay alive, so call under ``torch.no_grad()`` to
    measure inference. Works on any device, including ``"meta"`` tensors (which
    allocate nothing, so even huge shapes can be measured instantly).

    Args:
        fn: The computation to measure.
        *args: Positional arguments for ``fn``.
        **kwargs: Keyword arguments for ``fn``.

    Returns:
        Peak live bytes, an int (the result is discarded).

    Raises:
        TypeError: ``fn`` is not callable.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    with _LiveTensorBytes() as tracker:
        result = fn(*args, **kwargs)
        del result
    return tracker.peak


class _OpRecorder(TorchDispatchMode):
    """Records the name of every ATen operator that runs."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def aten_ops(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> list[str]:
    """The ATen operators that ``fn(*args, **kwargs)`` runs, in order (e.g. ``["mm", "_softmax", ...]``).

    Shows which kernel PyTorch picked: a fused ``scaled_dot_product_attention`` backend is
    one operator (``_scaled_dot_product_flash_attention_for_cpu`` on a CPU), the math
    backend a sequence of matmuls and a softmax.

    Raises:
        TypeError: ``fn`` is not callable.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    with _OpRecorder() as recorder:
        fn(*args, **kwargs)
    return recorder.names


# ----------------------------------------------------------------------------- benchmark subjects
# Chapter 13 compares ways of computing the *same* causal multi-head self-attention layer
# (Raschka's comparison). Two of them, "einsum" and "fused QKV, explicit", are written
# the way tutorials write attention, with their own softmax-matmul: that is what is being
# measured. They are benchmark subjects, not modules to build models from; every model in
# attn_core calls attn_core.core.attention.


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
    if not isinstance(layer, MultiHeadAttention):
        raise TypeError(f"layer must be an attn_core.MultiHeadAttention, got {type(layer).__name__}")
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
