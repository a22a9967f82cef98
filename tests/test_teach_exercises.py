"""attn_core.teach.exercises: the checks of exercises 3.3 and 5.2 (and chapter 15's) accept a right answer,
report a wrong one (with its hint) and a "your turn" stub as not yet, and never raise."""

from __future__ import annotations

import torch

from attn_core import MultiHeadAttention
from attn_core.teach.exercises import (
    check_decode_one_by_one,
    check_mha_from_torch,
)


def _stub(*args):
    raise NotImplementedError


def _mha_from_torch(ref, swap_qk=False):
    layer = MultiHeadAttention(ref.embed_dim, ref.num_heads, bias=True).double()
    w_q, w_k, w_v = ref.in_proj_weight.chunk(3)  # each (d, d)
    b_q, b_k, b_v = ref.in_proj_bias.chunk(3)
    if swap_qk:
        w_q, w_k = w_k, w_q
    with torch.no_grad():
        for proj, w, b in [
            (layer.q_proj, w_q, b_q),
            (layer.k_proj, w_k, b_k),
            (layer.v_proj, w_v, b_v),
            (layer.out_proj, ref.out_proj.weight, ref.out_proj.bias),
        ]:
            proj.weight.copy_(w)
            proj.bias.copy_(b)
    return layer


def test_check_mha_from_torch(capsys):
    assert check_mha_from_torch(_mha_from_torch)
    assert not check_mha_from_torch(lambda ref: _mha_from_torch(ref, swap_qk=True))
    assert "max abs difference" in capsys.readouterr().out
    assert not check_mha_from_torch(lambda ref: _mha_from_torch(ref).float())
    assert "build the layer in float64" in capsys.readouterr().out
    assert not check_mha_from_torch(lambda ref: MultiHeadAttention(12, 3).double())
    assert "bias=True" in capsys.readouterr().out
    assert not check_mha_from_torch(_stub)
    assert "not yet: NotImplementedError" in capsys.readouterr().out


def test_check_mha_from_torch_keeps_the_rng():
    torch.manual_seed(0)
    want = torch.rand(3)
    torch.manual_seed(0)
    check_mha_from_torch(_mha_from_torch)
    assert torch.equal(torch.rand(3), want)


def _decode(layer, x):
    cache = layer.make_cache(x.shape[0], x.shape[1])
    return torch.cat([layer(x[:, t : t + 1], kv_cache=cache) for t in range(x.shape[1])], dim=1)


def test_check_decode_one_by_one(capsys):
    assert check_decode_one_by_one(_decode)
    assert not check_decode_one_by_one(lambda layer, x: layer(x))  # the full pass is not decoding
    assert "call it once per token" in capsys.readouterr().out
    no_cache = lambda layer, x: torch.cat([layer(x[:, t : t + 1]) for t in range(x.shape[1])], dim=1)  # noqa: E731
    assert not check_decode_one_by_one(no_cache)
    assert "pass kv_cache=" in capsys.readouterr().out
    assert not check_decode_one_by_one(_stub)
    assert "not yet: NotImplementedError" in capsys.readouterr().out


# --------------------------------------------------------------------------- chapter 15
def _ring_read(slots, positions):
    order = torch.argsort(positions)
    order = order[positions[order] >= 0]
    return slots[:, :, order], positions[order]


def _sink_attention(q, k, v, sinks, with_sink=True):
    T = q.shape[-2]
    s = (q @ k.transpose(-2, -1)) / q.shape[-1] ** 0.5
    s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    if with_sink:
        s = torch.cat([s, sinks[:, None, None].expand(*s.shape[:-1], 1)], -1)
        return torch.softmax(s, -1)[..., :-1] @ v
    return torch.softmax(s, -1) @ v


def _mixed_bytes(n_layers, full_every, window, context, n_kv_heads, head_dim, halve=False):
    per = (1 if halve else 2) * n_kv_heads * head_dim * 2
    return sum(per * (context if (i + 1) % full_every == 0 else min(context, window)) for i in range(n_layers))


def test_chapter_15_checks(capsys):
    from attn_core.teach.exercises import check_mixed_cache_bytes, check_ring_read, check_sink_attention

    assert check_ring_read(_ring_read)
    assert not check_ring_read(lambda s, p: (s[:, :, p >= 0], p[p >= 0]))
    assert "expected [5, 6, 7, 8]" in capsys.readouterr().out
    assert check_sink_attention(_sink_attention)
    assert not check_sink_attention(lambda *a: _sink_attention(*a, with_sink=False))
    assert "without the sink" in capsys.readouterr().out
    assert check_mixed_cache_bytes(_mixed_bytes)
    assert not check_mixed_cache_bytes(lambda *a: _mixed_bytes(*a, halve=True))
    assert "keys *and* values" in capsys.readouterr().out
    for check in (check_ring_read, check_sink_attention, check_mixed_cache_bytes):
        assert not check(_stub)
        assert "not yet: NotImplementedError" in capsys.readouterr().out
