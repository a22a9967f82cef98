"""attn_core.caches.static.

Static-shape caches decode exactly as the growing caches, with the same shapes every step.
"""

from __future__ import annotations

import shutil

import pytest
import torch

from attn_core import DecoderConfig, DecoderLM, KVCache
from attn_core.caches.static import StaticKVCache, StaticLatentKVCache, filled_mask, is_static, make_static_caches
from attn_core.config import Indexer, LayerPattern, Positions
from attn_core.model.generation import generate
from attn_core.positions.rope_scaling import DynamicNTKScaling
from conftest import peaked_decoder

F64 = torch.float64
_SMALL = dict(vocab_size=24, d_model=32, n_heads=4, max_len=32)

CONFIGS = {
    "llama_gqa": DecoderConfig.llama_like(**_SMALL, n_kv_heads=2),
    "gpt2_learned": DecoderConfig.gpt2_like(**_SMALL),
    "window_sinks": DecoderConfig.llama_like(
        **_SMALL,
        n_kv_heads=2,
        attention_sinks=True,
        pattern=LayerPattern(layer_types=("sliding", "full"), sliding_window=3),
    ),
    "mla": DecoderConfig.llama_like(**_SMALL, n_kv_heads=None, attention="mla", d_latent=16, d_q_latent=12),
    "alibi": DecoderConfig.llama_like(**_SMALL, positions=Positions(positional="alibi")),
    "hybrid": DecoderConfig.llama_like(**_SMALL, n_kv_heads=2, pattern=LayerPattern(layer_types=("linear", "full"))),
    "kv_share": DecoderConfig.llama_like(**_SMALL, n_kv_heads=2, pattern=LayerPattern(kv_share=(0, 0))),
    # speeds that change with the length: the caches keep host-side (int) offsets
    "dynamic_ntk": DecoderConfig.llama_like(
        **_SMALL, positions=Positions(positional="rope", rope_scaling=DynamicNTKScaling(2.0, 8))
    ),
    "sinusoidal": DecoderConfig.gpt2_like(**_SMALL, positions=Positions(positional="sinusoidal")),
}


_model = peaked_decoder  # logits far from uniform: greedy tokens are not near ties


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_static_decoding_equals_dynamic_in_float64(name):
    model = _model(CONFIGS[name])
    idx = torch.randint(0, 24, (2, 5), generator=torch.Generator().manual_seed(1))
    tokens, logits = generate(model, idx, 10, temperature=0.0, return_logits=True)
    s_tokens, s_logits = generate(model, idx, 10, temperature=0.0, return_logits=True, static=True)
    assert torch.equal(tokens, s_tokens)
    assert torch.allclose(s_logits, logits, rtol=0, atol=1e-12)
    if name != "dynamic_ntk":  # whose cached keys keep the older speeds (rope_scaling.DynamicNTKScaling)
        # and both equal the full-sequence forward
        assert torch.allclose(model(tokens[:, :-1]), logits, rtol=0, atol=1e-12)


def test_every_static_step_has_the_same_shapes():
    model = _model(CONFIGS["window_sinks"])
    caches = model.make_caches(1, 9, static=True)
    assert all(isinstance(c, StaticKVCache) for c in caches)
    seen = []
    with torch.no_grad():
        model(torch.tensor([[1, 2, 3]]), caches=caches)
        for t in range(6):
            k, v = caches[0].update(torch.zeros(1, 2, 0, 8, dtype=F64), torch.zeros(1, 2, 0, 8, dtype=F64))
            seen.append(k.shape)
            model(torch.tensor([[t]]), caches=caches)
    assert set(seen) == {torch.Size([1, 2, 9, 8])}
    assert caches[0].size == 9


def test_buffer_is_right_aligned():
    cache = StaticKVCache(1, 1, 2, 4, dtype=F64)
    first = torch.tensor([[[[1.0, 1.0], [2.0, 2.0]]]], dtype=F64)  # (1, 1, 2, 2): positions 0, 1
    k, _ = cache.update(first, first)
    assert k[0, 0, :, 0].tolist() == [0.0, 0.0, 1.0, 2.0]
    k, _ = cache.update(first[:, :, :1] * 3, first[:, :, :1] * 3)  # position 2
    assert k[0, 0, :, 0].tolist() == [0.0, 1.0, 2.0, 3.0] and cache.size == 3
    assert filled_mask(4, cache.size).tolist() == [False, True, True, True]
    cache.reset()
    assert cache.size == 0


