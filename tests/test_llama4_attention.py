"""Llama 4's attention mechanisms (issue 28): chunked attention and the NoPE layers' query temperature.

* :func:`~attn_core.ops.masks.position_mask` with ``chunk=c``: a query sees the earlier keys of its own
  chunk only; held to Hugging Face's ``chunked_causal_mask_function``, to a loop, and to properties.
* ``MultiHeadAttention(chunk=)``: the mask from absolute positions, so prefill + decoding with a
  full (or a static, right-aligned) cache equals the whole sequence.
* :func:`~attn_core.positions.positional.query_temperature` and ``MultiHeadAttention(temperature=)``: by hand,
  against Hugging Face's formula, continued positions in decoding.
* :class:`~attn_core.DecoderConfig`'s Llama 4 fields: where each acts, and bad values.
Whole models against Hugging Face's: ``tests/test_hf_families_llama4.py``.
"""

from __future__ import annotations

import math

import pytest
import torch

from attn_core import DecoderConfig, DecoderLM, MultiHeadAttention
from attn_core.config import LayerPattern, Positions
from attn_core.model.params import parameter_count
from attn_core.ops.masks import position_mask
from attn_core.ops.shapes import split_heads
from attn_core.positions.positional import check_temperature, query_temperature
from attn_core.positions.rope import RotaryEmbedding

F64 = torch.float64


# --------------------------------------------------------------------------- the chunked mask
def test_chunk_mask_by_hand():
    m = position_mask(torch.arange(6), torch.arange(6), chunk=3).int()
    expected = torch.tensor(
        [[1, 0, 0, 0, 0, 0],
         [1, 1, 0, 0, 0, 0],
         [1, 1, 1, 0, 0, 0],
         [0, 0, 0, 1, 0, 0],  # position 3 opens a new chunk: itself only (a window of 3 would see 1 and 2)
         [0, 0, 0, 1, 1, 0],
         [0, 0, 0, 1, 1, 1]]
    )  # fmt: skip
    assert torch.equal(m, expected)


