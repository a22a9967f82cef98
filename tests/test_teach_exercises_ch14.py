"""attn_core.teach.exercises.ch14: exercise 14.4's check passes the right cache size of a mixed
stack and fails the likely wrong ones (a window that grows, a state that grows, a
forgotten convolution, keys without values)."""

from __future__ import annotations

import pytest

from attn_core.teach.exercises.ch14 import (
    check_attention_parameters,
    check_equivalent_groups,
    check_kv_bytes_per_token,
    check_stack_cache_bytes,
)


def _kv_per_token(cfg, factor=2):  # keys and values of one attention layer, float32
    return factor * cfg.resolved_n_kv_heads * cfg.resolved_head_dim * 4


def _linear_state(cfg, conv=True):  # one Gated DeltaNet layer's state, float32
    h = cfg.linear.linear_n_heads or cfg.n_heads
    d_k = cfg.linear.linear_head_dim or cfg.resolved_head_dim
    h_v = cfg.linear.linear_n_value_heads or h
    d_v = cfg.linear.linear_value_head_dim or d_k
    conv_elems = (2 * h * d_k + h_v * d_v) * (cfg.linear.linear_conv_size - 1) if conv else 0
    return (conv_elems + h_v * d_k * d_v) * 4


def _right(cfg, context):
    total = 0
    for kind in cfg.resolved_layer_types:
        if kind == "full":
            total += context * _kv_per_token(cfg)
        elif kind == "sliding":
            total += min(context, cfg.pattern.sliding_window) * _kv_per_token(cfg)
        else:
            total += _linear_state(cfg)
    return total


def _window_grows(cfg, context):  # a sliding layer counted like a full one
    return sum(context * _kv_per_token(cfg) if k != "linear" else _linear_state(cfg) for k in cfg.resolved_layer_types)


def _window_always_full(cfg, context):  # the window's W slots even when fewer tokens came
    return sum(
        context * _kv_per_token(cfg)
        if k == "full"
        else cfg.pattern.sliding_window * _kv_per_token(cfg)
        if k == "sliding"
        else _linear_state(cfg)
        for k in cfg.resolved_layer_types
    )


def _state_grows(cfg, context):  # a linear layer counted like attention
    return sum(
        min(context, cfg.pattern.sliding_window) * _kv_per_token(cfg)
        if k == "sliding"
        else context * _kv_per_token(cfg)
        for k in cfg.resolved_layer_types
    )


def _no_conv(cfg, context):  # the matrix state only: the short convolution forgotten
    return sum(
        context * _kv_per_token(cfg)
        if k == "full"
        else min(context, cfg.pattern.sliding_window) * _kv_per_token(cfg)
        if k == "sliding"
        else _linear_state(cfg, conv=False)
        for k in cfg.resolved_layer_types
    )


def _keys_only(cfg, context):  # forgets the values of the attention layers
    return _right(cfg, context) - sum(
        (context if k == "full" else min(context, cfg.pattern.sliding_window)) * _kv_per_token(cfg, 1)
        for k in cfg.resolved_layer_types
        if k != "linear"
    )


def _raises(cfg, context):
    raise NotImplementedError


def test_stack_cache_bytes_passes_the_right_answer(capsys):
    assert check_stack_cache_bytes(_right)
    assert "correct" in capsys.readouterr().out


@pytest.mark.parametrize("wrong", [_window_grows, _window_always_full, _state_grows, _no_conv, _keys_only, _raises])
def test_stack_cache_bytes_fails_wrong_answers(wrong, capsys):
    assert not check_stack_cache_bytes(wrong)
    assert "not yet" in capsys.readouterr().out


def test_old_checks_still_pass_and_fail():
    def kv(cfg):
        if cfg.attention == "mla":
            return (cfg.d_latent + cfg.resolved_rope_dim) * cfg.n_layers * 4
        return 2 * cfg.resolved_n_kv_heads * cfg.resolved_head_dim * cfg.n_layers * 4

    assert check_kv_bytes_per_token(kv)
    assert not check_kv_bytes_per_token(lambda cfg: cfg.n_heads * cfg.resolved_head_dim * cfg.n_layers * 8)
    assert check_attention_parameters(lambda d, h, kv: 2 * d * d + 2 * d * kv * (d // h))
    assert not check_attention_parameters(lambda d, h, kv: 4 * d * d)
    assert check_equivalent_groups(lambda c, r, h: (c + r) / (2 * h))
    assert not check_equivalent_groups(lambda c, r, h: c / (2 * h))
