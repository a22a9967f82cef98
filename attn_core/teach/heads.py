"""Find attention heads by what they do: scores computed from attention weights.

Each score is a number per head, high when the head does one thing:

* :func:`previous_token_score`: the weight a query puts on the token just before it;
* :func:`induction_score`: on a passage repeated twice, the weight a query in the second
  copy puts on the token *after* its earlier occurrence (the head that continues a
  pattern it has seen, Olsson et al., 2022);
* :func:`first_token_score`: the weight on position 0 (an attention "sink", Xiao et al., 2023);
* :func:`punctuation_score`: the weight on punctuation and line breaks;
* :func:`positional_score`: how much of the pattern is fixed by positions alone, the same
  whatever the text (1 = identical maps on every passage).

:func:`score_heads` runs a model on passages of a text and returns all five as
``(L, H)`` tables; :func:`ablate_heads` switches heads off (their output set to zero) to
measure what they contribute; :func:`repeated_passages` and :func:`repeat_loss` build
and score the repeated passages an induction head is for.

Shape legend:
    N    passages (a batch)
    L    layers, H heads
    T    tokens per passage (queries and keys: the maps are causal self-attention)
    ...  any leading dimensions, e.g. ``(N, L, H)``
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from ..model.decoder import DecoderLM
from .pretrained import ByteCodec

__all__ = [
    "PUNCTUATION",
    "previous_token_score",
    "induction_score",
    "first_token_score",
    "punctuation_score",
    "positional_score",
    "text_passages",
    "repeated_passages",
    "score_heads",
    "repeat_loss",
    "ablate_heads",
    "SCORE_NAMES",
]

#: The bytes :func:`punctuation_score` counts as punctuation (line breaks included).
PUNCTUATION = ".,;:!?\n"
#: The keys of :func:`score_heads`'s result, in order.
SCORE_NAMES = ("previous_token", "induction", "first_token", "punctuation", "positional")


def _check_weights(weights: object, *, min_dim: int = 2) -> torch.Tensor:
    if not isinstance(weights, torch.Tensor):
        raise TypeError(f"weights must be a torch.Tensor, got {type(weights).__name__}")
    if not weights.dtype.is_floating_point:
        raise TypeError(f"weights must be floating point, got dtype={weights.dtype}")
    if weights.dim() < min_dim or weights.shape[-1] != weights.shape[-2]:
        raise ValueError(
            f"weights must have shape (..., T, T) with at least {min_dim} dimensions, got {tuple(weights.shape)}"
        )
    return weights


def _check_query_start(start: object, T: int, name: str = "min_query") -> int:
    if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start < T:
        raise ValueError(f"{name} must be an int in [0, T={T}), got {name}={start!r}")
    return start


def previous_token_score(weights: torch.Tensor) -> torch.Tensor:
    """Mean weight of each query on the key just before it.

    Args:
        weights: Causal self-attention weights.

    Returns:
        The mean over queries ``t = 1 .. T-1`` of ``weights[..., t, t-1]``; 1 for a head
        that always looks one token back.

    Shapes:
        weights: ``(..., T, T)`` with ``T >= 2``; output: ``(...)``
    """
    w = _check_weights(weights)
    if w.shape[-1] < 2:
        raise ValueError(f"previous_token_score needs T >= 2, got T={w.shape[-1]}")
    return w.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1)  # (..., T-1) -> (...)


def induction_score(weights: torch.Tensor, period: int) -> torch.Tensor:
    """Mean weight on "the token after the same token one period earlier", on a repeated passage.

    On ``x_0 .. x_{n-1} x_0 .. x_{n-1}`` (period ``n``), a query ``t >= n`` in the second
    copy sees its own token at ``t - n``; an induction head attends to ``t - n + 1``, the
    token that came next last time, and so predicts it.

    Args:
        weights: Weights on passages that repeat with this period.
        period: ``n``, the passage length.

    Shapes:
        weights: ``(..., T, T)`` with ``n < T <= 2n``... or longer; output: ``(...)``
    """
    w = _check_weights(weights)
    T = w.shape[-1]
    if isinstance(period, bool) or not isinstance(period, int) or not 1 <= period < T:
        raise ValueError(f"period must be an int in [1, T={T}), got period={period!r}")
    # Keys t - period + 1 for the queries t = period .. T-1: the diagonal at offset 1 - period.
    return w.diagonal(offset=1 - period, dim1=-2, dim2=-1)[..., : T - period].mean(-1)


def first_token_score(weights: torch.Tensor, *, min_query: int = 8) -> torch.Tensor:
    """Mean weight on position 0 (an attention sink), over the queries ``t >= min_query``.

    The first queries have few keys to choose from (query 0 has only position 0), so
    they are left out by default.

    Shapes:
        weights: ``(..., T, T)``; output: ``(...)``
    """
    w = _check_weights(weights)
    start = _check_query_start(min_query, w.shape[-1])
    return w[..., start:, 0].mean(-1)


def punctuation_score(
    weights: torch.Tensor, ids: torch.Tensor, *, chars: str = PUNCTUATION, min_query: int = 8
) -> torch.Tensor:
    """Mean total weight on keys that are punctuation or line breaks.

    Compare it with the same score of uniform causal attention (``punctuation_score(
    causal_mask(T) / causal_mask(T).sum(-1, keepdim=True), ids)``): a head scoring well
    above that baseline seeks punctuation out.

    Args:
        weights: Attention weights.
        ids: The byte ids of the keys (the passages the weights were computed on).
        chars: The characters that count (ASCII), default :data:`PUNCTUATION`.
        min_query: First query counted.

    Shapes:
        weights: ``(N, ..., T, T)`` or ``(T, T)``; ids: ``(N, T)`` or ``(T,)``; output: ``(N, ...)`` or ``()``
    """
    w = _check_weights(weights)
    if not isinstance(ids, torch.Tensor) or ids.dtype.is_floating_point:
        raise TypeError(f"ids must be an integer tensor, got {type(ids).__name__}")
    T = w.shape[-1]
    if ids.shape[-1] != T or (ids.dim() == 2 and ids.shape[0] != w.shape[0]) or ids.dim() > 2:
        raise ValueError(
            f"ids must have shape (T,) or (N, T) matching weights {tuple(w.shape)}, got {tuple(ids.shape)}"
        )
    start = _check_query_start(min_query, T)
    marks = torch.tensor(sorted(set(chars.encode("ascii"))), dtype=ids.dtype)
    is_punct = torch.isin(ids, marks).to(w.dtype)  # (N, T) or (T,)
    if ids.dim() == 2:
        is_punct = is_punct.reshape(ids.shape[0], *([1] * (w.dim() - 3)), 1, T)  # (N, 1.., 1, T)
    mass = (w * is_punct).sum(-1)  # (..., T): weight on punctuation keys per query
    return mass[..., start:].mean(-1)


def positional_score(weights: torch.Tensor, *, min_query: int = 1) -> torch.Tensor:
    """How far a head's maps are the same on every passage: 1 minus the mean total-variation
    distance between each passage's row and the mean row over the passages.

    A head whose pattern depends on positions only (always the previous token, always
    position 0, a fixed local window) scores 1; a head that looks for content scores
    lower. Previous-token and sink heads are positional too: read this score beside them.

    Args:
        weights: Maps of ``N >= 2`` passages of the same length.
        min_query: First query counted (query 0 has one key and is always the same).

    Shapes:
        weights: ``(N, ..., T, T)``; output: ``(...)``
    """
    w = _check_weights(weights, min_dim=3)
    if w.shape[0] < 2:
        raise ValueError(f"positional_score needs N >= 2 passages, got N={w.shape[0]}")
    start = _check_query_start(min_query, w.shape[-1])
    tv = 0.5 * (w - w.mean(0, keepdim=True)).abs().sum(-1)  # (N, ..., T): distance of each row to the mean row
    return 1.0 - tv[..., start:].mean(-1).mean(0)


def _as_ids(text) -> torch.Tensor:
    ids = ByteCodec().encode(text) if isinstance(text, str) else text
    if not isinstance(ids, torch.Tensor) or ids.dim() != 1 or ids.dtype.is_floating_point:
        raise TypeError("text must be a str or a (N,) integer tensor of token ids")
    return ids.long()


def _check_count(name: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {name}={value!r}")
    return value


def text_passages(text, n_passages: int, length: int) -> torch.Tensor:
    """``n_passages`` windows of ``length`` bytes, evenly spaced over ``text`` (deterministic).

    Shapes:
        text: ``N_text`` bytes; output: ``(n_passages, length)``
    """
    ids = _as_ids(text)
    _check_count("n_passages", n_passages)
    _check_count("length", length)
    if ids.numel() < length:
        raise ValueError(f"the text has {ids.numel()} bytes, fewer than length={length}")
    span = ids.numel() - length
    starts = [span * i // max(1, n_passages - 1) for i in range(n_passages)] if n_passages > 1 else [0]
    return torch.stack([ids[s : s + length] for s in starts])


def repeated_passages(text, n_passages: int, period: int) -> torch.Tensor:
    """Passages of ``period`` bytes from ``text``, each written twice: ``x x``.

    Shapes:
        output: ``(n_passages, 2 * period)``
    """
    once = text_passages(text, n_passages, period)  # (N, period)
    return torch.cat([once, once], dim=1)  # (N, 2·period)


@torch.no_grad()
def _all_weights(model: DecoderLM, ids: torch.Tensor) -> torch.Tensor:
    was_training = model.training
    model.eval()
    try:
        _, weights = model(ids, return_weights=True)  # L tensors (N, H, T, T)
    finally:
        model.train(was_training)
    return torch.stack(weights, dim=1)  # (N, L, H, T, T)


def score_heads(
    model: DecoderLM, text, *, n_passages: int = 16, length: int = 128, period: int = 64
) -> dict[str, torch.Tensor]:
    """All five scores of every head of ``model``, averaged over passages of ``text``.

    Previous-token, first-token, punctuation and positional scores use ``n_passages``
    windows of ``length`` bytes; the induction score uses the same number of passages of
    ``period`` bytes, each repeated twice.

    Args:
        model: A :class:`~attn_core.DecoderLM` (e.g. from ``load_shakespeare``).
        text: The text to score on (a string or byte ids), e.g. the validation play.
        n_passages: Passages per score (at least 2, for the positional score).
        length: Bytes per natural passage.
        period: Bytes per repeated passage (``2 * period <= max_len``).

    Returns:
        ``{name: scores}`` for each name of :data:`SCORE_NAMES`, in the model's dtype.

    Shapes:
        each score: ``(L, H)``
    """
    if not isinstance(model, DecoderLM):
        raise TypeError(f"model must be a DecoderLM, got {type(model).__name__}")
    _check_count("n_passages", n_passages, minimum=2)
    max_len = model.config.max_len
    if _check_count("length", length, minimum=16) > max_len:
        raise ValueError(f"length={length} exceeds the model's max_len={max_len}")
    if 2 * _check_count("period", period, minimum=2) > max_len:
        raise ValueError(f"2 * period = {2 * period} exceeds the model's max_len={max_len}")
    natural = text_passages(text, n_passages, length)  # (N, length)
    w = _all_weights(model, natural)  # (N, L, H, T, T)
    scores = {
        "previous_token": previous_token_score(w).mean(0),
        "first_token": first_token_score(w).mean(0),
        "punctuation": punctuation_score(w, natural).mean(0),
        "positional": positional_score(w),
    }
    repeated = repeated_passages(text, n_passages, period)  # (N, 2·period)
    scores["induction"] = induction_score(_all_weights(model, repeated), period).mean(0)
    return {name: scores[name] for name in SCORE_NAMES}


@torch.no_grad()
def repeat_loss(model: DecoderLM, repeated: torch.Tensor, period: int) -> tuple[float, float]:
    """Bits per byte on the first and on the second copy of repeated passages.

    The second copy is predictable from the first: a model with induction heads does much
    better there. The first byte of each copy is not scored (the first has no context,
    and the second's first byte is not predictable from the repetition alone).

    Shapes:
        repeated: ``(N, 2 * period)`` from :func:`repeated_passages`
    """
    if not isinstance(model, DecoderLM):
        raise TypeError(f"model must be a DecoderLM, got {type(model).__name__}")
    if not isinstance(repeated, torch.Tensor) or repeated.dim() != 2 or repeated.shape[1] != 2 * period:
        raise ValueError(
            f"repeated must have shape (N, 2 * period = {2 * period}), got "
            f"{tuple(repeated.shape) if isinstance(repeated, torch.Tensor) else type(repeated).__name__}"
        )
    was_training = model.training
    model.eval()
    try:
        logits = model(repeated[:, :-1])  # (N, 2·period - 1, V): row t predicts byte t + 1
    finally:
        model.train(was_training)
    nll = F.cross_entropy(logits.transpose(1, 2).double(), repeated[:, 1:], reduction="none")  # (N, 2·period - 1)
    first = nll[:, : period - 1].mean().item()  # predicting bytes 1 .. period-1
    second = nll[:, period:].mean().item()  # predicting bytes period+1 .. 2·period-1
    return first / math.log(2), second / math.log(2)


@contextlib.contextmanager
def ablate_heads(model: DecoderLM, heads: Iterable[tuple[int, int]]) -> Iterator[DecoderLM]:
    """Switch heads off inside a ``with`` block: their output is set to zero.

    Zeroing a head's slice of the concatenated head outputs, just before the output
    projection ``out_proj``, removes exactly what that head writes into the residual
    stream (plus nothing of the projection's bias, which every head shares).

    Args:
        model: A :class:`~attn_core.DecoderLM` with standard multi-head attention blocks.
        heads: ``(layer, head)`` pairs.

    Yields:
        The same model, with the heads off until the block ends.

    Shapes:
        out_proj's input: ``(B, T, H·D)``, head ``h`` in columns ``h·D .. (h+1)·D - 1``
    """
    if not isinstance(model, DecoderLM):
        raise TypeError(f"model must be a DecoderLM, got {type(model).__name__}")
    c = model.config
    if c.block != "standard" or c.attention != "mha":
        raise ValueError(
            f"ablate_heads needs standard multi-head attention blocks, got block={c.block!r}, attention={c.attention!r}"
        )
    by_layer: dict[int, list[int]] = {}
    for pair in heads:
        if (
            not isinstance(pair, tuple)
            or len(pair) != 2
            or not all(isinstance(i, int) and not isinstance(i, bool) for i in pair)
        ):
            raise TypeError(f"each head must be a (layer, head) pair of ints, got {pair!r}")
        layer, head = pair
        if not 0 <= layer < c.n_layers or not 0 <= head < c.n_heads:
            raise ValueError(f"head {pair} is out of range: layer in [0, {c.n_layers}), head in [0, {c.n_heads})")
        by_layer.setdefault(layer, []).append(head)
    D = c.resolved_head_dim
    handles = []

    def make_hook(head_list: list[int]):
        def hook(module: nn.Module, args: tuple):
            x = args[0].clone()  # (B, T, H·D): out-of-place, autograd keeps the original
            for h in head_list:
                x[..., h * D : (h + 1) * D] = 0.0
            return (x, *args[1:])

        return hook

    try:
        for layer, head_list in by_layer.items():
            out_proj = model.blocks[layer].attn.out_proj
            handles.append(out_proj.register_forward_pre_hook(make_hook(head_list)))
        yield model
    finally:
        for handle in handles:
            handle.remove()
