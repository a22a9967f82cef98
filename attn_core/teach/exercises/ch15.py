"""Checks for the exercises of chapter 15 (sliding windows and attention sinks)."""

from __future__ import annotations

from typing import Callable

import torch

from ...caches.kv import RollingKVCache
from ...config import DecoderConfig, LayerPattern
from ...ops.attention import attention
from ..window import kv_cache_bytes, layer_pattern
from ._common import compare, report

__all__ = [
    "check_ring_read",
    "check_sink_attention",
    "check_mixed_cache_bytes",
    "check_streaming_positions",
    "check_longformer_mask",
]


def check_ring_read(fn: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]) -> bool:
    """Exercise 15.2: ``fn(slots, positions)`` reads a ring buffer in time order.

    ``slots`` holds one key per slot, ``positions[s]`` the absolute position stored in slot
    ``s`` (``-1``: empty). Return the stored keys oldest first and their positions. The
    reference is :class:`~attn_core.RollingKVCache` after a few wrapped updates.

    Shapes:
        slots: ``(B, H, S, D)``; positions: ``(S,)`` -> keys ``(B, H, n, D)``, positions ``(n,)``
    """
    name = "15.2 ring read"
    g = torch.Generator().manual_seed(152)
    for window, steps in ((4, 3), (4, 9), (5, 13)):
        cache = RollingKVCache(1, 2, 3, window=window, dtype=torch.float64)
        for _ in range(steps):
            k = torch.randn(1, 2, 1, 3, generator=g, dtype=torch.float64)
            cache.update(k, k)
        want_k, _ = cache.update(torch.zeros(1, 2, 0, 3, dtype=torch.float64), torch.zeros(1, 2, 0, 3))
        want_pos = cache.key_positions
        try:
            got_k, got_pos = fn(cache.slot_keys, cache.slot_positions)
        except Exception as e:
            return report(name, False, f"{type(e).__name__}: {e}")
        if not isinstance(got_pos, torch.Tensor) or got_pos.tolist() != want_pos.tolist():
            got = got_pos.tolist() if isinstance(got_pos, torch.Tensor) else got_pos
            return report(
                name, False, f"window={window}, after {steps} tokens: positions {got}, expected {want_pos.tolist()}"
            )
        if not (isinstance(got_k, torch.Tensor) and got_k.shape == want_k.shape and torch.equal(got_k, want_k)):
            return compare(name, got_k, want_k, atol=0.0)
    return report(name, True, "before and after the ring wraps, empty slots skipped")


def check_sink_attention(fn: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]) -> bool:
    """Exercise 15.3: ``fn(q, k, v, sinks)``: causal attention with gpt-oss's sink logit per head.

    The sink joins every softmax denominator and has no value; the reference is
    :func:`attn_core.attention` with ``sinks=``.

    Shapes:
        q, k, v: ``(B, H, T, D)``; sinks: ``(H,)``; fn's output: ``(B, H, T, D)``
    """
    name = "15.3 sink attention"
    g = torch.Generator().manual_seed(153)
    q, k, v = (torch.randn(2, 3, 6, 4, generator=g, dtype=torch.float64) for _ in range(3))
    sinks = torch.tensor([-1.0, 0.5, 3.0], dtype=torch.float64)
    try:
        got = fn(q, k, v, sinks)
    except Exception as e:
        return report(name, False, f"{type(e).__name__}: {e}")
    expected = attention(q, k, v, is_causal=True, sinks=sinks)
    plain = attention(q, k, v, is_causal=True)
    if isinstance(got, torch.Tensor) and got.shape == expected.shape and torch.allclose(got, plain, atol=1e-10):
        return report(name, False, "this is attention without the sink: add exp(sink) to every denominator")
    return compare(name, got, expected, atol=1e-10)


def check_mixed_cache_bytes(fn: Callable[..., int]) -> bool:
    """Exercise 15.4: ``fn(n_layers, full_every, window, context, n_kv_heads, head_dim)``: KV-cache bytes in bfloat16.

    Every ``full_every``-th layer is full (:func:`~attn_core.teach.window.layer_pattern`), the
    others hold at most ``window`` positions; batch 1, 2 bytes per element.
    """
    name = "15.4 mixed cache bytes"
    cases = [(6, 6, 4, 100, 2, 8), (4, 2, 16, 8, 1, 4), (62, 6, 1024, 131072, 16, 128), (3, 1, 5, 50, 2, 2)]
    for n_layers, full_every, window, context, n_kv_heads, head_dim in cases:
        types = layer_pattern(n_layers, full_every)
        config = DecoderConfig(
            vocab_size=2,
            n_layers=n_layers,
            d_model=n_kv_heads * head_dim,
            n_heads=n_kv_heads,
            pattern=LayerPattern(layer_types=types, sliding_window=window if "sliding" in types else None),
        )
        want = kv_cache_bytes(config, context)
        try:
            got = fn(n_layers, full_every, window, context, n_kv_heads, head_dim)
        except Exception as e:
            return report(name, False, f"{type(e).__name__}: {e}")
        if got != want:
            hint = " (keys *and* values)" if got == want // 2 else ""
            args = f"n_layers={n_layers}, full_every={full_every}, window={window}, context={context}"
            return report(name, False, f"{args}: got {got!r}, expected {want}{hint}")
    return report(name, True, "Gemma 3 27B's shape included")


