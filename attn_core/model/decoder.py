"""A decoder-only (GPT-style) language model: embeddings, ``L`` blocks, a norm, logits.

:class:`DecoderLM` builds itself from a :class:`~attn_core.DecoderConfig`: standard
:class:`~attn_core.TransformerBlock` s (with multi-head or multi-head latent attention)
or He & Hofmann's :class:`~attn_core.SimplifiedBlock` s. One code path serves training
(the full sequence) and decoding (a cache per layer, each built by its layer).

Shape legend:
    B        batch size
    T        positions in this call; with caches, ``T_k = past + T`` keys
    V        vocabulary size
    d_model  width of the residual stream
    H        query heads
    L        number of layers (blocks)
"""

from __future__ import annotations

import torch
from torch import nn

from ..caches.kv import KVCache, LatentKVCache, positions_after
from ..caches.recurrent import GatedDeltaNetCache
from ..caches.static import is_static, make_static_caches, static_mask
from ..checks import check_bool, check_instance, check_int, check_number, check_tensor
from ..config import DecoderConfig
from ..modules.dropout import Dropout
from ..modules.norms import make_norm
from ..positions.positional import ALiBi, LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from ..positions.rope import RotaryEmbedding
from .build import make_layer
from .padding import (
    absolute_encodings,
    check_attention_mask,
    check_padding_support,
    check_relative_positions,
    padding_keys_mask,
    positions_from_mask,
)

__all__ = ["DecoderLM", "ScaledLinear"]


