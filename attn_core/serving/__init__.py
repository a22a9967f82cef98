"""Serving a decoder to many requests at once (floor 5).

What a server adds around the model of :mod:`attn_core.model`: where the keys and values
of many sequences live (a paged cache of fixed-size blocks), which requests run
at each step (an engine with continuous batching and prefix caching), and how to spend
fewer steps of the large model (speculative decoding).

* :mod:`.engine`: :class:`Engine` (``add``, ``step``, ``run``, ``stats``), greedy decoding of
  many requests at once.
* :mod:`.scheduler`: which requests run at each step (continuous batching, chunked
  prefill, preemption).
* :mod:`.prefix`: block tables whose full blocks are shared by the hash of their prefix.
* :mod:`.batch`: one packed model step over many sequences, attention per sequence.
* The paged cache itself is :mod:`attn_core.caches.paged`.
* :mod:`.speculative`: :func:`speculative_generate` (a draft model or :class:`PromptLookup`
  proposes, the target verifies ``k`` tokens per call).

May import :mod:`attn_core.model` and every floor below it; never :mod:`attn_core.hf` or
:mod:`attn_core.teach`.
"""

from .engine import Engine, EngineStats

__all__ = ["Engine", "EngineStats"]
