"""Unit tests of attn_core.layers.sparse_attention: DeepSeek Sparse Attention around an attention layer, sparsify."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attn_core import (
    ALiBi,
    DecoderConfig,
    DecoderLM,
    LightningIndexer,
    MultiHeadAttention,
    MultiHeadLatentAttention,
    SparseAttention,
    attention,
    generate,
)
from attn_core.layers.sparse_attention import (
    SparseCache,
    indexer_loss,
    indexer_losses,
    sparse_attention_flops,
    sparsify,
)
from conftest import randn

F64 = torch.float64


def make_sparse(kind="mha", topk=3, seed=0):
    torch.manual_seed(seed)
    if kind == "mha":
        attn = MultiHeadAttention(16, 2, causal=True)
        d_query = None
    else:
        attn = MultiHeadLatentAttention(16, 2, d_latent=8, d_q_latent=6, rope_dim=2)
        d_query = 6
    return SparseAttention(attn, LightningIndexer(16, 3, 8, d_query=d_query, rope_dim=4), topk).to(F64).eval()


# ----------------------------------------------------------------------------- indexer


# ----------------------------------------------------------------------------- top-k


# ----------------------------------------------------------------------------- DSA layer
@pytest.mark.parametrize("kind", ["mha", "mla"])
def test_selection_mask_is_all_that_changes(kind):
    """DSA = the same attention layer given the selection as a mask (the one attention core)."""
    sa = make_sparse(kind, topk=3)
    x = randn(2, 9, 16)
    _, selected = sa.index(x)
    assert torch.equal(sa(x), sa.attn(x, mask=selected[:, None]))
    out, w = sa(x, return_weights=True)
    assert ((w > 0) <= selected[:, None]).all()
    assert torch.allclose(w.sum(-1), torch.ones_like(w.sum(-1)))


@pytest.mark.parametrize("kind", ["mha", "mla"])
def test_k_at_least_the_context_is_full_attention(kind):
    sa = make_sparse(kind, topk=9)
    x = randn(2, 9, 16)
    assert (sa(x) - sa.attn(x)).abs().max() < 1e-12
    sa.topk = None
    assert (sa(x) - sa.attn(x)).abs().max() < 1e-12
    sa.topk = 2
    assert (sa(x) - sa.attn(x)).abs().max() > 1e-3


@pytest.mark.parametrize("kind", ["mha", "mla"])
def test_cached_decoding_equals_the_full_pass(kind):
    sa = make_sparse(kind, topk=3)
    x = randn(2, 10, 16)
    full = sa(x)
    cache = sa.make_cache(2, 10)
    assert isinstance(cache, SparseCache)
    outs = [sa(x[:, :4], kv_cache=cache)] + [sa(x[:, t : t + 1], kv_cache=cache) for t in range(4, 10)]
    assert (torch.cat(outs, 1) - full).abs().max() < 1e-12
    assert cache.size == 10
    assert cache.numel_per_token() == cache.attn.numel_per_token() + 8
    cache.reset()
    assert cache.size == 0


def test_causal():
    sa = make_sparse("mha", topk=2)
    x = randn(1, 8, 16)
    x2 = x.clone()
    x2[:, 6:] += 1.0
    assert (sa(x2)[:, :6] - sa(x)[:, :6]).abs().max() == 0


def test_float_bias_and_bool_masks_are_combined_with_the_selection():
    torch.manual_seed(0)
    sa = SparseAttention(MultiHeadAttention(16, 2, causal=True), LightningIndexer(16, 2, 4), 3).to(F64).eval()
    x = randn(1, 7, 16)
    _, sel = sa.index(x)
    bias = ALiBi(2).bias(7, 7)[None].to(F64)  # (1, H, T, T)
    assert torch.equal(sa(x, mask=bias), sa.attn(x, mask=bias.masked_fill(~sel[:, None], float("-inf"))))
    keep = torch.ones(7, 7, dtype=torch.bool)
    keep[:, 0] = False
    keep[0, 0] = True
    assert torch.equal(sa(x, mask=keep), sa.attn(x, mask=keep & sel[:, None]))


def test_gradcheck_float64():
    sa = make_sparse("mha", topk=2)
    x = randn(1, 5, 16).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: sa(t), (x,), eps=1e-6, atol=1e-5)


def test_indexer_input_is_detached_and_its_loss_trains_only_the_indexer():
    sa = make_sparse("mla", topk=3).train()
    sa.distill = True
    x = randn(2, 8, 16).requires_grad_()
    out = sa(x)
    out.sum().backward()
    assert all(p.grad is None for p in sa.indexer.parameters())  # the LM loss never reaches the indexer
    grads_before = [p.grad.clone() for p in sa.attn.parameters()]
    x_grad = x.grad.clone()
    indexer_losses(sa).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in sa.indexer.parameters())
    assert all(torch.equal(a, p.grad) for a, p in zip(grads_before, sa.attn.parameters()))
    assert torch.equal(x.grad, x_grad)
    assert sa.last_indexer_loss is None  # collected and cleared
    with pytest.raises(ValueError, match="distill"):
        indexer_losses(sa)


def test_sparse_stage_loss_uses_the_selection():
    sa = make_sparse("mha", topk=2).train()
    sa.distill = True
    x = randn(1, 6, 16)
    out, w = sa(x, return_weights=True)
    scores, sel = sa.index(x)
    assert torch.allclose(sa.last_indexer_loss, indexer_loss(scores, w, sel))
    sa.topk = None
    sa(x)
    _, w_dense = sa(x, return_weights=True)
    assert torch.allclose(sa.last_indexer_loss, indexer_loss(scores, w_dense))


def test_bad_arguments():
    attn = MultiHeadLatentAttention(16, 2, d_latent=8, d_q_latent=6)
    with pytest.raises(ValueError, match="d_query"):
        SparseAttention(attn, LightningIndexer(16, 2, 4), 2)
    with pytest.raises(ValueError, match="topk"):
        SparseAttention(MultiHeadAttention(16, 2, causal=True), LightningIndexer(16, 2, 4), 0)
    with pytest.raises(TypeError):
        SparseAttention(MultiHeadAttention(16, 2, causal=True), torch.nn.Linear(2, 2), 2)
    sa = make_sparse()
    with pytest.raises(TypeError, match="kv_cache"):
        sa(randn(1, 3, 16), kv_cache=object())


# ----------------------------------------------------------------------------- the loss


# ----------------------------------------------------------------------------- models and cost
@pytest.mark.parametrize("attention_kind", ["mha", "mla"])
def test_sparsify_a_decoder_and_generate_with_caches(attention_kind):
    kw = dict(attention="mla", d_latent=16, d_q_latent=12, n_kv_heads=None) if attention_kind == "mla" else {}
    torch.manual_seed(0)
    model = DecoderLM(DecoderConfig.llama_like(d_model=32, n_heads=4, vocab_size=24, max_len=24, n_layers=2, **kw))
    sparsify(model, topk=3, n_heads=2, head_dim=8, rope_dim=4)
    assert all(isinstance(b.attn, SparseAttention) for b in model.blocks)
    model.eval()
    idx = torch.randint(0, 24, (2, 5), generator=torch.Generator().manual_seed(1))
    a = generate(model, idx, 8, use_cache=True, temperature=0.0)
    b = generate(model, idx, 8, use_cache=False, temperature=0.0)
    assert torch.equal(a, b)
    with pytest.raises(ValueError, match="blocks"):
        sparsify(torch.nn.Linear(2, 2), topk=2, n_heads=1, head_dim=2)


def test_flops():
    kw = dict(n_heads=4, qk_dim=16, v_dim=8)
    assert sparse_attention_flops(100, **kw) == 2 * 4 * 24 * 100
    sparse = sparse_attention_flops(100, topk=10, index_n_heads=2, index_head_dim=4, **kw)
    assert sparse == 2 * 2 * 5 * 100 + 2 * 4 * 24 * 10
    # k beyond the context: the full attention plus the indexer.
    assert (
        sparse_attention_flops(5, topk=10, index_n_heads=2, index_head_dim=4, **kw)
        == sparse_attention_flops(5, **kw) + 2 * 2 * 5 * 5
    )
    with pytest.raises(ValueError, match="context"):
        sparse_attention_flops(0, **kw)
    with pytest.raises(ValueError, match="index_n_heads"):
        sparse_attention_flops(5, topk=2, **kw)


def test_attention_core_is_the_one_called():
    """No copy of the softmax: DSA's output equals the core called with the selection mask."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 1, causal=True).to(F64)
    sa = SparseAttention(mha, LightningIndexer(8, 2, 4), 2).to(F64)
    x = randn(1, 6, 8)
    _, sel = sa.index(x)
    q, k, v = mha.q_proj(x)[:, None], mha.k_proj(x)[:, None], mha.v_proj(x)[:, None]
    want = mha.out_proj(attention(q, k, v, mask=sel[:, None], is_causal=True)[:, 0])
    assert (sa(x) - want).abs().max() < 1e-12