def _streaming_reference(t: int, sink_tokens: int, window: int) -> tuple[list[int], int]:
    """What a :class:`~attn_core.teach.streaming.StreamingKVCache` shows the query at text position ``t``."""
    from ...positions.rope import RotaryEmbedding
    from ..streaming import StreamingKVCache

    cache = StreamingKVCache(1, 1, 2, window, rope=RotaryEmbedding(2), sink_tokens=sink_tokens, dtype=torch.float64)
    for _ in range(t):
        cache.update(torch.zeros(1, 1, 1, 2, dtype=torch.float64), torch.zeros(1, 1, 1, 2, dtype=torch.float64))
    held = [p for p in cache.slot_positions.tolist() if p >= 0] + [t]
    return held, cache.size


def check_streaming_positions(fn: Callable[[int, int, int], tuple[list[int], int]]) -> bool:
    """Exercise 15.5: ``fn(t, sink_tokens, window)`` -> ``(held, query_position)`` under StreamingLLM.

    ``held``: the text positions of the keys the query at text position ``t`` sees (the
    first ``sink_tokens`` tokens and the last ``window``, itself included), in order.
    ``query_position``: the position RoPE gives that query, its place in the cache. The
    reference is :class:`~attn_core.teach.streaming.StreamingKVCache` fed ``t + 1`` tokens.
    """
    name = "15.5 streaming positions"
    for t, sink_tokens, window in ((3, 4, 8), (11, 4, 8), (12, 4, 8), (40, 4, 8), (20, 0, 5), (9, 1, 1), (30, 2, 6)):
        want_held, want_pos = _streaming_reference(t, sink_tokens, window)
        try:
            got = fn(t, sink_tokens, window)
            held, pos = list(got[0]), int(got[1])
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        case = f"t={t}, sink_tokens={sink_tokens}, window={window}"
        if held != want_held:
            hint = " (the window counts the query itself)" if len(held) == len(want_held) + 1 else ""
            return report(name, False, f"{case}: held {held}, expected {want_held}{hint}")
        if pos != want_pos:
            hint = " (that is its place in the text, not in the cache)" if pos == t else ""
            return report(name, False, f"{case}: query position {pos}, expected {want_pos}{hint}")
    return report(name, True, "before and after the first eviction, with and without sinks")


def _longformer_reference(T: int, window: int, global_positions: tuple[int, ...]) -> torch.Tensor:
    """Longformer's mask: ``|i - j| <= window // 2`` (both sides), plus symmetric global tokens."""
    i = torch.arange(T)[:, None]  # (T, 1)
    j = torch.arange(T)[None, :]  # (1, T)
    allowed = (i - j).abs() <= window // 2  # (T, T): w/2 on each side, itself included
    for g in global_positions:
        allowed[g, :] = True  # a global token sees every token ...
        allowed[:, g] = True  # ... and every token sees it
    return allowed


def check_longformer_mask(fn: Callable[[int, int, tuple[int, ...]], torch.Tensor]) -> bool:
    """Exercise 15.1: ``fn(T, window, global_positions)`` is Longformer's attention mask.

    Longformer (an encoder) gives each token a *symmetric* window: ``window // 2`` tokens on
    each side and itself (``|i - j| <= window // 2``), with no causality; each position in
    ``global_positions`` attends to every token and every token attends to it. The cases
    include the sequence's edges, an odd window and no global token.

    Shapes:
        fn's output: ``(T, T)``, boolean, True = may attend
    """
    name = "15.1 Longformer's window"
    cases = ((8, 4, ()), (9, 2, (0,)), (10, 6, (0, 7)), (7, 5, (3,)))
    for T, window, global_positions in cases:
        try:
            got = fn(T, window, global_positions)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        expected = _longformer_reference(T, window, global_positions)
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
            return compare(name, got, expected.double(), atol=0.0)
        got = got.bool()
        if torch.equal(got, expected):
            continue
        where = f"T={T}, window={window}, global_positions={global_positions}"
        if not got.triu(1).any():
            return report(name, False, f"{where}: no query sees a later key (Longformer's window is two-sided)")
        if torch.equal(got.T, got) and (got.sum(-1) != expected.sum(-1)).any() and not global_positions:
            middle = T // 2
            return report(
                name,
                False,
                f"{where}: query {middle} sees {int(got[middle].sum())} keys, expected "
                f"{int(expected[middle].sum())} (window // 2 on each side, and itself)",
            )
        if global_positions and not torch.equal(got, got.T):
            return report(name, False, f"{where}: global attention goes both ways (rows and columns)")
        wrong = (got != expected).nonzero()[0].tolist()
        return report(name, False, f"{where}: wrong at (query, key)={wrong}")
    return report(name, True, "sliding both ways, odd and even windows, with and without global tokens")
