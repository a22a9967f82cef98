"""One model step over the tokens of many sequences: packed, with attention per sequence.

The tokens a step runs (a chunk of one prompt, one token of each decoding request) are
packed into one row, ``(1, N)``: the embeddings, norms, MLPs and logits of all of them
run as one batch, with no padding. Attention is the only part where a token must see
its own sequence alone, at its own positions: for it, each block's attention module is
called once per sequence, on that sequence's slice of the row and with its paged cache
(:class:`~attn_core.caches.paged.PagedKVCache`), so RoPE rotates by the sequence's own
positions and the keys are those of its block table.

The model's blocks call ``self.attn``; while :func:`forward_packed` runs, each block's
``attn`` is a :class:`SequenceSplit` around the original module (put back afterwards,
also after an error). The caches handed to the model are :class:`PackedCaches`: one per
layer, holding every sequence's view of that layer.

Shape legend:
    N      tokens of the step, all sequences packed; ``n_i`` those of sequence ``i``
    V      vocabulary size
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn

__all__ = ["PackedCaches", "SequenceSplit", "split_attention", "forward_packed", "check_packable"]


class PackedCaches:
    """One layer's caches for a packed step: each sequence's view and the span of its tokens in the row.

    Args:
        spans: ``(start, end)`` of each sequence's tokens in the packed row.
        views: Each sequence's cache of this layer (e.g. a paged view).
        offset: What the model reads as the positions cached before the step (for an
            absolute encoding's table only: at least the largest position + 1 - N).
    """

    def __init__(self, spans: list[tuple[int, int]], views: list, offset: int) -> None:
        if len(spans) != len(views):
            raise ValueError(f"one view per span: got {len(spans)} spans and {len(views)} views")
        self.spans, self.views, self._offset = spans, views, offset

    @property
    def size(self) -> int:
        return self._offset

    @property
    def offset(self) -> int:
        return self._offset


class SequenceSplit(nn.Module):
    """A block's attention, called once per sequence of a packed row (:class:`PackedCaches`).

    Follows the attention-layer protocol, ``forward(x, *, mask=, kv_cache=, return_weights=)``.

    Args:
        attention: The block's attention module.

    Shapes:
        x: ``(1, N, d_model)``; output: ``(1, N, d_model)``
    """

    def __init__(self, attention: nn.Module) -> None:
        super().__init__()
        self.inner = attention

    def forward(self, x: torch.Tensor, *, mask=None, kv_cache: PackedCaches | None = None, return_weights=False):
        if not isinstance(kv_cache, PackedCaches):
            raise TypeError(f"SequenceSplit needs PackedCaches, got {type(kv_cache).__name__}")
        if mask is not None or return_weights:
            raise ValueError("a packed step takes no mask and returns no weights (each sequence is causal alone)")
        outs = [self.inner(x[:, s:e], kv_cache=view) for (s, e), view in zip(kv_cache.spans, kv_cache.views)]
        return torch.cat(outs, dim=1)  # (1, N, d_model)


def check_packable(model: nn.Module) -> None:
    """Refuse, naming why, a model whose step cannot be packed: attention per sequence needs standard blocks.

    Raises:
        ValueError: Not standard blocks (the simplified ones average over every key of the
            call), ALiBi (its bias is built for one row of positions per call), a layer that
            reads another's keys (it would read the last sequence's).
    """
    c = model.config
    if c.block != "standard":
        raise ValueError(f"a packed step needs standard blocks, got block={c.block!r}")
    if c.positions.positional == "alibi":
        raise ValueError("a packed step does not take ALiBi: the model builds its bias for one row of positions")
    if c.pattern.kv_share is not None and any(src != i for i, src in enumerate(c.pattern.kv_share)):
        raise ValueError(f"a packed step does not take layers that share keys (kv_share={c.pattern.kv_share})")


@contextmanager
def split_attention(model: nn.Module):
    """While the block runs, every block's ``attn`` is a :class:`SequenceSplit` around it; restored after."""
    originals = [block.attn for block in model.blocks]
    try:
        for block, attn in zip(model.blocks, originals):
            block.attn = SequenceSplit(attn)
        yield
    finally:
        for block, attn in zip(model.blocks, originals):
            block.attn = attn


def forward_packed(model: nn.Module, chunks: list[tuple[list[int], int]], layer_views: list[list]) -> torch.Tensor:
    """Logits of the last token of each sequence after one packed step.

    Args:
        model: A :class:`~attn_core.DecoderLM` (checked by :func:`check_packable`).
        chunks: Each sequence's new tokens and the position of the first of them.
        layer_views: For each sequence, its cache of every layer (the caches are appended to).

    Shapes:
        output: ``(len(chunks), V)``
    """
    ids, positions, spans, start = [], [], [], 0
    for tokens, first in chunks:
        ids += tokens
        positions += range(first, first + len(tokens))
        spans.append((start, start + len(tokens)))
        start += len(tokens)
    device = model.tok_emb.weight.device
    N = len(ids)
    offset = max(0, max(positions) + 1 - N)
    caches = [PackedCaches(spans, [views[i] for views in layer_views], offset) for i in range(len(model.blocks))]
    # Absolute encodings (learned, sinusoidal) embed each token's own position; relative
    # ones are applied inside attention, per sequence, from each view's offset.
    absolute = model.config.positions.positional in ("learned", "sinusoidal")
    pos = {"position_ids": torch.tensor([positions], device=device)} if absolute else {}
    with split_attention(model):
        logits = model(torch.tensor([ids], device=device), caches=caches, **pos)  # (1, N, V)
    last = torch.tensor([e - 1 for _, e in spans], device=device)
    return logits[0, last]  # (len(chunks), V)
