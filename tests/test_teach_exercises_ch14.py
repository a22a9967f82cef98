"""attn_core.teach.exercises.ch14: the right and wrong answers of exercises 14.1-14.4 (ANSWERS, held to
the standard by tests/test_teach_exercises_standard.py): for 14.4, a window that grows, a state that
grows, a forgotten convolution, keys without values."""

from __future__ import annotations

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


def _kv(cfg, factor=2):
    if cfg.attention == "mla":
        return (cfg.d_latent + cfg.resolved_rope_dim) * cfg.n_layers * 4
    return factor * cfg.resolved_n_kv_heads * cfg.resolved_head_dim * cfg.n_layers * 4


ANSWERS = {
    check_kv_bytes_per_token: (
        [_kv],
        [
            (lambda cfg: cfg.n_heads * cfg.resolved_head_dim * cfg.n_layers * 8, "measured"),  # query heads
            (lambda cfg: _kv(cfg, factor=1), "measured"),  # keys only
            (lambda cfg: _kv(cfg) if cfg.attention != "mla" else cfg.d_latent * cfg.n_layers * 4, "measured"),
        ],
    ),
    check_attention_parameters: (
        [lambda d, h, kv: 2 * d * d + 2 * d * kv * (d // h)],
        [
            (lambda d, h, kv: 4 * d * d, "counted"),  # MHA's count for every layout
            (lambda d, h, kv: 2 * d * d + 2 * kv * (d // h), "counted"),  # K and V without d_model
            (lambda d, h, kv: d * d + 3 * d * kv * (d // h), "counted"),  # the query shares the narrow width
        ],
    ),
    check_equivalent_groups: (
        [lambda c, r, h: (c + r) / (2 * h)],
        [
            (lambda c, r, h: c / (2 * h), "measured"),  # the RoPE key forgotten
            (lambda c, r, h: (c + r) / h, "measured"),  # a group caches a key only
            (lambda c, r, h: (c + r) // (2 * h), "measured"),  # rounded to whole groups
        ],
    ),
    check_stack_cache_bytes: (
        [_right],
        [
            (_window_grows, "measured"),
            (_window_always_full, "measured"),
            (_state_grows, "measured"),
            (_no_conv, "measured"),
            (_keys_only, "measured"),
        ],
    ),
}
