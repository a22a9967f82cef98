"""Serving a decoder to many requests at once (floor 5).

What a server adds around the model of :mod:`attn_core.model`: where the keys and values
of many sequences live (a paged cache of fixed-size blocks), which requests run
at each step (an engine with continuous batching and prefix caching), and how to spend
fewer steps of the large model (speculative decoding).

* :mod:`.speculative`: :func:`speculative_generate` (a draft model or :class:`PromptLookup`
  proposes, the target verifies ``k`` tokens per call).

May import :mod:`attn_core.model` and every floor below it; never :mod:`attn_core.hf` or
:mod:`attn_core.teach`.
"""