@pytest.mark.parametrize("chunk", [1, 3, 4, 7])
def test_chunk_mask_properties_and_loop(chunk):
    q_pos, k_pos = torch.arange(5, 17), torch.arange(17)  # the last 12 queries of 17 positions (a cache)
    m = position_mask(q_pos, k_pos, chunk=chunk)
    loop = torch.tensor([[k <= q and k // chunk == q // chunk for k in range(17)] for q in range(5, 17)])
    assert torch.equal(m, loop)
    for i, q in enumerate(q_pos.tolist()):
        seen = k_pos[m[i]]
        assert bool((seen // chunk == q // chunk).all())  # never another chunk
        assert seen.max() == q and seen.min() == q // chunk * chunk  # itself, back to its chunk's start
    assert torch.equal(position_mask(q_pos, k_pos, chunk=100), position_mask(q_pos, k_pos))  # one chunk: causal


def test_chunk_mask_equals_hugging_faces():
    masking_utils = pytest.importorskip("transformers.masking_utils")
    fn = masking_utils.chunked_causal_mask_function(4, torch.zeros(1, dtype=torch.long))  # no left padding
    zero = torch.tensor(0)
    hf = fn(zero, zero, torch.arange(13)[:, None], torch.arange(13)[None, :])  # (13, 13), broadcast
    assert torch.equal(position_mask(torch.arange(13), torch.arange(13), chunk=4), hf)


def test_chunk_mask_hides_empty_slots_and_bad_input():
    m = position_mask(torch.arange(4, 6), torch.arange(-2, 6), chunk=4)  # two empty (negative) slots first
    assert not m[:, :2].any() and m[1, 6:].all()
    for bad, err in ((0, ValueError), (-4, ValueError), (2.0, TypeError), (True, TypeError)):
        with pytest.raises(err, match="chunk"):
            position_mask(torch.arange(3), torch.arange(3), chunk=bad)
    with pytest.raises(ValueError, match="window or a chunk, not both: got window=2, chunk=4"):
        position_mask(torch.arange(3), torch.arange(3), window=2, chunk=4)


# --------------------------------------------------------------------------- chunked attention layers
def chunked_layer(seed: int = 0, **kw) -> MultiHeadAttention:
    torch.manual_seed(seed)
    rope = RotaryEmbedding(8, layout="interleaved")
    return MultiHeadAttention(16, 4, n_kv_heads=2, head_dim=8, causal=True, rope=rope, chunk=3, **kw).to(F64).eval()


def test_chunked_layer_is_the_layer_with_the_chunk_mask():
    layer = chunked_layer()
    x = torch.randn(2, 10, 16, dtype=F64, generator=torch.Generator().manual_seed(1))
    plain = MultiHeadAttention(16, 4, n_kv_heads=2, head_dim=8, causal=True, rope=layer.rope).to(F64)
    plain.load_state_dict(layer.state_dict())
    mask = position_mask(torch.arange(10), torch.arange(10), chunk=3)
    out, w = layer(x, return_weights=True)
    assert torch.allclose(out, plain(x, mask=mask), atol=1e-14, rtol=0)
    assert (w[..., ~mask] == 0).all()  # no weight on another chunk
    assert (plain(x) - out).abs().max() > 1e-3  # the chunk matters here


def test_chunked_layer_decodes_with_a_full_cache_as_the_whole_sequence():
    layer = chunked_layer()
    x = torch.randn(2, 11, 16, dtype=F64, generator=torch.Generator().manual_seed(2))
    full = layer(x)
    cache = layer.make_cache(2, 16)
    assert type(cache).__name__ == "KVCache"  # not a rolling one: the mask hides the earlier chunks
    steps = [layer(x[:, :4], kv_cache=cache)] + [layer(x[:, t : t + 1], kv_cache=cache) for t in range(4, 11)]
    assert torch.allclose(torch.cat(steps, 1), full, atol=1e-13, rtol=0)


def test_chunked_decoder_with_static_caches_equals_the_whole_sequence():
    """Static caches are right-aligned (empty slots first): the chunk mask reads absolute positions."""
    torch.manual_seed(0)
    config = DecoderConfig.llama_like(
        vocab_size=24,
        d_model=32,
        n_heads=4,
        n_layers=2,
        max_len=16,
        positions=Positions(positional="rope", rope_layers=(True, False), nope_temperature=(2.0, 0.5)),
        pattern=LayerPattern(layer_types=("chunked", "full"), attention_chunk_size=3),
    )
    model = DecoderLM(config).double().eval()
    assert model.blocks[0].attn.chunk == 3 and model.blocks[1].attn.chunk is None
    idx = torch.randint(0, 24, (2, 9), generator=torch.Generator().manual_seed(3))
    full = model(idx)
    for static in (False, True):
        caches = model.make_caches(2, 12, static=static)
        steps = [model(idx[:, :4], caches=caches)] + [model(idx[:, t : t + 1], caches=caches) for t in range(4, 9)]
        assert torch.allclose(torch.cat(steps, 1), full, atol=1e-12, rtol=0), static


def test_chunk_bad_input():
    with pytest.raises(ValueError, match="chunk must be >= 1"):
        MultiHeadAttention(16, 4, causal=True, chunk=0)
    with pytest.raises(TypeError, match="chunk must be an int"):
        MultiHeadAttention(16, 4, causal=True, chunk=2.5)
    with pytest.raises(ValueError, match="window or chunk, not both"):
        MultiHeadAttention(16, 4, causal=True, chunk=4, window=2)
    with pytest.raises(ValueError, match="chunk=4 is for causal self-attention"):
        MultiHeadAttention(16, 4, chunk=4)
    with pytest.raises(ValueError, match="kv_source has chunk=3, this layer chunk=None"):
        MultiHeadAttention(16, 4, causal=True, kv_source=MultiHeadAttention(16, 4, causal=True, chunk=3))
    assert "chunk=3" in repr(chunked_layer())


# --------------------------------------------------------------------------- the NoPE layers' temperature
def test_query_temperature_by_hand_and_against_hugging_faces_formula():
    t = query_temperature(torch.arange(9), 3, 0.5)
    a, b = 1 + 0.5 * math.log(2), 1 + 0.5 * math.log(3)
    assert torch.allclose(t, torch.tensor([1, 1, a, a, a, b, b, b, 1 + 0.5 * math.log(4)], dtype=F64))
    positions = torch.arange(0, 40000, 37)
    hf = torch.log1p(torch.floor((positions.double() + 1.0) / 8192)) * 0.1 + 1.0  # Llama4TextAttention's lines
    assert torch.equal(query_temperature(positions, 8192, 0.1), hf)


def test_temperature_bad_input():
    for bad in ((0, 0.1), (-1.0, 0.1), (8192, -0.1), (8192, float("nan"))):
        with pytest.raises(ValueError, match="temperature"):
            check_temperature(bad)
    for bad in (8192, (8192,), "hot"):
        with pytest.raises(TypeError, match="temperature must be a pair"):
            MultiHeadAttention(16, 4, causal=True, temperature=bad)
    with pytest.raises(TypeError, match="positions"):
        query_temperature(torch.arange(3.0), 3, 0.5)


def test_temperature_layer_scales_each_query_and_decodes_the_same():
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 4, causal=True, temperature=(2.0, 0.7)).to(F64).eval()
    plain = MultiHeadAttention(16, 4, causal=True).to(F64).eval()
    plain.load_state_dict(layer.state_dict())
    x = torch.randn(2, 9, 16, dtype=F64, generator=torch.Generator().manual_seed(4))
    factors = query_temperature(torch.arange(9), 2.0, 0.7)  # (T,)
    # Scaling a query by s is scaling its scores by s: the same as a score scale per query row.
    q = split_heads(plain.q_proj(x), 4) * factors[:, None]  # (B, H, T, D)
    k, v = split_heads(plain.k_proj(x), 4), split_heads(plain.v_proj(x), 4)
    scores = (q @ k.transpose(-1, -2) / 2.0).masked_fill(~position_mask(torch.arange(9), torch.arange(9)), -torch.inf)
    by_hand = plain.out_proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(2, 9, 16))
    assert torch.allclose(layer(x), by_hand, atol=1e-14, rtol=0)
    assert (layer(x) - plain(x)).abs().max() > 1e-3
    cache = layer.make_cache(2, 12)
    steps = [layer(x[:, :3], kv_cache=cache)] + [layer(x[:, t : t + 1], kv_cache=cache) for t in range(3, 9)]
    assert torch.allclose(torch.cat(steps, 1), layer(x), atol=1e-13, rtol=0)  # positions continue after the cache
    assert "temperature=(2.0, 0.7)" in repr(layer)
    torch.autograd.gradcheck(lambda x: layer(x), (x[:1, :4].clone().requires_grad_(),))


# --------------------------------------------------------------------------- the config's Llama 4 fields
LLAMA4 = dict(
    vocab_size=24,
    d_model=32,
    n_heads=4,
    n_layers=4,
    max_len=16,
    qk_norm=True,
    pattern={"layer_types": ("chunked", "full") * 2, "attention_chunk_size": 3},
    positions={
        "positional": "rope",
        "rope_layers": (True, False) * 2,
        "nope_temperature": (2.0, 0.5),
        "nope_qk_norm": False,
    },
    moe={
        "n_experts": 4,
        "experts_per_token": 1,
        "n_shared_experts": 1,
        "router_scoring": "sigmoid",
        "router_weight_inputs": True,
        "moe_layer_step": 2,
    },
)


def test_llama4_fields_reach_each_layer():
    config = DecoderConfig.llama_like(**LLAMA4)
    model = DecoderLM(config)
    attn = [b.attn for b in model.blocks]
    assert [a.chunk for a in attn] == [3, None, 3, None]
    assert [a.temperature for a in attn] == [None, (2.0, 0.5), None, (2.0, 0.5)]
    assert [a.rope is not None for a in attn] == [True, False, True, False]
    assert [a.q_norm is not None for a in attn] == [True, False, True, False]  # QK-norm where it rotates
    assert [type(b.mlp).__name__ for b in model.blocks] == ["SwiGLU", "MixtureOfExperts"] * 2
    assert all(b.mlp.weight_inputs for b in model.blocks[1::2])
    assert [config.is_moe_layer(i) for i in range(4)] == [False, True, False, True]
    assert parameter_count(config) == model.num_parameters()  # no QK-norm gains in the NoPE layers


def _merged(base: dict, kw: dict) -> dict:
    """``base`` with ``kw``'s values, a part's fields given as a dict merged into the base's part."""
    return {**base, **{k: {**base[k], **v} if isinstance(base.get(k), dict) else v for k, v in kw.items()}}


@pytest.mark.parametrize(
    "kw,message",
    [
        (
            dict(pattern={"attention_chunk_size": None}),
            "attention_chunk_size=None is the chunk of the 'chunked' layers",
        ),
        (dict(pattern={"layer_types": None}), "attention_chunk_size=3 is the chunk of the 'chunked' layers"),
        (dict(pattern={"attention_chunk_size": 0}), "attention_chunk_size must be >= 1"),
        (
            dict(positions={"positional": "rope", "rope_layers": None}),
            r"nope_temperature=\(2.0, 0.5\) is for the attention layers without RoPE",
        ),
        (dict(positions={"positional": "rope", "nope_temperature": (0.0, 0.5)}), "temperature floor_scale"),
        (dict(qk_norm=False), "nope_qk_norm=False leaves out the NoPE layers' QK-norm, but qk_norm=False"),
        (dict(moe={"moe_layer_step": 0}), "moe_layer_step must be >= 1"),
        (dict(moe={"moe_layer_step": 5}), "moe_layer_step=5 leave no mixture-of-experts layer"),
        (dict(moe={"router_weight_inputs": 1}), "router_weight_inputs"),
    ],
)
def test_llama4_fields_bad_values(kw, message):
    with pytest.raises((ValueError, TypeError), match=message):
        DecoderConfig.llama_like(**_merged(LLAMA4, kw))


def test_padded_batches_are_refused():
    """Chunks and the temperature count positions from the first slot: a left-padded row would be cut elsewhere."""
    model = DecoderLM(DecoderConfig.llama_like(**LLAMA4))
    idx = torch.zeros(2, 4, dtype=torch.long)
    with pytest.raises(ValueError, match="chunks and the NoPE temperature count positions from the first slot"):
        model(idx, attention_mask=torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]]))