def test_static_latent_cache_is_right_aligned():
    cache = StaticLatentKVCache(1, 3, 2, 5, dtype=F64)
    c, r = cache.update(torch.ones(1, 2, 3, dtype=F64), torch.ones(1, 2, 2, dtype=F64))
    assert c.shape == (1, 5, 3) and r.shape == (1, 5, 2)
    assert c[0, :, 0].tolist() == [0.0, 0.0, 0.0, 1.0, 1.0]


def test_cache_too_short_names_the_sizes():
    model = _model(CONFIGS["llama_gqa"])
    caches = model.make_caches(1, 6, static=True)
    model(torch.tensor([[1, 2, 3, 4]]), caches=caches)
    with pytest.raises(ValueError, match=r"static cache too short: 4 stored \+ 3 new positions > max_len=6"):
        model(torch.tensor([[1, 2, 3]]), caches=caches)
    assert caches[0].size == 4  # nothing was written


def test_unsupported_models_refuse_static_caches():
    sas = DecoderLM(DecoderConfig.llama_like(**_SMALL, n_kv_heads=None, block="sas"))
    with pytest.raises(ValueError, match="static caches need standard blocks: block='sas'"):
        sas.make_caches(1, 8, static=True)
    dsa = DecoderLM(
        DecoderConfig.llama_like(
            **_SMALL,
            n_kv_heads=None,
            attention="mla",
            d_latent=16,
            indexer=Indexer(index_n_heads=2, index_head_dim=8, index_topk=4),
        )
    )
    with pytest.raises(ValueError, match="layer 0's cache is a SparseCache"):
        dsa.make_caches(1, 8, static=True)
    with pytest.raises(TypeError, match="static must be a bool"):
        sas.make_caches(1, 8, static="yes")


def test_make_static_caches_and_is_static():
    dynamic = [KVCache(1, 2, 4, 8), None]
    static = make_static_caches(dynamic, 8, dtype=F64)
    assert isinstance(static[0], StaticKVCache) and static[1] is None
    assert static[0].made_for == dynamic[0].made_for
    assert is_static(static[0]) and not is_static(dynamic[0])


def test_filled_mask_bad_input():
    with pytest.raises(ValueError, match="filled=5 positions do not fit in max_len=4"):
        filled_mask(4, 5)
    with pytest.raises(ValueError, match="filled must be >= 0"):
        filled_mask(4, -1)


def test_generate_compile_uses_the_static_path(monkeypatch):
    """``compile=True`` hands the decoding steps to torch.compile (here its eager backend: no C++ build)."""
    compiled = []
    real = torch.compile

    def eager_compile(model, **kwargs):
        compiled.append(kwargs)
        return real(model, backend="eager")

    monkeypatch.setattr(torch, "compile", eager_compile)
    model = _model(CONFIGS["llama_gqa"])
    idx = torch.randint(0, 24, (1, 4), generator=torch.Generator().manual_seed(2))
    expected = generate(model, idx, 6, temperature=0.0)
    assert torch.equal(generate(model, idx, 6, temperature=0.0, compile=True), expected)
    assert torch.equal(generate(model, idx, 6, temperature=0.0, compile="max-autotune-no-cudagraphs"), expected)
    assert compiled == [{}, {"mode": "max-autotune-no-cudagraphs"}]


@pytest.mark.skipif(
    not any(shutil.which(cxx) for cxx in ("g++", "clang++", "c++")),
    reason="Inductor compiles C++ on a CPU, and no C++ compiler was found",
)
@pytest.mark.parametrize("mode", [True, "reduce-overhead"])
def test_generate_compiled_by_inductor_equals_eager(mode):
    """The real compiler, not only dynamo's tracing: the in-place updates of the static buffers
    and of the device count survive Inductor's functionalisation, and the step is compiled once.
    On a CPU ``"reduce-overhead"`` records no CUDA graph but compiles the same step."""
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    model = DecoderLM(CONFIGS["llama_gqa"]).eval()  # float32, as a compiled model runs
    idx = torch.randint(0, 24, (2, 4), generator=torch.Generator().manual_seed(3))
    expected, expected_logits = generate(model, idx, 8, temperature=0.0, return_logits=True)
    torch._dynamo.reset()
    counters.clear()
    tokens, logits = generate(model, idx, 8, temperature=0.0, return_logits=True, compile=mode)
    assert counters["stats"]["unique_graphs"] == 1
    assert torch.equal(tokens, expected)
    torch.testing.assert_close(logits, expected_logits, rtol=1e-5, atol=1e-5)  # fused kernels round differently
    torch._dynamo.reset()


