"""attn_core.teach.exercises.ch05: the right and wrong answers of exercises 5.1-5.3 (ANSWERS, held to the
standard by tests/test_teach_exercises_standard.py)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attn_core.teach.exercises.ch05 import (
    check_equal_size_d_ff,
    check_equal_size_prediction,
    check_largest_step_ratio,
    check_limit_prediction,
    check_mqa_prediction,
    check_mqa_test,
)


def _reference(q, k, v):
    H = q.shape[1]
    return F.scaled_dot_product_attention(q, k.expand(-1, H, -1, -1), v.expand(-1, H, -1, -1))


def _inputs(B, H=4, T=5, D=8):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, H, T, D, generator=g, dtype=torch.float64)
    k, v = torch.randn(2, B, 1, T, D, generator=g, dtype=torch.float64)
    return q, k, v


def _test_batch_of_three(attention):
    q, k, v = _inputs(3)  # several sequences, a batch size other than H
    torch.testing.assert_close(attention(q, k, v), _reference(q, k, v))


def _test_batch_equal_to_heads(attention):
    q, k, v = _inputs(4)  # B = H: the dropped head axis runs, and is wrong
    got = attention(q, k, v)
    assert torch.allclose(got, _reference(q, k, v), atol=1e-10), "attention differs"


def _test_one_sequence(attention):
    q, k, v = _inputs(1)  # B = 1: the dropped head axis is right here
    torch.testing.assert_close(attention(q, k, v), _reference(q, k, v))


def _test_shapes_only(attention):
    q, k, v = _inputs(3)
    assert attention(q, k, v).shape == q.shape


def _test_bitwise(attention):
    q, k, v = _inputs(3)
    assert torch.equal(attention(q, k, v), _reference(q, k, v)), "not bit for bit"


def _test_rows_sum_to_one(attention):  # a property that one bug keeps
    q, k, v = _inputs(3)
    ones = torch.ones_like(v)
    torch.testing.assert_close(attention(q, k, ones), torch.ones_like(q))


def _ratio(P, L, H, H_kv, D, T, ridge, flops_per_weight=2, kv=2):
    # from the first compute-bound batch on, the weights take B·flops·P / ridge and the
    # caches B·kv·2·L·heads·T·D bytes: the ratio no longer depends on B
    weights = flops_per_weight * P / ridge
    cache = lambda n: kv * 2 * L * n * T * D  # noqa: E731
    return (weights + cache(H)) / (weights + cache(H_kv))


def _largest(n_params, n_layers, n_heads, n_kv_heads, head_dim, context, ridge):
    args = n_params, n_layers, n_heads, n_kv_heads, head_dim, context, ridge
    return math.ceil(ridge), _ratio(*args)


def _cache_ratio(n_params, n_layers, n_heads, n_kv_heads, head_dim, context, ridge):
    return math.ceil(ridge), n_heads / n_kv_heads


def _ridge_floor(n_params, n_layers, n_heads, n_kv_heads, head_dim, context, ridge):
    return int(ridge), _largest(n_params, n_layers, n_heads, n_kv_heads, head_dim, context, ridge)[1]


def _multiply_only(n_params, n_layers, n_heads, n_kv_heads, head_dim, context, ridge):
    args = n_params, n_layers, n_heads, n_kv_heads, head_dim, context, ridge
    return math.ceil(2 * ridge), _ratio(*args, flops_per_weight=1)


def _keys_only(n_params, n_layers, n_heads, n_kv_heads, head_dim, context, ridge):
    args = n_params, n_layers, n_heads, n_kv_heads, head_dim, context, ridge
    return math.ceil(ridge), _ratio(*args, kv=1)


def _one_layer(n_params, n_layers, n_heads, n_kv_heads, head_dim, context, ridge):
    return math.ceil(ridge), _ratio(n_params, 1, n_heads, n_kv_heads, head_dim, context, ridge)


def _at_batch_30(n_params, n_layers, n_heads, n_kv_heads, head_dim, context, ridge):
    # the largest batch MHA fits on the page: the weights still memory-bound there
    cache = lambda n: 2 * 2 * n_layers * n * context * head_dim * 30  # noqa: E731
    return 30, (2 * n_params + cache(n_heads)) / (2 * n_params + cache(n_kv_heads))


def _equal_size(d_model, n_heads, d_ff, n_encoder_layers, n_decoder_layers):
    # self-attention in every layer, cross-attention in the decoder of an encoder-decoder;
    # each drops 2·d_model·(d_model - head_dim) K/V weights; a hidden unit holds 2·d_model
    cross = n_decoder_layers if n_encoder_layers else 0
    n_attention = n_encoder_layers + n_decoder_layers + cross
    dropped = n_attention * 2 * d_model * (d_model - d_model // n_heads)
    return d_ff + round(dropped / ((n_encoder_layers + n_decoder_layers) * 2 * d_model))


def _att(e, n):  # attention layers of e encoder and n decoder layers
    return e + n + (n if e else 0)


ANSWERS = {
    check_mqa_test: (
        [_test_batch_of_three, _test_batch_equal_to_heads],
        [
            (_test_one_sequence, "drops the key's head axis"),  # B = 1 hides it
            (_test_shapes_only, "takes the softmax over the queries"),
            (_test_bitwise, "rejects a right attention"),  # rounding differs
            (_test_rows_sum_to_one, "head 0's queries"),
        ],
    ),
    check_largest_step_ratio: (
        [_largest],
        [
            (_cache_ratio, "grows with the batch"),
            (_ridge_floor, "rounded up"),
            (_multiply_only, "a multiply and an add"),
            (_keys_only, "keys and values"),
            (_one_layer, "every layer"),
            (_at_batch_30, "got"),
        ],
    ),
    check_limit_prediction: (
        [{1024: 9.4, 32768: 29.6}, {1024: 9, 32768: 30}],
        [
            ({1024: 32, 32768: 32}, "at 1024 tokens"),  # the caches' ratio
            ({1024: 19.6, 32768: 19.6}, "at 1024 tokens"),  # the page's 4096, unchanged
            ({1024: 9.4, 32768: 19.6}, "at 32768 tokens"),
            ({1024: 9.4, 32768: 32}, "at 32768 tokens"),  # n_heads / n_kv_heads
            ({1024: 9.4}, "keys"),
        ],
    ),
    check_mqa_prediction: (
        [{"B=1": {"axis"}, "H=1": {"head0"}}],
        [
            ({"B=1": {"axis"}, "H=1": {"axis", "head0"}}, "at H=1"),  # B > 1 catches it
            ({"B=1": set(), "H=1": {"head0"}}, "at B=1"),  # the page's bug 2
            ({"B=1": {"axis"}, "H=1": set()}, "at H=1"),  # head 0 is the only head
            ({"B=1": {"axis"}, "H=1": {"scale", "head0"}}, "bug names"),  # chapter 3's bug
            ({"B=1": {"axis"}}, "keys"),
        ],
    ),
    check_equal_size_d_ff: (
        [_equal_size, lambda d, H, f, e, n: f + round(_att(e, n) * (d - d // H) / (e + n))],
        [
            (lambda d, H, f, e, n: f + round((e + n) * (d - d // H) / (e + n)), "cross-attention"),
            (lambda d, H, f, e, n: f + round((e + 2 * n) * (d - d // H) / (e + n)), "no cross-attention"),
            (lambda d, H, f, e, n: f + round(_att(e, n) * (d - d // H) / (2 * (e + n))), "the value projections"),
            (lambda d, H, f, e, n: f + round(2 * _att(e, n) * (d - d // H) / (e + n)), "both matrices"),
            (lambda d, H, f, e, n: f + round(_att(e, n) * (d - H) / (e + n)), "head_dim outputs"),
            (lambda d, H, f, e, n: f + round(_att(e, n) * (d - d // H)), "every MLP layer"),
            (lambda d, H, f, e, n: f + _att(e, n) * (d - d // H) // (e + n), "nearest unit"),
            (lambda d, H, f, e, n: round(_att(e, n) * (d - d // H) / (e + n)), "d_ff plus"),
        ],
    ),
    check_equal_size_prediction: (
        [{"attention": 18, "mlp": 12}],
        [
            ({"attention": 12, "mlp": 12}, "cross-attention too"),  # self-attention only
            ({"attention": 24, "mlp": 12}, "no cross-attention"),  # cross in the encoder too
            ({"attention": 18, "mlp": 18}, "one MLP per layer"),  # an MLP per attention
            ({"attention": 18.0, "mlp": 12}, "whole number"),
            ({"attention": 18}, "keys"),
        ],
    ),
}
