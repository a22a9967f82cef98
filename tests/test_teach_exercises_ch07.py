"""attn_core.teach.exercises.ch07: the right and wrong answers of its exercises (ANSWERS, held to the
standard by tests/test_teach_exercises_standard.py), and that the folded matrix of 7.3 reproduces
the layer's absorbed output."""

from __future__ import annotations

import math

import torch

from attn_core.layers.mla import MultiHeadLatentAttention
from attn_core.teach.exercises.ch07 import (
    check_absorbed_output,
    check_absorbed_query,
    check_cache_elements,
    check_decoupled_scores,
)


# 7.1 absorbed query ---------------------------------------------------------------
def _absorbed_query(q_c, w_uk):
    return torch.einsum("bhtd,hdc->bhtc", q_c, w_uk)  # q_lat[h] = w_uk[h]ᵀ q_c[h]


# 7.2 decoupled scores -------------------------------------------------------------
def _decoupled(q_c, q_r, k_c, k_r, *, scale_dims=None, rope=True):
    d = q_c.shape[-1] + q_r.shape[-1] if scale_dims is None else scale_dims(q_c, q_r)
    scores = q_c @ k_c.transpose(-2, -1)  # (B, H, T_q, T_k)
    if rope:
        scores = scores + q_r @ k_r.unsqueeze(1).transpose(-2, -1)  # one RoPE key for every head
    return scores / math.sqrt(d)


# 7.3 cache elements (the old exercise, kept for its tests) ------------------------
def _cache_elements(kind, n_heads, head_dim, n_kv_heads, d_latent, rope_dim):
    return {
        "mha": 2 * n_heads * head_dim,
        "gqa": 2 * n_kv_heads * head_dim,
        "mqa": 2 * head_dim,
        "mla": d_latent + rope_dim,
    }[kind]


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


ANSWERS = {
    check_absorbed_query: (
        [_absorbed_query],
        [
            (lambda q_c, w_uk: torch.einsum("bhtd,dc->bhtc", q_c, w_uk[0]), "max abs"),  # head 0's for every head
            (lambda q_c, w_uk: q_c @ w_uk.sum(0), "max abs"),  # the heads' matrices summed
            (lambda q_c, w_uk: q_c, "shape"),  # not moved at all
        ],
    ),
    check_decoupled_scores: (
        [_decoupled],
        [
            (lambda *a: _decoupled(*a, scale_dims=lambda q_c, q_r: q_c.shape[-1]), "1/√d_h"),
            (lambda *a: _decoupled(*a, rope=False, scale_dims=lambda q_c, q_r: 12), "RoPE part"),
            (lambda *a: _decoupled(*a)[..., :1], "shape"),
        ],
    ),
    check_cache_elements: (
        [_cache_elements],
        [
            (lambda kind, **kw: _cache_elements(kind, **kw) // (1 if kind == "mla" else 2), "measured"),  # keys only
            (lambda kind, **kw: kw["d_latent"] if kind == "mla" else _cache_elements(kind, **kw), "measured"),
            (
                lambda kind, **kw: (
                    2 * kw["d_latent"] + kw["rope_dim"] if kind == "mla" else _cache_elements(kind, **kw)
                ),
                "measured",
            ),  # fmt: skip
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
