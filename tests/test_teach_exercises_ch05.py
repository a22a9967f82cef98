"""attn_core.teach.exercises.ch05: the right and wrong answers of exercises 5.1-5.3 (ANSWERS, held to the
standard by tests/test_teach_exercises_standard.py)."""

from __future__ import annotations

from attn_core.teach.exercises.ch05 import check_decode_intensity, check_max_batch, check_step_intensity


def _max_batch(free_bytes, n_layers, n_kv_heads, head_dim, context, bytes_per_element):
    per_sequence = 2 * n_layers * n_kv_heads * head_dim * context * bytes_per_element
    return free_bytes // per_sequence


def _keys_only(free_bytes, n_layers, n_kv_heads, head_dim, context, bytes_per_element):
    return free_bytes // (n_layers * n_kv_heads * head_dim * context * bytes_per_element)


def _one_layer(free_bytes, n_layers, n_kv_heads, head_dim, context, bytes_per_element):
    return free_bytes // (2 * n_kv_heads * head_dim * context * bytes_per_element)


def _rounded_up(free_bytes, n_layers, n_kv_heads, head_dim, context, bytes_per_element):
    per_sequence = 2 * n_layers * n_kv_heads * head_dim * context * bytes_per_element
    return -(-free_bytes // per_sequence)


def _as_float(free_bytes, n_layers, n_kv_heads, head_dim, context, bytes_per_element):
    return free_bytes / (2 * n_layers * n_kv_heads * head_dim * context * bytes_per_element)


def _step(batch, n_params, n_layers, n_heads, n_kv_heads, head_dim, context):
    flops = batch * (2 * n_params + 4 * n_layers * n_heads * context * head_dim)
    read = 2 * n_params + batch * 4 * n_layers * n_kv_heads * context * head_dim
    return flops / read


def _weights_only(batch, n_params, n_layers, n_heads, n_kv_heads, head_dim, context):
    return 2 * batch * n_params / (2 * n_params)


def _cache_once(batch, n_params, n_layers, n_heads, n_kv_heads, head_dim, context):
    flops = batch * (2 * n_params + 4 * n_layers * n_heads * context * head_dim)
    return flops / (2 * n_params + 4 * n_layers * n_kv_heads * context * head_dim)


def _weights_per_sequence(batch, n_params, n_layers, n_heads, n_kv_heads, head_dim, context):
    flops = batch * (2 * n_params + 4 * n_layers * n_heads * context * head_dim)
    return flops / (batch * (2 * n_params + 4 * n_layers * n_kv_heads * context * head_dim))


def _float32(batch, n_params, n_layers, n_heads, n_kv_heads, head_dim, context):
    return _step(batch, n_params, n_layers, n_heads, n_kv_heads, head_dim, context) / 2


def _step_keys_only(batch, n_params, n_layers, n_heads, n_kv_heads, head_dim, context):
    flops = batch * (2 * n_params + 4 * n_layers * n_heads * context * head_dim)
    return flops / (2 * n_params + batch * 2 * n_layers * n_kv_heads * context * head_dim)


ANSWERS = {
    check_decode_intensity: (
        # 4·H·n·T·D FLOPs over 2·H_kv·T·D·2 bytes
        [lambda H, H_kv, n_new: H * n_new / H_kv],
        [
            (lambda H, H_kv, n_new: H / H_kv, "counted"),  # forgets the new tokens
            (lambda H, H_kv, n_new: 2 * H * n_new / H_kv, "keys *and* values"),  # keys only
            (lambda H, H_kv, n_new: H_kv * n_new / H, "which of H and H_kv"),  # inverted
            (lambda H, H_kv, n_new: 1.0, "counted"),  # "always memory-bound at 1"
            (lambda H, H_kv, n_new: H * n_new / H_kv / 2, "counted"),  # float32 bytes
        ],
    ),
    check_max_batch: (
        [_max_batch],
        [
            (_keys_only, "measured"),
            (_one_layer, "measured"),
            (_rounded_up, "measured"),
            (_as_float, "measured"),
        ],
    ),
    check_step_intensity: (
        [_step],
        [
            (_weights_only, "the cache's bytes are missing"),
            (lambda B, P, L, H, H_kv, D, T: H / H_kv, "the weights are missing"),  # 5.1's answer
            (_cache_once, "its own cache"),
            (_weights_per_sequence, "once per step"),
            (_float32, "counted"),
            (_step_keys_only, "counted"),
        ],
    ),
}
