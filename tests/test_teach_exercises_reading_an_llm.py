"""attn_core.teach.exercises.reading_an_llm: each check passes a correct answer and fails wrong ones (printing why)."""

from __future__ import annotations

import torch

from attn_core.teach.exercises import check_gqa_cache_bytes, check_logit_difference, check_sink_mass


def _sink_mass(weights, min_query):
    mass = weights[..., min_query:, 0].mean(-1)  # (..., L, H)
    return mass.mean(0) if mass.dim() == 3 else mass


def test_sink_mass(capsys):
    assert check_sink_mass(_sink_mass)
    assert "correct" in capsys.readouterr().out
    assert not check_sink_mass(lambda w, q: _sink_mass(w, 0))  # every query counted
    assert "before min_query" in capsys.readouterr().out
    assert not check_sink_mass(lambda w, q: w[..., q:, -1].mean(-1))  # the last key, no batch mean
    assert not check_sink_mass(lambda w, q: w[..., q:, 0].sum(-1).mean(0) if w.dim() == 5 else w[..., q:, 0].sum(-1))
    assert not check_sink_mass(lambda w, q: 1 / 0)
    assert "ZeroDivisionError" in capsys.readouterr().out


def _logit_difference(logits, last, io, s):
    at_last = logits[torch.arange(logits.shape[0]), last]  # (B, V)
    return at_last.gather(1, io[:, None])[:, 0] - at_last.gather(1, s[:, None])[:, 0]


def test_logit_difference(capsys):
    assert check_logit_difference(_logit_difference)
    assert "correct" in capsys.readouterr().out
    at_end = lambda lo, last, io, s: _logit_difference(lo, torch.full_like(last, lo.shape[1] - 1), io, s)  # noqa: E731
    assert not check_logit_difference(at_end)
    assert "padded end" in capsys.readouterr().out
    assert not check_logit_difference(lambda lo, last, io, s: _logit_difference(lo, last, s, io))
    assert "sign" in capsys.readouterr().out
    assert not check_logit_difference(lambda lo, last, io, s: _logit_difference(lo, last, io, s)[:, None])


def test_gqa_cache_bytes(capsys):
    assert check_gqa_cache_bytes(
        lambda n_layers, n_kv_heads, head_dim, bytes_per_value: 2 * n_layers * n_kv_heads * head_dim * bytes_per_value
    )
    assert "correct" in capsys.readouterr().out
    assert not check_gqa_cache_bytes(
        lambda n_layers, n_kv_heads, head_dim, bytes_per_value: n_layers * n_kv_heads * head_dim * bytes_per_value
    )
    assert "keys *and* values" in capsys.readouterr().out
    assert not check_gqa_cache_bytes(
        lambda n_layers, n_kv_heads, head_dim, bytes_per_value: (
            2 * n_layers * 3 * n_kv_heads * head_dim * bytes_per_value
        )
    )  # per query head
