"""DecoderConfig's "linear" layers: Gated DeltaNet in the attention's place (chapter 17's hybrid, as in Qwen3-Next)."""

from __future__ import annotations

import pytest
import torch

from attn_core import DecoderConfig, DecoderLM, GatedDeltaNet, KVCache, MultiHeadAttention, generate
from attn_core.caches.recurrent import GatedDeltaNetCache
from attn_core.config import LayerPattern, LinearLayers
from attn_core.teach.window import kv_cache_bytes, layer_pattern

# Three Gated DeltaNet layers per full attention layer (Qwen3-Next's full_attention_interval=4),
# with two value heads per key head, as in Qwen3-Next.
HYBRID = DecoderConfig.llama_like(
    vocab_size=20,
    n_layers=4,
    d_model=32,
    n_heads=4,
    max_len=160,
    pattern=LayerPattern(layer_types=layer_pattern(4, 4, other="linear")),
    linear=LinearLayers(linear_n_value_heads=8, linear_head_dim=6, linear_value_head_dim=5),
)


def _model(config: DecoderConfig = HYBRID, seed: int = 0) -> DecoderLM:
    torch.manual_seed(seed)
    return DecoderLM(config).double().eval()


def test_layer_pattern_other_linear_follows_qwen3_next():
    assert layer_pattern(8, 4, other="linear") == ("linear",) * 3 + ("full",) + ("linear",) * 3 + ("full",)
    with pytest.raises(ValueError, match="other must be 'sliding' or 'linear', got 'dense'"):
        layer_pattern(4, 2, other="dense")


def test_linear_layers_are_gated_deltanet_with_the_configured_sizes():
    model = _model()
    kinds = [type(b.attn) for b in model.blocks]
    assert kinds == [GatedDeltaNet] * 3 + [MultiHeadAttention]
    gdn = model.blocks[0].attn
    assert (gdn.n_heads, gdn.head_dim, gdn.n_value_heads, gdn.value_head_dim, gdn.conv_size) == (4, 6, 8, 5, 4)
    # The full layer keeps the model's own attention; the MLPs and norms are the same in every block.
    assert model.blocks[3].attn.n_heads == 4 and model.blocks[3].attn.head_dim == 8
    assert type(model.blocks[0].mlp) is type(model.blocks[3].mlp)


def test_linear_sizes_default_to_the_attention_sizes():
    config = DecoderConfig.llama_like(
        vocab_size=20, n_layers=2, d_model=32, n_heads=4, pattern=LayerPattern(layer_types=("linear", "full"))
    )
    gdn = DecoderLM(config).blocks[0].attn
    assert (gdn.n_heads, gdn.head_dim, gdn.n_value_heads, gdn.value_head_dim) == (4, 8, 4, 8)


def test_hybrid_is_causal():
    model = _model()
    idx = torch.randint(0, 20, (2, 30), generator=torch.Generator().manual_seed(1))
    logits = model(idx)
    changed = idx.clone()
    changed[:, 12:] = (changed[:, 12:] + 1) % 20
    torch.testing.assert_close(model(changed)[:, :12], logits[:, :12], rtol=0, atol=1e-12)
    assert (model(changed)[:, 12:] - logits[:, 12:]).abs().max() > 1e-3


@pytest.mark.parametrize("prompt", [1, 7, 100])  # 100 > the chunk size of 64: the prefill crosses a chunk
def test_hybrid_decodes_with_caches_as_on_the_full_sequence(prompt):
    model = _model()
    idx = torch.randint(0, 20, (2, 130), generator=torch.Generator().manual_seed(2))
    full = model(idx)
    caches = model.make_caches(2)
    assert [type(c) for c in caches] == [GatedDeltaNetCache] * 3 + [KVCache]
    steps = [model(idx[:, :prompt], caches=caches)]
    steps += [model(idx[:, t : t + 1], caches=caches) for t in range(prompt, 130)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-10)
    assert all(c.size == 130 for c in caches)


def test_hybrid_generates_the_same_tokens_with_and_without_caches():
    model = _model()
    prompt = torch.randint(0, 20, (1, 9), generator=torch.Generator().manual_seed(3))
    cached = generate(model, prompt, 20, temperature=0)
    uncached = generate(model, prompt, 20, temperature=0, use_cache=False)
    assert torch.equal(cached, uncached)


def test_hybrid_weights_have_one_map_per_layer():
    _, weights = _model()(torch.randint(0, 20, (1, 11)), return_weights=True)
    assert [tuple(w.shape) for w in weights] == [(1, 8, 11, 11)] * 3 + [(1, 4, 11, 11)]
    assert all(torch.all(w.triu(1) == 0) for w in weights)  # every map is causal


def test_hybrid_gradcheck():
    config = DecoderConfig.llama_like(
        vocab_size=7, n_layers=2, d_model=8, n_heads=2, pattern=LayerPattern(layer_types=("linear", "full"))
    )
    model = _model(config)
    x = torch.randn(1, 5, 8, dtype=torch.float64, requires_grad=True)

    def stream(x):  # the residual stream through a Gated DeltaNet block and an attention block
        for block in model.blocks:
            x = block(x)
        return x

    assert torch.autograd.gradcheck(stream, (x,))


def test_kv_cache_bytes_counts_the_constant_linear_state():
    # Per linear layer: conv history (2·4·6 + 8·5 channels × 3 taps) + state (8 heads × 6 × 5).
    state = (2 * 4 * 6 + 8 * 5) * 3 + 8 * 6 * 5
    full_per_position = 2 * HYBRID.resolved_n_kv_heads * 8  # keys and values of the one full layer (2 KV heads)
    for context in (1, 100, 10_000):
        assert kv_cache_bytes(HYBRID, context, bytes_per_element=4) == 4 * (3 * state + full_per_position * context)
    caches = _model().make_caches(1)
    held = sum(t.numel() for t in (caches[0].conv_state, caches[0].state))
    assert held == state  # the formula counts what the cache holds
    assert caches[0].nbytes() == 8 * state  # float64 here


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (dict(linear={"linear_n_heads": 2}), r"linear_n_heads configure 'linear' layers, but layer_types=None"),
        (
            dict(pattern={"layer_types": ("linear", "full")}, linear={"linear_n_heads": 3, "linear_n_value_heads": 4}),
            "not a multiple of",
        ),
        (dict(pattern={"layer_types": ("linear", "full")}, linear={"linear_conv_size": 0}), "linear_conv_size"),
        (dict(pattern={"layer_types": ("linear", "full")}, positions={"positional": "alibi"}), "positional='alibi'"),
        (
            dict(pattern={"layer_types": ("linear", "linear"), "kv_share": (0, 0)}),
            r"kv_share\[1\]=0: layer 1 is 'linear'",
        ),
        (
            dict(attention="mla", d_latent=8, n_kv_heads=None, pattern={"layer_types": ("linear", "full")}),
            "attention='mha'",
        ),
        (dict(pattern={"layer_types": ("linear", "dense")}), "layer_types"),
    ],
)
def test_hybrid_bad_config(kw, message):
    with pytest.raises(ValueError, match=message):
        DecoderConfig.llama_like(vocab_size=20, n_layers=2, d_model=32, n_heads=4, **kw)
