"""Multi-head attention: one class for MHA, GQA, MQA and cross-attention (the single head: self_attention).

Every module here projects its inputs and then calls :func:`attn_core.core.attention`;
none of them has a softmax-matmul of its own.

Shape legend:
    B        batch size
    T        sequence length; ``T_q`` queries, ``T_k`` keys (cross-attention, caches)
    d_model  model width; ``d_context`` width of the sequence cross-attention reads
    H        query heads; ``H_kv`` key/value heads (``n_kv_heads``)
    D        width of one head, ``d_model // H``
"""

from __future__ import annotations

import torch
from torch import nn

from .cache import ContextKVCache, KVCache, RollingKVCache, storage_like
from .checks import (
    check_bool,
    check_choice,
    check_instance,
    check_int,
    check_made_for,
    check_number,
    check_tensor,
)
from .core import attend
from .gating import GATE_KINDS, gate_width, output_gate
from .masks import check_window, position_mask
from .norms import make_qk_norm
from .positional import check_temperature, query_temperature
from .rope import check_rope
from .shapes import head_mask, merge_heads, split_heads

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
            per value (OLMo 2/3; :class:`~attn_core.norms.HeadsRMSNorm`).
        norm_eps: The ε of the QK-norm's :class:`~attn_core.RMSNorm` s.
        gate: An output gate per head (Qiu et al. 2025, arXiv 2505.06708; Qwen3-Next):
            ``"elementwise"`` (one sigmoid per channel) or ``"headwise"`` (one per head),
            computed from ``x`` by ``gate_proj`` and applied to each head's attention
            output before ``out_proj`` (:func:`~attn_core.gating.output_gate`). ``None``: no gate.
        softcap: Attention-logit soft-capping (Gemma 2): scores become
            ``softcap · tanh(scores / softcap)`` before the mask. ``None``: no cap.
        window: Sliding window (chapter 15; Mistral, Gemma, gpt-oss): each query sees
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
            ``n_kv_heads``, ``head_dim``, ``window`` and ``sink_tokens`` as the source.
        qkv_bias: Biases on the query, key and value projections only, none on the output
            projection (Qwen2, GLM-4). Not with ``bias=True``, which gives every projection one.
        scale: What the scores ``q·k`` are multiplied by before the softmax; ``None``: ``1/√D``.
            Gemma 2 27B scales by ``query_pre_attn_scalar**-0.5`` (144 for heads of 128),
            Granite by its ``attention_multiplier``.
        chunk: Chunked attention (Llama 4's RoPE layers, ``attention_chunk_size``): the
            positions are cut into chunks of ``chunk`` (``0..chunk-1``, ...) and a query sees
            only the earlier keys of its own chunk (:func:`~attn_core.masks.position_mask`).
            Needs ``causal=True``; not with ``window``. Its cache is a full
            :class:`~attn_core.KVCache` (the mask hides the earlier chunks).
        temperature: ``(floor_scale, attn_scale)``: each query is multiplied by
            :func:`~attn_core.positional.query_temperature` of its position, after RoPE and
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
        check_int("d_model", d_model)
        check_int("n_heads", n_heads)
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        check_int("n_kv_heads", n_kv_heads)
        d_context = d_model if d_context is None else d_context
        check_int("d_context", d_context)
        if head_dim is None and d_model % n_heads != 0:
            raise ValueError(
                f"d_model={d_model} is not divisible by n_heads={n_heads}; pass head_dim= to choose the head width"
            )
        if n_heads % n_kv_heads != 0:
            raise ValueError(f"n_heads={n_heads} is not divisible by n_kv_heads={n_kv_heads}")
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.head_dim = d_model // n_heads if head_dim is None else check_int("head_dim", head_dim)
        self.d_context, self.causal = d_context, check_bool("causal", causal)
        check_bool("bias", bias)
        # Qwen2's layout: biases on the query/key/value projections only (bias=True gives every projection one).
        if check_bool("qkv_bias", qkv_bias) and bias:
            raise ValueError("qkv_bias=True adds biases to q/k/v only; bias=True already gives every projection one")
        qkv_bias = bias or qkv_bias
        self.qkv_bias = qkv_bias and not bias
        self.scale = None if scale is None else check_number("scale", scale, low=0.0, low_open=True)
        self.dropout = check_number("dropout", dropout, low=0.0, high=1.0, high_open=True)
        self.rope = check_rope(rope, self.head_dim)
        kv_width = n_kv_heads * self.head_dim
        self.q_proj = nn.Linear(d_model, n_heads * self.head_dim, bias=qkv_bias)
        self.k_proj = nn.Linear(d_context, kv_width, bias=qkv_bias)
        self.v_proj = nn.Linear(d_context, kv_width, bias=qkv_bias)
        self.out_proj = nn.Linear(n_heads * self.head_dim, d_model, bias=bias)
        # QK-norm (qk_norm=True): one RMSNorm over each head's D dims, its gain shared by the heads;
        # "all_heads" (OLMo 2/3): one over a token's H·D (H_kv·D) values, a gain per value.
        self.q_norm = make_qk_norm(qk_norm, n_heads, self.head_dim, eps=norm_eps)
        self.k_norm = make_qk_norm(qk_norm, n_kv_heads, self.head_dim, eps=norm_eps)
        # Gated attention and soft-capping (chapter 16).
        self.gate = None if gate is None else check_choice("gate", gate, GATE_KINDS)
        self.softcap = None if softcap is None else check_number("softcap", softcap, low=0.0, low_open=True)
        self.gate_proj = None
        if gate is not None:  # from the query-side input: H heads × (head width or 1) logits
            self.gate_proj = nn.Linear(d_model, n_heads * gate_width(gate, self.head_dim), bias=bias)
        # Sliding window, StreamingLLM's kept first tokens and gpt-oss's sink logits (chapter 15).
        self.window = check_window(window)
        self.sink_tokens = check_int("sink_tokens", sink_tokens, minimum=0)
        # Llama 4: chunked attention (its RoPE layers) and a query temperature by position (its NoPE layers).
        self.chunk = None if chunk is None else check_int("chunk", chunk)
        self.temperature = check_temperature(temperature)
        if self.chunk is not None and self.window is not None:
            raise ValueError(f"pass window or chunk, not both: got window={window}, chunk={chunk}")
        check_bool("sinks", sinks)
        for name, value, on in (
            ("window", window, self.window is not None),
            ("chunk", chunk, self.chunk is not None),
            ("sinks", sinks, sinks),
            ("sink_tokens", sink_tokens, sink_tokens > 0),
        ):
            if on and not causal:
                raise ValueError(f"{name}={value!r} is for causal self-attention, got causal={causal}")
        if self.sink_tokens and self.window is None:
            raise ValueError(f"sink_tokens={sink_tokens} keeps the first tokens inside a window: pass window= too")
        self.sinks = nn.Parameter(torch.zeros(n_heads)) if sinks else None
        # Cross-layer KV sharing: a source keeps its last keys/values for the layers that read them.
        self.publishes_kv, self.shared_kv, self._kv_source = False, None, ()
        if kv_source is not None:
            self._share_kv_of(kv_source)

    # The shared helper, attn_core.shapes.split_heads: (B, T, n·D) -> (B, n, T, D).
    _split_heads = staticmethod(split_heads)

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
        if self._kv_source:
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
        ``layer(x, memory)`` without projecting ``memory`` again (chapter 4).

        Shapes:
            context: ``(B, T_k, d_context)``; returns keys and values ``(B, H_kv, T_k, D)``
        """
        check_tensor("context", context, ("B", "T", ("d_context", self.d_context)), like=self.q_proj.weight)
        self._check_cross_cacheable()
        k = self._split_heads(self.k_proj(context), self.n_kv_heads)  # (B, T_k, H_kv·D) -> (B, H_kv, T_k, D)
        v = self._split_heads(self.v_proj(context), self.n_kv_heads)  # (B, T_k, H_kv·D) -> (B, H_kv, T_k, D)
        if self.k_norm is not None:  # QK-norm is part of the keys: cache them normalised
            k = self.k_norm(k)
        return ContextKVCache(k, v)

    def _check_cross_cacheable(self) -> None:
        """Cached cross-attention needs keys that do not depend on the step: no causality, RoPE or shared K/V."""
        for name, value, bad in (
            ("causal", self.causal, self.causal),
            ("rope", self.rope, self.rope is not None),
            ("kv_source", "shared", bool(self._kv_source)),
        ):
            if bad:
                raise ValueError(f"cached cross-attention needs a layer without {name}, this one has {name}={value!r}")

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
        check_tensor("x", x, ("B", "T", ("d_model", self.d_model)), like=self.q_proj.weight)
        check_instance("kv_cache", kv_cache, (KVCache, RollingKVCache), optional=True)
        rolling = isinstance(kv_cache, RollingKVCache)
        if rolling:
            self._check_rolling(kv_cache, mask)
        if kv_cache is not None:
            check_made_for(
                "kv_cache",
                kv_cache.made_for,
                {"batch_size": x.shape[0], "n_kv_heads": self.n_kv_heads, "head_dim": self.head_dim},
                fix="make it with this layer's make_cache(batch_size, max_len)",
            )
        if context is not None:
            check_tensor("context", context, ("B", "T", ("d_context", self.d_context)), like=self.q_proj.weight)
            if context.shape[0] != x.shape[0]:
                raise ValueError(
                    f"x and context must have the same batch size, got {x.shape[0]} and {context.shape[0]}"
                )
            if self.causal:
                raise ValueError("causal=True is for self-attention; cross-attention (context given) is not causal")
            if kv_cache is not None:
                raise ValueError(
                    "kv_cache is for self-attention; cross-attention keys can be computed once instead: "
                    "context_kv=layer.cache_context(context)"
                )
            if context_kv is not None:
                raise ValueError("pass context or context_kv (its keys and values, projected once), not both")
        elif context_kv is not None:
            self._check_context_kv(context_kv, x, kv_cache)
        elif self.d_context != self.d_model:
            raise ValueError(f"this module expects a context of width d_context={self.d_context}; pass context=")
        mask = head_mask(mask)  # (B, T_q, T_k) -> (B, 1, T_q, T_k): the same for every head
        if self._kv_source:
            return self._forward_shared_kv(x, mask, kv_cache, return_weights)
        source = x if context is None else context
        q = self._split_heads(self.q_proj(x), self.n_heads)  # (B, T_q, d_model) -> (B, H, T_q, D)
        if context_kv is not None:
            return self._forward_context_kv(q, x, context_kv, mask, return_weights)
        k = self._split_heads(self.k_proj(source), self.n_kv_heads)  # (B, T_k, H_kv·D) -> (B, H_kv, T_k, D)
        v = self._split_heads(self.v_proj(source), self.n_kv_heads)  # (B, T_k, H_kv·D) -> (B, H_kv, T_k, D)
        if self.q_norm is not None:  # QK-norm: per head, before RoPE (Qwen3)
            q, k = self.q_norm(q), self.k_norm(k)
        past = 0 if kv_cache is None else kv_cache.size
        if self.rope is not None:
            # Positions continue after the cached ones, so a token gets the same rotation
            # whether it is processed in the full sequence or one step at a time.
            q = self.rope(q, offset=past)
            k = self.rope(k, offset=past)
        if self.temperature is not None:  # Llama 4's NoPE layers: queries sharpened with their position
            q = q * self._temperature(past, x.shape[1], q)
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)  # (B, H_kv, past + T_q, D); rolling: (B, H_kv, stored + T_q, D)
        is_causal, window = self.causal, self.window
        if rolling or self.sink_tokens or self.chunk:
            # The band from absolute positions: a ring buffer's keys are not positions 0..T_k-1, and the
            # last of T_k keys is position past + T_q - 1 (a static cache's empty slots come first).
            last = past + x.shape[1]
            k_pos = kv_cache.key_positions if rolling else torch.arange(last - k.shape[2], last, device=x.device)
            q_pos = torch.arange(past, past + x.shape[1], device=x.device)  # (T_q,)
            band = position_mask(q_pos, k_pos, window=self.window, sink_tokens=self.sink_tokens, chunk=self.chunk)
            if mask is None:
                mask = band
            else:
                mask = mask & band if mask.dtype == torch.bool else mask.masked_fill(~band, float("-inf"))
            is_causal, window = False, None
        if self.publishes_kv:  # for the later layers that reuse these keys and values
            self.shared_kv = dict(k=k, v=v, past=past, T_q=x.shape[1], mask=mask, is_causal=is_causal, window=window)
        dropout_p = self.dropout if self.training else 0.0
        out, weights = attend(
            q,
            k,
            v,
            mask=mask,
            is_causal=is_causal,
            dropout_p=dropout_p,
            return_weights=return_weights,
            softcap=self.softcap,
            scale=self.scale,
            window=window,
            sinks=self.sinks,
        )
        if self.gate_proj is not None:
            gate_logits = self._split_heads(self.gate_proj(x), self.n_heads)  # (B, T_q, H·G) -> (B, H, T_q, G)
            out = output_gate(out, gate_logits)  # (B, H, T_q, D), each head scaled by σ(gate)
        out = merge_heads(out)  # (B, H, T_q, D) -> (B, T_q, d_model)
        out = self.out_proj(out)
        return (out, weights) if return_weights else out

    def _temperature(self, past: int, T: int, q: torch.Tensor) -> torch.Tensor:
        """The query factors of positions ``past..past+T-1`` (:func:`~attn_core.positional.query_temperature`).

        Shapes:
            output: ``(T, 1)`` in ``q``'s dtype, broadcasting over ``(B, H, T, D)`` queries
        """
        positions = torch.arange(past, past + T, device=q.device)  # (T,)
        return query_temperature(positions, *self.temperature).to(q.dtype)[:, None]  # (T,) -> (T, 1)

    def _check_context_kv(self, context_kv, x, kv_cache) -> None:
        """``context_kv`` must be this layer's kind of cache, for this batch, without a self-attention cache."""
        check_instance("context_kv", context_kv, ContextKVCache)
        self._check_cross_cacheable()
        if kv_cache is not None:
            raise ValueError("kv_cache is for self-attention; with context_kv the keys are already cached")
        B, H_kv, _, D = context_kv.k.shape
        if B != x.shape[0] or H_kv != self.n_kv_heads or D != self.head_dim:
            raise ValueError(
                f"context_kv holds (B, H_kv, D) = ({B}, {H_kv}, {D}); this call needs "
                f"({x.shape[0]}, {self.n_kv_heads}, {self.head_dim}): build it with this layer's cache_context"
            )

    def _forward_context_kv(self, q, x, context_kv, mask, return_weights):
        """Queries against keys and values that :meth:`cache_context` projected once."""
        if self.q_norm is not None:
            q = self.q_norm(q)
        out, weights = attend(
            q,
            context_kv.k,
            context_kv.v,
            mask=mask,
            dropout_p=self.dropout if self.training else 0.0,
            return_weights=return_weights,
            softcap=self.softcap,
            scale=self.scale,
        )
        if self.gate_proj is not None:
            gate_logits = self._split_heads(self.gate_proj(x), self.n_heads)  # (B, T_q, H·G) -> (B, H, T_q, G)
            out = output_gate(out, gate_logits)  # (B, H, T_q, D)
        out = self.out_proj(merge_heads(out))  # (B, H, T_q, D) -> (B, T_q, H·D) -> (B, T_q, d_model)
        return (out, weights) if return_weights else out

    def _share_kv_of(self, source: MultiHeadAttention) -> None:
        """Become a reader of ``source``'s keys and values: drop the key/value projections."""
        check_instance("kv_source", source, MultiHeadAttention)
        if source._kv_source:
            raise ValueError("kv_source must compute its own keys and values (it has a kv_source itself)")
        for name in ("n_kv_heads", "head_dim", "causal", "window", "sink_tokens", "chunk", "d_model"):
            if getattr(source, name) != getattr(self, name):
                raise ValueError(
                    f"kv_source has {name}={getattr(source, name)!r}, this layer {name}={getattr(self, name)!r}: "
                    f"a layer can only reuse keys and values of the same shape and mask"
                )
        self.k_proj = self.v_proj = self.k_norm = None  # nothing to project: the source's K/V are reused
        self._kv_source = (source,)  # a tuple, not a submodule: the source's weights belong to the source
        source.publishes_kv = True

    def _forward_shared_kv(self, x, mask, kv_cache, return_weights):
        """Queries of this layer against the keys and values the source layer just computed."""
        if kv_cache is not None:
            raise ValueError("a layer with a kv_source has no cache of its own (make_cache returns None): pass None")
        rec = self._kv_source[0].shared_kv
        if rec is None or rec["T_q"] != x.shape[1] or rec["k"].shape[0] != x.shape[0]:
            raise ValueError("kv_source has not run on this input yet: call the source layer first")
        if mask is not None:
            raise ValueError("a layer with a kv_source attends with its source's mask: pass mask= to the source only")
        q = self._split_heads(self.q_proj(x), self.n_heads)  # (B, T_q, H·D) -> (B, H, T_q, D)
        if self.q_norm is not None:
            q = self.q_norm(q)
        if self.rope is not None:
            q = self.rope(q, offset=rec["past"])
        if self.temperature is not None:
            q = q * self._temperature(rec["past"], x.shape[1], q)
        out, weights = attend(
            q,
            rec["k"],
            rec["v"],
            mask=rec["mask"],
            is_causal=rec["is_causal"],
            dropout_p=self.dropout if self.training else 0.0,
            return_weights=return_weights,
            softcap=self.softcap,
            scale=self.scale,
            window=rec["window"],
            sinks=self.sinks,
        )
        if self.gate_proj is not None:
            gate_logits = self._split_heads(self.gate_proj(x), self.n_heads)  # (B, T_q, H·G) -> (B, H, T_q, G)
            out = output_gate(out, gate_logits)  # (B, H, T_q, D)
        out = self.out_proj(merge_heads(out))  # (B, H, T_q, D) -> (B, T_q, H·D) -> (B, T_q, d_model)
        return (out, weights) if return_weights else out

    def _check_rolling(self, cache: RollingKVCache, mask) -> None:
        """A rolling cache must hold this layer's whole window (and its kept first tokens)."""
        if self.window is None:
            raise ValueError(
                "a RollingKVCache drops old keys: it is for a layer with a window, this one has window=None"
            )
        if cache.window < self.window or cache.sink_tokens < self.sink_tokens:
            raise ValueError(
                f"the rolling cache is too small for this layer: cache window={cache.window}, "
                f"sink_tokens={cache.sink_tokens}; the layer needs window={self.window}, sink_tokens={self.sink_tokens}"
            )
        if mask is not None:
            raise ValueError("mask= cannot be combined with a RollingKVCache (its keys are ring slots, not positions)")

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, n_heads={self.n_heads}, n_kv_heads={self.n_kv_heads}, "
            f"head_dim={self.head_dim}, causal={self.causal}"
            + (f", window={self.window}" if self.window is not None else "")
            + (f", sink_tokens={self.sink_tokens}" if self.sink_tokens else "")
            + (f", chunk={self.chunk}" if self.chunk is not None else "")
            + (f", temperature={self.temperature}" if self.temperature is not None else "")
            + (", sinks=True" if self.sinks is not None else "")
            + (", kv_source=shared" if self._kv_source else "")
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
