"""attn_core.teach.exercises.ch15: the right and wrong answers of exercises 15.1-15.5 (ANSWERS, held to
the standard by tests/test_teach_exercises_standard.py)."""

from __future__ import annotations

import torch

from attn_core.ops.masks import causal_mask
from attn_core.teach.exercises.ch15 import (
    check_longformer_mask,
    check_mixed_cache_bytes,
    check_ring_read,
    check_sink_attention,
    check_streaming_positions,
)


# 15.1 Longformer's symmetric window with global tokens ------------------------------
def _longformer(T, window, global_positions, *, reach=None, strict=False, both_ways=True):
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    reach = window // 2 if reach is None else reach
    allowed = (i - j).abs() < reach if strict else (i - j).abs() <= reach
    g = torch.zeros(T, dtype=torch.bool)
    g[list(global_positions)] = True
    return allowed | g[None, :] | (g[:, None] if both_ways else False)


def _causal_window(T, window, global_positions):  # chapter 15's (decoder) window of the same width: one-sided
    g = torch.zeros(T, dtype=torch.bool)
    g[list(global_positions)] = True
    return causal_mask(T, window=window) | g[:, None] | g[None, :]


def _ignores_global(T, window, global_positions):
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return (i - j).abs() <= window // 2


# 15.2 reading a ring buffer ---------------------------------------------------------
def _ring_read(slots, positions):
    order = torch.argsort(positions)
    order = order[positions[order] >= 0]
    return slots[:, :, order], positions[order]


# 15.3 sink attention ----------------------------------------------------------------
def _sink_attention(q, k, v, sinks, with_sink=True, causal=True):
    T = q.shape[-2]
    s = (q @ k.transpose(-2, -1)) / q.shape[-1] ** 0.5
    if causal:
        s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    if with_sink:
        s = torch.cat([s, sinks[:, None, None].expand(*s.shape[:-1], 1)], -1)
        return torch.softmax(s, -1)[..., :-1] @ v
    return torch.softmax(s, -1) @ v


# 15.4 the cache of a mixed stack ----------------------------------------------------
def _mixed_bytes(n_layers, full_every, window, context, n_kv_heads, head_dim, halve=False, clip=True):
    per = (1 if halve else 2) * n_kv_heads * head_dim * 2
    held = min(context, window) if clip else window
    return sum(per * (context if (i + 1) % full_every == 0 else held) for i in range(n_layers))


# 15.5 StreamingLLM's positions -------------------------------------------------------
def _streaming(t, sink_tokens, window):
    held = sorted(set(range(min(sink_tokens, t + 1))) | set(range(max(0, t - window + 1), t + 1)))
    return held, len(held) - 1


def _streaming_window_off_by_one(t, s, w):
    held = sorted(set(range(min(s, t + 1))) | set(range(max(0, t - w), t + 1)))
    return held, len(held) - 1


def _streaming_sinks_twice(t, s, w):  # a window that does not skip the sinks: listed twice early on
    held = list(range(min(s, t + 1))) + list(range(max(0, t - w + 1), t + 1))
    return held, len(held) - 1


ANSWERS = {
    check_longformer_mask: (
        [_longformer],
        [
            (_causal_window, "two-sided"),
            (lambda T, w, g: _longformer(T, w, g, strict=True), "window // 2 on each side"),
            (lambda T, w, g: _longformer(T, w, g, reach=w), "window // 2 on each side"),  # w on each side
            (lambda T, w, g: _longformer(T, w, g, both_ways=False), "both ways"),
            (_ignores_global, "wrong at (query, key)"),
            (lambda T, w, g: torch.ones(T, T + 1, dtype=torch.bool), "shape"),
        ],
    ),
    check_ring_read: (
        [_ring_read],
        [
            (lambda s, p: (s[:, :, p >= 0], p[p >= 0]), "expected [5, 6, 7, 8]"),  # slot order, not time order
            # sorted by position, the empty slots (-1) kept
            (lambda s, p: (s[:, :, torch.argsort(p)], p[torch.argsort(p)]), "positions [-1, 0, 1, 2]"),
        ],
    ),
    check_sink_attention: (
        [_sink_attention],
        [
            (lambda *a: _sink_attention(*a, with_sink=False), "without the sink"),
            (lambda *a: _sink_attention(*a, causal=False), "max abs difference"),
            (lambda q, k, v, sinks: _sink_attention(q, k, v, sinks.exp()), "max abs difference"),  # exp(sink) as logit
        ],
    ),
    check_mixed_cache_bytes: (
        [_mixed_bytes],
        [
            (lambda *a: _mixed_bytes(*a, halve=True), "keys *and* values"),
            (lambda *a: _mixed_bytes(*a, clip=False), "expected"),  # a window larger than the context
            (lambda n, f, w, c, h, d: n * 2 * h * d * 2 * c, "expected"),  # every layer full
        ],
    ),
    check_streaming_positions: (
        [_streaming],
        [
            (lambda t, s, w: (_streaming(t, s, w)[0], t), "not in the cache"),
            (_streaming_window_off_by_one, "counts the query itself"),
            (lambda t, s, w: _streaming(t, 0, w), "expected"),  # the sinks forgotten
            (_streaming_sinks_twice, "expected"),
        ],
    ),
}