def test_generate_static_bad_input():
    model = _model(CONFIGS["llama_gqa"])
    idx = torch.tensor([[1, 2]])
    with pytest.raises(ValueError, match="pass use_cache=True"):
        generate(model, idx, 3, static=True, use_cache=False)
    with pytest.raises(TypeError, match="compile must be a bool or a torch.compile mode"):
        generate(model, idx, 3, compile=1)
    with pytest.raises(TypeError, match="static must be a bool"):
        generate(model, idx, 3, static=1)


def test_a_refused_update_leaves_the_static_cache_unchanged():
    cache = StaticKVCache(1, 2, 4, 5, dtype=F64)
    good = torch.ones(1, 2, 2, 4, dtype=F64)
    cache.update(good, good)
    before = cache.update(good[:, :, :0], good[:, :, :0])[0].clone()
    with pytest.raises(ValueError, match=r"k must have shape \(1, 2, 'T_new', 4\), got \(1, 3, 1, 4\)"):
        cache.update(torch.ones(1, 3, 1, 4, dtype=F64), torch.ones(1, 3, 1, 4, dtype=F64))
    assert cache.size == 2 and torch.equal(cache.update(good[:, :, :0], good[:, :, :0])[0], before)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_static_offsets_live_on_the_device_unless_the_speeds_need_the_length(name):
    model = _model(CONFIGS[name])
    caches = model.make_caches(2, 12, static=True)
    static = [c for c in caches if is_static(c)]
    with torch.no_grad():
        model(torch.randint(0, 24, (2, 5)), caches=caches)
    for cache in static:
        assert cache.size == 5
        if name == "dynamic_ntk":
            assert cache.device_offsets is False and cache.offset == 5
        else:
            offset = cache.offset  # a copy: the next update does not change it
            assert isinstance(offset, torch.Tensor) and offset.dim() == 0 and not offset.dtype.is_floating_point
            assert int(offset) == 5
            cache.update(*_one_position(cache, batch_size=2))
            assert int(offset) == 5 and int(cache.offset) == 6 and cache.size == 6


def _one_position(cache, batch_size):
    """Zeros for one new position of each tensor ``cache.update`` takes."""
    made = cache.made_for
    if isinstance(cache, StaticLatentKVCache):  # (B, T_new, d_c), (B, T_new, d_r)
        return torch.zeros(batch_size, 1, made["d_latent"], dtype=F64), torch.zeros(
            batch_size, 1, made["d_rope"], dtype=F64
        )
    kv = torch.zeros(batch_size, made["n_kv_heads"], 1, made["head_dim"], dtype=F64)  # (B, H_kv, T_new, D)
    return kv, kv


def test_static_buffers_are_marked_static_addresses_for_cuda_graphs():
    caches = make_static_caches([KVCache(1, 2, 4, 8)], 8, dtype=F64)
    for t in (*caches[0]._store.values(), caches[0]._count._device):
        assert getattr(t, "_dynamo_static_input_type", None) is not None


def test_reset_forgets_the_device_count_too():
    cache = StaticKVCache(1, 2, 4, 6, dtype=F64)
    cache.update(torch.ones(1, 2, 3, 4, dtype=F64), torch.ones(1, 2, 3, 4, dtype=F64))
    cache.reset()
    assert cache.size == 0 and int(cache.offset) == 0
    with pytest.raises(ValueError, match="static cache too short: 0 stored \\+ 7 new positions > max_len=6"):
        cache.update(torch.ones(1, 2, 7, 4, dtype=F64), torch.ones(1, 2, 7, 4, dtype=F64))


def test_filled_mask_takes_a_device_count():
    assert torch.equal(filled_mask(5, torch.tensor(2)), filled_mask(5, 2))
    assert filled_mask(5, 2).tolist() == [False, False, False, True, True]
    with pytest.raises(TypeError, match="filled"):
        filled_mask(5, torch.tensor(2.0))


def test_learned_positions_refuse_static_caches_longer_than_their_table():
    model = _model(CONFIGS["gpt2_learned"])
    with pytest.raises(ValueError, match="max_len=40 slots need positions up to 39.*config.max_len=32"):
        model.make_caches(1, 40, static=True)
