"""attn_core.model.decoder.

DecoderLM is causal, decodes with caches as on full sequences, ties weights, refuses bad input.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from attn_core import (
    ALiBi,
    DecoderConfig,
    DecoderLM,
    KVCache,
    LatentKVCache,
    SinusoidalPositionalEncoding,
    causal_mask,
    parameter_count,
)
from attn_core.config import LayerPattern, Positions
from conftest import PRESETS, decoder

# The presets, and the positional kinds that no preset uses (chapter 8's experiment).
CONFIGS = {
    **PRESETS,
    "gpt2_sinusoidal": DecoderConfig.gpt2_like(
        d_model=32, n_heads=4, vocab_size=24, positions=Positions(positional="sinusoidal")
    ),
    "gpt2_alibi": DecoderConfig.gpt2_like(
        d_model=32, n_heads=4, vocab_size=24, positions=Positions(positional="alibi")
    ),
    "llama_alibi": DecoderConfig.llama_like(
        d_model=32, n_heads=4, vocab_size=24, positions=Positions(positional="alibi")
    ),
}


# --------------------------------------------------------------------------- the language model
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_decoder_is_causal(name):
    model = decoder(CONFIGS[name]).eval()
    V = model.config.vocab_size
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, V, (2, 10), generator=g)
    logits = model(idx)
    for t in (0, 4, 8):
        changed = idx.clone()
        changed[:, t + 1 :] = torch.randint(0, V, (2, 10 - t - 1), generator=g)
        other = model(changed)
        assert torch.allclose(logits[:, : t + 1], other[:, : t + 1], atol=1e-5), f"position <= {t} saw the future"
        assert not torch.allclose(logits[:, t + 1 :], other[:, t + 1 :], atol=1e-5)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_incremental_decoding_equals_full_sequence(name):
    model = decoder(CONFIGS[name]).eval()
    idx = torch.randint(0, model.config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(2))
    full, full_w = model(idx, return_weights=True)
    caches = model.make_caches(2, 12)
    expected_type = LatentKVCache if model.config.attention == "mla" else KVCache
    assert all(isinstance(c, expected_type) for c in caches) and len(caches) == model.config.n_layers
    parts = [model(idx[:, :4], caches=caches)]  # prefill
    for t in range(4, 9):
        step, step_w = model(idx[:, t : t + 1], caches=caches, return_weights=True)
        parts.append(step)
        assert step_w[0].shape == (2, model.config.n_heads, 1, t + 1)
        assert torch.allclose(step_w[-1][:, :, 0], full_w[-1][:, :, t, : t + 1], atol=1e-5)
    assert caches[0].size == 9
    assert torch.allclose(torch.cat(parts, dim=1), full, atol=1e-5)


def test_forward_shapes_and_weights():
    model = decoder(PRESETS["llama_like"]).eval()
    idx = torch.randint(0, 24, (3, 7))
    logits, weights = model(idx, return_weights=True)
    assert logits.shape == (3, 7, 24)
    assert len(weights) == 2 and all(w.shape == (3, 4, 7, 7) for w in weights)


def test_learned_positions_offset_by_cache():
    model = decoder(PRESETS["gpt2_like"]).eval()
    idx = torch.randint(0, 24, (1, 6))
    caches = model.make_caches(1)
    model(idx[:, :5], caches=caches)
    last = model(idx[:, 5:], caches=caches)
    alone = model(idx[:, 5:])  # the same token at position 0 instead of 5
    assert torch.allclose(last, model(idx)[:, 5:], atol=1e-5)
    assert not torch.allclose(last, alone, atol=1e-4)


def _without_positions(config: DecoderConfig) -> DecoderLM:
    """The same weights (same seed) with ``positional="none"``: positions added by hand below."""
    return (
        decoder(dataclasses.replace(config, positions=dataclasses.replace(config.positions, positional="none")))
        .double()
        .eval()
    )


def test_sinusoidal_positions_are_the_table_added_to_the_embeddings():
    config = CONFIGS["gpt2_sinusoidal"]
    model, plain = decoder(config).double().eval(), _without_positions(config)
    assert isinstance(model.pos_emb, SinusoidalPositionalEncoding) and model.alibi is None
    assert model.num_parameters() == plain.num_parameters() == parameter_count(config)  # no parameters
    idx = torch.randint(0, 24, (2, 40), generator=torch.Generator().manual_seed(4))
    # Vaswani et al.: embeddings scaled by √d_model, then the encodings added.
    x = plain.tok_emb(idx) * 32**0.5 + SinusoidalPositionalEncoding(32).encodings(40, dtype=torch.float64)  # (B, T, d)
    for block in plain.blocks:
        x = block(x)
    expected = plain.lm_head(plain.final_norm(x))  # (B, T, V)
    assert (model(idx) - expected).abs().max() < 1e-12
    # No table, so no maximum length: a sequence longer than max_len runs (learned positions raise).
    long_config = dataclasses.replace(config, max_len=8)
    assert decoder(long_config)(idx[:, :20]).shape == (2, 20, 24)
    with pytest.raises(ValueError, match="exceed max_len=8"):
        decoder(
            dataclasses.replace(long_config, positions=dataclasses.replace(long_config.positions, positional="learned"))
        )(idx[:, :20])


_LLAMA_SMALL = dict(d_model=32, n_heads=4, vocab_size=24)


def test_scale_embeddings_multiplies_the_token_embeddings_by_sqrt_d_model():
    """Gemma: the blocks read ``√d_model · tok_emb(idx)`` (no positions added; RoPE acts inside the layers)."""
    config = DecoderConfig.llama_like(d_model=32, n_heads=4, vocab_size=24, scale_embeddings=True)
    model, plain = decoder(config).double().eval(), decoder(DecoderConfig.llama_like(**_LLAMA_SMALL)).double().eval()
    assert model.embed_scale == 32**0.5 and plain.embed_scale == 1.0
    assert model.num_parameters() == plain.num_parameters() == parameter_count(config)  # no parameters
    idx = torch.randint(0, 24, (2, 7), generator=torch.Generator().manual_seed(5))
    x = plain.tok_emb(idx) * 32**0.5  # (B, T, d)
    for block in plain.blocks:
        x = block(x)
    assert (model(idx) - plain.lm_head(plain.final_norm(x))).abs().max() < 1e-12
    assert (model(idx) - plain(idx)).abs().max() > 1e-3  # the scale matters


def test_final_softcap_caps_the_logits_with_tanh():
    """Gemma 2: the logits are ``cap · tanh(lm_head(...) / cap)``, inside ``(-cap, cap)``; caches see the same."""
    config = DecoderConfig.llama_like(**_LLAMA_SMALL, final_softcap=0.5)
    model = decoder(config).double().eval()
    plain = decoder(dataclasses.replace(config, final_softcap=None)).double().eval()  # the same seed: same weights
    assert model.num_parameters() == plain.num_parameters() == parameter_count(config)  # no parameters
    idx = torch.randint(0, 24, (2, 7), generator=torch.Generator().manual_seed(5))
    x = plain.tok_emb(idx)  # (B, T, d)
    for block in plain.blocks:
        x = block(x)
    raw = plain.lm_head(plain.final_norm(x))  # (B, T, V)
    assert raw.abs().max() > 1.0  # the cap bites
    logits = model(idx)
    assert (logits - 0.5 * torch.tanh(raw / 0.5)).abs().max() < 1e-12
    assert logits.abs().max() < 0.5
    caches = model.make_caches(2, 16)
    steps = [model(idx[:, :4], caches=caches)] + [model(idx[:, t : t + 1], caches=caches) for t in range(4, 7)]
    assert (torch.cat(steps, dim=1) - logits).abs().max() < 1e-12


def test_sliding_rope_base_gives_the_sliding_layers_their_own_rope():
    """Gemma 3: local layers rotate with base 10000, global ones with rope_base (1e6)."""
    config = DecoderConfig.llama_like(
        **_LLAMA_SMALL,
        n_layers=3,
        positions=Positions(positional="rope", rope_base=1e6, sliding_rope_base=1e4),
        pattern=LayerPattern(layer_types=("sliding", "full", "sliding"), sliding_window=3),
    )
    model = decoder(config)
    assert [b.attn.rope.base for b in model.blocks] == [1e4, 1e6, 1e4]
    assert model.blocks[0].attn.rope is model.blocks[2].attn.rope is model.sliding_rope
    assert model.blocks[1].attn.rope is model.rope and model.rope.base == 1e6
    assert model.num_parameters() == parameter_count(config)
    # Without it every layer has rope_base; the outputs differ, and decoding with caches still equals the full run.
    same = decoder(dataclasses.replace(config, positions=dataclasses.replace(config.positions, sliding_rope_base=None)))
    assert same.sliding_rope is None and all(b.attn.rope is same.rope for b in same.blocks)
    idx = torch.randint(0, 24, (2, 9), generator=torch.Generator().manual_seed(6))
    model, same = model.double().eval(), same.double().eval()
    assert (model(idx) - same(idx)).abs().max() > 1e-3
    caches = model.make_caches(2, 16)
    steps = [model(idx[:, :4], caches=caches)] + [model(idx[:, t : t + 1], caches=caches) for t in range(4, 9)]
    assert (torch.cat(steps, dim=1) - model(idx)).abs().max() < 1e-12


@pytest.mark.parametrize(
    "kw,message",
    [
        (
            dict(positions={"positional": "rope", "sliding_rope_base": 1e4}),
            "sliding_rope_base=10000.0 is about the 'sliding' layers' RoPE, but no layer is 'sliding'",
        ),
        (
            dict(positions={"sliding_rope_base": 1e4, "positional": "none"}, pattern={"sliding_window": 3}),
            "needs positional='rope'",
        ),
        (
            dict(
                attention="mla",
                d_latent=8,
                n_kv_heads=None,
                positions={"positional": "rope", "sliding_rope_base": 1e4},
                pattern={"sliding_window": 3},
            ),
            "need attention='mha'",
        ),
        (
            dict(positions={"positional": "rope", "sliding_rope_base": 0.5}, pattern={"sliding_window": 3}),
            "sliding_rope_base=0.5",
        ),
    ],
)
def test_sliding_rope_base_bad_combinations(kw, message):
    with pytest.raises(ValueError, match=message):
        DecoderConfig.llama_like(**_LLAMA_SMALL, **kw)


@pytest.mark.parametrize("name", ["gpt2_alibi", "llama_alibi"])
def test_alibi_weights_equal_the_manual_computation(name):
    """Every layer's weights are softmax(q·k/√D - m_h·(i - j)) over the keys j <= i; no parameters added."""
    config = CONFIGS[name]
    model, plain = decoder(config).double().eval(), _without_positions(config)
    assert model.pos_emb is None and model.rope is None and isinstance(model.alibi, ALiBi)
    assert model.num_parameters() == plain.num_parameters() == parameter_count(config)
    T, H, D = 7, config.n_heads, config.d_model // config.n_heads
    idx = torch.randint(0, 24, (2, T), generator=torch.Generator().manual_seed(5))
    logits, weights = model(idx, return_weights=True)
    x = plain.tok_emb(idx)  # (B, T, d)
    slopes = torch.tensor(ALiBi.slopes_for(H), dtype=torch.float64)  # (H,)
    distance = (torch.arange(T)[:, None] - torch.arange(T)[None, :]).double()  # (T, T): i - j
    for block, w in zip(plain.blocks, weights, strict=True):
        attn = block.attn
        h = block.attn_norm(x)
        q = attn.q_proj(h).view(2, T, H, D).transpose(1, 2)  # (B, T, H·D) -> (B, H, T, D)
        kv_rep = H // attn.n_kv_heads  # GQA: each key/value head serves kv_rep query heads
        k = attn.k_proj(h).view(2, T, attn.n_kv_heads, D).transpose(1, 2).repeat_interleave(kv_rep, dim=1)
        scores = q @ k.transpose(-2, -1) / D**0.5 - slopes[:, None, None] * distance  # (B, H, T, T)
        expected = scores.masked_fill(~causal_mask(T), float("-inf")).softmax(-1)
        assert (w - expected).abs().max() < 1e-12
        x = block(x, mask=-(slopes[:, None, None] * distance.abs())[None])  # (1, H, T, T): the bias by hand
    assert (logits - plain.lm_head(plain.final_norm(x))).abs().max() < 1e-12
    # The bias changes what the model computes: without it the weights differ.
    assert (plain(idx, return_weights=True)[1][0] - weights[0]).abs().max() > 1e-3


