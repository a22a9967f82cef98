"""attn_core.teach.window: receptive field of a windowed stack, layer patterns, cache bytes, imposing a window."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from attn_core import DecoderConfig, DecoderLM, MultiHeadAttention
from attn_core.config import Positions
from attn_core.teach.window import (
    kv_cache_bytes,
    layer_pattern,
    published_attention,
    receptive_field,
    receptive_field_width,
    windowed,
)
from conftest import F64, randn


def stack(n_layers: int, window: int | None, d: int = 8) -> list[MultiHeadAttention]:
    torch.manual_seed(0)
    return [MultiHeadAttention(d, 2, causal=True, window=window).double() for _ in range(n_layers)]


@pytest.mark.parametrize("n_layers,window", [(1, 3), (2, 3), (3, 4), (4, 2)])
def test_receptive_field_is_layers_times_window(n_layers, window):
    T = 20
    reach = receptive_field(stack(n_layers, window), randn(1, T, 8))
    width = receptive_field_width(n_layers, window)
    assert width == n_layers * (window - 1) + 1
    assert (reach[T - width :] > 0).all(), "every position inside the receptive field matters"
    assert (reach[: T - width] == 0).all(), "nothing beyond it does: exactly zero"


def test_receptive_field_of_full_attention_is_everything_and_probes_any_position():
    reach = receptive_field(stack(1, None), randn(1, 10, 8), position=4)
    assert (reach[:5] > 0).all() and (reach[5:] == 0).all()  # causal: nothing after position 4


def test_receptive_field_bad_input():
    with pytest.raises(ValueError, match=r"position must be an int in \[-5, 5\), got position=5"):
        receptive_field(stack(1, 2), randn(1, 5, 8), position=5)
    with pytest.raises(TypeError, match="layers must be a non-empty sequence"):
        receptive_field([], randn(1, 5, 8))
    with pytest.raises(ValueError, match="window must be >= 1.*window=0"):
        receptive_field_width(2, 0)


def test_layer_pattern_follows_gemma3_and_gpt_oss():
    assert layer_pattern(6, 6) == ("sliding",) * 5 + ("full",)
    assert layer_pattern(4, 2) == ("sliding", "full", "sliding", "full")
    assert layer_pattern(3, 1) == ("full",) * 3
    with pytest.raises(ValueError, match="full_every must be >= 1, got full_every=0"):
        layer_pattern(4, 0)


CONFIGS = {
    "full": dict(),
    "sliding": dict(pattern={"sliding_window": 4}),
    "mixed": dict(pattern={"layer_types": ("sliding", "full", "sliding"), "sliding_window": 4}),
    "shared": dict(pattern={"kv_share": (0, 0, 2)}),
    "mixed+shared": dict(
        pattern={"layer_types": ("sliding", "sliding", "full"), "sliding_window": 4, "kv_share": (0, 0, 2)}
    ),
}


@pytest.mark.parametrize("kw", CONFIGS.values(), ids=CONFIGS.keys())
@pytest.mark.parametrize("context", [3, 12])
def test_kv_cache_bytes_equals_what_the_model_allocates(kw, context):
    config = DecoderConfig.llama_like(n_layers=3, max_len=64, **kw)
    model = DecoderLM(config)
    caches = [c for c in model.make_caches(2, context) if c is not None]
    assert kv_cache_bytes(config, context, batch_size=2, bytes_per_element=4) == sum(c.nbytes() for c in caches)


def test_kv_cache_bytes_grows_with_context_only_in_full_layers():
    full = DecoderConfig.llama_like(n_layers=4)
    sliding = dataclasses.replace(full, pattern=dataclasses.replace(full.pattern, sliding_window=8))
    assert kv_cache_bytes(sliding, 1000) == kv_cache_bytes(sliding, 8) < kv_cache_bytes(full, 1000)
    assert kv_cache_bytes(full, 1000) == 125 * kv_cache_bytes(full, 8)
    with pytest.raises(ValueError, match="context must be >= 1, got context=0"):
        kv_cache_bytes(full, 0)
    with pytest.raises(TypeError, match="config"):
        kv_cache_bytes("llama", 10)


def test_published_attention_shapes():
    shapes = published_attention()
    mistral, gemma, oss20, oss120 = (shapes[k] for k in ("Mistral 7B", "Gemma 3 27B", "gpt-oss-20b", "gpt-oss-120b"))
    assert mistral.resolved_layer_types == ("sliding",) * 32 and mistral.pattern.sliding_window == 4096
    assert gemma.resolved_layer_types.count("full") == 10 and gemma.pattern.sliding_window == 1024
    assert oss20.n_layers == 24 and oss120.n_layers == 36 and oss120.pattern.layer_types[:2] == ("sliding", "full")
    # Per token and layer, bfloat16: 2 (K, V) x H_kv x D x 2 bytes.
    assert kv_cache_bytes(mistral, 1) == 32 * 2 * 8 * 128 * 2
    assert kv_cache_bytes(oss120, 131072) == 18 * 2 * 8 * 64 * 2 * (131072 + 128)


def test_windowed_imposes_and_restores():
    config = DecoderConfig.llama_like(n_layers=2, positions=Positions(positional="none"))
    torch.manual_seed(0)
    model = DecoderLM(config).to(F64)
    idx = torch.randint(0, 64, (1, 12), generator=torch.Generator().manual_seed(0))
    before = model(idx)
    with windowed(model, 3, sink_tokens=1):
        assert all(b.attn.window == 3 and b.attn.sink_tokens == 1 for b in model.blocks)
        inside = model(idx)
    assert all(b.attn.window is None for b in model.blocks)
    torch.testing.assert_close(model(idx), before, rtol=0, atol=0)
    torch.testing.assert_close(inside[:, :4], before[:, :4], rtol=0, atol=1e-12)  # the first 4 see everything
    assert (inside[:, 4:] - before[:, 4:]).abs().max() > 1e-6


def test_windowed_bad_input():
    model = DecoderLM(DecoderConfig.llama_like())
    with pytest.raises(ValueError, match="window must be >= 1.*window=0"):
        with windowed(model, 0):
            pass
    with pytest.raises(ValueError, match="sink_tokens=2 keeps the first tokens inside a window"):
        with windowed(model, None, sink_tokens=2):
            pass
    with pytest.raises(ValueError, match="Linear has no causal MultiHeadAttention"):
        with windowed(torch.nn.Linear(2, 2), 3):
            pass
