"""StreamingLLM's cache: the first tokens kept as sinks, a sliding window, positions *inside* the cache.

Xiao et al. (2023, arXiv 2309.17453) run a model trained on a finite context over an
endless stream: the cache keeps the first ``sink_tokens`` tokens (the attention sinks) and
the last ``window`` ones, and gives every cached key the position of its *slot in the
cache*, ``0 .. cache_len - 1``, not its position in the text. Keys are therefore stored
before RoPE and rotated again at every step; the new token's query sits at the end of
the cache. Positions never grow past ``sink_tokens + window - 1``, which is what lets the
stream run past the training length.

The other way keeps each token's position in the text (:class:`~attn_core.RollingKVCache`,
or :func:`~attn_core.teach.window.windowed` on a full pass, which equals it). Under RoPE a
score depends only on the distance between query and key, so the two differ only in the
distance from a query to the sink tokens: the text's ``t - j`` against the cache's
``sink_tokens + window - 1 - j`` once the window is full.

* :func:`unrotate` undoes a :class:`~attn_core.RotaryEmbedding` (to store keys before RoPE).
* :class:`StreamingKVCache` is that cache, for one layer.
* :func:`make_streaming_caches` gives one per layer of a :class:`~attn_core.DecoderLM`.
* :func:`streaming_losses` measures a model's next-token loss per token under either
  scheme (or with full attention), decoding one token at a time as StreamingLLM does.

Shape legend:
    B      batch size
    H_kv   key/value heads
    T      tokens of the text; ``T_new`` given to one :meth:`StreamingKVCache.update`
    D      width of one head
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..caches.kv import RollingKVCache
from ..checks import check_choice, check_instance, check_int, check_tensor
from ..layers.multihead import MultiHeadAttention
from ..model.decoder import DecoderLM
from ..ops.masks import check_window
from ..positions.rope import RotaryEmbedding
from .window import windowed

__all__ = ["POSITIONS", "unrotate", "StreamingKVCache", "make_streaming_caches", "streaming_losses"]

#: Where a streaming cache's keys get their positions: in the text, or in the cache.
POSITIONS = ("original", "cache")


def unrotate(rope: RotaryEmbedding, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
    """Undo ``rope(x, offset)``: rotate every pair back by its angle.

    A rotation by ``-a`` is a reflection, the rotation by ``a``, and the same reflection
    (``F R(a) F = R(-a)`` with ``F = diag(1, -1)`` on each pair), so the module's own
    rotation serves: negate each pair's second coordinate, rotate, negate it again.

    Args:
        rope: The rotary embedding that rotated ``x``.
        x: Rotated queries or keys, positions along dimension ``-2``.
        offset: The position of ``x``'s first row when it was rotated.

    Returns:
        ``x`` before the rotation, same shape and dtype.

    Shapes:
        x: ``(..., T, D)``; output: ``(..., T, D)``
    """
    check_instance("rope", rope, RotaryEmbedding)
    check_tensor("x", x, ("...", "T", ("head_dim", rope.head_dim)), floating=True)
    flip = torch.ones(rope.head_dim, dtype=x.dtype, device=x.device)  # (D,)
    if rope.layout == "half":
        flip[rope.head_dim // 2 :] = -1  # pairs (i, i + D/2): the second halves
    else:
        flip[1::2] = -1  # pairs (2i, 2i + 1): the odd dimensions
    return rope(x * flip, offset) * flip


class StreamingKVCache(RollingKVCache):
    """StreamingLLM's cache for one layer: ``sink_tokens`` first tokens and a window, positions in the cache.

    The layer rotates a new token's query and key at :attr:`size`, the number of keys held
    (its place at the end of the cache). :meth:`update` stores the keys *before* RoPE
    (:func:`unrotate`), rotates every held key to its slot ``0 .. size - 1`` and returns
    them followed by the new ones. Afterwards it keeps the sink tokens and the last
    ``window - 1`` tokens, so that the next token sees ``sink_tokens + window`` keys in
    all, itself included: the same tokens a :class:`~attn_core.RollingKVCache` shows it,
    at other positions.

    A :class:`~attn_core.RollingKVCache` by type, so a layer with the same ``window`` and
    ``sink_tokens`` accepts it (put them on the model with :func:`~attn_core.teach.window.windowed`).
    Decode one token at a time once the cache is full; before that, a prompt of up to
    ``sink_tokens + window`` tokens may go in one call (nothing is evicted inside it).

    Args:
        batch_size: ``B``.
        n_kv_heads: Key/value heads stored, ``H_kv``.
        head_dim: Width of one head, ``D``.
        window: Most recent tokens a query sees, itself included.
        rope: The layer's :class:`~attn_core.RotaryEmbedding` (to rotate the stored keys).
        sink_tokens: First tokens kept for good (StreamingLLM keeps 4; 0: a plain window).
        dtype: Storage dtype.
        device: Storage device.

    Shapes:
        update(k, v): k, v ``(B, H_kv, T_new, D)`` -> k, v ``(B, H_kv, size + T_new, D)``;
        key_positions ``(size + T_new,)`` = ``0 .. size + T_new - 1``
    """

    def __init__(
        self,
        batch_size: int,
        n_kv_heads: int,
        head_dim: int,
        window: int,
        *,
        rope: RotaryEmbedding,
        sink_tokens: int = 0,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(batch_size, n_kv_heads, head_dim, window, sink_tokens=sink_tokens, dtype=dtype, device=device)
        self.rope = check_instance("rope", rope, RotaryEmbedding)
        if rope.head_dim != head_dim:
            raise ValueError(f"rope rotates heads of {rope.head_dim}, but the cache holds head_dim={head_dim}")
        self._held = 0  # keys held, in time order in slots 0 .. _held - 1 (before RoPE)

    @property
    def size(self) -> int:
        """Keys held: the position the next token gets (its place at the end of the cache)."""
        return self._held

    @property
    def seen(self) -> int:
        """Tokens seen so far (the next token's position in the text)."""
        return self._size

    def reset(self) -> None:
        """Forget every token (the memory is kept for reuse)."""
        super().reset()
        self._held = 0

    def slot(self, position: int) -> int:
        """The slot that holds the text's ``position`` now (slots are in time order).

        Raises:
            ValueError: ``position`` is not held (evicted, or not seen yet).
        """
        check_int("position", position, minimum=0)
        held = (self._pos[: self._held] == position).nonzero().flatten()
        if held.numel() == 0:
            raise ValueError(f"position={position} is not held; held: {self._pos[: self._held].tolist()}")
        return int(held[0])

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Return the held keys (rotated to their slots) and values, then ``k``/``v``; keep sinks and window.

        ``k`` must have been rotated at positions ``size .. size + T_new - 1`` (what the
        layer does with the cache's :attr:`size`). Sets :attr:`key_positions` to
        ``0 .. size + T_new - 1``: positions inside the cache.

        Shapes:
            k, v: ``(B, H_kv, T_new, D)``
            returns: two tensors ``(B, H_kv, size + T_new, D)``; key_positions ``(size + T_new,)``
        """
        n, T_new = self._held, self.check_kv(k, v)
        if T_new > 1 and n + T_new > self.slots:
            raise ValueError(
                f"a StreamingKVCache holding {n} keys takes at most {self.slots - n} tokens at once "
                f"(sink_tokens + window = {self.slots}), got T_new={T_new}: decode one token at a time"
            )
        k, v = k.detach().to(self._k.dtype), v.detach().to(self._v.dtype)  # values, not the graph
        plain = torch.cat([self._k[:, :, :n], unrotate(self.rope, k, n)], dim=2)  # (B, H_kv, n + T_new, D)
        v_all = torch.cat([self._v[:, :, :n], v], dim=2)  # (B, H_kv, n + T_new, D)
        # Every held key at its slot 0 .. n - 1; the new ones as the layer rotated them.
        k_all = torch.cat([self.rope(self._k[:, :, :n]), k], dim=2)  # (B, H_kv, n + T_new, D)
        self.key_positions = torch.arange(n + T_new, device=self._pos.device)  # (n + T_new,)
        # Keep the sinks and the last window - 1 tokens: with the next one, a full window.
        total = n + T_new
        first = min(self.sink_tokens, total)
        keep = [*range(first), *range(max(first, total - (self.window - 1)), total)]
        idx = torch.tensor(keep, dtype=torch.long, device=self._k.device)  # (held,)
        text_pos = torch.cat(
            [self._pos[:n], torch.arange(self._size, self._size + T_new, device=self._pos.device)]
        )  # (n + T_new,): each key's position in the text
        held = len(keep)
        self._k[:, :, :held] = plain.index_select(2, idx)
        self._v[:, :, :held] = v_all.index_select(2, idx)
        self._pos.fill_(-1)
        self._pos[:held] = text_pos[idx.to(self._pos.device)]
        self._held = held
        self._size += T_new
        return k_all, v_all


def _streamable_layers(model: DecoderLM) -> list[MultiHeadAttention]:
    check_instance("model", model, DecoderLM)
    if model.config.positions.positional != "rope":
        raise ValueError(
            "positions inside the cache are RoPE positions; this model has "
            f"positional={model.config.positions.positional!r}"
        )
    layers = []
    for i, block in enumerate(model.blocks):
        attn = getattr(block, "attn", None)
        if not isinstance(attn, MultiHeadAttention) or attn.rope is None or attn.kv_source is not None:
            raise ValueError(
                f"layer {i} ({type(attn).__name__}) is not a RoPE MultiHeadAttention with its own keys and values"
            )
        layers.append(attn)
    return layers


def make_streaming_caches(
    model: DecoderLM, batch_size: int, window: int, *, sink_tokens: int = 0
) -> list[StreamingKVCache]:
    """One :class:`StreamingKVCache` per layer of ``model`` (dtype and device of its weights).

    The layers must carry the same window and sink tokens while decoding:
    ``with windowed(model, window, sink_tokens=sink_tokens)``.

    Raises:
        ValueError: The model has no RoPE, or a layer that is not a RoPE
            :class:`~attn_core.MultiHeadAttention` with its own keys and values.
    """
    layers = _streamable_layers(model)
    check_int("batch_size", batch_size)
    p = model.tok_emb.weight
    return [
        StreamingKVCache(
            batch_size,
            a.n_kv_heads,
            a.head_dim,
            window,
            rope=a.rope,
            sink_tokens=sink_tokens,
            dtype=p.dtype,
            device=p.device,
        )
        for a in layers
    ]


def streaming_losses(
    model: DecoderLM,
    ids: torch.Tensor,
    window: int | None,
    *,
    sink_tokens: int = 0,
    positions: str = "cache",
) -> torch.Tensor:
    """Next-token cross-entropy (nats) at every position of ``ids`` under a streaming cache.

    * ``window=None``: full attention (one pass).
    * ``positions="original"``: every token keeps its position in the text; one pass with
      the window on every layer (:func:`~attn_core.teach.window.windowed`), which equals decoding
      token by token from a :class:`~attn_core.RollingKVCache`.
    * ``positions="cache"``: StreamingLLM; decodes token by token from
      :class:`StreamingKVCache` s (the first ``sink_tokens + window`` tokens in one call).

    Args:
        model: A :class:`~attn_core.DecoderLM` with RoPE (its mode is left as it is; use eval).
        ids: Token ids.
        window: Most recent tokens each query sees, itself included; None for full attention.
        sink_tokens: First tokens kept visible (0: a plain sliding window).
        positions: ``"cache"`` or ``"original"`` (:data:`POSITIONS`).

    Returns:
        Loss of predicting ``ids[:, t + 1]`` from the tokens up to ``t``.

    Shapes:
        ids: ``(B, T)`` with ``T >= 2``; output: ``(B, T - 1)``

    Raises:
        ValueError: A bad window, ``sink_tokens`` or ``positions``; ``sink_tokens`` without a
            window; a model the cache cannot serve (see :func:`make_streaming_caches`).
        TypeError: ``ids`` is not an integer tensor.
    """
    check_instance("model", model, DecoderLM)
    check_tensor("ids", ids, ("B", "T"), integer=True)
    if ids.shape[1] < 2:
        raise ValueError(f"ids must hold at least 2 tokens (one target), got shape {tuple(ids.shape)}")
    window = check_window(window)
    sink_tokens = check_int("sink_tokens", sink_tokens, minimum=0)
    positions = check_choice("positions", positions, POSITIONS)
    if sink_tokens and window is None:
        raise ValueError(f"sink_tokens={sink_tokens} keeps the first tokens inside a window: pass a window")
    with torch.no_grad():
        if window is None:
            logits = model(ids)  # (B, T, V)
        elif positions == "original":
            with windowed(model, window, sink_tokens=sink_tokens):
                logits = model(ids)  # (B, T, V)
        else:
            caches = make_streaming_caches(model, ids.shape[0], window, sink_tokens=sink_tokens)
            first = min(ids.shape[1], sink_tokens + window)  # nothing is evicted before this
            with windowed(model, window, sink_tokens=sink_tokens):
                steps = [model(ids[:, :first], caches=caches)]  # (B, first, V)
                steps += [model(ids[:, t : t + 1], caches=caches) for t in range(first, ids.shape[1])]
            logits = torch.cat(steps, dim=1)  # (B, T, V)
    targets = ids[:, 1:].long()  # (B, T - 1)
    return F.cross_entropy(logits[:, :-1].transpose(1, 2), targets, reduction="none")  # (B, T - 1)
