"""Cached cross-attention: a context's keys and values projected once, reused at every step.

An encoder-decoder's decoder attends to the same source at every step it writes.
``layer.cache_context(memory)`` projects ``memory`` into a :class:`~attn_core.ContextKVCache`
once; ``layer(x, context_kv=cache)`` then gives the output of ``layer(x, memory)`` without
projecting it again. This module holds the rules for which layers and calls may do that,
and turns such a cache into the :class:`~attn_core.layers.kv_sharing.SharedKV` that
:class:`~attn_core.MultiHeadAttention`'s one tail attends to.

Shape legend:
    B        batch size
    T_q      queries; ``T_k`` context positions
    H_kv     key/value heads; ``D`` width of one head
"""

from __future__ import annotations

import torch
from torch import nn

from ..checks import check_instance, check_tensor
from .kv_sharing import SharedKV, borrows_kv

__all__ = ["ContextKVCache", "check_cross_cacheable", "check_context_kv", "context_keys"]


class ContextKVCache:
    """The keys and values a cross-attention layer reads from its context, projected once.

    In an encoder-decoder, the source (the encoder's output) does not change while the
    decoder writes: its keys and values are the same at every decoding step. A layer's
    ``cache_context(context)`` projects them once into this object, and every later call
    ``layer(x, context_kv=cache)`` reuses them instead of projecting the context again.
    Unlike :class:`KVCache` it never grows: it holds one whole source sequence.

    Detaches (as every cache, :mod:`attn_core.caches.kv`): no gradient flows through it.

    Shapes:
        k, v: ``(B, H_kv, T_k, D)``
    """

    def __init__(self, k: torch.Tensor, v: torch.Tensor) -> None:
        check_tensor("k", k, ("B", "H_kv", "T_k", "D"), floating=True)
        check_tensor("v", v, ("B", "H_kv", "T_k", "D"), floating=True)
        if k.shape != v.shape:
            raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
        self.k, self.v = k.detach(), v.detach()  # values, not the graph

    @property
    def size(self) -> int:
        """Number of context positions ``T_k``."""
        return self.k.shape[2]

    def numel_per_token(self) -> int:
        """Elements stored per context position and batch item (keys and values)."""
        return 2 * self.k.shape[1] * self.k.shape[3]

    def nbytes(self) -> int:
        """Bytes held by the keys and values."""
        return 2 * self.k.numel() * self.k.element_size()


def check_cross_cacheable(layer: nn.Module) -> None:
    """Cached cross-attention needs keys that do not depend on the step: no causality, RoPE or shared K/V.

    Raises:
        ValueError: ``layer`` is causal, has a RoPE, or borrows its keys and values.
    """
    for name, value, bad in (
        ("causal", layer.causal, layer.causal),
        ("rope", layer.rope, layer.rope is not None),
        ("kv_source", "shared", borrows_kv(layer)),
    ):
        if bad:
            raise ValueError(f"cached cross-attention needs a layer without {name}, this one has {name}={value!r}")


def check_context_kv(layer: nn.Module, context_kv: object, x: torch.Tensor, kv_cache: object) -> None:
    """``context_kv`` must be ``layer``'s kind of cache, for this batch, without a self-attention cache.

    Raises:
        TypeError: ``context_kv`` is not a :class:`~attn_core.ContextKVCache`.
        ValueError: ``layer`` cannot cache a context (:func:`check_cross_cacheable`), a
            ``kv_cache`` is given too, or the cache's batch size, heads or head width differ.

    Shapes:
        x: ``(B, T_q, d_model)``; context_kv keys and values ``(B, H_kv, T_k, D)``
    """
    check_instance("context_kv", context_kv, ContextKVCache)
    check_cross_cacheable(layer)
    if kv_cache is not None:
        raise ValueError("kv_cache is for self-attention; with context_kv the keys are already cached")
    B, H_kv, _, D = context_kv.k.shape
    if B != x.shape[0] or H_kv != layer.n_kv_heads or D != layer.head_dim:
        raise ValueError(
            f"context_kv holds (B, H_kv, D) = ({B}, {H_kv}, {D}); this call needs "
            f"({x.shape[0]}, {layer.n_kv_heads}, {layer.head_dim}): build it with this layer's cache_context"
        )


def context_keys(context_kv: ContextKVCache, mask: torch.Tensor | None, n_queries: int) -> SharedKV:
    """The cached context's keys and values, to attend to with ``mask`` (cross-attention is not causal).

    Shapes:
        keys and values ``(B, H_kv, T_k, D)``; mask broadcasts to ``(B, H, T_q, T_k)``
    """
    return SharedKV(context_kv.k, context_kv.v, past=0, n_queries=n_queries, mask=mask, is_causal=False, window=None)
