"""Attention layers: modules with parameters that mix positions (floor 2).

* :mod:`.self_attention`: :class:`SelfAttention`, one head, for the first chapter.
* :mod:`.multihead`: :class:`MultiHeadAttention` (MHA, GQA, MQA, cross-attention), with
  its option and call checks in :mod:`.multihead_checks`.
* :mod:`.context_kv`: cross-attention to a context projected once.
* :mod:`.kv_sharing`: keys and values shared across layers.
* :mod:`.gating`: the output gate of gated attention.
* :mod:`.mla`: multi-head latent attention (DeepSeek-V2).
* :mod:`.simplified`: shaped attention and the simplified blocks (He & Hofmann, 2023).
* :mod:`.gated_deltanet`: Gated DeltaNet, a linear-attention layer (Qwen3-Next).
* :mod:`.indexer`, :mod:`.sparse_attention`: DeepSeek Sparse Attention's lightning indexer
  and the layer that attends to the keys it selects.

Layers may import :mod:`attn_core.checks` and floor 1 (:mod:`attn_core.ops`,
:mod:`attn_core.positions`, :mod:`attn_core.caches`, :mod:`attn_core.modules`); never the
config, the model or anything above.
"""
