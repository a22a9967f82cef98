"""The options issue 29 added for converting open-weight families, each tested on its own.

* ``MultiHeadAttention(qkv_bias=True)`` (Qwen2, GLM-4): biases on q, k, v only;
* ``MultiHeadAttention(scale=)`` (Gemma 2 27B, Granite): the score scale;
* :class:`~attn_core.model.blocks.ParallelBlock` (Cohere, GPT-J): attention and MLP from one norm;
* :class:`~attn_core.model.blocks.ScaledDropout` (Granite's residual multiplier) and
  :class:`~attn_core.model.decoder.ScaledLinear` (Cohere's / Granite's logit scale);
* the DecoderConfig fields that build them, ``embedding_multiplier``, ``rope_full_layers``
  (Cohere 2's position-free global layers), ``rotary_dim`` and the lightning indexer
  (``index_n_heads``; DeepSeek-V3.2).

References are written out here in float64 (``torch.nn.functional`` only).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from attn_core import DecoderConfig, DecoderLM, MultiHeadAttention, RotaryEmbedding, TransformerBlock
from attn_core.config import Indexer, LayerPattern, Positions
from attn_core.layers.sparse_attention import SparseAttention, SparseCache
from attn_core.model.blocks import ParallelBlock, ScaledDropout
from attn_core.model.decoder import ScaledLinear
from attn_core.ops.shapes import split_heads

F64 = torch.float64


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


def randomised(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Random float64 parameters everywhere, biases and gains included (so that a dropped one shows)."""
    torch.manual_seed(seed)
    module = module.to(F64)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p) * 0.3 + (1.0 if p.dim() == 1 and p.shape[0] in (32,) else 0.0))
    return module.eval()


def reference_attention(layer: MultiHeadAttention, x: torch.Tensor, scale: float) -> torch.Tensor:
    """Causal GQA written out: projections (with whatever biases the layer has), softmax(q·k·scale), out_proj."""
    B, T, _ = x.shape
    H, H_kv, D = layer.n_heads, layer.n_kv_heads, layer.head_dim

    def heads(t, n):
        return t.view(B, T, n, D).transpose(1, 2)  # (B, T, n·D) -> (B, n, T, D)

    q = heads(F.linear(x, layer.q_proj.weight, layer.q_proj.bias), H)
    k = heads(F.linear(x, layer.k_proj.weight, layer.k_proj.bias), H_kv).repeat_interleave(H // H_kv, dim=1)
    v = heads(F.linear(x, layer.v_proj.weight, layer.v_proj.bias), H_kv).repeat_interleave(H // H_kv, dim=1)
    if layer.rope is not None:
        q, k = layer.rope(q), layer.rope(k)
    scores = (q @ k.transpose(-1, -2)) * scale
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v  # (B, H, T, D)
    return F.linear(out.transpose(1, 2).reshape(B, T, H * D), layer.out_proj.weight, layer.out_proj.bias)


# --------------------------------------------------------------------------- q/k/v biases
def test_qkv_bias_puts_biases_on_q_k_v_only():
    layer = MultiHeadAttention(32, 4, n_kv_heads=2, causal=True, qkv_bias=True)
    assert all(getattr(layer, n).bias is not None for n in ("q_proj", "k_proj", "v_proj"))
    assert layer.out_proj.bias is None and layer.qkv_bias
    assert "qkv_bias=True" in repr(layer)


def test_qkv_bias_output_equals_reference():
    layer = randomised(MultiHeadAttention(32, 4, n_kv_heads=2, causal=True, qkv_bias=True, rope=RotaryEmbedding(8)))
    x = randn(2, 7, 32)
    torch.testing.assert_close(layer(x), reference_attention(layer, x, 8**-0.5), rtol=0, atol=1e-12)
    # The biases act: zeroing the query bias changes the output (a layer that ignored it would not).
    before = layer(x)
    with torch.no_grad():
        layer.q_proj.bias.zero_()
    assert (layer(x) - before).abs().max() > 1e-3


@pytest.mark.parametrize(
    "kw,error,message",
    [
        (dict(qkv_bias=True, bias=True), ValueError, "bias=True already gives every projection one"),
        (dict(qkv_bias=1), TypeError, "qkv_bias"),
        (dict(scale=0.0), ValueError, "scale"),
        (dict(scale=-1.0), ValueError, "scale"),
        (dict(scale="big"), TypeError, "scale"),
    ],
)
def test_attention_options_bad_input(kw, error, message):
    with pytest.raises(error, match=message):
        MultiHeadAttention(32, 4, causal=True, **kw)


# --------------------------------------------------------------------------- score scale
@pytest.mark.parametrize("return_weights", [False, True])
def test_scale_multiplies_the_scores(return_weights):
    """Both attention paths (SDPA, and the explicit one that returns weights) use the layer's scale."""
    layer = randomised(MultiHeadAttention(32, 4, n_kv_heads=2, causal=True, scale=144**-0.5))
    x = randn(2, 6, 32)
    out = layer(x, return_weights=return_weights)
    out = out[0] if return_weights else out
    torch.testing.assert_close(out, reference_attention(layer, x, 144**-0.5), rtol=0, atol=1e-12)
    assert (out - reference_attention(layer, x, 8**-0.5)).abs().max() > 1e-3  # not the default 1/sqrt(D)


def test_scale_with_softcap_and_cache():
    """The scale comes before the soft-cap (Gemma 2) and holds token by token with a cache."""
    layer = randomised(MultiHeadAttention(32, 4, causal=True, scale=0.7, softcap=2.0, rope=RotaryEmbedding(8)))
    x = randn(1, 5, 32)
    full = layer(x)
    cache = layer.make_cache(1, 8)
    steps = torch.cat([layer(x[:, t : t + 1], kv_cache=cache) for t in range(5)], dim=1)
    torch.testing.assert_close(steps, full, rtol=0, atol=1e-12)
    _, w = layer(x, return_weights=True)
    q = layer.rope(split_heads(layer.q_proj(x), 4))
    k = layer.rope(split_heads(layer.k_proj(x), 4))
    s = 2.0 * torch.tanh((q @ k.transpose(-1, -2)) * 0.7 / 2.0)
    expected = torch.softmax(s.masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), float("-inf")), dim=-1)
    torch.testing.assert_close(w, expected, rtol=0, atol=1e-12)


