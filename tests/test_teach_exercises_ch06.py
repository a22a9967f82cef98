"""attn_core.teach.exercises.ch06: the right and wrong answers of exercises 6.1-6.3 (ANSWERS, held to the
standard by tests/test_teach_exercises_standard.py).

The slips: for 6.1 (decode FLOPs per byte) forgetting the group size, counting only keys,
only the score products, or elements instead of bytes; for 6.2 (GQA -> MHA weights)
repeating rows instead of head blocks, tiling the heads, a wrong shape; for 6.3 (cache bytes
per GPU under tensor parallelism) a fractional head, ignoring the split, keys only.
"""

from __future__ import annotations

from attn_core.teach.exercises.ch06 import (
    check_decode_intensity,
    check_gqa_to_mha,
    check_kv_bytes_per_gpu,
)


# 6.1 -------------------------------------------------------------------------------
def _intensity(n_heads, n_kv_heads, head_dim, seq_len, bytes_per_element):
    flops = n_heads * seq_len * 4 * head_dim  # q·k and w·v, 2·D each
    read = 2 * n_kv_heads * seq_len * head_dim * bytes_per_element  # K and V
    return flops / read


# 6.2 -------------------------------------------------------------------------------
def _expand(weight, n_heads, n_kv_heads):
    d_model = weight.shape[1]
    D = weight.shape[0] // n_kv_heads
    # (H_kv, D, d) -> (H, D, d): each head block repeated for its G query heads
    blocks = weight.view(n_kv_heads, D, d_model).repeat_interleave(n_heads // n_kv_heads, dim=0)
    return blocks.reshape(n_heads * D, d_model)


# 6.3 -------------------------------------------------------------------------------
def _per_gpu(n_layers, n_kv_heads, head_dim, seq_len, tp_degree, bytes_per_element):
    heads = max(n_kv_heads // tp_degree, 1)  # replicated when n_kv_heads < tp_degree
    return 2 * n_layers * heads * head_dim * seq_len * bytes_per_element


ANSWERS = {
    check_decode_intensity: (
        [
            _intensity,
            lambda n_heads, n_kv_heads, bytes_per_element, **_: 2 * n_heads / n_kv_heads / bytes_per_element,
        ],
        [
            (lambda **kw: 2 / kw["bytes_per_element"], "MHA's value"),
            (lambda **kw: 2 * _intensity(**kw), "keys *and*"),
            (lambda **kw: _intensity(**kw) / 2, "half"),
            (lambda **kw: 2 * kw["n_heads"] / kw["n_kv_heads"], "per *byte*"),
            (lambda **kw: 2.0 * kw["n_heads"] / kw["n_kv_heads"] / kw["bytes_per_element"] + 0.01, "counted"),
        ],
    ),
    check_gqa_to_mha: (
        [_expand],
        [
            (lambda w, H, H_kv: w.repeat_interleave(H // H_kv, dim=0), "*row*"),
            (lambda w, H, H_kv: w.repeat(H // H_kv, 1), "tiled"),
            (lambda w, H, H_kv: w, "want"),
            # a right shape and no recognised slip: the heads shifted by one
            (
                lambda w, H, H_kv: _expand(w, H, H_kv).view(H, -1, w.shape[1]).roll(1, 0).reshape(-1, w.shape[1]),
                "GQA -> MHA",
            ),
        ],
    ),
    check_kv_bytes_per_gpu: (
        [_per_gpu],
        [
            (lambda **kw: _per_gpu(**{**kw, "tp_degree": 1}) / kw["tp_degree"], "replicated"),
            (lambda **kw: _per_gpu(**{**kw, "tp_degree": 1}), "whole model"),
            (lambda **kw: _per_gpu(**kw) // 2, "keys *and* values"),
        ],
    ),
}
