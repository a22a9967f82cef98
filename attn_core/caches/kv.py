"""Key/value caches for incremental decoding.

When a decoder generates one token at a time, the keys and values of earlier tokens do
not change; a cache keeps them so that each step only projects the *new* token.

The cache is preallocated for ``max_len`` positions, so that appending is a copy into a
slice rather than a ``torch.cat`` that reallocates the whole history at every step.

A cache **detaches**: it stores the values of the keys and values, not the autograd
graph that made them, and what ``update`` returns are views of its own storage. So no
gradient flows through a cache, neither into the cached positions nor into the ones just
added. Caches are for decoding (under ``torch.no_grad()``); train on full sequences.

Every attention layer builds the cache it needs with ``layer.make_cache(batch_size,
max_len)`` (a :class:`KVCache`, or a :class:`LatentKVCache` for multi-head latent
attention) and takes it as ``layer(x, kv_cache=cache)``. A cross-attention layer's
context, projected once, is a :class:`~attn_core.ContextKVCache` (:mod:`attn_core.layers.context_kv`).

Shape legend:
    B      batch size
    H_kv   key/value heads stored (1 for MQA, n_kv_heads for GQA, n_heads for MHA)
    T      positions stored so far (``size``); ``T_new`` positions added by one update
    D      width of one key/value head; ``d_c``/``d_r`` latent and RoPE-key widths (MLA)
"""

from __future__ import annotations

import torch

from ..checks import check_int, check_tensor

__all__ = ["SlotCache", "KVCache", "LatentKVCache", "RollingKVCache", "storage_like", "positions_after"]


