"""attn_core.blocks: MLPs, block wiring, the decoder LM, its config and its parameter formula."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from attn_core import (
    DecoderConfig,
    DecoderLM,
    FeedForward,
    KVCache,
    LatentKVCache,
    SimplifiedBlock,
    SwiGLU,
    TransformerBlock,
    parameter_breakdown,
    parameter_count,
    swiglu_hidden_dim,
)

PRESETS = {
    "gpt2_like": DecoderConfig.gpt2_like(d_model=32, n_heads=4, vocab_size=24, max_len=16),
    "gpt2_post": DecoderConfig.gpt2_like(d_model=32, n_heads=4, vocab_size=24, max_len=16, norm_position="post"),
    "llama_like": DecoderConfig.llama_like(d_model=32, n_heads=4, vocab_size=24, max_len=16),
    "mqa_nopos": DecoderConfig.llama_like(d_model=32, n_heads=4, n_kv_heads=1, vocab_size=24, positional="none"),
    "mla": DecoderConfig.llama_like(d_model=32, n_heads=4, n_kv_heads=None, vocab_size=24, attention="mla",
                                    d_latent=16, d_q_latent=12),
    "mla_learned": DecoderConfig.gpt2_like(d_model=32, n_heads=4, vocab_size=24, attention="mla", d_latent=16,
                                           bias=False),
    "sas": DecoderConfig.gpt2_like(d_model=32, n_heads=4, vocab_size=24, max_len=16, block="sas", norm="rmsnorm"),
    "sas-p": DecoderConfig.gpt2_like(d_model=32, n_heads=4, vocab_size=24, max_len=16, block="sas-p"),
    "sas_rope": DecoderConfig.llama_like(d_model=32, n_heads=4, n_kv_heads=None, vocab_size=24, block="sas-p"),
}


def _model(name: str, seed: int = 0) -> DecoderLM:
    torch.manual_seed(seed)
    model = DecoderLM(PRESETS[name]).eval()
    # Move the simplified blocks away from their identity initialisation (W_Q = 0), so
    # that attention actually depends on the content and causality is really tested.
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, SimplifiedBlock):
                module.attn.q_proj.weight.normal_(0.0, 0.5)
    return model


# --------------------------------------------------------------------------- MLPs
def test_feedforward_matches_formula_and_default_width():
    ff = FeedForward(8)
    assert ff.d_ff == 32
    x = torch.randn(2, 3, 8)
    expected = F.linear(F.gelu(F.linear(x, ff.up_proj.weight, ff.up_proj.bias)), ff.down_proj.weight, ff.down_proj.bias)
    assert torch.allclose(ff(x), expected, atol=1e-6)


def test_swiglu_matches_formula_and_width():
    sw = SwiGLU(8, 24)
    x = torch.randn(2, 3, 8)
    expected = sw.down_proj(F.silu(sw.gate_proj(x)) * sw.up_proj(x))
    assert torch.allclose(sw(x), expected, atol=1e-6)
    assert swiglu_hidden_dim(4096, 256) == 11008  # LLaMA-7B
    assert SwiGLU(48).d_ff == swiglu_hidden_dim(48) == 128  # ⅔·4·48 = 128 exactly
    assert SwiGLU(64).d_ff == 176  # ⅔·4·64 = 170.7 -> rounded up to a multiple of 8
    # Three matrices of width ⅔·4d cost what two of width 4d cost.
    d = 96
    gelu = sum(p.numel() for p in FeedForward(d, bias=False).parameters())
    swiglu = sum(p.numel() for p in SwiGLU(d).parameters())
    assert gelu == swiglu == 8 * d * d


@pytest.mark.parametrize("cls", [FeedForward, SwiGLU])
@pytest.mark.parametrize(
    "kwargs,message",
    [(dict(d_model=0), "d_model=0"), (dict(d_model=8, d_ff=0), "d_ff=0"), (dict(d_model=8, dropout=1.0), "dropout=1.0")],
)
def test_mlp_bad_input(cls, kwargs, message):
    with pytest.raises(ValueError, match=message):
        cls(**kwargs)


# --------------------------------------------------------------------------- the block
def _block(norm_position, norm="layernorm", mlp="gelu", seed=0):
    torch.manual_seed(seed)
    block = TransformerBlock(16, 4, norm=norm, mlp=mlp, norm_position=norm_position)
    with torch.no_grad():  # non-trivial gains and biases, so a swapped wiring shows
        for n in (block.attn_norm, block.mlp_norm):
            n.weight.uniform_(0.5, 1.5)
            if getattr(n, "bias", None) is not None:
                n.bias.normal_(0.0, 0.1)
    return block.eval()


@pytest.mark.parametrize("norm,mlp", [("layernorm", "gelu"), ("rmsnorm", "swiglu")])
def test_pre_norm_wiring(norm, mlp):
    block = _block("pre", norm, mlp)
    x = torch.randn(2, 5, 16) * 3
    h = x + block.attn(block.attn_norm(x))
    expected = h + block.mlp(block.mlp_norm(h))
    assert torch.allclose(block(x), expected, atol=1e-6)


@pytest.mark.parametrize("norm,mlp", [("layernorm", "gelu"), ("rmsnorm", "swiglu")])
def test_post_norm_wiring_and_output_is_normalised(norm, mlp):
    block = _block("post", norm, mlp)
    x = torch.randn(2, 5, 16) * 3
    h = block.attn_norm(x + block.attn(x))
    expected = block.mlp_norm(h + block.mlp(h))
    out = block(x)
    assert torch.allclose(out, expected, atol=1e-6)
    # Post-norm: the block's output *is* a norm's output. Undo the gain/bias and check.
    n = block.mlp_norm
    raw = (out - (n.bias if getattr(n, "bias", None) is not None else 0)) / n.weight
    if norm == "layernorm":
        assert torch.allclose(raw.mean(-1), torch.zeros(2, 5), atol=1e-5)
        assert torch.allclose(raw.var(-1, unbiased=False), torch.ones(2, 5), atol=1e-3)
    else:
        assert torch.allclose(raw.pow(2).mean(-1), torch.ones(2, 5), atol=1e-4)
    # ... while a pre-norm block's output is not normalised: it is the residual stream.
    pre_out = _block("pre", norm, mlp)(x)
    assert not torch.allclose(pre_out.pow(2).mean(-1), torch.ones(2, 5), atol=0.1)


@pytest.mark.parametrize("norm_position", ["pre", "post"])
@pytest.mark.parametrize("norm,mlp", [("layernorm", "gelu"), ("rmsnorm", "swiglu")])
def test_block_gradcheck(norm_position, norm, mlp):
    torch.manual_seed(0)
    block = TransformerBlock(4, 2, n_kv_heads=1, d_ff=6, norm=norm, mlp=mlp, norm_position=norm_position).double()
    x = torch.randn(1, 3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: block(t), (x,))


def test_block_return_weights_and_bad_input():
    block = _block("pre")
    out, w = block(torch.randn(2, 5, 16), return_weights=True)
    assert out.shape == (2, 5, 16) and w.shape == (2, 4, 5, 5)
    assert torch.allclose(w.sum(-1), torch.ones(2, 4, 5), atol=1e-6)
    assert (w.triu(1) == 0).all()  # causal by default
    with pytest.raises(ValueError, match="norm_position='middle'"):
        TransformerBlock(16, 4, norm_position="middle")
    with pytest.raises(ValueError, match="norm='batchnorm'"):
        TransformerBlock(16, 4, norm="batchnorm")
    with pytest.raises(ValueError, match="mlp='relu'"):
        TransformerBlock(16, 4, mlp="relu")
    with pytest.raises(ValueError, match=r"d_model=16\), got \(2, 5, 8\)"):
        block(torch.randn(2, 5, 8))
    with pytest.raises(TypeError, match="attention must be an nn.Module"):
        TransformerBlock(16, 4, attention="mla")


# --------------------------------------------------------------------------- parameter count
@pytest.mark.parametrize("name", sorted(PRESETS))
def test_parameter_count_equals_formula(name):
    model = DecoderLM(PRESETS[name])
    assert model.num_parameters() == parameter_count(PRESETS[name])
    assert sum(parameter_breakdown(PRESETS[name]).values()) == parameter_count(PRESETS[name])


@pytest.mark.parametrize(
    "overrides",
    [dict(tie_weights=False), dict(bias=False), dict(positional="rope"), dict(mlp="swiglu", d_ff=40),
     dict(n_kv_heads=2, norm="rmsnorm"), dict(n_layers=3, block="sas", bias=True), dict(n_layers=1, block="sas-p")],
)
def test_parameter_count_equals_formula_variants(overrides):
    config = DecoderConfig.gpt2_like(d_model=32, n_heads=4, vocab_size=24, **overrides)
    assert DecoderLM(config).num_parameters() == parameter_count(config)


def test_published_parameter_counts():
    gpt2 = DecoderConfig.gpt2_like(vocab_size=50257, n_layers=12, d_model=768, n_heads=12, max_len=1024)
    assert parameter_count(gpt2) == 124_439_808  # GPT-2 small
    with torch.device("meta"):  # the module, without allocating 124M floats
        assert DecoderLM(gpt2).num_parameters() == 124_439_808
    llama = DecoderConfig.llama_like(vocab_size=32000, n_layers=32, d_model=4096, n_heads=32, n_kv_heads=32,
                                     d_ff=11008, max_len=2048)
    assert parameter_count(llama) == 6_738_415_616  # LLaMA-7B


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


# --------------------------------------------------------------------------- the language model
@pytest.mark.parametrize("name", sorted(PRESETS))
def test_decoder_is_causal(name):
    model = _model(name)
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


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_incremental_decoding_equals_full_sequence(name):
    model = _model(name)
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
    model = _model("llama_like")
    idx = torch.randint(0, 24, (3, 7))
    logits, weights = model(idx, return_weights=True)
    assert logits.shape == (3, 7, 24)
    assert len(weights) == 2 and all(w.shape == (3, 4, 7, 7) for w in weights)


def test_learned_positions_offset_by_cache():
    model = _model("gpt2_like")
    idx = torch.randint(0, 24, (1, 6))
    caches = model.make_caches(1)
    model(idx[:, :5], caches=caches)
    last = model(idx[:, 5:], caches=caches)
    alone = model(idx[:, 5:])  # the same token at position 0 instead of 5
    assert torch.allclose(last, model(idx)[:, 5:], atol=1e-5)
    assert not torch.allclose(last, alone, atol=1e-4)


def test_dropout_only_in_training():
    config = dataclasses.replace(PRESETS["gpt2_like"], dropout=0.5)
    model = DecoderLM(config)
    idx = torch.randint(0, 24, (2, 6))
    model.train()
    assert not torch.allclose(model(idx), model(idx))
    model.eval()
    assert torch.equal(model(idx), model(idx))


def test_decoder_bad_input():
    model = _model("gpt2_like")
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


# --------------------------------------------------------------------------- the config
def test_config_is_frozen_and_presets():
    c = DecoderConfig.gpt2_like()
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.d_model = 8  # type: ignore[misc]
    assert (c.attention, c.positional, c.mlp, c.norm, c.norm_position, c.tie_weights) == (
        "mha", "learned", "gelu", "layernorm", "pre", True)
    l = DecoderConfig.llama_like(n_layers=3)
    assert (l.positional, l.mlp, l.norm, l.tie_weights, l.n_layers) == ("rope", "swiglu", "rmsnorm", False, 3)
    assert l.resolved_n_kv_heads < l.n_heads  # GQA
    assert DecoderConfig.gpt2_like(d_model=48, n_heads=4).resolved_d_ff == 192
    assert dataclasses.replace(c, d_model=32).resolved_d_ff == 128  # recomputed, not stale


@pytest.mark.parametrize(
    "overrides,message",
    [
        (dict(d_model=30, n_heads=4), "d_model=30 is not divisible by n_heads=4"),
        (dict(n_kv_heads=3), "n_heads=4 is not divisible by n_kv_heads=3"),
        (dict(positional="alibi"), "positional='alibi'"),
        (dict(mlp="relu"), "mlp='relu'"),
        (dict(norm="batchnorm"), "norm='batchnorm'"),
        (dict(norm_position="sandwich"), "norm_position='sandwich'"),
        (dict(attention="linear"), "attention='linear'"),
        (dict(block="resnet"), "block='resnet'"),
        (dict(vocab_size=0), "vocab_size=0"),
        (dict(dropout=1.5), "dropout=1.5"),
        (dict(attention="mla"), "needs d_latent"),
        (dict(d_latent=8), "d_latent=8 is an MLA size"),
        (dict(head_dim=8), "head_dim=8 must equal d_model // n_heads = 16"),
        (dict(block="sas", n_kv_heads=2), "n_kv_heads=2"),
        (dict(block="sas-p", norm_position="post"), "norm_position='post'"),
        (dict(attention="mla", d_latent=8, rope_dim=4), "rope_dim=4 needs positional='rope'"),
        (dict(rope_base=1.0), "rope_base=1.0"),
    ],
)
def test_config_errors_name_the_values(overrides, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        DecoderConfig.gpt2_like(**overrides)


def test_config_type_errors():
    with pytest.raises(TypeError, match="n_layers must be an int"):
        DecoderConfig.gpt2_like(n_layers=2.0)
    with pytest.raises(TypeError, match="tie_weights must be a bool"):
        DecoderConfig.gpt2_like(tie_weights=1)


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
