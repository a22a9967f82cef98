"""Paged key/value caches: fixed-size blocks in one pool, a block table per sequence.

A :class:`~attn_core.KVCache` reserves ``max_len`` positions for every sequence, used or
not. A server holding many requests of unknown lengths would reserve most of its memory
for positions never written. A paged cache (vLLM's PagedAttention, Kwon et al. 2023)
cuts each layer's memory into blocks of ``block_size`` positions shared by all
sequences: a sequence owns a *block table*, the ids of its blocks in order, and takes a
new block only when its last one is full, so it wastes fewer than ``block_size``
positions. Position ``p`` of a sequence lives in block ``table[p // block_size]`` at
slot ``p % block_size``.

* :class:`BlockPool`: which blocks are free, and how many sequences hold each (a block
  of a shared prefix is held by every sequence that starts with it).
* :class:`PagedStorage`: one layer's blocks (keys and values, or MLA's latents).
* :class:`PagedKVCache`, :class:`PagedLatentKVCache`: one sequence's view of one layer's
  blocks through its table. They are a :class:`~attn_core.KVCache` and a
  :class:`~attn_core.LatentKVCache` to the layers, which take them unchanged.

Reading is the reference path: the blocks of the table are gathered into one
contiguous tensor, and attention runs on it as on a contiguous cache.

Shape legend:
    N      blocks in the pool; ``S`` positions per block (``block_size``)
    H_kv   key/value heads; ``D`` width of one head; ``d_c``/``d_r`` MLA's widths
    T      positions stored for a sequence; ``T_new`` positions added by one update
"""

from __future__ import annotations

from collections import OrderedDict

import torch

from ..checks import check_bool, check_int, check_tensor
from .kv import KVCache, LatentKVCache, RollingKVCache

__all__ = ["BlockPool", "PagedStorage", "PagedKVCache", "PagedLatentKVCache", "make_paged_storage"]


