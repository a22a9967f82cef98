"""attn_core.model.build: layer i built from (config, i), as the model builds it."""

from __future__ import annotations

from attn_core import DecoderConfig, DecoderLM, GatedDeltaNet, MixtureOfExperts, MultiHeadAttention
from attn_core.config import LayerPattern, LayerSpec, MoE, Positions
from attn_core.model.build import make_attention, make_layer, make_moe

SMALL = dict(vocab_size=24, d_model=32, n_heads=4, max_len=16)


def test_layer_spec_answers_each_layer_once():
    config = DecoderConfig.llama_like(
        **SMALL,
        n_layers=3,
        pattern=LayerPattern(("sliding", "full", "full"), sliding_window=4, kv_share=(0, 1, 1)),
        positions=Positions("rope", rope_base=1e6, sliding_rope_base=1e4),
        moe=MoE(4, first_dense_layers=1),
    )
    specs = [config.layer(i) for i in range(3)]
    assert all(isinstance(s, LayerSpec) for s in specs)
    assert [s.window for s in specs] == [4, None, None]
    assert [s.rope for s in specs] == ["sliding_rope", "rope", "rope"]
    assert [s.kv_source for s in specs] == [None, None, 1]
    assert [s.moe for s in specs] == [False, True, True]


def test_make_layer_passes_the_mixture_of_experts_in():
    """The MoE is the block's MLP from its constructor: no dense MLP was built and replaced."""
    config = DecoderConfig.llama_like(**SMALL, n_layers=2, moe=MoE(4, first_dense_layers=1))
    dense, sparse = make_layer(config, 0), make_layer(config, 1)
    assert not isinstance(dense.mlp, MixtureOfExperts) and isinstance(sparse.mlp, MixtureOfExperts)
    assert all(not name.startswith("mlp.gate_proj") for name, _ in sparse.named_parameters())
    assert isinstance(make_moe(config), MixtureOfExperts)


def test_make_attention_follows_the_layer_type():
    config = DecoderConfig.llama_like(**SMALL, n_layers=2, pattern=LayerPattern(("linear", "full")))
    assert isinstance(make_attention(config, config.layer(0)), GatedDeltaNet)
    assert isinstance(make_attention(config, config.layer(1)), MultiHeadAttention)


def test_the_model_builds_its_layers_with_make_layer():
    """DecoderLM's blocks are make_layer's, a sharing layer given its source's attention."""
    config = DecoderConfig.llama_like(**SMALL, n_layers=2, pattern=LayerPattern(kv_share=(0, 0)))
    model = DecoderLM(config)
    assert [type(b) for b in model.blocks] == [type(make_layer(config, i)) for i in range(2)]
    caches = model.make_caches(1)
    assert caches[0] is not None and caches[1] is None  # layer 1 reads layer 0's keys and values
