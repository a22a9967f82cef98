"""attn_core.teach.exercises.ch06: the right and wrong answers of exercises 6.1-6.3 (ANSWERS, held to the
standard by tests/test_teach_exercises_standard.py).

The slips: for 6.1 (which key/value head each query head of a black box reads) assuming the
adjacent or the tiled map instead of measuring it, and probes that compare with a reference of
their own (fooled by a causal mask or another scale); for 6.2 (GQA -> MHA weights) repeating
rows instead of head blocks, tiling the heads, a wrong shape, and a prediction of the shapes where
the bug is harmless that misses one kind or takes D = 2 for a row; for 6.3 (the key/value heads a
GPU of a tensor-parallel group holds) a fraction of a head, the heads tiled over the GPUs,
one head where several are needed, strided heads, every head; for its prediction (GPU 5 of
16 for LLaMA-2-70B's heads) the heads dealt round-robin, the key/value heads split 16 ways, the
GPU left out of its own set.
"""

from __future__ import annotations

import torch

from attn_core.ops.attention import attention
from attn_core.teach.exercises.ch06 import (
    check_gqa_to_mha,
    check_gqa_to_mha_prediction,
    check_kv_head_of,
    check_kv_heads_on_gpu,
    check_tp_prediction,
)


# 6.1 -------------------------------------------------------------------------------
def _probe_constant_values(attend, n_heads, n_kv_heads):
    # values constant per head: every output is the number of the head read
    q, k = torch.randn(1, n_heads, 3, 4), torch.randn(1, n_kv_heads, 3, 4)
    v = torch.arange(n_kv_heads, dtype=q.dtype).view(1, -1, 1, 1).expand(1, -1, 3, 4)
    return attend(q, k, v)[0, :, -1, 0].round().long().tolist()


def _probe_perturb(attend, n_heads, n_kv_heads):
    # change one key/value head at a time and see which outputs move
    q, k, v = torch.randn(1, n_heads, 4, 4), torch.randn(1, n_kv_heads, 4, 4), torch.randn(1, n_kv_heads, 4, 4)
    base = attend(q, k, v)
    found = [None] * n_heads
    for j in range(n_kv_heads):
        v2 = v.clone()
        v2[:, j] += 1.0
        moved = (attend(q, k, v2) - base).abs().amax(dim=(0, 2, 3)) > 1e-4
        for h in range(n_heads):
            if moved[h]:
                found[h] = j
    return found


def _probe_by_reference(attend, n_heads, n_kv_heads):
    # compares with plain, unmasked attention at the default scale: fooled by a mask or a scale
    q, k, v = torch.randn(1, n_heads, 4, 4), torch.randn(1, n_kv_heads, 4, 4), torch.randn(1, n_kv_heads, 4, 4)
    out = attend(q, k, v)
    found = []
    for h in range(n_heads):
        errs = [(attention(q[:, h], k[:, j], v[:, j]) - out[:, h]).abs().max().item() for j in range(n_kv_heads)]
        found.append(min(range(n_kv_heads), key=lambda j: errs[j]) if min(errs) < 1e-5 else -1)
    return found


ANSWERS_61_WRONG = [
    (lambda attend, H, H_kv: [h // (H // H_kv) for h in range(H)], "assumed"),
    (lambda attend, H, H_kv: [h % H_kv for h in range(H)], "assumed"),
    (_probe_by_reference, "masks or scales"),
    (lambda attend, H, H_kv: _probe_constant_values(attend, H, H_kv)[:-1], "one per query head"),
]


# 6.2 -------------------------------------------------------------------------------
def _expand(weight, n_heads, n_kv_heads):
    d_model = weight.shape[1]
    D = weight.shape[0] // n_kv_heads
    # (H_kv, D, d) -> (H, D, d): each head block repeated for its G query heads
    blocks = weight.view(n_kv_heads, D, d_model).repeat_interleave(n_heads // n_kv_heads, dim=0)
    return blocks.reshape(n_heads * D, d_model)


# 6.3 -------------------------------------------------------------------------------
def _held(n_heads, n_kv_heads, tp_degree, rank):
    G = n_heads // n_kv_heads
    mine = range(rank * n_heads // tp_degree, (rank + 1) * n_heads // tp_degree)
    return sorted({h // G for h in mine})


def _held_by_range(n_heads, n_kv_heads, tp_degree, rank):
    first = rank * n_kv_heads // tp_degree
    return list(range(first, first + max(n_kv_heads // tp_degree, 1)))


def _held_unsorted(n_heads, n_kv_heads, tp_degree, rank):
    return _held(n_heads, n_kv_heads, tp_degree, rank)[::-1]  # a set: any order is right


ANSWERS = {
    check_kv_head_of: (
        [_probe_constant_values, _probe_perturb],
        ANSWERS_61_WRONG,
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
    check_gqa_to_mha_prediction: (
        [{"b", "c", "e"}, ["E", "c", "b"]],
        [
            ({"b"}, "a row is a whole head"),  # only G = 1 seen
            ({"c", "e"}, "nothing is repeated"),  # only D = 1 seen
            ({"b", "c", "e", "f"}, "repeated in place"),  # head_dim 2 taken for a row
            ({"b", "c"}, "is right too"),
            ({"g"}, "unknown"),
            ("bce", "set of letters"),
        ],
    ),
    check_kv_heads_on_gpu: (
        [_held, _held_by_range, _held_unsorted],
        [
            # the heads split t ways even when there are fewer than t: a fraction of a head
            (lambda H, H_kv, t, r: list(range(r * H_kv // t, (r + 1) * H_kv // t)), "replicated"),
            # replicated heads dealt round-robin: GPU r's query heads read another head
            (lambda H, H_kv, t, r: [r % H_kv] if H_kv < t else _held(H, H_kv, t, r), "not theirs"),
            # one head per GPU always
            (lambda H, H_kv, t, r: [r * H_kv // t], "not theirs"),
            # strided heads
            (lambda H, H_kv, t, r: list(range(r % H_kv, H_kv, t)) or [0], "not theirs"),
            # every head on every GPU
            (lambda H, H_kv, t, r: list(range(H_kv)), "more key/value heads"),
        ],
    ),
    check_tp_prediction: (
        [{"kv_head": 2, "gpus": {4, 5}}, {"kv_head": 2, "gpus": [5, 4]}],
        [
            ({"kv_head": 5, "gpus": {5, 13}}, "query heads 20..23"),  # round-robin
            ({"kv_head": 2, "gpus": {4}}, "not [4]"),  # GPU 5 itself left out
            ({"kv_head": 2, "gpus": {2, 10}}, "not [2, 10]"),  # round-robin GPUs
            ({"kv_head": 2}, "keys"),
        ],
    ),
}
