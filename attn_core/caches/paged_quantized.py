"""A paged key/value cache in int8: each full block quantized, keys per channel, values per token.

The blocks of :mod:`attn_core.caches.paged` hold int8 codes here, with the scales and
zero points of :func:`~attn_core.caches.quantized.quantize_int8` (KIVI, Liu et al. 2024):
a block's keys share one scale per channel over its ``S`` positions (so a block is
quantized once it is full), its values one scale per position over the channels. A
sequence's newest, partial block waits in full precision in its view (the *residual*),
and is quantized into its block when it fills. So the paged int8 cache holds exactly
what a :class:`~attn_core.caches.quantized.QuantizedKVCache` with ``group = S`` holds,
and returns the same numbers.

A full block is never written again, so a shared prefix block (:mod:`attn_core.serving.prefix`)
is quantized once, by the sequence that filled it.

Shape legend:
    N      blocks in the pool; ``S`` positions per block
    H_kv   key/value heads; ``D`` width of one head
    T      positions stored for a sequence; ``T_new`` added by one update
"""

from __future__ import annotations

import torch

from ..checks import check_int
from .paged import BlockPool, PagedKVCache, PagedStorage
from .quantized import dequantize_int8, quantize_int8

__all__ = ["PagedQuantizedStorage", "PagedQuantizedKVCache"]