def positions_after(offset: int | torch.Tensor, n: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Positions ``offset .. offset + n - 1`` of ``n`` new tokens after ``offset`` stored ones.

    ``offset`` is a cache's :attr:`~SlotCache.offset`: a Python int, or for a static cache a 0-d
    integer tensor on the device (:mod:`attn_core.caches.static`), added there: the host never reads it.

    Shapes:
        output: ``(n,)`` integer
    """
    if isinstance(offset, torch.Tensor):
        return offset + torch.arange(n, device=offset.device)
    return torch.arange(offset, offset + n, device=device)


def storage_like(
    weight: torch.Tensor, dtype: torch.dtype | None = None, device: torch.device | str | None = None
) -> dict:
    """The ``dtype`` and ``device`` a layer's cache gets: those asked for, else those of the layer's weight.

    Every ``make_cache`` passes them on: ``KVCache(..., **storage_like(self.k_proj.weight, dtype, device))``.
    """
    return {"dtype": weight.dtype if dtype is None else dtype, "device": weight.device if device is None else device}


class SlotCache:
    """Preallocated storage for named tensors that grow along one sequence axis: the base of the caches.

    Each tensor of ``shapes`` (its shape without the sequence axis) gets a buffer with ``max_len``
    inserted at ``seq_dim``. A subclass's ``update`` calls ``_append``, which checks the new tensors,
    copies their values (never the graph) after the ``size`` positions stored, returning views of all.
    """

    def __init__(self, shapes: dict[str, tuple[int, ...]], max_len: int, *, seq_dim: int, dtype, device) -> None:
        check_int("max_len", max_len)
        self.max_len, self.seq_dim, self._size = max_len, seq_dim, 0
        self._made_for: dict[str, int] = {}  # filled in by each kind of cache
        self._store = {}
        for name, shape in shapes.items():
            full = list(shape)
            full.insert(seq_dim, max_len)
            self._store[name] = torch.zeros(full, dtype=dtype, device=device)

    @property
    def size(self) -> int:
        """Number of positions stored."""
        return self._size

    @property
    def offset(self) -> int | torch.Tensor:
        """Where the positions of the next update start (the RoPE offset of a layer's new tokens).

        :attr:`size` here; a static cache returns it as a device tensor (:mod:`attn_core.caches.static`).
        """
        return self._size

    @property
    def made_for(self) -> dict[str, int]:
        """The sizes the cache was made for, by name: what a layer compares with its own (``check_made_for``)."""
        return dict(self._made_for)

    def reset(self) -> None:
        """Forget every stored position (the memory is kept for reuse)."""
        self._size = 0

    def truncate(self, size: int) -> None:
        """Keep the first ``size`` positions (speculative decoding drops its rejected tokens so)."""
        if check_int("size", size, minimum=0) > self.size or type(self).size is not SlotCache.size:
            raise ValueError(f"cannot truncate a {type(self).__name__} of {self.size} positions to size={size}")
        self._size = size

    def _check_new(self, new: dict[str, torch.Tensor]) -> int:
        """Check the tensors of one update against the stored ones; return their ``T_new``."""
        T_new = None
        for name, t in new.items():
            check_tensor(name, t, floating=True)  # an integer tensor would be cast silently by copy_
            stored = self._store[name]
            expected = list(stored.shape)
            expected[self.seq_dim] = t.shape[self.seq_dim] if t.dim() == stored.dim() else -1
            if t.dim() != stored.dim() or list(t.shape) != expected:
                want = list(stored.shape)
                want[self.seq_dim] = "T_new"
                raise ValueError(f"{name} must have shape {tuple(want)}, got {tuple(t.shape)}")
            if T_new is not None and t.shape[self.seq_dim] != T_new:
                raise ValueError(
                    f"all tensors of one update need the same T_new, got {T_new} and {t.shape[self.seq_dim]}"
                )
            T_new = t.shape[self.seq_dim]
        return T_new

    def _append(self, **new: torch.Tensor) -> tuple[torch.Tensor, ...]:
        T_new = self._check_new(new)
        if self._size + T_new > self.max_len:
            raise ValueError(
                f"cache overflow: {self._size} stored + {T_new} new > max_len={self.max_len}; "
                f"create the cache with a larger max_len"
            )
        start, end = self._size, self._size + T_new
        out = []
        for name, t in new.items():
            stored = self._store[name]
            stored.narrow(self.seq_dim, start, T_new).copy_(t.detach())  # values, not the graph
            out.append(stored.narrow(self.seq_dim, 0, end))  # a view: no copy of the history
        self._size = end
        return tuple(out)

    def numel_per_token(self) -> int:
        """Elements stored per position and batch item (summed over the stored tensors)."""
        return sum(t[0].numel() // self.max_len for t in self._store.values())

    def nbytes(self) -> int:
        """Bytes allocated for the whole preallocated cache."""
        return sum(t.numel() * t.element_size() for t in self._store.values())


class KVCache(SlotCache):
    """Keys and values of one attention layer, preallocated for ``max_len`` positions.

    Args:
        batch_size: ``B``.
        n_kv_heads: Key/value heads stored, ``H_kv``.
        head_dim: Width of one head, ``D``.
        max_len: Most positions the cache can hold.
        dtype: Storage dtype.
        device: Storage device.

    Detaches (see the module docstring): no gradient flows through the cache.

    Shapes:
        update(k, v): k, v ``(B, H_kv, T_new, D)`` -> k, v ``(B, H_kv, T + T_new, D)``
    """

    def __init__(
        self,
        batch_size: int,
        n_kv_heads: int,
        head_dim: int,
        max_len: int,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        shape = (
            check_int("batch_size", batch_size),
            check_int("n_kv_heads", n_kv_heads),
            check_int("head_dim", head_dim),
        )
        super().__init__({"k": shape, "v": shape}, max_len, seq_dim=2, dtype=dtype, device=device)
        self._made_for = dict(zip(("batch_size", "n_kv_heads", "head_dim"), shape))

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``k`` and ``v``; return every stored key and value (views, no copy).

        Shapes:
            k, v: ``(B, H_kv, T_new, D)``
            returns: two tensors ``(B, H_kv, T + T_new, D)``
        """
        return self._append(k=k, v=v)


class LatentKVCache(SlotCache):
    """The cache of multi-head latent attention: one latent ``c_KV`` and one shared RoPE key.

    Args:
        batch_size: ``B``.
        d_latent: Width of the compressed key/value latent, ``d_c``.
        d_rope: Width of the decoupled RoPE key shared by all heads, ``d_r`` (0 for none).
        max_len: Most positions the cache can hold.
        dtype: Storage dtype.
        device: Storage device.

    Detaches (see the module docstring): no gradient flows through the cache.

    Shapes:
        update(c_kv, k_rope): c_kv ``(B, T_new, d_c)``, k_rope ``(B, T_new, d_r)``
        -> ``(B, T + T_new, d_c)``, ``(B, T + T_new, d_r)``
    """

    def __init__(
        self,
        batch_size: int,
        d_latent: int,
        d_rope: int,
        max_len: int,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        check_int("batch_size", batch_size)
        check_int("d_latent", d_latent)
        check_int("d_rope", d_rope, minimum=0)
        super().__init__(
            {"c_kv": (batch_size, d_latent), "k_rope": (batch_size, d_rope)},
            max_len,
            seq_dim=1,
            dtype=dtype,
            device=device,
        )
        self._made_for = {"batch_size": batch_size, "d_latent": d_latent, "d_rope": d_rope}

    def update(self, c_kv: torch.Tensor, k_rope: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append the latent and the RoPE key; return everything stored (views, no copy).

        Shapes:
            c_kv: ``(B, T_new, d_c)``; k_rope: ``(B, T_new, d_r)``
            returns: ``(B, T + T_new, d_c)``, ``(B, T + T_new, d_r)``
        """
        return self._append(c_kv=c_kv, k_rope=k_rope)


class RollingKVCache:
    """A ring buffer of the last ``window`` keys and values: memory constant in the context length.

    A sliding-window layer (Mistral, Gemma, gpt-oss) never looks further back than its
    window, so older keys and values can be overwritten: position ``p`` lives in slot
    ``p mod window``. The slots are therefore *not* in chronological order once the ring
    has wrapped; :meth:`update` returns them in order, with their absolute positions
    (:attr:`key_positions`) from which the layer builds its mask.

    With ``sink_tokens > 0`` the first positions are kept for good in slots of their own
    (StreamingLLM, Xiao et al. 2023: the "attention sinks" that trained models lean on).

    Args:
        batch_size: ``B``.
        n_kv_heads: Key/value heads stored, ``H_kv``.
        head_dim: Width of one head, ``D``.
        window: Most recent positions kept (the layer's window, or more).
        sink_tokens: First positions kept forever.
        dtype: Storage dtype.
        device: Storage device.

    Detaches like :class:`KVCache`: no gradient flows through the cache.

    Shapes:
        update(k, v): k, v ``(B, H_kv, T_new, D)`` -> k, v ``(B, H_kv, T_k, D)`` with
        ``T_k = min(stored, sink_tokens + window) + T_new``; key_positions ``(T_k,)``
    """

    def __init__(
        self,
        batch_size: int,
        n_kv_heads: int,
        head_dim: int,
        window: int,
        *,
        sink_tokens: int = 0,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        shape = (
            check_int("batch_size", batch_size),
            check_int("n_kv_heads", n_kv_heads),
            check_int("head_dim", head_dim),
        )
        self.window = check_int("window", window)
        self.sink_tokens = check_int("sink_tokens", sink_tokens, minimum=0)
        self.slots = self.sink_tokens + self.window
        full = (shape[0], shape[1], self.slots, shape[2])  # (B, H_kv, slots, D)
        self._k = torch.zeros(full, dtype=dtype, device=device)
        self._v = torch.zeros(full, dtype=dtype, device=device)
        self._pos = torch.full((self.slots,), -1, dtype=torch.long, device=device)  # -1: empty slot
        self._size = 0
        self.key_positions: torch.Tensor | None = None
        self._made_for = dict(zip(("batch_size", "n_kv_heads", "head_dim"), shape))

    @property
    def made_for(self) -> dict[str, int]:
        """The sizes the cache was made for, by name (as :attr:`KVCache.made_for`)."""
        return dict(self._made_for)

    @property
    def size(self) -> int:
        """Number of positions seen so far (the next position's index), not the number stored."""
        return self._size

    @property
    def offset(self) -> int:
        """Where the positions of the next update start: :attr:`size` (as :attr:`SlotCache.offset`)."""
        return self.size

    def reset(self) -> None:
        """Forget every position (the memory is kept for reuse)."""
        self._size = 0
        self._pos.fill_(-1)
        self.key_positions = None

    @property
    def slot_positions(self) -> torch.Tensor:
        """The absolute position held by each slot, in storage order (``-1``: empty). Shapes: ``(slots,)``"""
        return self._pos.clone()

    @property
    def slot_keys(self) -> torch.Tensor:
        """The stored keys in storage (ring) order, not time order. Shapes: ``(B, H_kv, slots, D)``"""
        return self._k.clone()

    @property
    def slot_values(self) -> torch.Tensor:
        """The stored values in storage (ring) order. Shapes: ``(B, H_kv, slots, D)``"""
        return self._v.clone()

    def slot(self, position: int) -> int:
        """The slot where ``position`` is written: its own for a sink token, else ``position mod window`` after them."""
        if position < self.sink_tokens:
            return position
        return self.sink_tokens + (position - self.sink_tokens) % self.window

    def check_kv(self, k: torch.Tensor, v: torch.Tensor) -> int:
        """Check the keys and values of one update against the storage; return ``T_new``.

        Shapes:
            k, v: ``(B, H_kv, T_new, D)``
        """
        B, H, _, D = self._k.shape
        for name, t in (("k", k), ("v", v)):
            check_tensor(name, t, ("B", "H_kv", "T_new", "D"), floating=True)
            if (t.shape[0], t.shape[1], t.shape[3]) != (B, H, D):
                raise ValueError(f"{name} must have shape ({B}, {H}, T_new, {D}), got {tuple(t.shape)}")
        if k.shape != v.shape:
            raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
        return k.shape[2]

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Return the stored keys/values (in chronological order) followed by ``k``/``v``; then store ``k``/``v``.

        Sets :attr:`key_positions`, the absolute position of every returned key.

        Shapes:
            k, v: ``(B, H_kv, T_new, D)``
            returns: two tensors ``(B, H_kv, T_k, D)``; key_positions ``(T_k,)``
        """
        T_new = self.check_kv(k, v)
        k, v = k.detach().to(self._k.dtype), v.detach().to(self._v.dtype)  # values, not the graph; storage dtype
        # Read the ring in chronological order: slot order is not time order once it wraps.
        # The n stored slots are known on the host (sinks fill first, then the ring), so the
        # order comes from sorting the slots' positions, the empty ones (-1) first and cut
        # off: no value read back from the device (a nonzero() would wait for it).
        n = min(self._size, self.slots)
        order = torch.argsort(self._pos)[self.slots - n :]  # (n,) slots, oldest first
        new_pos = torch.arange(self._size, self._size + T_new, device=self._pos.device)  # (T_new,)
        self.key_positions = torch.cat([self._pos[order], new_pos])  # (T_k,)
        k_all = torch.cat([self._k[:, :, order], k], dim=2)  # (B, H_kv, n + T_new, D)
        v_all = torch.cat([self._v[:, :, order], v], dim=2)  # (B, H_kv, n + T_new, D)
        if T_new == 1:  # a decoding step: one slot, known on the host, written in place
            slot = self.slot(self._size)
            self._k[:, :, slot : slot + 1].copy_(k)
            self._v[:, :, slot : slot + 1].copy_(v)
            self._pos[slot : slot + 1].copy_(new_pos)
            self._size += 1
            return k_all, v_all
        # Store the new positions that survive: sink tokens and the last `window` of them.
        keep = [i for i in range(T_new) if self._size + i < self.sink_tokens or i >= T_new - self.window]
        slots = torch.tensor([self.slot(self._size + i) for i in keep], dtype=torch.long, device=self._pos.device)
        idx = torch.tensor(keep, dtype=torch.long, device=k.device)
        self._k.index_copy_(2, slots, k.index_select(2, idx))
        self._v.index_copy_(2, slots, v.index_select(2, idx))
        self._pos[slots] = new_pos[idx]
        self._size += T_new
        return k_all, v_all

    def numel_per_token(self) -> int:
        """Elements stored per slot and batch item (keys and values)."""
        return 2 * self._k.shape[1] * self._k.shape[3]

    def nbytes(self) -> int:
        """Bytes allocated: ``2·B·H_kv·(sink_tokens + window)·D`` elements, whatever the context length."""
        return 2 * self._k.numel() * self._k.element_size()
