"""attn_core.teach.exercises.reading_an_llm: the right and wrong answers of exercises A.1-A.3 (ANSWERS,
held to the standard by tests/test_teach_exercises_standard.py)."""

from __future__ import annotations

import torch

from attn_core.teach.exercises.reading_an_llm import check_gqa_cache_bytes, check_logit_difference, check_sink_mass


def _sink_mass(weights, min_query):
    mass = weights[..., min_query:, 0].mean(-1)  # (..., L, H)
    return mass.mean(0) if mass.dim() == 3 else mass


def _logit_difference(logits, last, io, s):
    at_last = logits[torch.arange(logits.shape[0]), last]  # (B, V)
    return at_last.gather(1, io[:, None])[:, 0] - at_last.gather(1, s[:, None])[:, 0]


def _at_end(logits, last, io, s):  # read at the padded end
    return _logit_difference(logits, torch.full_like(last, logits.shape[1] - 1), io, s)


def _gqa_bytes(n_layers, n_kv_heads, head_dim, bytes_per_value, *, factor=2, heads_per_kv=1):
    return factor * n_layers * heads_per_kv * n_kv_heads * head_dim * bytes_per_value


ANSWERS = {
    check_sink_mass: (
        [_sink_mass],
        [
            (lambda w, q: _sink_mass(w, 0), "before min_query"),  # every query counted
            (lambda w, q: w[..., q:, -1].mean(-1), "wrong values"),  # the last key
            (lambda w, q: w[..., q:, 0].sum(-1).mean(0) if w.dim() == 5 else w[..., q:, 0].sum(-1), "wrong values"),
        ],
    ),
    check_logit_difference: (
        [_logit_difference],
        [
            (_at_end, "padded end"),
            (lambda lo, last, io, s: _logit_difference(lo, last, s, io), "sign"),
            (lambda lo, last, io, s: _logit_difference(lo, last, io, s)[:, None], "shape"),
        ],
    ),
    check_gqa_cache_bytes: (
        [_gqa_bytes],
        [
            (lambda **kw: _gqa_bytes(**kw, factor=1), "keys *and* values"),
            (lambda **kw: _gqa_bytes(**kw, heads_per_kv=3), "measured"),  # per query head
            (lambda n_layers, n_kv_heads, head_dim, bytes_per_value: 2 * n_kv_heads * head_dim, "measured"),
        ],
    ),
}