class PagedQuantizedStorage(PagedStorage):
    """One layer's key/value blocks in int8, with the scales and zero points of each block.

    Args:
        n_kv_heads, head_dim: ``H_kv`` and ``D``.
        pool: The :class:`~attn_core.caches.paged.BlockPool` whose ids index the blocks.
        window: A sliding-window layer's window (reads start where the window does).
        dtype: The dtype of the residual and of what reads return (the model's).
        device: Of the storage.

    Shapes:
        codes ``k``, ``v``: ``(N * S, H_kv, D)`` int8; key scale and zero ``(N, H_kv, D)`` (per block
        and channel); value scale and zero ``(N * S, H_kv, 1)`` (per position)
    """

    def __init__(
        self,
        n_kv_heads: int,
        head_dim: int,
        pool: BlockPool,
        *,
        window: int | None = None,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        shape = (n_kv_heads, head_dim)
        super().__init__("kv", {"k": shape, "v": shape}, pool, window=window, dtype=torch.int8, device=device)
        self.dtype = dtype
        stats = torch.promote_types(dtype, torch.float32)  # as quantize_int8 returns them
        N, rows = pool.num_blocks, pool.num_blocks * pool.block_size
        self.tensors["k_scale"] = torch.zeros(N, *shape, dtype=stats, device=device)
        self.tensors["k_zero"] = torch.zeros(N, *shape, dtype=stats, device=device)
        self.tensors["v_scale"] = torch.zeros(rows, n_kv_heads, 1, dtype=stats, device=device)
        self.tensors["v_zero"] = torch.zeros(rows, n_kv_heads, 1, dtype=stats, device=device)

    def view(self, table: list[int], size: int = 0) -> PagedQuantizedKVCache:
        """One sequence's cache for this layer (``size`` must be whole blocks: a residual is not stored here)."""
        return PagedQuantizedKVCache(self, table, size)

    def store_blocks(self, table: list[int], first: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Quantize whole blocks of one sequence, starting with its block number ``first``.

        Shapes:
            k, v: ``(n·S, H_kv, D)``
        """
        S = self.pool.block_size
        n = k.shape[0] // S
        blocks = torch.tensor(table[first : first + n], dtype=torch.long, device=k.device)  # (n,)
        rows = self.rows(table, first * S, (first + n) * S)  # (n·S,)
        q, scale, zero = quantize_int8(k.reshape(n, S, *k.shape[1:]), dim=1)  # keys per channel over a block
        self.tensors["k"].index_copy_(0, rows, q.reshape(k.shape))
        self.tensors["k_scale"].index_copy_(0, blocks, scale[:, 0])
        self.tensors["k_zero"].index_copy_(0, blocks, zero[:, 0])
        q, scale, zero = quantize_int8(v, dim=-1)  # values per position over the channels
        self.tensors["v"].index_copy_(0, rows, q)
        self.tensors["v_scale"].index_copy_(0, rows, scale)
        self.tensors["v_zero"].index_copy_(0, rows, zero)

    def read_blocks(self, table: list[int], start: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Dequantized keys and values of positions ``start .. end - 1``, all in full blocks.

        Shapes:
            returns: two tensors ``(end - start, H_kv, D)`` in :attr:`dtype`
        """
        S, t = self.pool.block_size, self.tensors
        rows = self.rows(table, start, end)  # (end - start,)
        blocks = rows // S  # the block of each position: its keys' scale and zero
        k = dequantize_int8(t["k"][rows], t["k_scale"][blocks], t["k_zero"][blocks], self.dtype)
        v = dequantize_int8(t["v"][rows], t["v_scale"][rows], t["v_zero"][rows], self.dtype)
        return k, v


class PagedQuantizedKVCache(PagedKVCache):
    """One sequence's int8 keys and values of one layer: its full blocks quantized, the newest in full precision.

    Returns what it holds, as :class:`~attn_core.caches.quantized.QuantizedKVCache` does:
    the full blocks dequantized (those that the new positions just filled included), then
    the residual.

    Shapes:
        update(k, v): k, v ``(1, H_kv, T_new, D)`` -> k, v ``(1, H_kv, T_read, D)``
    """

    def __init__(self, storage: PagedQuantizedStorage, table: list[int], size: int = 0) -> None:
        super().__init__(storage, table, size)
        S = storage.pool.block_size
        if size % S:
            raise ValueError(f"an int8 view starts at whole blocks: size={size} is not a multiple of block_size={S}")
        H, D = storage.shapes["k"]
        self._res_k = torch.zeros(S, H, D, dtype=storage.dtype, device=storage.tensors["k"].device)
        self._res_v = torch.zeros_like(self._res_k)

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store ``k`` and ``v`` (quantizing every block they fill); return the positions read.

        Shapes:
            k, v: ``(1, H_kv, T_new, D)``; returns two tensors ``(1, H_kv, T_read, D)``
        """
        T_new = self._check_new({"k": k, "v": v})
        st, S = self.storage, self.storage.pool.block_size
        end, start = self._check_room(T_new), self.first_read(T_new)
        r = self._size % S  # positions waiting in the residual
        k_all = torch.cat((self._res_k[:r], k.detach()[0].transpose(0, 1).to(st.dtype)))  # (r + T_new, H, D)
        v_all = torch.cat((self._res_v[:r], v.detach()[0].transpose(0, 1).to(st.dtype)))
        full = (r + T_new) // S * S  # positions that fill whole blocks now
        if full:
            st.store_blocks(self.table, (self._size - r) // S, k_all[:full], v_all[:full])
        rest = r + T_new - full
        self._res_k[:rest], self._res_v[:rest] = k_all[full:], v_all[full:]
        self._size = end
        quantized = end - rest
        k_out, v_out = st.read_blocks(self.table, min(start, quantized), quantized)
        k_out = torch.cat((k_out, self._res_k[:rest]))[max(0, start - quantized) :]  # (T_read, H, D)
        v_out = torch.cat((v_out, self._res_v[:rest]))[max(0, start - quantized) :]
        return k_out.transpose(0, 1)[None], v_out.transpose(0, 1)[None]

    def truncate(self, size: int) -> None:
        """Keep the first ``size`` positions: only residual ones can go (a quantized block lost its originals).

        Raises:
            ValueError: ``size`` outside ``[quantized, size]``.
        """
        quantized = self._size // self.storage.pool.block_size * self.storage.pool.block_size
        if not quantized <= check_int("size", size, minimum=0) <= self._size:
            raise ValueError(
                f"an int8 paged cache can be truncated only within its full-precision residual: size must be in "
                f"[{quantized}, {self._size}], got size={size}"
            )
        self._size = size

    def nbytes(self) -> int:
        """Bytes of the blocks this sequence holds in this layer, and of its full-precision residual."""
        return super().nbytes() + 2 * self._res_k.numel() * self._res_k.element_size()