def test_scale_gradcheck():
    layer = randomised(MultiHeadAttention(8, 2, causal=True, scale=0.3, qkv_bias=True))
    x = randn(1, 3, 8).requires_grad_()
    assert torch.autograd.gradcheck(layer, (x,))


# --------------------------------------------------------------------------- parallel block
def test_parallel_block_is_attention_plus_mlp_from_one_norm():
    block = ParallelBlock(32, 4, n_kv_heads=2, mlp="swiglu", norm="rmsnorm", d_ff=48)
    assert isinstance(block, ParallelBlock) and not hasattr(block, "mlp_norm")
    block = randomised(block)
    x = randn(2, 6, 32)
    h = block.attn_norm(x)
    torch.testing.assert_close(block(x), x + (block.attn(h) + block.mlp(h)), rtol=0, atol=0)
    sequential = randomised(TransformerBlock(32, 4, n_kv_heads=2, mlp="swiglu", norm="rmsnorm", d_ff=48))
    sequential.load_state_dict({**block.state_dict(), "mlp_norm.weight": block.attn_norm.weight})
    assert (sequential(x) - block(x)).abs().max() > 1e-3  # the MLP of a sequential block sees the attention's output


def test_parallel_block_caches_and_weights():
    block = randomised(ParallelBlock(32, 4, mlp="swiglu", norm="rmsnorm", rope=RotaryEmbedding(8)))
    x = randn(1, 5, 32)
    full, w = block(x, return_weights=True)
    assert w.shape == (1, 4, 5, 5)
    cache = block.make_cache(1, 8)
    steps = torch.cat([block(x[:, t : t + 1], kv_cache=cache) for t in range(5)], dim=1)
    torch.testing.assert_close(steps, full, rtol=0, atol=1e-12)


def test_parallel_block_gradcheck():
    block = randomised(ParallelBlock(8, 2, mlp="swiglu", norm="rmsnorm", d_ff=8))
    x = randn(1, 3, 8).requires_grad_()
    assert torch.autograd.gradcheck(block, (x,))