def test_dropout_only_in_training():
    config = dataclasses.replace(PRESETS["gpt2_like"], dropout=0.5)
    model = DecoderLM(config)
    idx = torch.randint(0, 24, (2, 6))
    model.train()
    assert not torch.allclose(model(idx), model(idx))
    model.eval()
    assert torch.equal(model(idx), model(idx))


def test_decoder_bad_input():
    model = decoder(PRESETS["gpt2_like"]).eval()
    with pytest.raises(ValueError, match=r"\[0, vocab_size=24\), got min=0, max=30"):
        model(torch.tensor([[0, 30]]))
    with pytest.raises(ValueError, match="min=-1"):
        model(torch.tensor([[-1, 3]]))
    with pytest.raises(TypeError, match="idx must be an integer tensor, got dtype=torch.float32"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match=r"shape \(B, T\)"):
        model(torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="exceed max_len=16"):
        model(torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match="n_layers=2 caches"):
        model(torch.zeros(1, 3, dtype=torch.long), caches=model.make_caches(1)[:1])
    with pytest.raises(TypeError, match="DecoderConfig"):
        DecoderLM(dict(vocab_size=3))


def test_weight_tying_shares_storage():
    tied = DecoderLM(PRESETS["gpt2_like"])
    assert tied.lm_head.weight is tied.tok_emb.weight
    assert tied.lm_head.weight.data_ptr() == tied.tok_emb.weight.data_ptr()
    with torch.no_grad():
        tied.tok_emb.weight[0, 0] = 123.0
    assert tied.lm_head.weight[0, 0].item() == 123.0
    untied = DecoderLM(PRESETS["llama_like"])
    assert untied.lm_head.weight.data_ptr() != untied.tok_emb.weight.data_ptr()
    c = PRESETS["gpt2_like"]
    assert parameter_count(dataclasses.replace(c, tie_weights=False)) - parameter_count(c) == c.vocab_size * c.d_model


