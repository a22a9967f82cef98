"""Keys and values ready to attend to, and cross-layer KV sharing (Brandon et al. 2024).

:class:`SharedKV` is what :class:`~attn_core.MultiHeadAttention` hands to its one tail
(attend, gate, merge heads, project): the keys and values with the mask to attend with.
A layer whose keys and values later layers reuse keeps the last one it computed; a layer
built with ``kv_source=`` holds a :class:`KVSharing`, its link to that source, and has no
key/value projections and no cache of its own. :func:`borrows_kv` tells which layers do.

Shape legend:
    B        batch size
    T_q      queries of the call that computed the keys; ``T_k`` keys attended to
    H_kv     key/value heads; ``D`` width of one head
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["SharedKV", "KVSharing", "borrows_kv"]

# What a layer must share with its source to attend with the source's keys, values and mask.
SAME_AS_SOURCE = ("n_kv_heads", "head_dim", "causal", "window", "sink_tokens", "chunk", "d_model")


@dataclass(frozen=True)
class SharedKV:
    """Keys and values ready to attend to, with the mask that goes with them.

    Attributes:
        k: The keys, after QK-norm, RoPE and the cache.
        v: The values.
        past: Positions before this call's queries (their RoPE offset): an int, or a static
            cache's 0-d device tensor (:attr:`~attn_core.caches.static.StaticKVCache.offset`).
        n_queries: Number of queries ``T_q`` of the call that computed them.
        mask: Boolean or float mask to attend with, or None.
        is_causal: Whether the core adds the causal mask itself.
        window: The sliding window the core applies itself, or None.

    Shapes:
        k, v: ``(B, H_kv, T_k, D)``; mask: broadcasts to ``(B, H, T_q, T_k)``
    """

    k: torch.Tensor
    v: torch.Tensor
    past: int | torch.Tensor
    n_queries: int
    mask: torch.Tensor | None
    is_causal: bool
    window: int | None


class KVSharing:
    """The link from a layer that reuses keys and values to the layer that computes them.

    The source is held here, not registered as a submodule of the reader: its weights
    belong to the source. Building the link marks the source as publishing: from then on
    each of its calls keeps its :class:`SharedKV` in ``source.shared_kv``.

    Args:
        reader: The layer that reuses the keys and values.
        source: The earlier layer that computes them, on the same input, just before.

    Raises:
        ValueError: ``source`` borrows its keys and values itself, or differs from
            ``reader`` in one of ``n_kv_heads``, ``head_dim``, ``causal``, ``window``,
            ``sink_tokens``, ``chunk``, ``d_model``.
    """

    def __init__(self, reader: nn.Module, source: nn.Module) -> None:
        if borrows_kv(source):
            raise ValueError("kv_source must compute its own keys and values (it has a kv_source itself)")
        for name in SAME_AS_SOURCE:
            if getattr(source, name) != getattr(reader, name):
                raise ValueError(
                    f"kv_source has {name}={getattr(source, name)!r}, this layer {name}={getattr(reader, name)!r}: "
                    f"a layer can only reuse keys and values of the same shape and mask"
                )
        self.source = source
        source.publishes_kv = True

    def read(self, x: torch.Tensor, mask: torch.Tensor | None, kv_cache: object) -> SharedKV:
        """The keys and values the source computed on this input, for the reader's queries.

        Raises:
            ValueError: a ``kv_cache`` or ``mask`` is given (the source has them), or the
                source has not run on an input of this batch size and length.

        Shapes:
            x: ``(B, T_q, d_model)``; returns keys and values ``(B, H_kv, T_k, D)``
        """
        if kv_cache is not None:
            raise ValueError("a layer with a kv_source has no cache of its own (make_cache returns None): pass None")
        shared = self.source.shared_kv
        if shared is None or shared.n_queries != x.shape[1] or shared.k.shape[0] != x.shape[0]:
            raise ValueError("kv_source has not run on this input yet: call the source layer first")
        if mask is not None:
            raise ValueError("a layer with a kv_source attends with its source's mask: pass mask= to the source only")
        return shared


def borrows_kv(layer: object) -> bool:
    """Whether ``layer`` reuses another layer's keys and values (built with ``kv_source=``).

    Such a layer has no cache of its own: its ``make_cache`` returns None.
    """
    return isinstance(getattr(layer, "kv_sharing", None), KVSharing)
