"""What decoding carries from step to step (floor 1; imports only :mod:`attn_core.checks`).

* :mod:`.kv`: :class:`KVCache`, :class:`LatentKVCache` (MLA), :class:`RollingKVCache`
  (sliding windows), :class:`SlotCache`, and the helpers every cache shares.
* :mod:`.quantized`: int8 quantization of keys (per channel) and values (per token),
  and a cache that stores them so.
* :mod:`.paged`: blocks in a shared pool and a block table per sequence (a server's
  cache), read through the table; :mod:`.paged_quantized` stores the blocks in int8.
* :mod:`.static`: static-shape versions of those caches, for compiled decoding.
* :mod:`.recurrent`: the constant-size state of a Gated DeltaNet layer.
* :mod:`.position_count`: a cache's count on the host and on the device (for CUDA graphs).
* :mod:`.size`: cache elements per token, by formula.

A layer builds its own cache (``layer.make_cache``), so caches know nothing of layers.
Modules here import each other and :mod:`attn_core.checks`, nothing else of the package.
"""
