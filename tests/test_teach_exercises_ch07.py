"""attn_core.teach.exercises.ch07: exercise 7.3 (folding W_UV into the output projection).

The check must pass the folded matrix and fail the plausible slips: columns ordered
latent-major, W_UV applied transposed, one head's block used for every head, a stub.
"""

from __future__ import annotations

import torch

from attn_core.layers.mla import MultiHeadLatentAttention
from attn_core.teach.exercises.ch07 import check_absorbed_output


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


def _stub(w_uv, w_o):
    raise NotImplementedError


def test_right_answer_passes(capsys):
    assert check_absorbed_output(_fold)
    assert "correct" in capsys.readouterr().out


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


def test_wrong_answers_fail(capsys):
    assert not check_absorbed_output(_latent_major)
    assert "(latent, head)" in capsys.readouterr().out
    for wrong in (_first_head_everywhere, _wrong_head_split):
        assert not check_absorbed_output(wrong)
        assert "max abs difference" in capsys.readouterr().out
    assert not check_absorbed_output(lambda w_uv, w_o: _fold(w_uv, w_o)[:, :-1])
    assert "shape" in capsys.readouterr().out
    assert not check_absorbed_output(_stub)
    assert "NotImplementedError" in capsys.readouterr().out
