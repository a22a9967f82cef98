"""KV-cache size of one attention layer, measured from the cache the layer itself fills.

:func:`kv_cache_elements_per_token` builds a layer's own cache, runs one token through the
layer and counts what was stored per position: DeepSeek-V2's Table 1 measured rather than
written down (``2·H·d_h`` for MHA, ``2·n_g·d_h`` for GQA, ``2·d_h`` for MQA, ``d_c + d_r``
for MLA). The same counts by formula for a whole model are
:func:`attn_core.teach.window.kv_cache_bytes`.

Shape legend:
    d_model  model width of the layer (its input is ``(1, 1, d_model)``)
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["kv_cache_elements_per_token"]


@torch.no_grad()
def kv_cache_elements_per_token(module: nn.Module) -> int:
    """KV-cache elements one token occupies in one layer, measured from the cache tensors.

    Builds the layer's cache (a :class:`~attn_core.caches.kv.LatentKVCache` for MLA, a
    :class:`~attn_core.KVCache` of ``n_kv_heads`` heads for MHA/GQA/MQA), runs one token
    through the layer so that the layer itself fills it, and counts the elements stored
    per position. This is DeepSeek-V2's Table 1: ``2·H·d_h`` (MHA), ``2·n_g·d_h`` (GQA),
    ``2·d_h`` (MQA), ``d_c + d_r`` (MLA).

    Args:
        module: An attention layer: a :class:`~attn_core.layers.mla.MultiHeadLatentAttention`, a
            :class:`~attn_core.MultiHeadAttention` (and its GQA/MQA forms), or any layer
            that builds its cache with ``make_cache(batch_size, max_len)``.

    Returns:
        Elements per token (multiply by the element size for bytes).
    """
    if not callable(getattr(module, "make_cache", None)):
        raise TypeError(f"module must be an attention layer with a make_cache method, got {type(module).__name__}")
    cache = module.make_cache(1, 1)
    w = next(module.parameters())
    module(torch.zeros(1, 1, module.d_model, dtype=w.dtype, device=w.device), kv_cache=cache)
    if cache.size != 1:  # pragma: no cover - guards against a layer that bypasses its cache
        raise RuntimeError(f"the layer did not fill its cache (size={cache.size})")
    return cache.numel_per_token()
