"""A decoder language model built from a config (floor 4).

* :mod:`.build`: ``make_layer(config, i)``, layer ``i`` built from the config.
* :mod:`.blocks`: the transformer block (pre-, post- and sandwich norm; parallel).
* :mod:`.decoder`: :class:`DecoderLM`, the model: embeddings, the layers, the head.
* :mod:`.padding`: left-padded batches (positions from the attention mask).
* :mod:`.params`: the parameter count by formula.
* :mod:`.generation`: autoregressive decoding, with or without caches.

May import :mod:`attn_core.config` and every floor below it; never :mod:`attn_core.hf` or
:mod:`attn_core.teach`.
"""