class BlockPool:
    """The bookkeeping of ``num_blocks`` blocks: a free list and a reference count per block.

    A block is *in use* while its count is positive. Released blocks go back to the free
    list in an order: a block released with ``keep=True`` (its contents are worth
    finding again, e.g. a cached prefix) goes to the back, any other to the front, and
    :meth:`allocate` takes from the front. So the blocks whose contents are kept are
    reused last, the least recently released first (LRU eviction).

    Args:
        num_blocks: Blocks in the pool, ``N``.
        block_size: Positions per block, ``S``.
    """

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = check_int("num_blocks", num_blocks)
        self.block_size = check_int("block_size", block_size)
        self._refs = [0] * num_blocks
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))  # front: next to reuse

    @property
    def num_free(self) -> int:
        """Blocks not held by any sequence (their contents may still be kept)."""
        return len(self._free)

    @property
    def num_used(self) -> int:
        """Blocks held by at least one sequence."""
        return self.num_blocks - len(self._free)

    def blocks_for(self, positions: int) -> int:
        """Blocks that ``positions`` positions of one sequence occupy: ``ceil(positions / S)``."""
        return -(-check_int("positions", positions, minimum=0) // self.block_size)

    def refcount(self, block: int) -> int:
        """How many sequences hold ``block``."""
        return self._refs[self._check_id(block)]

    def _check_id(self, block: object) -> int:
        check_int("block", block, minimum=0)
        if block >= self.num_blocks:
            raise ValueError(f"block={block} is not in the pool of num_blocks={self.num_blocks}")
        return block

    def check_in_use(self, block: int) -> int:
        """Return ``block`` if a sequence holds it; raise naming it if it is free.

        Raises:
            ValueError: The block was released (reading it would read another sequence's
                positions, or stale ones).
        """
        if self._refs[self._check_id(block)] == 0:
            raise ValueError(f"block {block} is free (released): a freed block cannot be read or written")
        return block

    def allocate(self) -> int:
        """Take the block at the front of the free list; its count becomes 1.

        Raises:
            ValueError: The pool is exhausted (every block is in use).
        """
        if not self._free:
            raise ValueError(
                f"block pool exhausted: all num_blocks={self.num_blocks} blocks (block_size={self.block_size}) "
                f"are in use; release a sequence's blocks or make a larger pool"
            )
        block, _ = self._free.popitem(last=False)
        self._refs[block] = 1
        return block

    def take(self, block: int) -> int:
        """Take a particular free block (one whose kept contents are wanted again); its count becomes 1.

        Raises:
            ValueError: The block is in use (share it with :meth:`share` instead).
        """
        if self._refs[self._check_id(block)] != 0:
            raise ValueError(f"block {block} is in use (refcount {self._refs[block]}): share it, do not take it")
        del self._free[block]
        self._refs[block] = 1
        return block

    def share(self, block: int) -> int:
        """One more sequence holds ``block`` (a block in use)."""
        self._refs[self.check_in_use(block)] += 1
        return block

    def release(self, block: int, *, keep: bool = False) -> bool:
        """One sequence fewer holds ``block``; return whether it became free.

        A freed block goes to the back of the free list with ``keep=True`` (reused last),
        to the front otherwise.
        """
        self._refs[self.check_in_use(block)] -= 1
        if self._refs[block]:
            return False
        self._free[block] = None
        if not check_bool("keep", keep):
            self._free.move_to_end(block, last=False)
        return True


class PagedStorage:
    """One layer's blocks: a tensor per stored name, indexed by ``block * S + slot``.

    Each name of ``shapes`` (its shape for one position, e.g. ``(H_kv, D)`` for keys)
    gets a tensor ``(N * S, *shape)``: the positions of a block are consecutive rows, so
    gathering a sequence is one ``index_select`` through its table.

    Args:
        kind: ``"kv"`` (keys ``k`` and values ``v``) or ``"latent"`` (MLA's ``c_kv`` and ``k_rope``).
        shapes: The shape of one position of each stored tensor.
        pool: The :class:`BlockPool` whose block ids index this storage.
        window: A sliding-window layer's window: reads start at the oldest key a new
            query can see (None: every position is read).
        dtype, device: Of the storage.

    Shapes:
        each stored tensor: ``(N * S, *shape)``
    """

    def __init__(
        self,
        kind: str,
        shapes: dict[str, tuple[int, ...]],
        pool: BlockPool,
        *,
        window: int | None = None,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        if kind not in ("kv", "latent"):
            raise ValueError(f"kind must be 'kv' or 'latent', got {kind!r}")
        if not isinstance(pool, BlockPool):
            raise TypeError(f"pool must be a BlockPool, got {type(pool).__name__}")
        self.kind, self.pool, self.shapes = kind, pool, dict(shapes)
        self.window = None if window is None else check_int("window", window)
        rows = pool.num_blocks * pool.block_size
        self.tensors = {name: torch.zeros((rows, *shape), dtype=dtype, device=device) for name, shape in shapes.items()}

    def view(self, table: list[int], size: int = 0) -> PagedKVCache | PagedLatentKVCache:
        """One sequence's cache for this layer: the blocks of ``table``, ``size`` positions already stored.

        ``table`` is kept by reference: blocks the engine appends to it are seen by the view.
        """
        cls = PagedKVCache if self.kind == "kv" else PagedLatentKVCache
        return cls(self, table, size)

    def rows(self, table: list[int], start: int, end: int) -> torch.Tensor:
        """The storage rows of positions ``start .. end - 1`` of a sequence with this ``table``.

        Shapes:
            output: ``(end - start,)`` integer
        """
        S = self.pool.block_size
        device = next(iter(self.tensors.values())).device
        positions = torch.arange(start, end, device=device)  # (end - start,)
        blocks = torch.tensor(table, dtype=torch.long, device=device)  # (len(table),)
        return blocks[positions // S] * S + positions % S

    def nbytes(self) -> int:
        """Bytes of the whole storage (every block of the pool)."""
        return sum(t.numel() * t.element_size() for t in self.tensors.values())

    def bytes_per_block(self) -> int:
        """Bytes one block holds in this layer."""
        return self.nbytes() // self.pool.num_blocks


class _PagedView:
    """What the two views share: checked writes into a sequence's blocks, reads gathered through its table.

    Not constructed directly (:meth:`PagedStorage.view`); the view does not call its cache
    base's constructor, which would allocate contiguous storage.
    """

    seq_dim: int  # of the tensors a layer passes, batch first: 2 for (1, H_kv, T, D), 1 for (1, T, d_c)

    def __init__(self, storage: PagedStorage, table: list[int], size: int) -> None:
        self.storage, self.table = storage, table
        self._size = check_int("size", size, minimum=0)
        if size > len(table) * storage.pool.block_size:
            raise ValueError(
                f"size={size} positions do not fit in the table's {len(table)} blocks "
                f"of block_size={storage.pool.block_size}"
            )

    @property
    def max_len(self) -> int:
        """Positions the sequence's blocks hold now (grows as blocks are appended to the table)."""
        return len(self.table) * self.storage.pool.block_size

    def reset(self) -> None:
        """Forget every stored position (the blocks stay the sequence's)."""
        self._size = 0

    def first_read(self, T_new: int) -> int:
        """The first position an update of ``T_new`` positions returns: 0, or the oldest key a window still sees."""
        window = self.storage.window
        return 0 if window is None else max(0, self._size - window + 1)

    def _check_room(self, T_new: int) -> int:
        """Check that ``T_new`` more positions fit in the table's blocks, all in use; return the new size."""
        end = self._size + T_new
        if end > self.max_len:
            raise ValueError(
                f"sequence past its blocks: positions {self._size}..{end - 1} need "
                f"{self.storage.pool.blocks_for(end)} blocks, its table holds {len(self.table)} "
                f"(block_size={self.storage.pool.block_size}); append blocks to the table first"
            )
        for block in self.table[: self.storage.pool.blocks_for(end)]:
            self.storage.pool.check_in_use(block)
        return end

    def _write_and_read(self, new: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        T_new = self._check_new(new)
        end = self._check_room(T_new)
        start = self.first_read(T_new)
        read = self.storage.rows(self.table, start, end)  # (end - start,): reads start at or before size
        written = read[self._size - start :]  # (T_new,)
        out = []
        for name, t in new.items():
            store = self.storage.tensors[name]
            rows = t.detach()[0].movedim(self.seq_dim - 1, 0).to(store.dtype)  # (T_new, *shape): values, not the graph
            store.index_copy_(0, written, rows)
            # The reference path: gather the sequence's blocks into one contiguous tensor.
            out.append(store.index_select(0, read).movedim(0, self.seq_dim - 1)[None])
        self._size = end
        return tuple(out)

    def _check_new(self, new: dict[str, torch.Tensor]) -> int:
        """Check the tensors of one update (one sequence, the stored shapes); return their ``T_new``."""
        T_new = None
        for name, t in new.items():
            check_tensor(name, t, floating=True)  # an integer tensor would be cast silently
            want = [1, *self.storage.shapes[name]]
            want.insert(self.seq_dim, "T_new")
            if t.dim() != len(want) or any(w != "T_new" and w != g for w, g in zip(want, t.shape)):
                raise ValueError(f"{name} must have shape {tuple(want)} (one sequence), got {tuple(t.shape)}")
            if T_new is not None and t.shape[self.seq_dim] != T_new:
                raise ValueError(
                    f"all tensors of one update need the same T_new, got {T_new} and {t.shape[self.seq_dim]}"
                )
            T_new = t.shape[self.seq_dim]
        return T_new

    def numel_per_token(self) -> int:
        """Elements stored per position (summed over the stored tensors)."""
        return sum(t[0].numel() for t in self.storage.tensors.values())

    def nbytes(self) -> int:
        """Bytes of the blocks this sequence holds in this layer."""
        return len(self.table) * self.storage.bytes_per_block()


class PagedKVCache(_PagedView, KVCache):
    """One sequence's keys and values of one layer, in the blocks of its table: a :class:`~attn_core.KVCache`.

    ``update`` writes the new positions into their blocks and returns every stored
    position gathered through the table (a sliding-window layer's: from the oldest key
    its new queries can see, a suffix the layer aligns as it aligns a full cache).

    Raises (``update``):
        ValueError: New positions past the table's blocks; a block of the table that was
            released; a tensor of the wrong shape.

    Shapes:
        update(k, v): k, v ``(1, H_kv, T_new, D)`` -> k, v ``(1, H_kv, T_read, D)``
    """

    seq_dim = 2

    def __init__(self, storage: PagedStorage, table: list[int], size: int = 0) -> None:
        super().__init__(storage, table, size)
        H, D = storage.shapes["k"]
        self._made_for = {"batch_size": 1, "n_kv_heads": H, "head_dim": D}

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store ``k`` and ``v`` in the sequence's blocks; return the positions read (see the class).

        Shapes:
            k, v: ``(1, H_kv, T_new, D)``; returns two tensors ``(1, H_kv, T_read, D)``
        """
        return self._write_and_read({"k": k, "v": v})


class PagedLatentKVCache(_PagedView, LatentKVCache):
    """One sequence's MLA latents of one layer, in the blocks of its table: a :class:`~attn_core.LatentKVCache`.

    Shapes:
        update(c_kv, k_rope): ``(1, T_new, d_c)``, ``(1, T_new, d_r)`` -> ``(1, T, d_c)``, ``(1, T, d_r)``
    """

    seq_dim = 1

    def __init__(self, storage: PagedStorage, table: list[int], size: int = 0) -> None:
        super().__init__(storage, table, size)
        (d_c,), (d_r,) = storage.shapes["c_kv"], storage.shapes["k_rope"]
        self._made_for = {"batch_size": 1, "d_latent": d_c, "d_rope": d_r}

    def update(self, c_kv: torch.Tensor, k_rope: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store the latents in the sequence's blocks; return every stored position.

        Shapes:
            c_kv: ``(1, T_new, d_c)``; k_rope: ``(1, T_new, d_r)``; returns ``(1, T, d_c)``, ``(1, T, d_r)``
        """
        return self._write_and_read({"c_kv": c_kv, "k_rope": k_rope})


def make_paged_storage(
    layer_caches: list,
    pool: BlockPool,
    *,
    dtype: torch.dtype,
    device: torch.device | str | None = None,
    kv_storage=None,
) -> list[PagedStorage]:
    """Paged storage for every layer of a model, from the caches it makes (``model.make_caches(1)``).

    A :class:`~attn_core.KVCache` becomes key/value blocks; a sliding window's
    :class:`~attn_core.RollingKVCache` too (every position is kept, and reads start at the
    window: a window with kept first tokens reads every position); MLA's
    :class:`~attn_core.LatentKVCache` latent blocks.

    Args:
        layer_caches: One cache per layer, as the model makes them.
        pool: The pool whose block ids index every layer's storage.
        dtype, device: Of the storage.
        kv_storage: Builds a key/value layer's storage instead of :class:`PagedStorage`,
            called as ``kv_storage(n_kv_heads, head_dim, pool, window=, dtype=, device=)``
            (e.g. :class:`~attn_core.caches.paged_quantized.PagedQuantizedStorage`); then
            only key/value layers are accepted.

    Raises:
        ValueError: A layer whose cache is of another kind (a recurrent state, a layer
            reading another's keys; MLA's latents with ``kv_storage``), named.
    """
    out = []
    for i, cache in enumerate(layer_caches):
        kind = type(cache)
        made = cache.made_for if kind in (KVCache, RollingKVCache, LatentKVCache) else None
        if kind in (KVCache, RollingKVCache):
            window = cache.window if kind is RollingKVCache and cache.sink_tokens == 0 else None
            H, D = made["n_kv_heads"], made["head_dim"]
            if kv_storage is not None:
                storage = kv_storage(H, D, pool, window=window, dtype=dtype, device=device)
            else:
                shapes = {"k": (H, D), "v": (H, D)}
                storage = PagedStorage("kv", shapes, pool, window=window, dtype=dtype, device=device)
        elif kind is LatentKVCache and kv_storage is None:
            shapes = {"c_kv": (made["d_latent"],), "k_rope": (made["d_rope"],)}
            storage = PagedStorage("latent", shapes, pool, dtype=dtype, device=device)
        else:
            got = "None (it reads another layer's keys and values)" if cache is None else type(cache).__name__
            accepted = "KVCache and RollingKVCache" if kv_storage else "KVCache, RollingKVCache and LatentKVCache"
            raise ValueError(f"layer {i}'s cache is {got}: this paged storage holds {accepted} layers")
        out.append(storage)
    return out
