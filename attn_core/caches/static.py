"""Static-shape key/value caches: every decoding step sees the same tensor shapes.

A :class:`~attn_core.KVCache` returns the ``T`` positions stored so far, so the key length
grows by one at every step: a fused attention kernel plans anew for each length, and a
captured step (``torch.compile(mode="reduce-overhead")``, CUDA graphs) cannot be replayed
with another shape. A static cache always returns its whole preallocated buffer of
``max_len`` positions, and the model masks the slots not filled yet (as production static
caches do: Hugging Face's ``StaticCache`` and its ``cache_position``).

The buffer here is **right-aligned**: the newest position always lives in the last slot,
and each update shifts the history left by the number of new positions. So the keys of a
query are, like those of a growing cache, the *last* ones of the buffer, and attention's
causal and sliding-window masks (aligned bottom-right, :func:`attn_core.ops.attention.attention`)
stay right with no change in the layers; only the empty slots on the left need a mask,
which :meth:`attn_core.DecoderLM.forward` builds (:func:`filled_mask`). The shift is not
free: each update reads the whole buffer and writes it back (about twice the buffer's
bytes per update, growing with ``max_len``), where Hugging Face's ``StaticCache`` writes
only the new slot in place and indexes it by ``cache_position``. It stays small next to
reading every weight of the model once per token while ``max_len`` is short.

A captured step also needs fixed addresses and no value read by the host. The buffers are
marked as static addresses, and the number of stored positions lives on the device
(:attr:`StaticKVCache.offset`, a 0-d tensor, :mod:`attn_core.caches.position_count`): the filled
slots' mask and the positions of the new tokens (RoPE's rows, absolute encodings) are
computed from it there. So a
compiled step is traced once for every position, not once per position (or with a
symbolic position, which CUDA graphs record anew for each value).

Shape legend:
    B      batch size
    H_kv   key/value heads; ``D`` width of one head; ``d_c``/``d_r`` MLA's latent and RoPE-key widths
    L      ``max_len``, the slots of the buffer (what every step returns)
    T_new  positions added by one update
"""

from __future__ import annotations

import torch

from ..caches.recurrent import GatedDeltaNetCache
from ..checks import check_bool, check_int, check_tensor
from .kv import KVCache, LatentKVCache, RollingKVCache
from .position_count import PositionCount

__all__ = [
    "StaticKVCache",
    "StaticLatentKVCache",
    "filled_mask",
    "make_static_caches",
    "is_static",
    "static_mask",
]