def test_a_sparsified_decoder_trains_with_the_indexer_loss():
    """DecoderLM + sparsify: the LM loss trains the model, the indexer loss only the indexers."""
    torch.manual_seed(0)
    config = DecoderConfig.llama_like(d_model=32, n_heads=4, vocab_size=24, max_len=16, n_layers=2)
    model = sparsify(DecoderLM(config), topk=None, n_heads=2, head_dim=8, rope_dim=4)
    for block in model.blocks:
        block.attn.distill = True
    model.train()
    idx = torch.randint(0, 24, (4, 12), generator=torch.Generator().manual_seed(2))
    logits = model(idx)
    lm = F.cross_entropy(logits[:, :-1].flatten(0, 1), idx[:, 1:].flatten())
    distill = indexer_losses(model)
    indexer_params = {id(p) for b in model.blocks for p in b.attn.indexer.parameters()}
    lm_grads = torch.autograd.grad(lm, list(model.parameters()), allow_unused=True)
    distill_grads = torch.autograd.grad(distill, list(model.parameters()), allow_unused=True)
    for p, g_lm, g_kl in zip(model.parameters(), lm_grads, distill_grads):
        if id(p) in indexer_params:
            assert g_lm is None and g_kl is not None
        else:
            assert g_kl is None
    assert distill.item() > 0