@pytest.mark.parametrize(
    "kw,error,message",
    [
        (dict(parallel=True, norm_position="post"), ValueError, "parallel=True reads one pre-norm"),
        (dict(parallel="yes"), TypeError, "parallel"),
        (dict(residual_scale=0.0), ValueError, "residual_scale"),
        (dict(qkv_bias=1), TypeError, "qkv_bias"),
    ],
)
def test_block_options_bad_input(kw, error, message):
    with pytest.raises(error, match=message):
        TransformerBlock(32, 4, **kw)


def test_block_options_refused_with_a_given_attention():
    attention = MultiHeadAttention(32, 4, causal=True)
    for kw in (dict(qkv_bias=True), dict(scale=0.5)):
        with pytest.raises(ValueError, match="configure the built-in attention"):
            TransformerBlock(32, 4, attention=attention, **kw)
    with pytest.raises(ValueError, match="ParallelBlock has parallel=True"):
        ParallelBlock(32, 4, parallel=False)


# --------------------------------------------------------------------------- residual and logit scales
def test_scaled_dropout():
    x = randn(3, 4)
    drop = ScaledDropout(0.5, 0.22)
    torch.testing.assert_close(drop.eval()(x), 0.22 * x, rtol=0, atol=0)
    torch.manual_seed(0)
    ours = drop.train()(x)
    torch.manual_seed(0)
    torch.testing.assert_close(ours, 0.22 * F.dropout(x, 0.5, training=True), rtol=0, atol=0)
    assert "scale=0.22" in repr(drop)
    with pytest.raises(ValueError, match="scale"):
        ScaledDropout(0.0, -1.0)


def test_residual_scale_multiplies_each_branch():
    """Granite: ``x + m·attn(norm(x))``, then ``h + m·mlp(norm(h))``."""
    block = randomised(TransformerBlock(32, 4, mlp="swiglu", norm="rmsnorm", residual_scale=0.5))
    assert isinstance(block.resid_dropout, ScaledDropout)
    x = randn(2, 5, 32)
    h = x + 0.5 * block.attn(block.attn_norm(x))
    torch.testing.assert_close(block(x), h + 0.5 * block.mlp(block.mlp_norm(h)), rtol=0, atol=0)
    # Unscaled blocks print as before.
    assert repr(TransformerBlock(32, 4).resid_dropout) == "Dropout(p=0.0, inplace=False)"


def test_scaled_linear():
    head = randomised(ScaledLinear(32, 10, scale=0.25))
    x = randn(2, 32)
    torch.testing.assert_close(head(x), 0.25 * F.linear(x, head.weight), rtol=0, atol=0)
    assert head.bias is None and "scale=0.25" in repr(head)
    with pytest.raises(ValueError, match="scale"):
        ScaledLinear(4, 4, scale=0.0)


# --------------------------------------------------------------------------- the DecoderConfig fields
SMALL = dict(vocab_size=24, d_model=32, n_heads=4, n_kv_heads=2, n_layers=2, max_len=16)


def model(seed: int = 0, **kw) -> DecoderLM:
    torch.manual_seed(seed)
    return randomised(DecoderLM(DecoderConfig.llama_like(**{**SMALL, **kw})), seed=seed)