class DecoderLM(nn.Module):
    """A decoder-only (GPT-style) language model: embeddings, ``L`` causal blocks, a norm, logits.

    One code path serves training and generation: ``forward(idx)`` runs a whole sequence
    under the causal mask; ``forward(idx, caches=model.make_caches(B, max_len))`` runs
    the next chunk of a sequence whose earlier keys and values sit in the caches, with
    positions continuing after the cached ones. Prefilling a prompt and then feeding one
    token at a time gives the same logits as running the full sequence (a test holds it).

    Args:
        config: The architecture.

    Attributes:
        tok_emb: ``nn.Embedding(V, d_model)``.
        pos_emb: :class:`~attn_core.LearnedPositionalEmbedding`,
            :class:`~attn_core.SinusoidalPositionalEncoding` or None.
        embed_scale: What the token embeddings are multiplied by before positions are
            added: ``√d_model`` with sinusoidal positions (Vaswani et al. 2017, §3.4; the
            encodings have entries of size 1, the embeddings start at 0.02) or with
            ``config.scale_embeddings`` (Gemma), else 1.
        rope: The :class:`~attn_core.RotaryEmbedding` shared by all layers (scaled by
            ``config.positions.rope_scaling`` if set), or None.
        sliding_rope: The one shared by the ``"sliding"`` layers when
            ``config.positions.sliding_rope_base`` gives them a base of their own (Gemma 3), else None.
        alibi: The :class:`~attn_core.ALiBi` whose bias every layer adds to its scores, or None.
        blocks: ``nn.ModuleList`` of :class:`TransformerBlock` or
            :class:`~attn_core.SimplifiedBlock`.
        embed_norm: Normalisation of the embeddings for post-norm models (as in BERT),
            ``nn.Identity`` for pre-norm ones.
        final_norm: Normalisation before the output projection for pre-norm models;
            ``nn.Identity`` for post-norm ones, whose blocks end with a norm already.
        lm_head: ``nn.Linear(d_model, V, bias=False)``; its weight *is* ``tok_emb.weight``
            when ``config.tie_weights``. With ``config.final_softcap`` (Gemma 2) its
            logits are soft-capped, ``cap · tanh(logits / cap)``.

    Shapes:
        idx: ``(B, T)`` token ids
        logits: ``(B, T, V)``; weights: a list of ``L`` tensors ``(B, H, T, T_k)``
    """

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        check_instance("config", config, DecoderConfig)
        self.config = c = config
        self.tok_emb = nn.Embedding(c.vocab_size, c.d_model)
        # GPT-2's initialisation: with tied weights the same matrix makes the logits, and
        # N(0, 1) entries would start them at a scale of √d_model.
        nn.init.normal_(self.tok_emb.weight, std=0.02)
        self.pos_emb = None
        if c.positions.positional == "learned":
            self.pos_emb = LearnedPositionalEmbedding(c.max_len, c.d_model)
        elif c.positions.positional == "sinusoidal":
            self.pos_emb = SinusoidalPositionalEncoding(c.d_model)
        # The Transformer's recipe with fixed sinusoids: scale the embeddings up by √d_model,
        # or the ±1 encodings drown the 0.02-scale token vectors (the same matrix makes the logits).
        # Gemma scales its embeddings the same way (scale_embeddings), with no positions added.
        self.embed_scale = c.d_model**0.5 if c.positions.positional == "sinusoidal" or c.scale_embeddings else 1.0
        if c.embedding_multiplier != 1.0:  # Granite multiplies its embeddings by a constant
            self.embed_scale = self.embed_scale * c.embedding_multiplier
        self.alibi = ALiBi(c.n_heads) if c.positions.positional == "alibi" else None
        self.rope = None
        p = c.positions
        partial = {} if p.rotary_dim is None else {"rotary_dim": p.rotary_dim}  # GLM, Phi-4-mini: part of each head
        if p.positional == "rope" and c.attention == "mha":  # context extension (YaRN, Llama 3.1, ...) if any
            self.rope = RotaryEmbedding(
                c.resolved_head_dim, base=p.rope_base, layout=p.rope_layout, scaling=p.rope_scaling, **partial
            )
        self.sliding_rope = None
        if p.sliding_rope_base is not None:  # the config checked: RoPE, MHA, some sliding layers
            self.sliding_rope = RotaryEmbedding(
                c.resolved_head_dim, base=p.sliding_rope_base, layout=p.rope_layout, **partial
            )
        self.drop = Dropout(c.dropout)
        # Post-norm blocks feed the raw stream to their first attention: normalise the
        # embeddings first (as BERT does), or the first layer attends with vectors of
        # scale 0.02 (the initialisation) and barely learns. Pre-norm blocks normalise
        # their own inputs and need the norm at the other end, before the logits.
        post = c.norm_position == "post"
        self.embed_norm = make_norm(c.norm, c.d_model, c.norm_eps) if post else nn.Identity()
        self.blocks = nn.ModuleList()
        ropes = {"rope": self.rope, "sliding_rope": self.sliding_rope, None: None}
        for i in range(c.n_layers):  # one at a time: a layer that shares K/V needs its source built
            spec = c.layer(i)
            source = None if spec.kv_source is None else self.blocks[spec.kv_source].attn
            self.blocks.append(make_layer(c, i, rope=ropes[spec.rope], kv_source=source))
        self.final_norm = nn.Identity() if post else make_norm(c.norm, c.d_model, c.norm_eps)
        if c.logit_scale != 1.0:  # Cohere, Granite: the logits times a constant
            self.lm_head = ScaledLinear(c.d_model, c.vocab_size, scale=c.logit_scale)
        else:
            self.lm_head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        if c.tie_weights:
            self.lm_head.weight = self.tok_emb.weight  # one Parameter, two uses

    def make_caches(
        self, batch_size: int, max_len: int | None = None, *, static: bool = False
    ) -> list[KVCache | LatentKVCache]:
        """One empty cache per layer (:class:`~attn_core.KVCache`, or MLA's ``LatentKVCache``).

        A sliding-window layer gets a constant-memory :class:`~attn_core.RollingKVCache`, a
        ``"linear"`` layer its constant-size :class:`~attn_core.caches.recurrent.GatedDeltaNetCache`; a
        layer that reuses another's keys and values (``config.pattern.kv_share``) gets ``None``.

        Args:
            batch_size: ``B``.
            max_len: Positions each cache holds; default ``config.max_len``.
            static: Static-shape caches (:mod:`attn_core.caches.static`): every call returns
                all ``max_len`` slots, so that each decoding step has the same shapes (for
                ``torch.compile`` and CUDA graphs); :meth:`forward` masks the empty slots.
                Not for the simplified blocks (their uniform term counts every key) nor
                DeepSeek Sparse Attention.

        Raises:
            ValueError: ``static=True`` for a model it does not support, naming why.
        """
        check_int("batch_size", batch_size)
        max_len = self.config.max_len if max_len is None else check_int("max_len", max_len)
        p = self.tok_emb.weight
        caches = [b.make_cache(batch_size, max_len, dtype=p.dtype, device=p.device) for b in self.blocks]
        if not check_bool("static", static):
            return caches
        if self.config.block != "standard":
            raise ValueError(
                f"static caches need standard blocks: block={self.config.block!r} averages over every key "
                f"slot (its causal uniform term), the empty ones included"
            )
        if self.config.positions.positional == "learned" and max_len > self.config.max_len:
            raise ValueError(
                f"static caches of max_len={max_len} slots need positions up to {max_len - 1}, but the learned "
                f"table holds config.max_len={self.config.max_len}: make them with max_len <= {self.config.max_len}"
            )
        ropes = [module for module in self.modules() if isinstance(module, RotaryEmbedding)]
        for rope in ropes:  # every step must see rotary tables of the same shape
            rope.reserve(max_len, device=p.device)
        # Positions as device tensors (a step CUDA graphs can replay), unless a RoPE's speeds
        # depend on each call's length, which the host must then know (dynamic NTK, LongRoPE).
        on_device = not any(rope.length_dependent for rope in ropes)
        return make_static_caches(caches, max_len, dtype=p.dtype, device=p.device, device_offsets=on_device)

    def _check_token_ids(self, idx: torch.Tensor) -> None:
        """Token ids in ``[0, vocab_size)``, checked without making the host wait for a device.

        Reading a value of a tensor (``int(idx.max())``) makes the host wait until the
        device has computed it: on a GPU, two synchronisations per decoding step, and a
        graph break for ``torch.compile``. So the ids are read only when they live on the
        CPU (a clear ``ValueError``); on another device an asynchronous device-side assert
        reports them (a device error at the next synchronisation), and inside a compiled
        graph the embedding's own bounds check does.
        """
        if torch.compiler.is_compiling():
            return
        V = self.config.vocab_size
        if idx.device.type == "cpu":
            lo, hi = int(idx.min()), int(idx.max())
            if lo < 0 or hi >= V:
                raise ValueError(f"token ids must be in [0, vocab_size={V}), got min={lo}, max={hi}")
        else:
            torch._assert_async(((idx >= 0) & (idx < V)).all(), f"token ids must be in [0, vocab_size={V})")

    def _check_inputs(self, idx: object, caches) -> tuple[int | torch.Tensor, object]:
        """Check :meth:`forward`'s inputs; return ``(offset, static)``.

        ``offset`` counts the positions cached before this call (a device tensor with static
        caches); ``static`` is the first static cache, or None.
        """
        c = self.config
        check_tensor("idx", idx, ("B", "T"), integer=True)
        if idx.shape[1] == 0:
            raise ValueError(f"idx must have shape (B, T) with T >= 1, got {tuple(idx.shape)}")
        self._check_token_ids(idx)
        static = None
        if caches is None:
            offset = 0
        else:
            if not isinstance(caches, (list, tuple)) or len(caches) != c.n_layers:
                got = len(caches) if isinstance(caches, (list, tuple)) else type(caches).__name__
                raise ValueError(f"caches must be a list of n_layers={c.n_layers} caches (make_caches), got {got}")
            for i, cache in enumerate(caches):
                # Only a layer that reads another's keys and values (config.pattern.kv_share) has no cache.
                if cache is None and (c.pattern.kv_share is None or c.pattern.kv_share[i] == i):
                    raise ValueError(
                        f"caches[{i}] is None, but layer {i} keeps its own keys and values: "
                        f"pass caches=model.make_caches(batch_size)"
                    )
            static = next((cache for cache in caches if is_static(cache)), None)
            if static is not None:  # its offset may be a device tensor, which the host never reads
                offset = static.offset
            else:
                offset = next((cache.size for cache in caches if cache is not None), 0)
        if isinstance(offset, torch.Tensor):
            return offset, static  # the learned table's length is checked against the static caches' (make_caches)
        if c.positions.positional == "learned" and offset + idx.shape[1] > c.max_len:
            raise ValueError(
                f"positions {offset}..{offset + idx.shape[1] - 1} exceed max_len={c.max_len} "
                f"(cached={offset}, T={idx.shape[1]})"
            )
        return offset, static

    def forward(
        self,
        idx: torch.Tensor,
        *,
        caches: list | None = None,
        return_weights: bool = False,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, list[torch.Tensor]]:
        """Next-token logits for every position of ``idx``.

        Args:
            idx: Token ids. With ``caches``, the *new* tokens only: their positions start
                at the number of cached positions.
            caches: From :meth:`make_caches`; each is appended to.
            return_weights: Also return every layer's attention weights.
            attention_mask: For a left-padded batch (:mod:`attn_core.model.padding`): 1 for a
                token, 0 for padding, over every position so far (cached and new), as in
                Hugging Face. Padding keys are hidden, and each row's positions start at its
                first token (``cumsum(mask) − 1``) unless ``position_ids`` says otherwise.
                Standard blocks without sliding windows, linear layers, static caches or
                DeepSeek Sparse Attention.
            position_ids: Each row's positions of the new tokens. Absolute encodings
                (learned, sinusoidal) embed them; relative ones (RoPE, ALiBi) depend on
                ``q − k`` only, so a row may only be shifted as a whole (checked on the CPU).

        Returns:
            ``logits``, or ``(logits, weights)``: logits at position ``t`` depend only on
            tokens ``0..t``.

        Shapes:
            idx: ``(B, T)``
            logits: ``(B, T, V)``
            weights: list of ``L`` tensors ``(B, H, T, past + T)``
        """
        offset, static_cache = self._check_inputs(idx, caches)
        T = idx.shape[1]
        static = static_cache is not None
        pad = None
        if attention_mask is not None:
            check_padding_support(self.config, static)
            pad = check_attention_mask(attention_mask, idx.shape[0], offset + T)  # (B, past + T) bool
        if position_ids is not None:
            check_tensor("position_ids", position_ids, ("B", "T"), integer=True)
            if position_ids.shape != idx.shape:
                raise ValueError(
                    f"position_ids must have idx's shape {tuple(idx.shape)}, got {tuple(position_ids.shape)}"
                )
        x = self.tok_emb(idx.long())  # (B, T, d_model)
        if self.embed_scale != 1.0:
            x = x * self.embed_scale
        if self.pos_emb is not None:
            if position_ids is None and pad is not None:
                position_ids = positions_from_mask(pad, T)  # (B, T): counted from each row's first token
            if isinstance(offset, torch.Tensor):  # static caches: positions added on the device
                if position_ids is None:
                    position_ids = positions_after(offset, T).expand(idx.shape[0], T)  # (B, T)
                L = static_cache.max_len
                x = x + absolute_encodings(self.pos_emb, position_ids, L, x)  # a table of every slot's position
            elif position_ids is None:
                x = self.pos_emb(x, offset)  # positions continue after the cached ones
            else:
                x = x + absolute_encodings(self.pos_emb, position_ids, offset + T, x)
        elif position_ids is not None:
            check_relative_positions(position_ids, offset, pad, self.config.positions.positional)
        x = self.drop(self.embed_norm(x))
        bias = None
        if static:
            bias = static_mask(caches, offset, T, self.alibi, x.device)  # (1, 1 or H, T, L)
        elif self.alibi is not None:  # the same (H, T, past + T) bias in every layer, queries the last T positions
            bias = self.alibi.bias(T, offset + T, device=x.device)[None]  # (1, H, T, past + T)
        if pad is not None:
            keys = padding_keys_mask(pad, T)  # (B, T, past + T): padding keys hidden
            bias = keys if bias is None else bias.masked_fill(~keys[:, None], float("-inf"))  # (B, H, T, past + T)
        all_weights = []
        kv_share = self.config.pattern.kv_share
        for i, block in enumerate(self.blocks):
            cache = None if caches is None else caches[i]
            # A recurrent layer (Gated DeltaNet) has no key slots to mask; a layer that reads
            # another's keys (config.pattern.kv_share) attends with the mask its source layer was given.
            reader = kv_share is not None and kv_share[i] != i
            layer_mask = None if reader or isinstance(cache, GatedDeltaNetCache) else bias
            if return_weights:
                x, w = block(x, mask=layer_mask, kv_cache=cache, return_weights=True)
                all_weights.append(w)
            else:
                x = block(x, mask=layer_mask, kv_cache=cache)
        logits = self.lm_head(self.final_norm(x))  # (B, T, V)
        if self.config.final_softcap is not None:  # Gemma 2: cap · tanh(logits / cap)
            cap = self.config.final_softcap
            logits = cap * torch.tanh(logits / cap)
        return (logits, all_weights) if return_weights else logits

    def num_parameters(self) -> int:
        """Parameters of the module (a tied matrix counted once, as ``parameters()`` does)."""
        return sum(p.numel() for p in self.parameters())

    def extra_repr(self) -> str:
        c = self.config
        return (
            f"block={c.block!r}, attention={c.attention!r}, positional={c.positions.positional!r}, tied={c.tie_weights}"
        )


class ScaledLinear(nn.Linear):
    """A bias-free linear layer whose output is multiplied by a constant: the logits of Cohere and Granite.

    ``ScaledLinear(d, V, scale=s)(x) = s · (x Wᵀ)``; its ``weight`` can be tied to the token
    embedding as a plain ``nn.Linear``'s (:attr:`DecoderLM.lm_head`).

    Args:
        in_features: ``d_model``.
        out_features: ``V``.
        scale: The factor (Cohere's ``logit_scale``; Granite's ``1 / logits_scaling``).

    Shapes:
        x: ``(..., in_features)``; output: ``(..., out_features)``
    """

    def __init__(self, in_features: int, out_features: int, *, scale: float) -> None:
        super().__init__(in_features, out_features, bias=False)
        self.scale = check_number("scale", scale, low=0.0, low_open=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Shapes: x ``(..., in_features)`` -> ``(..., out_features)``."""
        return super().forward(x) * self.scale

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, scale={self.scale:g}"
