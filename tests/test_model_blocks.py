"""attn_core.model.blocks.

The transformer block's pre-/post-/sandwich-norm wiring, gradients, attention protocol, errors.
"""

from __future__ import annotations

import copy

import pytest
import torch

from attn_core import (
    KVCache,
    LatentKVCache,
    MultiHeadLatentAttention,
    RotaryEmbedding,
    TransformerBlock,
)
from attn_core.model.blocks import ParallelBlock, SandwichBlock, make_block


# --------------------------------------------------------------------------- the block
def _block(norm_position, norm="layernorm", mlp="gelu", seed=0):
    torch.manual_seed(seed)
    block = make_block(16, 4, norm=norm, mlp=mlp, norm_position=norm_position)
    with torch.no_grad():  # non-trivial gains and biases, so a swapped wiring shows
        norms = ("attn_norm", "attn_post_norm", "mlp_norm", "mlp_post_norm")
        for n in (getattr(block, name) for name in norms if hasattr(block, name)):
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


@pytest.mark.parametrize("norm,mlp", [("layernorm", "gelu"), ("rmsnorm", "swiglu"), ("rmsnorm", "geglu_tanh")])
def test_sandwich_norm_wiring(norm, mlp):
    """Gemma 2/3: a norm before and after each sub-layer, inside the residual branch."""
    block = _block("sandwich", norm, mlp)
    x = torch.randn(2, 5, 16) * 3
    h = x + block.attn_post_norm(block.attn(block.attn_norm(x)))
    expected = h + block.mlp_post_norm(block.mlp(block.mlp_norm(h)))
    assert torch.allclose(block(x), expected, atol=1e-6)
    # The post norms matter (a pre-norm block with the same weights computes something else) ...
    pre = _block("pre", norm, mlp)
    with torch.no_grad():
        for name in ("attn_norm", "mlp_norm"):
            getattr(pre, name).load_state_dict(getattr(block, name).state_dict())
    pre.attn.load_state_dict(block.attn.state_dict())
    pre.mlp.load_state_dict(block.mlp.state_dict())
    assert not torch.allclose(pre(x), block(x), atol=1e-3)
    # make_block(norm_position="sandwich") builds the subclass; it refuses another position.
    assert type(block) is SandwichBlock and isinstance(block, TransformerBlock) and type(pre) is TransformerBlock
    assert type(copy.deepcopy(block)) is SandwichBlock and block.norm_position == "sandwich"
    with pytest.raises(ValueError, match="SandwichBlock has .* got norm_position='pre'"):
        SandwichBlock(16, 4, norm_position="pre")
    # ... and only sandwich blocks have the post norms: the other blocks' modules are unchanged.
    assert not hasattr(pre, "attn_post_norm") and not hasattr(_block("post"), "mlp_post_norm")
    assert sum(p.numel() for p in block.parameters()) - sum(p.numel() for p in pre.parameters()) == sum(
        p.numel() for p in (*block.attn_post_norm.parameters(), *block.mlp_post_norm.parameters())
    )


@pytest.mark.parametrize("norm_position", ["pre", "post", "sandwich"])
@pytest.mark.parametrize("norm,mlp", [("layernorm", "gelu"), ("rmsnorm", "swiglu")])
def test_block_gradcheck(norm_position, norm, mlp):
    torch.manual_seed(0)
    block = make_block(4, 2, n_kv_heads=1, d_ff=6, norm=norm, mlp=mlp, norm_position=norm_position).double()
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


def test_prebuilt_attention_refuses_the_builtin_attention_arguments():
    mla = MultiHeadLatentAttention(16, 4, d_latent=8)
    block = TransformerBlock(16, 4, attention=mla)
    assert block.attn is mla
    for kwargs in (dict(n_kv_heads=2), dict(rope=RotaryEmbedding(4)), dict(causal=False)):
        name = next(iter(kwargs))
        with pytest.raises(ValueError, match=f"would be ignored.*got {name}="):
            TransformerBlock(16, 4, attention=mla, **kwargs)
    with pytest.raises(ValueError, match="n_heads=2 does not match attention.n_heads=4"):
        TransformerBlock(16, 2, attention=mla)
    with pytest.raises(TypeError, match="attention must be an nn.Module, got str"):
        TransformerBlock(16, 4, attention="mla")


def test_block_cache_is_built_by_its_attention():
    block = TransformerBlock(16, 4, n_kv_heads=2).double()
    cache = block.make_cache(2, 8)
    assert isinstance(cache, KVCache) and cache.numel_per_token() == 2 * 2 * 4
    assert cache.nbytes() == 2 * 2 * 2 * 8 * 4 * 8  # k and v, float64 like the weights
    latent = TransformerBlock(16, 4, attention=MultiHeadLatentAttention(16, 4, d_latent=8)).make_cache(1, 4)
    assert isinstance(latent, LatentKVCache)


def test_make_block_builds_the_class_the_position_names():
    for position in ("pre", "post"):
        assert type(make_block(16, 4, norm_position=position)) is TransformerBlock
    for position in ("sandwich", "post_sublayer"):
        assert type(make_block(16, 4, norm_position=position)) is SandwichBlock
    assert type(make_block(16, 4, parallel=True)) is ParallelBlock
    with pytest.raises(ValueError, match="parallel=True reads one pre-norm"):
        make_block(16, 4, norm_position="sandwich", parallel=True)
    # TransformerBlock's own forward is the pre/post one: it refuses what a subclass computes.
    for kw in (dict(norm_position="sandwich"), dict(norm_position="post_sublayer"), dict(parallel=True)):
        with pytest.raises(ValueError, match="build a SandwichBlock or ParallelBlock, or call make_block"):
            TransformerBlock(16, 4, **kw)