IDX = torch.randint(0, 24, (2, 7), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("tied", [False, True])
def test_logit_scale_and_embedding_multiplier(tied):
    plain = model(tie_weights=tied)
    scaled = DecoderLM(dataclasses.replace(plain.config, logit_scale=0.5)).to(F64).eval()
    scaled.load_state_dict(plain.state_dict())
    assert isinstance(scaled.lm_head, ScaledLinear) and (scaled.lm_head.weight is scaled.tok_emb.weight) == tied
    torch.testing.assert_close(scaled(IDX), 0.5 * plain(IDX), rtol=0, atol=0)
    # The scale comes before the final soft-cap.
    capped = DecoderLM(dataclasses.replace(plain.config, logit_scale=0.5, final_softcap=2.0)).to(F64).eval()
    capped.load_state_dict(plain.state_dict())
    torch.testing.assert_close(capped(IDX), 2.0 * torch.tanh(0.5 * plain(IDX) / 2.0), rtol=0, atol=1e-15)
    both = DecoderLM(dataclasses.replace(plain.config, embedding_multiplier=3.0, scale_embeddings=True))
    assert both.embed_scale == 32**0.5 * 3.0


def test_rope_full_layers_false_leaves_the_full_layers_without_positions():
    """Cohere 2: the sliding layers rotate, the full ones are position-free (and then permutation-invariant
    over the keys they see)."""
    m = model(
        pattern=LayerPattern(("sliding", "full"), sliding_window=3),
        positions=Positions("rope", rope_full_layers=False),
    )
    assert m.blocks[0].attn.rope is not None and m.blocks[1].attn.rope is None
    full = m(IDX)
    caches = m.make_caches(2)
    steps = torch.cat([m(IDX[:, t : t + 1], caches=caches) for t in range(IDX.shape[1])], dim=1)
    torch.testing.assert_close(steps, full, rtol=0, atol=1e-12)


def test_rotary_dim_reaches_the_rope():
    m = model(positions=Positions("rope", rotary_dim=4), head_dim=16)
    assert m.rope.rotary_dim == 4 and m.blocks[0].attn.rope is m.rope


def test_indexer_fields_build_sparse_attention_and_its_caches():
    m = model(
        n_kv_heads=None, attention="mla", d_latent=16, d_q_latent=12, rope_dim=4,
        indexer=Indexer(index_n_heads=4, index_head_dim=8, index_topk=3),
    )  # fmt: skip
    attn = m.blocks[0].attn
    assert isinstance(attn, SparseAttention) and attn.topk == 3
    assert (attn.indexer.n_heads, attn.indexer.head_dim, attn.indexer.d_query, attn.indexer.rope_dim) == (4, 8, 12, 4)
    caches = m.make_caches(2)
    assert all(isinstance(c, SparseCache) for c in caches)
    full = m(IDX)
    steps = torch.cat([m(IDX[:, t : t + 1], caches=caches) for t in range(IDX.shape[1])], dim=1)
    torch.testing.assert_close(steps, full, rtol=0, atol=1e-12)
    dense = (
        DecoderLM(dataclasses.replace(m.config, indexer=dataclasses.replace(m.config.indexer, index_topk=None)))
        .to(F64)
        .eval()
    )
    dense.load_state_dict(m.state_dict())
    assert (dense(IDX) - full).abs().max() > 1e-3  # 3 of up to 7 tokens is not all of them


@pytest.mark.parametrize(
    "kw,message",
    [
        (dict(qkv_bias=True, bias=True), "bias=True already gives every projection one"),
        (dict(qkv_bias=True, attention="mla", d_latent=8, n_kv_heads=None), "need attention='mha'"),
        (dict(attention_scale=0.0), "attention_scale"),
        (dict(logit_scale=-1.0), "logit_scale"),
        (dict(embedding_multiplier=0.0), "embedding_multiplier"),
        (dict(residual_multiplier=0.0), "residual_multiplier"),
        (dict(parallel_block=True, norm_position="post"), "parallel_block=True reads one pre-norm"),
        (
            dict(positions={"positional": "rope", "rope_full_layers": False}),
            "rope_full_layers=False is about the 'sliding' layers' RoPE",
        ),
        (dict(positions={"positional": "rope", "rotary_dim": 3}), "rotary_dim must be even"),
        (dict(positions={"positional": "rope", "rotary_dim": 16}), "at most head_dim=8"),
        (dict(positions={"rotary_dim": 4, "positional": "none"}), "rotary_dim=4 needs positional='rope'"),
        (dict(indexer={"index_n_heads": 4}), "needs index_head_dim"),
        (dict(indexer={"index_n_heads": 4, "index_head_dim": 8}), "reads MLA's query latent"),
        (
            dict(
                attention="mla",
                d_latent=8,
                n_kv_heads=None,
                rope_dim=4,
                indexer={"index_n_heads": 4, "index_head_dim": 2},
            ),
            "index_head_dim must be at least rope_dim",
        ),
    ],
)
def test_config_options_bad_input(kw, message):
    with pytest.raises(ValueError, match=message):
        DecoderConfig.llama_like(**{**SMALL, **kw})


def test_the_repr_shows_what_is_set():
    """The fields off their defaults print, the parts as their own dataclasses."""
    text = repr(DecoderConfig.llama_like(**SMALL))
    assert "positions=Positions(positional='rope')" in text
    for default in ("pattern=", "moe=", "indexer=", "logit_scale="):
        assert default not in text
    assert "logit_scale=0.5" in repr(DecoderConfig.llama_like(**SMALL, logit_scale=0.5))
