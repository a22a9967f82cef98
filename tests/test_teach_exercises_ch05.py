"""attn_core.teach.exercises.ch05: the right and wrong answers of exercises 5.1-5.3 (ANSWERS, held to the
standard by tests/test_teach_exercises_standard.py)."""

from __future__ import annotations

import torch

from attn_core.teach.exercises.ch05 import check_decode_intensity, check_decode_one_by_one, check_max_batch


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


def _decode(layer, x):
    cache = layer.make_cache(x.shape[0], x.shape[1])
    return torch.cat([layer(x[:, t : t + 1], kv_cache=cache) for t in range(x.shape[1])], dim=1)


def _decode_without_cache(layer, x):
    return torch.cat([layer(x[:, t : t + 1]) for t in range(x.shape[1])], dim=1)


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
    check_decode_one_by_one: (
        [_decode],
        [
            (lambda layer, x: layer(x), "call it once per token"),  # the full pass is not decoding
            (_decode_without_cache, "pass kv_cache="),
        ],
    ),
}
