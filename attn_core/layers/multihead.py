"""Multi-head attention: one class for MHA, GQA, MQA and cross-attention (the single head: self_attention).

Every module here projects its inputs and then calls :func:`attn_core.ops.attention.attention`;
none of them has a softmax-matmul of its own.

One path: :meth:`MultiHeadAttention.forward` projects the queries, takes its keys and
values from one of three places, and ends in one tail (attend, gate each head, merge the
heads, project). The keys and values are a :class:`~attn_core.layers.kv_sharing.SharedKV`:

* this layer's own projections of ``x`` or ``context``, after a cache's earlier ones;
* a context projected once (cached cross-attention, :mod:`attn_core.layers.context_kv`);
* an earlier layer's (cross-layer KV sharing, :mod:`attn_core.layers.kv_sharing`).

The checks of its options and calls are in :mod:`attn_core.layers.multihead_checks`.

Shape legend:
    B        batch size
    T        sequence length; ``T_q`` queries, ``T_k`` keys (cross-attention, caches)
    d_model  model width; ``d_context`` width of the sequence cross-attention reads
    H        query heads; ``H_kv`` key/value heads (``n_kv_heads``)
    D        width of one head, ``d_model // H``
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn

from ..caches.kv import KVCache, RollingKVCache, positions_after, storage_like
from ..checks import check_instance, check_int, check_tensor
from ..modules.norms import make_qk_norm
from ..ops.attention import attend
from ..ops.masks import position_mask
from ..ops.shapes import head_mask, merge_heads, split_heads
from ..positions.positional import query_temperature
from .context_kv import ContextKVCache, check_cross_cacheable, context_keys
from .gating import gate_width, output_gate
from .kv_sharing import KVSharing, SharedKV
from .multihead_checks import check_mha_call, check_mha_options

__all__ = ["MultiHeadAttention", "GroupedQueryAttention", "MultiQueryAttention"]


class MultiHeadAttention(nn.Module):
    """Multi-head attention; also grouped-query, multi-query and cross-attention.

    * ``n_kv_heads=None`` (= ``n_heads``): multi-head attention (Vaswani et al., 2017).
    * ``1 < n_kv_heads < n_heads``: grouped-query attention (Ainslie et al., 2023); query
      head ``h`` shares key/value head ``h // (n_heads // n_kv_heads)``.
    * ``n_kv_heads=1``: multi-query attention (Shazeer, 2019).
    * ``forward(x, context)``: cross-attention; queries come from ``x``, keys and values
      from ``context``, which may have another length and (``d_context``) another width.

    Args:
        d_model: Model width; must be divisible by ``n_heads``.
        n_heads: Number of query heads ``H``.
        n_kv_heads: Number of key/value heads ``H_kv``; must divide ``n_heads``.
        causal: Block attention to future positions (self-attention only).
        bias: Give the projections a bias.
        dropout: Dropout probability on the attention weights, in training mode.
        rope: A :class:`~attn_core.RotaryEmbedding` to rotate queries and keys, or None.
        d_context: Width of the ``context`` sequence for cross-attention (default ``d_model``).
        head_dim: Width ``D`` of one head; default ``d_model // n_heads``. Another value
            decouples the heads from the model width (Qwen3, Gemma): the query and output
            projections are then ``d_model × H·D``.
        qk_norm: RMS-normalise every query and key head over its ``D`` dimensions (a learned
            gain per dimension, shared by the heads) before RoPE: Qwen3, Gemma 3. ``"all_heads"``:
            one RMSNorm over a token's ``H·D`` query (``H_kv·D`` key) values together, a gain
            per value (OLMo 2/3; :class:`~attn_core.modules.norms.HeadsRMSNorm`).
        norm_eps: The ε of the QK-norm's :class:`~attn_core.RMSNorm` s.
        gate: An output gate per head (Qiu et al. 2025, arXiv 2505.06708; Qwen3-Next):
            ``"elementwise"`` (one sigmoid per channel) or ``"headwise"`` (one per head),
            computed from ``x`` by ``gate_proj`` and applied to each head's attention
            output before ``out_proj`` (:func:`~attn_core.layers.gating.output_gate`). ``None``: no gate.
        softcap: Attention-logit soft-capping (Gemma 2): scores become
            ``softcap · tanh(scores / softcap)`` before the mask. ``None``: no cap.
        window: Sliding window (Mistral, Gemma, gpt-oss): each query sees
            itself and the ``window - 1`` positions before it. Needs ``causal=True``. Its
            :meth:`make_cache` is then a constant-memory :class:`~attn_core.RollingKVCache`.
        sinks: A learned logit per head in every softmax denominator (gpt-oss's attention
            sinks, the parameter ``self.sinks`` of shape ``(H,)``, initialised to 0): a head
            may put mass on "nothing". Needs ``causal=True``.
        sink_tokens: With a window, the first ``sink_tokens`` positions stay visible to
            every query (StreamingLLM, Xiao et al. 2023).
        kv_source: An earlier layer whose keys and values this one reuses (cross-layer KV
            sharing, Brandon et al. 2024): this layer has no key/value projections and no
            cache of its own, and must run after ``kv_source`` on the same input. Same
            ``n_kv_heads``, ``head_dim``, ``window`` and ``sink_tokens`` as the source
            (:class:`~attn_core.layers.kv_sharing.KVSharing`; the layer's ``kv_source`` property
            returns it).
        qkv_bias: Biases on the query, key and value projections only, none on the output
            projection (Qwen2, GLM-4). Not with ``bias=True``, which gives every projection one.
        scale: What the scores ``q·k`` are multiplied by before the softmax; ``None``: ``1/√D``.
            Gemma 2 27B scales by ``query_pre_attn_scalar**-0.5`` (144 for heads of 128),
            Granite by its ``attention_multiplier``.
        chunk: Chunked attention (Llama 4's RoPE layers, ``attention_chunk_size``): the
            positions are cut into chunks of ``chunk`` (``0..chunk-1``, ...) and a query sees
            only the earlier keys of its own chunk (:func:`~attn_core.ops.masks.position_mask`).
            Needs ``causal=True``; not with ``window``. Its cache is a full
            :class:`~attn_core.KVCache` (the mask hides the earlier chunks).
        temperature: ``(floor_scale, attn_scale)``: each query is multiplied by
            :func:`~attn_core.positions.positional.query_temperature` of its position, after RoPE and
            QK-norm (Llama 4's NoPE layers, ``attn_temperature_tuning``). ``None``: no temperature.

    Shapes:
        x: ``(B, T_q, d_model)``; context: ``(B, T_k, d_context)``
        output: ``(B, T_q, d_model)``; weights: ``(B, H, T_q, T_k)``
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        n_kv_heads: int | None = None,
        causal: bool = False,
        bias: bool = False,
        dropout: float = 0.0,
        rope: nn.Module | None = None,
        d_context: int | None = None,
        head_dim: int | None = None,
        qk_norm: bool | str = False,
        norm_eps: float = 1e-6,
        gate: str | None = None,
        softcap: float | None = None,
        window: int | None = None,
        sinks: bool = False,
        sink_tokens: int = 0,
        kv_source: MultiHeadAttention | None = None,
        qkv_bias: bool = False,
        scale: float | None = None,
        chunk: int | None = None,
        temperature: tuple[float, float] | None = None,
    ) -> None:
        super().__init__()
        options = check_mha_options(
            d_model, n_heads, n_kv_heads=n_kv_heads, causal=causal, bias=bias, dropout=dropout, rope=rope,
            d_context=d_context, head_dim=head_dim, qk_norm=qk_norm, gate=gate, softcap=softcap, window=window,
            sinks=sinks, sink_tokens=sink_tokens, qkv_bias=qkv_bias, scale=scale, chunk=chunk, temperature=temperature,
        )  # fmt: skip
        for name, value in options.items():  # d_model, n_heads, ..., rope (registered before the projections)
            setattr(self, name, value)
        H, H_kv, D = n_heads, self.n_kv_heads, self.head_dim
        proj_bias = bias or qkv_bias  # Qwen2's layout (qkv_bias): biases on the query/key/value projections only
        self.q_proj = nn.Linear(d_model, H * D, bias=proj_bias)
        self.k_proj = nn.Linear(self.d_context, H_kv * D, bias=proj_bias)
        self.v_proj = nn.Linear(self.d_context, H_kv * D, bias=proj_bias)
        self.out_proj = nn.Linear(H * D, d_model, bias=bias)
        # QK-norm (qk_norm=True): one RMSNorm over each head's D dims, its gain shared by the heads;
        # "all_heads" (OLMo 2/3): one over a token's H·D (H_kv·D) values, a gain per value.
        self.q_norm = make_qk_norm(qk_norm, H, D, eps=norm_eps)
        self.k_norm = make_qk_norm(qk_norm, H_kv, D, eps=norm_eps)
        self.gate_proj = None  # the output gate's logits, from the query-side input: H × (D or 1)
        if gate is not None:
            self.gate_proj = nn.Linear(d_model, H * gate_width(gate, D), bias=bias)
        self.sinks = nn.Parameter(torch.zeros(H)) if sinks else None  # gpt-oss's sink logit per head
        # Cross-layer KV sharing: a source keeps its last keys/values (shared_kv) for the layers that read them.
        self.publishes_kv, self.shared_kv, self.kv_sharing = False, None, None
        if kv_source is not None:
            self.kv_sharing = KVSharing(self, check_instance("kv_source", kv_source, MultiHeadAttention))
            self.k_proj = self.v_proj = self.k_norm = None  # nothing to project: the source's K/V are reused

    @property
    def kv_source(self) -> MultiHeadAttention | None:
        """The earlier layer whose keys and values this one reuses, or None (it projects its own)."""
        return None if self.kv_sharing is None else self.kv_sharing.source

    def make_cache(
        self,
        batch_size: int,
        max_len: int,
        *,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ) -> KVCache | RollingKVCache | None:
        """An empty :class:`~attn_core.KVCache` of ``n_kv_heads`` heads (dtype/device of the weights by default).

        With a ``window`` shorter than ``max_len``, a :class:`~attn_core.RollingKVCache` of
        ``sink_tokens + window`` slots instead: its memory does not grow with ``max_len``.
        ``None`` for a layer with a ``kv_source``: it reads the source's cache.

        Shapes:
            stores k, v ``(B, H_kv, max_len, D)`` (or ``(B, H_kv, sink_tokens + window, D)``)
        """
        if self.kv_sharing is not None:
            return None
        storage = storage_like(self.k_proj.weight, dtype, device)
        if self.window is not None and check_int("max_len", max_len) > self.sink_tokens + self.window:
            return RollingKVCache(
                batch_size, self.n_kv_heads, self.head_dim, self.window, sink_tokens=self.sink_tokens, **storage
            )
        return KVCache(batch_size, self.n_kv_heads, self.head_dim, max_len, **storage)

    def cache_context(self, context: torch.Tensor) -> ContextKVCache:
        """Project a cross-attention context into keys and values once, for every later call.

        An encoder-decoder's decoder attends to the same source at every step it writes;
        ``layer(x, context_kv=layer.cache_context(memory))`` then gives the same output as
        ``layer(x, memory)`` without projecting ``memory`` again (:mod:`attn_core.layers.context_kv`).

        Shapes:
            context: ``(B, T_k, d_context)``; returns keys and values ``(B, H_kv, T_k, D)``
        """
        check_tensor("context", context, ("B", "T", ("d_context", self.d_context)), like=self.q_proj.weight)
        check_cross_cacheable(self)
        k = split_heads(self.k_proj(context), self.n_kv_heads)  # (B, T_k, H_kv·D) -> (B, H_kv, T_k, D)
        v = split_heads(self.v_proj(context), self.n_kv_heads)  # (B, T_k, H_kv·D) -> (B, H_kv, T_k, D)
        if self.k_norm is not None:  # QK-norm is part of the keys: cache them normalised
            k = self.k_norm(k)
        return ContextKVCache(k, v)

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor | None = None,
        *,
        mask: torch.Tensor | None = None,
        kv_cache: KVCache | None = None,
        return_weights: bool = False,
        context_kv: ContextKVCache | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Attend from ``x`` to ``x`` (self-attention) or to ``context`` (cross-attention).

        Queries always come from ``x``; the keys and values from one of three places: this
        layer's projections of ``x`` or ``context`` (after a cache's earlier ones), a
        context projected once (``context_kv``), or the source layer (``kv_source``). All
        three go through the same tail (:meth:`_attend_and_project`).

        Args:
            x: The sequence that asks (the queries).
            context: The sequence that answers (keys and values); ``None`` for self-attention.
            mask: Boolean (``True`` = may attend) or float bias, of shape ``(T_q, T_k)``,
                ``(B, T_q, T_k)`` (same for every head; e.g. :func:`~attn_core.padding_mask`)
                or ``(B, H, T_q, T_k)``.
            kv_cache: A :class:`~attn_core.KVCache` (see :meth:`make_cache`) holding the keys
                and values of earlier positions; this call's are appended to it (decoding).
            return_weights: Also return the attention weights (explicit path).
            context_kv: Cross-attention to a context projected once by :meth:`cache_context`
                (instead of ``context``): the same output, without projecting it again.

        Shapes:
            x: ``(B, T_q, d_model)``
            context: ``(B, T_k, d_context)``
            output: ``(B, T_q, d_model)``
            weights: ``(B, H, T_q, T_k)``; with a cache ``T_k`` counts the cached positions.
        """
        check_mha_call(self, x, context, mask, kv_cache, context_kv)
        mask = head_mask(mask)  # (B, T_q, T_k) -> (B, 1, T_q, T_k): the same for every head
        q = split_heads(self.q_proj(x), self.n_heads)  # (B, T_q, d_model) -> (B, H, T_q, D)
        if self.q_norm is not None:  # QK-norm: per head, before RoPE (Qwen3)
            q = self.q_norm(q)
        if self.kv_sharing is not None:  # the keys and values the source layer just computed
            kv = self.kv_sharing.read(x, mask, kv_cache)
        elif context_kv is not None:  # a context projected once by cache_context
            kv = context_keys(context_kv, mask, x.shape[1])
        else:
            kv = self._own_keys_values(x if context is None else context, x.shape[1], mask, kv_cache)
        if self.rope is not None:  # after the kv.past cached positions, as the keys were rotated
            q = self.rope(q, offset=kv.past)
        if self.temperature is not None:  # Llama 4's NoPE layers: queries sharpened with their position
            q = q * self._temperature(kv.past, x.shape[1], q)
        return self._attend_and_project(q, kv, x, return_weights)

    def _own_keys_values(
        self, source: torch.Tensor, T_q: int, mask: torch.Tensor | None, kv_cache: KVCache | RollingKVCache | None
    ) -> SharedKV:
        """This layer's keys and values of ``source`` (after the cached ones), with the mask to attend with.

        ``source`` is ``x`` (self-attention, ``T_q`` new positions) or the context
        (cross-attention, no cache). A layer that publishes its keys and values keeps the result.

        Shapes:
            source: ``(B, T_k, d_context)``; returns keys and values ``(B, H_kv, T_k, D)``; with a
            cache ``T_k = past + T_q`` (a rolling cache: the positions it still holds)
        """
        k = split_heads(self.k_proj(source), self.n_kv_heads)  # (B, T_k, H_kv·D) -> (B, H_kv, T_k, D)
        v = split_heads(self.v_proj(source), self.n_kv_heads)  # (B, T_k, H_kv·D) -> (B, H_kv, T_k, D)
        if self.k_norm is not None:  # QK-norm: per head, before RoPE (Qwen3)
            k = self.k_norm(k)
        past = 0 if kv_cache is None else kv_cache.offset  # a static cache's: a device tensor
        if self.rope is not None:
            # Positions continue after the cached ones, so a token gets the same rotation
            # whether it is processed in the full sequence or one step at a time.
            k = self.rope(k, offset=past)
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)  # (B, H_kv, past + T_q, D); rolling: (B, H_kv, stored + T_q, D)
        kv = SharedKV(k, v, past=past, n_queries=T_q, mask=mask, is_causal=self.causal, window=self.window)
        rolling = isinstance(kv_cache, RollingKVCache)
        if rolling or self.sink_tokens or self.chunk:
            # The band from absolute positions: a ring buffer's keys are not positions 0..T_k-1, and the
            # last of T_k keys is position past + T_q - 1 (a static cache's empty slots come first).
            T_k = k.shape[2]
            k_pos = kv_cache.key_positions if rolling else positions_after(past + T_q - T_k, T_k, k.device)  # (T_k,)
            q_pos = positions_after(past, T_q, k.device)  # (T_q,)
            band = position_mask(q_pos, k_pos, window=self.window, sink_tokens=self.sink_tokens, chunk=self.chunk)
            if mask is not None:
                band = mask & band if mask.dtype == torch.bool else mask.masked_fill(~band, float("-inf"))
            kv = replace(kv, mask=band, is_causal=False, window=None)
        if self.publishes_kv:  # for the later layers that reuse these keys and values
            self.shared_kv = kv
        return kv

    def _attend_and_project(
        self, q: torch.Tensor, kv: SharedKV, x: torch.Tensor, return_weights: bool
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """The tail of every path: attend, gate each head, merge the heads, project.

        Shapes:
            q: ``(B, H, T_q, D)``; kv.k, kv.v: ``(B, H_kv, T_k, D)``; x: ``(B, T_q, d_model)`` (the gate's input)
            output: ``(B, T_q, d_model)``; weights: ``(B, H, T_q, T_k)``
        """
        out, weights = attend(
            q,
            kv.k,
            kv.v,
            mask=kv.mask,
            is_causal=kv.is_causal,
            dropout_p=self.dropout if self.training else 0.0,
            return_weights=return_weights,
            softcap=self.softcap,
            scale=self.scale,
            window=kv.window,
            sinks=self.sinks,
        )
        if self.gate_proj is not None:
            gate_logits = split_heads(self.gate_proj(x), self.n_heads)  # (B, T_q, H·G) -> (B, H, T_q, G)
            out = output_gate(out, gate_logits)  # (B, H, T_q, D), each head scaled by σ(gate)
        out = merge_heads(out)  # (B, H, T_q, D) -> (B, T_q, H·D)
        out = self.out_proj(out)  # (B, T_q, H·D) -> (B, T_q, d_model)
        return (out, weights) if return_weights else out

    def _temperature(self, past: int | torch.Tensor, T: int, q: torch.Tensor) -> torch.Tensor:
        """The query factors of positions ``past..past+T-1`` (:func:`query_temperature`).

        Shapes:
            output: ``(T, 1)`` in ``q``'s dtype, broadcasting over ``(B, H, T, D)`` queries
        """
        positions = positions_after(past, T, q.device)  # (T,)
        return query_temperature(positions, *self.temperature).to(q.dtype)[:, None]  # (T,) -> (T, 1)

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, n_heads={self.n_heads}, n_kv_heads={self.n_kv_heads}, "
            f"head_dim={self.head_dim}, causal={self.causal}"
            + (f", window={self.window}" if self.window is not None else "")
            + (f", sink_tokens={self.sink_tokens}" if self.sink_tokens else "")
            + (f", chunk={self.chunk}" if self.chunk is not None else "")
            + (f", temperature={self.temperature}" if self.temperature is not None else "")
            + (", sinks=True" if self.sinks is not None else "")
            + (", kv_source=shared" if self.kv_sharing is not None else "")
            + (f", gate={self.gate!r}" if self.gate is not None else "")
            + (f", softcap={self.softcap:g}" if self.softcap is not None else "")
            + (", qkv_bias=True" if self.qkv_bias else "")
            + (f", scale={self.scale:g}" if self.scale is not None else "")
        )


class GroupedQueryAttention(MultiHeadAttention):
    """Grouped-query attention: ``MultiHeadAttention`` with ``n_kv_heads`` key/value heads.

    Shapes:
        x: ``(B, T, d_model)``; output: ``(B, T, d_model)``
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, **kwargs) -> None:
        super().__init__(d_model, n_heads, n_kv_heads=n_kv_heads, **kwargs)


class MultiQueryAttention(MultiHeadAttention):
    """Multi-query attention: ``MultiHeadAttention`` with a single key/value head.

    Shapes:
        x: ``(B, T, d_model)``; output: ``(B, T, d_model)``
    """

    def __init__(self, d_model: int, n_heads: int, **kwargs) -> None:
        super().__init__(d_model, n_heads, n_kv_heads=1, **kwargs)