class _RightAligned:
    """Overrides ``SlotCache``'s bookkeeping: shift the history left, write the new positions last.

    The number of stored positions is a :class:`~attn_core.caches.position_count.PositionCount`:
    the model computes with its device copy (:attr:`offset`: the mask of the filled slots,
    the positions of the new tokens), so a captured step reads the new count on every
    replay; the checks use the host copy. A compiled step cannot read the host copy, so
    it cannot check the room left: make the caches long enough for the whole generation,
    as :func:`~attn_core.generate` does; the next eager update raises if they overflowed.
    """

    def __init__(self, *args, device_offsets: bool = True, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.device_offsets = check_bool("device_offsets", device_offsets)
        stores = tuple(self._store.values())
        self._count = PositionCount(stores[0].device)
        # The buffers are updated in place at fixed addresses: CUDA graphs may then
        # replay a step without copying them in and out (as Hugging Face's StaticCache).
        for t in stores:
            torch._dynamo.mark_static_address(t)

    @property
    def size(self) -> int:
        """Number of positions stored (read back from the device after compiled steps)."""
        return self._count.host

    @property
    def offset(self) -> int | torch.Tensor:
        """The positions stored before the next update: a 0-d integer tensor on the device (a copy).

        With ``device_offsets=False`` (a model whose RoPE speeds depend on the length, which
        the host must know) it is :attr:`size`, an int.
        """
        return self._count.device if self.device_offsets else self.size

    def reset(self) -> None:
        """Forget every stored position (the buffers keep their values, behind the mask)."""
        self._count.host = 0

    def _append(self, **new: torch.Tensor) -> tuple[torch.Tensor, ...]:
        T_new = self._check_new(new)
        L = self.max_len
        if not torch.compiler.is_compiling() and self.size + T_new > L:
            raise ValueError(
                f"static cache too short: {self.size} stored + {T_new} new positions > max_len={L}; "
                f"make the caches with max_len >= {self.size + T_new}"
            )
        out = []
        for name, t in new.items():
            store = self._store[name]
            # Shift left by T_new (the oldest T_new slots, empty while filling, drop out), then
            # write the new positions into the last T_new slots. Every size here is fixed.
            history = store.narrow(self.seq_dim, T_new, L - T_new).clone()
            store.narrow(self.seq_dim, 0, L - T_new).copy_(history)
            store.narrow(self.seq_dim, L - T_new, T_new).copy_(t.detach())  # values, not the graph
            out.append(store)  # the whole buffer: (..., L, ...)
        self._count.advance(T_new)
        return tuple(out)


class StaticKVCache(_RightAligned, KVCache):
    """A :class:`~attn_core.KVCache` whose ``update`` returns all ``max_len`` slots, newest last.

    Arguments as :class:`~attn_core.KVCache`. The slots left of the ``size`` stored
    positions hold zeros and must be masked (:func:`filled_mask`).

    Shapes:
        update(k, v): k, v ``(B, H_kv, T_new, D)`` -> k, v ``(B, H_kv, L, D)``
    """


class StaticLatentKVCache(_RightAligned, LatentKVCache):
    """MLA's :class:`~attn_core.LatentKVCache`, static: ``update`` returns all ``max_len`` slots, newest last.

    Shapes:
        update(c_kv, k_rope): ``(B, T_new, d_c)``, ``(B, T_new, d_r)`` -> ``(B, L, d_c)``, ``(B, L, d_r)``
    """


def is_static(cache: object) -> bool:
    """Whether ``cache`` is one of this module's static caches."""
    return isinstance(cache, _RightAligned)


def filled_mask(max_len: int, filled: int | torch.Tensor, *, device: torch.device | str | None = None) -> torch.Tensor:
    """Which slots of a right-aligned static cache hold a position: the last ``filled``.

    ``filled`` may be a 0-d integer tensor (a static cache's count on the device): the
    comparison then runs on the device, and the host reads nothing.

    Shapes:
        output: ``(L,)`` boolean, True = a stored position (may be attended)
    """
    check_int("max_len", max_len)
    if isinstance(filled, torch.Tensor):
        check_tensor("filled", filled, (), integer=True)
        return torch.arange(max_len, device=filled.device) >= max_len - filled
    check_int("filled", filled, minimum=0)
    if filled > max_len:
        raise ValueError(f"filled={filled} positions do not fit in max_len={max_len} slots")
    return torch.arange(max_len, device=device) >= max_len - filled


def make_static_caches(
    layer_caches: list,
    max_len: int,
    *,
    dtype: torch.dtype,
    device: torch.device | str | None = None,
    device_offsets: bool = True,
) -> list:
    """Static counterparts of a model's per-layer caches (``model.make_caches(B, max_len)``), same sizes.

    A :class:`~attn_core.KVCache` or a sliding window's :class:`~attn_core.RollingKVCache`
    becomes a :class:`StaticKVCache` of ``max_len`` slots (a window is then masked inside
    the buffer, not dropped: the memory is that of a full layer); MLA's cache a
    :class:`StaticLatentKVCache`; a Gated DeltaNet layer's constant-size cache and ``None``
    (a layer sharing another's keys) are kept as they are.

    ``device_offsets``: whether the caches' :attr:`~StaticKVCache.offset` is a device
    tensor (positions the host never reads: a step that CUDA graphs can replay) or an int.

    Raises:
        ValueError: A cache of another kind (e.g. DeepSeek Sparse Attention's), named.
    """
    check_int("max_len", max_len)
    storage = {"dtype": dtype, "device": device, "device_offsets": check_bool("device_offsets", device_offsets)}
    out = []
    for i, cache in enumerate(layer_caches):
        if cache is None or isinstance(cache, GatedDeltaNetCache):
            out.append(cache)
            continue
        made = cache.made_for if type(cache) in (KVCache, RollingKVCache, LatentKVCache) else None
        if type(cache) in (KVCache, RollingKVCache):
            out.append(StaticKVCache(made["batch_size"], made["n_kv_heads"], made["head_dim"], max_len, **storage))
        elif type(cache) is LatentKVCache:
            out.append(StaticLatentKVCache(made["batch_size"], made["d_latent"], made["d_rope"], max_len, **storage))
        else:
            raise ValueError(
                f"layer {i}'s cache is a {type(cache).__name__}: static decoding supports KVCache, RollingKVCache, "
                f"LatentKVCache and GatedDeltaNetCache"
            )
    return out


def static_mask(
    caches: list, offset: int | torch.Tensor, T: int, alibi, device: torch.device | str | None = None
) -> torch.Tensor:
    """The mask of a model step with static caches: the filled slots (and ALiBi's bias over all slots).

    The caches are right-aligned: the ``offset + T`` positions stored after this call are
    the last slots, so the attention's own causal mask, aligned bottom-right, stays right;
    only the empty slots on the left are hidden.

    Args:
        caches: The model's caches (at least one static).
        offset: Positions stored before this call (an int, or a static cache's 0-d device
            tensor, :attr:`StaticKVCache.offset`); ``T`` new ones.
        alibi: The model's :class:`~attn_core.ALiBi`, or None.

    Shapes:
        output: ``(1, 1, T, L)`` boolean, or ``(1, H, T, L)`` float with ALiBi

    Raises:
        ValueError: The caches are too short for ``offset + T`` positions, with the sizes
            (an int ``offset``; a device count is checked by the caches' update).
    """
    L = next(c.max_len for c in caches if is_static(c))
    if not isinstance(offset, torch.Tensor) and offset + T > L:
        raise ValueError(
            f"static cache too short: {offset} stored + {T} new positions > max_len={L}; "
            f"make the caches with max_len >= {offset + T}"
        )
    valid = filled_mask(L, offset + T, device=device)  # (L,)
    if alibi is None:
        return valid.expand(1, 1, T, L)
    # ALiBi's bias depends on q − k only, and bottom-right aligned over L slots it gives
    # each stored key its true distance to the query.
    bias = alibi.bias(T, L, device=device)[None]  # (1, H, T, L)
    return bias.masked_fill(~valid, float("-inf"))
