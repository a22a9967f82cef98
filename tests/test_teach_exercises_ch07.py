"""attn_core.teach.exercises.ch07: the right and wrong answers of its exercises (ANSWERS, held to the
standard by tests/test_teach_exercises_standard.py), and that the folded matrix of 7.3 reproduces
the layer's absorbed output."""

from __future__ import annotations

import torch

from attn_core.layers.mla import MultiHeadLatentAttention
from attn_core.teach.exercises.ch07 import (
    check_absorbed_chunk,
    check_absorbed_output,
    check_fold_prediction,
    check_gqa_as_mla,
    check_key_rank,
)


# 7.1 GQA as MLA -------------------------------------------------------------------
def _gqa_as_mla(w_k, w_v, n_heads, D, *, group_of=None, values_for_keys=False):
    n_g = w_k.shape[0] // D
    group_of = group_of or (lambda i: i // (n_heads // n_g))
    w_dkv = torch.cat([w_k, w_v])  # (2·n_g·D, d_model): every group's key, then its value
    eye = torch.eye(D, dtype=w_k.dtype)
    w_uk = w_k.new_zeros(n_heads, D, 2 * n_g * D)
    w_uv = torch.zeros_like(w_uk)
    for i in range(n_heads):
        g = group_of(i)
        k_cols = slice((n_g + g) * D, (n_g + g + 1) * D) if values_for_keys else slice(g * D, (g + 1) * D)
        w_uk[i][:, k_cols] = eye  # head i selects its group's key
        w_uv[i][:, (n_g + g) * D : (n_g + g + 1) * D] = eye  # and its value
    return w_dkv, w_uk, w_uv


def _capped(w_k, w_v, n_heads, D):  # the right answer: min(2·n_g·D, d_model) wide
    if 2 * w_k.shape[0] <= w_k.shape[1]:
        return _gqa_as_mla(w_k, w_v, n_heads, D)
    n_g = w_k.shape[0] // D  # keys and values outnumber the input: cache the input itself
    groups = [i // (n_heads // n_g) for i in range(n_heads)]
    w_uk = torch.stack([w_k[g * D : (g + 1) * D] for g in groups])  # (H, D, d_model)
    w_uv = torch.stack([w_v[g * D : (g + 1) * D] for g in groups])
    return torch.eye(w_k.shape[1], dtype=w_k.dtype), w_uk, w_uv


def _padded(w_k, w_v, n_heads, D):
    w_dkv, w_uk, w_uv = _gqa_as_mla(w_k, w_v, n_heads, D)
    pad = w_dkv.new_zeros(2, w_dkv.shape[1])  # two unused latent rows
    grow = lambda w: torch.cat([w, w.new_zeros(*w.shape[:2], 2)], dim=-1)  # noqa: E731
    return torch.cat([w_dkv, pad]), grow(w_uk), grow(w_uv)


def _keys_only(w_k, w_v, n_heads, D):  # one latent for keys and values: too narrow
    n_g = w_k.shape[0] // D
    w_dkv, w_uk, _ = _gqa_as_mla(w_k, w_v, n_heads, D)
    return w_dkv[: n_g * D], w_uk[..., : n_g * D], w_uk[..., : n_g * D]


# 7.2 key rank ---------------------------------------------------------------------
def _rank(kind, *, d_model, n_heads, head_dim, n_kv_heads, d_latent, n_tokens):
    width = {
        "mha": n_heads * head_dim,
        "gqa": n_kv_heads * head_dim,
        "mqa": head_dim,
        "mla": min(d_latent, n_heads * head_dim),
    }[kind]
    return min(width, d_model, n_tokens)


# 7.3 absorbed output --------------------------------------------------------------
def _fold(w_uv, w_o):
    H, d_v, d_c = w_uv.shape
    # (d_model, H*d_v) -> (d_model, H, d_v); per head W_O[:, h] @ W_UV[h]
    folded = torch.einsum("mhv,hvc->mhc", w_o.view(w_o.shape[0], H, d_v), w_uv)
    return folded.reshape(w_o.shape[0], H * d_c)  # (d_model, H*d_c), head-major


def _latent_major(w_uv, w_o):
    folded = _fold(w_uv, w_o).view(w_o.shape[0], w_uv.shape[0], w_uv.shape[2])
    return folded.transpose(1, 2).reshape(w_o.shape[0], -1)  # (d_model, d_c*H)


def _first_head_everywhere(w_uv, w_o):
    return _fold(w_uv[:1].expand_as(w_uv), w_o)


def _wrong_head_split(w_uv, w_o):
    H, d_v, d_c = w_uv.shape
    # (d_model, H*d_v) read as (d_model, d_v, H): the head index is the fast one
    per_head = w_o.view(w_o.shape[0], d_v, H).transpose(1, 2)
    return torch.einsum("mhv,hvc->mhc", per_head, w_uv).reshape(w_o.shape[0], H * d_c)


# 7.4 absorbed chunk (find the bugs) ---------------------------------------------------
def _chunk(mla, x, cache, *, norm=True, k_offset=True, q_offset=True, causal=True):
    past = cache.size
    q_c, q_r = mla.queries(x, offset=past if q_offset else 0)  # (B, H, T, d_h), (B, H, T, d_r)
    c_new = mla.kv_down(x)  # (B, T, d_c)
    if norm:
        c_new = mla.kv_norm(c_new)
    k_new = mla.rope(mla.k_rope(x), offset=past if k_offset else 0)  # (B, T, d_r)
    c_kv, k_r = cache.update(c_new, k_new)  # (B, T_k, ·)
    mla.causal = causal
    try:
        heads, _ = mla._attend_absorbed(q_c, q_r, c_kv, k_r, None, False)  # (B, H, T, d_v)
    finally:
        mla.causal = True
    return mla.out_proj(heads.transpose(1, 2).flatten(2))  # (B, T, d_model)


ANSWERS = {
    check_absorbed_chunk: (
        [_chunk],
        [
            (lambda *a: _chunk(*a, norm=False, k_offset=False, q_offset=False), "latents c_KV differ"),  # as given
            (lambda *a: _chunk(*a, norm=False), "latents c_KV differ"),  # the offset fixed only
            (lambda *a: _chunk(*a, k_offset=False, q_offset=False), "k_R differ from the layer's from the second"),
            (lambda *a: _chunk(*a, q_offset=False), "chunk 2's outputs are not"),  # the key's offset only
            (lambda *a: _chunk(*a, causal=False), "chunk 1's outputs are not"),  # no mask within the chunk
        ],
    ),
    check_gqa_as_mla: (
        [_capped],
        [
            (_gqa_as_mla, "wider than the"),  # 2·n_g·D even where it exceeds d_model
            (lambda *a: _gqa_as_mla(*a, group_of=lambda i: i % (a[0].shape[0] // a[3])), "reads the key of group"),
            (lambda *a: _gqa_as_mla(*a, values_for_keys=True), "value projection"),
            (_padded, "a narrower one is exact too"),
            (_keys_only, "max abs difference"),
        ],
    ),
    check_key_rank: (
        [_rank],
        [
            (  # every query head counted, not the groups
                lambda kind, **kw: _rank(kind, **kw) if kind != "gqa" else kw["n_heads"] * kw["head_dim"],
                "you missed, the width of the distinct key heads",
            ),
            (  # the latent width alone, no caps
                lambda kind, **kw: kw["d_latent"] if kind == "mla" else _rank(kind, **kw),
                "above the measured rank",
            ),
            (lambda kind, **kw: _rank(kind, **{**kw, "n_tokens": 10**6}), "you missed, the number of tokens"),
            (lambda kind, **kw: _rank(kind, **{**kw, "d_model": 10**6}), "you missed, the input width"),
            (  # MLA taken for MQA: one head's width
                lambda kind, **kw: _rank("mqa" if kind == "mla" else kind, **kw),
                "below the measured rank",
            ),
        ],
    ),
    check_absorbed_output: (
        [_fold],
        [
            (_latent_major, "(latent, head)"),
            (_first_head_everywhere, "max abs difference"),
            (_wrong_head_split, "max abs difference"),
            (lambda w_uv, w_o: _fold(w_uv, w_o)[:, :-1], "shape"),
        ],
    ),
    check_fold_prediction: (
        [lambda: (3.64, 3.64, 131), lambda: (512 * 5120 / (128 * 512 + 128 * 5120),) * 2 + (131,)],
        [
            (lambda: (4.0, 4.0, 131), "ratio is not the counted"),  # d_c / d_v: W_UV's cost forgotten
            (lambda: (0.275, 0.275, 131), "ratio is not the counted"),  # upside down
            (lambda: (3.64, 3.64 * 8, 131), "ratio_large is not the counted"),  # "longer contexts favour it"
            (lambda: (3.64, 3.64, 128), "largest_d_c 128 is wrong"),  # d_c = d_v
            (lambda: (3.64, 3.64, 512), "largest_d_c 512 is wrong"),
            (lambda: (True, False, 131), "expected a number"),  # the yes/no of a question not asked
        ],
    ),
}


def test_right_answer_matches_the_layer():
    # The folded matrix reproduces MultiHeadLatentAttention's absorbed output.
    torch.manual_seed(0)
    mla = MultiHeadLatentAttention(16, 2, d_latent=6, head_dim=8, v_head_dim=4, rope_dim=4).double()
    x = torch.randn(1, 5, 16, dtype=torch.float64)
    H, d_v, d_c = 2, 4, 6
    w_uv = mla.v_up.weight.view(H, d_v, d_c)
    q_c, q_r = mla.queries(x)
    c_kv, k_r = mla.latents(x)
    q_lat = torch.einsum("bhtd,hdc->bhtc", q_c, mla.k_up.weight.view(H, 8, d_c))
    w = torch.softmax(
        (torch.cat([q_lat, q_r], -1) @ torch.cat([c_kv, k_r], -1).unsqueeze(1).transpose(-2, -1)) * mla.scale
        + torch.full((5, 5), float("-inf"), dtype=torch.float64).triu(1),
        -1,
    )
    o_lat = w @ c_kv.unsqueeze(1)  # (B, H, T, d_c)
    out = o_lat.transpose(1, 2).reshape(1, 5, H * d_c) @ _fold(w_uv, mla.out_proj.weight).T
    torch.testing.assert_close(out, mla(x, absorbed=True), atol=1e-10, rtol=0)