def test_norm_placement_in_the_model():
    pre, post = DecoderLM(PRESETS["gpt2_like"]), DecoderLM(PRESETS["gpt2_post"])
    assert isinstance(pre.embed_norm, torch.nn.Identity) and not isinstance(pre.final_norm, torch.nn.Identity)
    assert isinstance(post.final_norm, torch.nn.Identity) and not isinstance(post.embed_norm, torch.nn.Identity)
    # post-norm: the first block reads normalised embeddings (as BERT does)
    idx = torch.randint(0, 24, (2, 5))
    seen = {}
    post.blocks[0].register_forward_pre_hook(lambda m, args: seen.setdefault("x", args[0]))
    post.eval()(idx)
    # (not exactly 1: eps = 1e-5 is not negligible next to the variance of 0.02-scale embeddings)
    assert torch.allclose(seen["x"].var(-1, unbiased=False), torch.ones(2, 5), atol=0.03)


# --------------------------------------------------------------------------- the shapes of real models, tiny
REAL_SHAPES = {
    # Qwen3: heads wider than d_model / n_heads, QK-norm, ε = 1e-6, a large RoPE base.
    "qwen3_tiny": dict(
        d_model=32,
        n_heads=4,
        n_kv_heads=2,
        head_dim=16,
        qk_norm=True,
        norm_eps=1e-6,
        positions={"positional": "rope", "rope_base": 1e6},
    ),
    # DeepSeek-V3: q-LoRA, values narrower than keys, interleaved RoPE pairs.
    "deepseek_v3_tiny": dict(
        d_model=32,
        n_heads=4,
        n_kv_heads=None,
        attention="mla",
        d_latent=16,
        d_q_latent=12,
        head_dim=8,
        rope_dim=4,
        v_head_dim=6,
        positions={"positional": "rope", "rope_layout": "interleaved", "rope_base": 5e4},
    ),  # fmt: skip
    # Meta's LLaMA layout with ε = 1e-5.
    "llama_meta_layout": dict(
        d_model=32,
        n_heads=4,
        n_kv_heads=2,
        norm_eps=1e-5,
        positions={"positional": "rope", "rope_layout": "interleaved"},
    ),
}


@pytest.mark.parametrize("name", sorted(REAL_SHAPES))
def test_real_shapes_decode_with_caches_as_on_full_sequences(name):
    config = DecoderConfig.llama_like(vocab_size=24, max_len=16, **REAL_SHAPES[name])
    model = decoder(config).double().eval()
    idx = torch.randint(0, 24, (2, 9), generator=torch.Generator().manual_seed(3))
    full = model(idx)
    caches = model.make_caches(2, 9)
    parts = [model(idx[:, :4], caches=caches)] + [model(idx[:, t : t + 1], caches=caches) for t in range(4, 9)]
    assert (torch.cat(parts, dim=1) - full).abs().max() < 1e-12
    changed = idx.clone()
    changed[:, 5:] = (changed[:, 5:] + 1) % 24
    assert torch.equal(model(changed)[:, :5], full[:, :5])  # causal
    assert model.num_parameters() == parameter_count(config)
