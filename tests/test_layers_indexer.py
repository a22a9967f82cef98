"""attn_core.layers.indexer: the lightning indexer, its key cache, top-k selection, the distillation loss."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attn_core.layers.indexer import IndexerKeyCache, LightningIndexer, indexer_loss, topk_selection
from conftest import randn

F64 = torch.float64


def make_indexer(d_query=None, rope_dim=4, seed=0):
    torch.manual_seed(seed)
    return LightningIndexer(16, 3, 8, d_query=d_query, rope_dim=rope_dim).to(F64)


def reference_scores(indexer, x, q_input=None):
    """The index scores by the formula, one query, key and head at a time."""
    q_input = x if q_input is None else q_input
    B, T, _ = x.shape
    q = indexer.q_proj(q_input).view(B, T, indexer.n_heads, indexer.head_dim)
    k = indexer.k_norm(indexer.k_proj(x))
    if indexer.rope is not None:
        r = indexer.rope_dim
        q = torch.cat((indexer.rope(q[..., :r].transpose(1, 2)).transpose(1, 2), q[..., r:]), -1)
        k = torch.cat((indexer.rope(k[..., :r]), k[..., r:]), -1)
    w = indexer.weights_proj(x) / indexer.n_heads**0.5
    out = torch.full((B, T, T), float("-inf"), dtype=x.dtype)
    for b in range(B):
        for t in range(T):
            for s in range(t + 1):
                out[b, t, s] = sum(
                    w[b, t, j] * torch.relu(q[b, t, j] @ k[b, s] / indexer.head_dim**0.5)
                    for j in range(indexer.n_heads)
                )
    return out


@pytest.mark.parametrize("rope_dim", [0, 4, 8])
def test_indexer_matches_the_formula(rope_dim):
    indexer = make_indexer(rope_dim=rope_dim)
    x = randn(2, 6, 16)
    got = indexer(x)
    want = reference_scores(indexer, x)
    assert torch.equal(got.isinf(), want.isinf())
    assert (got - want)[~got.isinf()].abs().max() < 1e-12


def test_indexer_query_input_and_cache():
    indexer = make_indexer(d_query=5)
    x, q_in = randn(2, 7, 16), randn(2, 7, 5, seed=2)
    full = indexer(x, q_in)
    cache = IndexerKeyCache(2, 8, 7, dtype=F64)
    rows = [indexer(x[:, :3], q_in[:, :3], key_cache=cache)]
    for t in range(3, 7):
        rows.append(F.pad(indexer(x[:, t : t + 1], q_in[:, t : t + 1], key_cache=cache), (0, 6 - t), value=-torch.inf))
    rows[0] = F.pad(rows[0], (0, 4), value=-torch.inf)
    got = torch.cat(rows, 1)
    assert torch.equal(got.isinf(), full.isinf())
    assert (got - full)[~full.isinf()].abs().max() < 1e-12
    assert cache.size == 7


def test_indexer_causal_and_padding_mask():
    indexer = make_indexer()
    x = randn(1, 5, 16)
    s = indexer(x)
    future = torch.ones(5, 5, dtype=torch.bool).triu(1)
    assert torch.equal(torch.isinf(s[0]), future)
    pad = torch.tensor([False, True, True, True, True])
    assert torch.isinf(indexer(x, mask=pad)[0, :, 0]).all()
    # Perturbing a future token leaves earlier rows unchanged.
    x2 = x.clone()
    x2[:, 4] += 1.0
    assert torch.equal(indexer(x2)[:, :4], s[:, :4])


def test_indexer_bad_input():
    with pytest.raises(ValueError, match="rope_dim"):
        LightningIndexer(16, 2, 8, rope_dim=3)
    with pytest.raises(ValueError, match="rope_dim"):
        LightningIndexer(16, 2, 8, rope_dim=10)
    with pytest.raises(ValueError, match="n_heads"):
        LightningIndexer(16, 0, 8)
    indexer = make_indexer(d_query=5)
    with pytest.raises(ValueError, match="d_query"):
        indexer(randn(1, 3, 16))  # the queries read a 5-wide input, not x
    with pytest.raises(ValueError, match="d_model"):
        indexer(randn(1, 3, 12))


def test_topk_selection_matches_brute_force_and_keeps_all_when_fewer():
    scores = randn(2, 8, 8).masked_fill(~torch.ones(8, 8, dtype=torch.bool).tril(), float("-inf"))
    for k in (1, 3, 8, 20):
        sel = topk_selection(scores, k)
        assert torch.equal(sel.sum(-1), torch.clamp(torch.arange(1, 9), max=k).expand(2, 8))
        for b in range(2):
            for t in range(8):
                visible = scores[b, t, : t + 1]
                kth = visible.sort(descending=True).values[min(k, t + 1) - 1]
                assert torch.equal(sel[b, t, : t + 1], visible >= kth)


def test_topk_selection_breaks_ties_towards_the_newest_token():
    scores = torch.tensor([[0.0, 0.0, 1.0, 0.0, 0.0, -torch.inf]])
    assert topk_selection(scores, 2).tolist() == [[False, False, True, False, True, False]]
    assert topk_selection(scores[:, :5], 2).tolist() == [[False, False, True, False, True]]


def test_topk_selection_bad_input():
    with pytest.raises(ValueError, match="k"):
        topk_selection(randn(3, 3), 0)
    with pytest.raises(TypeError):
        topk_selection(torch.ones(3, 3, dtype=torch.long), 1)


def test_indexer_loss_is_the_kl_divergence():
    scores = randn(2, 5, 5).masked_fill(~torch.ones(5, 5, dtype=torch.bool).tril(), float("-inf"))
    w = torch.softmax(randn(2, 3, 5, 5, seed=3).masked_fill(~torch.ones(5, 5, dtype=torch.bool).tril(), -torch.inf), -1)
    p = w.sum(1) / w.sum(1).sum(-1, keepdim=True)
    want = 0.0
    for b in range(2):
        for t in range(5):
            pp, qq = p[b, t, : t + 1], torch.log_softmax(scores[b, t, : t + 1], -1)
            want += (pp * (pp.log() - qq)).sum() / 10
    assert (indexer_loss(scores, w) - want).abs() < 1e-12
    # Zero when the indexer's softmax is the target.
    assert indexer_loss(p.log(), w).abs() < 1e-12


def test_indexer_loss_gradcheck_and_selection():
    tri = torch.ones(4, 4, dtype=torch.bool).tril()
    w = torch.softmax(randn(1, 2, 4, 4, seed=3).masked_fill(~tri, -torch.inf), -1)
    scores = randn(1, 4, 4).masked_fill(~tri, float("-inf")).requires_grad_()
    sel = tri.clone()
    sel[3, 0] = False
    assert torch.autograd.gradcheck(lambda s: indexer_loss(s, w, sel[None]), (scores,))
    loss = indexer_loss(scores, w, sel[None])
    (g,) = torch.autograd.grad(loss, scores)
    assert g[0, 3, 0] == 0 and not g.isnan().any()


def test_indexer_loss_bad_shapes():
    with pytest.raises(ValueError, match="agree"):
        indexer_loss(randn(1, 4, 4), randn(1, 2, 4, 5))
    with pytest.raises(ValueError, match="selected"):
        indexer_loss(randn(1, 4, 4), randn(1, 2, 4, 4), torch.ones(4, 4, dtype=torch.bool))
