"""attn_core.layers.simplified: shaped attention, SAS and SAS-P blocks, and the causality bug they must avoid."""

from __future__ import annotations

import pytest
import torch

import attn_core.ops.attention as core
from attn_core import KVCache, ShapedAttention, SimplifiedBlock, causal_mask
from attn_core.layers.simplified import centring_matrix
from conftest import randomise_shaped_queries


# --------------------------------------------------------------------------- the centring matrix
def test_centring_matrix():
    C = centring_matrix(4)
    expected = torch.tensor([[1, 0, 0, 0], [1 / 2, 1 / 2, 0, 0], [1 / 3, 1 / 3, 1 / 3, 0], [1 / 4] * 4])
    assert torch.allclose(C, expected)
    # With a cache, queries are the last T_q positions: the bottom rows of the full matrix.
    assert torch.allclose(centring_matrix(2, 5), centring_matrix(5)[3:])
    assert torch.allclose(centring_matrix(3, causal=False), torch.full((3, 3), 1 / 3))
    # C is what a causal softmax gives for all-zero scores.
    zeros = torch.zeros(5, 5).masked_fill(~causal_mask(5), float("-inf"))
    assert torch.allclose(torch.softmax(zeros, -1), centring_matrix(5))


# --------------------------------------------------------------------------- identity at init
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("value_proj", [False, True])
def test_shaped_attention_is_identity_at_init(causal, value_proj):
    torch.manual_seed(0)
    attn = ShapedAttention(16, 4, causal=causal, value_proj=value_proj)
    assert torch.equal(attn.q_proj.weight, torch.zeros(16, 16))
    assert all(torch.equal(g, torch.ones(4)) for g in (attn.alpha, attn.beta, attn.gamma))
    x = torch.randn(2, 7, 16)
    out, A = attn(x, return_weights=True)
    assert torch.allclose(A, torch.eye(7).expand(2, 4, 7, 7), atol=1e-6)
    assert torch.allclose(out, x, atol=1e-5)


def test_simplified_blocks_at_init():
    torch.manual_seed(0)
    x = torch.randn(2, 6, 16) * 2
    sas = SimplifiedBlock(16, 4)
    n = sas.attn_norm(x)  # attention is the identity at init
    assert torch.allclose(sas(x), n + 0.1 * sas.mlp(sas.mlp_norm(n)), atol=1e-5)
    sasp = SimplifiedBlock(16, 4, parallel=True)
    n = sasp.attn_norm(x)
    assert torch.allclose(sasp(x), n + 0.1 * sasp.mlp(n), atol=1e-5)
    assert sasp.mlp_norm is None
    assert sas.beta_ff.item() == pytest.approx(0.1)


# --------------------------------------------------------------------------- the formula
@pytest.mark.parametrize("causal", [True, False])
def test_output_is_shaped_matrix_times_values(causal):
    torch.manual_seed(0)
    attn = ShapedAttention(12, 3, causal=causal).double()
    randomise_shaped_queries(attn, gains=True)
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    out, A = attn(x, return_weights=True)
    v = x.view(2, 5, 3, 4).transpose(1, 2)  # identity values, split into heads
    expected = (A @ v).transpose(1, 2).reshape(2, 5, 12)
    assert torch.allclose(out, expected, atol=1e-12)
    # A = α I + β softmax − γ C, head by head
    q = attn.q_proj(x).view(2, 5, 3, 4).transpose(1, 2)
    k = attn.k_proj(x).view(2, 5, 3, 4).transpose(1, 2)
    scores = q @ k.transpose(-2, -1) / 2.0
    if causal:
        scores = scores.masked_fill(~causal_mask(5), float("-inf"))
    P = torch.softmax(scores, -1)
    C = centring_matrix(5, causal=causal, dtype=torch.float64)
    a, b, g = (t.view(3, 1, 1) for t in (attn.alpha, attn.beta, attn.gamma))
    assert torch.allclose(A, a * torch.eye(5, dtype=torch.float64) + b * P - g * C, atol=1e-12)
    # Every row sums to α + β − γ (I, softmax and C rows each sum to 1).
    assert torch.allclose(A.sum(-1), (attn.alpha + attn.beta - attn.gamma).view(1, 3, 1).expand(2, 3, 5), atol=1e-12)


def test_softmax_part_calls_the_core(monkeypatch):
    calls = []
    real = core.attention

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(core, "attention", spy)
    attn = ShapedAttention(8, 2)
    attn(torch.randn(1, 3, 8))
    attn(torch.randn(1, 3, 8), return_weights=True)
    assert len(calls) == 2 and all(c["is_causal"] for c in calls)
    assert calls[1]["return_weights"] is True


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("value_proj", [False, True])
def test_module_and_blocks_are_causal(parallel, value_proj):
    torch.manual_seed(0)
    block = SimplifiedBlock(16, 4, parallel=parallel, value_proj=value_proj).eval()
    randomise_shaped_queries(block, gains=True)
    x = torch.randn(2, 8, 16)
    out = block(x)
    for t in (0, 3, 6):
        x2 = x.clone()
        x2[:, t + 1 :] += torch.randn(2, 8 - t - 1, 16)
        out2 = block(x2)
        assert torch.allclose(out[:, : t + 1], out2[:, : t + 1], atol=1e-5)
        assert not torch.allclose(out[:, t + 1 :], out2[:, t + 1 :], atol=1e-5)


# --------------------------------------------------------------------------- caches, gradients, errors
@pytest.mark.parametrize("parallel", [False, True])
def test_incremental_equals_full(parallel):
    torch.manual_seed(0)
    block = SimplifiedBlock(16, 4, parallel=parallel, value_proj=True).eval()
    randomise_shaped_queries(block, gains=True)
    x = torch.randn(2, 7, 16)
    full, full_A = block(x, return_weights=True)
    cache = block.make_cache(2, 10)
    assert isinstance(cache, KVCache)
    parts = [block(x[:, :3], kv_cache=cache)]
    for t in range(3, 7):
        out, A = block(x[:, t : t + 1], kv_cache=cache, return_weights=True)
        parts.append(out)
        assert torch.allclose(A[:, :, 0], full_A[:, :, t, : t + 1], atol=1e-5)
    assert torch.allclose(torch.cat(parts, 1), full, atol=1e-5)


@pytest.mark.parametrize("parallel", [False, True])
def test_gradcheck_float64(parallel):
    torch.manual_seed(0)
    block = SimplifiedBlock(4, 2, parallel=parallel, d_ff=6, value_proj=True).double()
    randomise_shaped_queries(block, gains=True)
    x = torch.randn(1, 3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: block(t), (x,))
    # the gains receive gradients too
    block(x).sum().backward()
    attn = block.attn
    assert all(p.grad is not None for p in (attn.alpha, attn.beta, attn.gamma, block.beta_ff))


def test_bad_input():
    with pytest.raises(ValueError, match="d_model=10 is not divisible by n_heads=3"):
        ShapedAttention(10, 3)
    with pytest.raises(TypeError, match="alpha must be a number"):
        ShapedAttention(8, 2, alpha="1")
    with pytest.raises(ValueError, match=r"d_model=8\), got \(1, 3, 6\)"):
        ShapedAttention(8, 2)(torch.randn(1, 3, 6))
    with pytest.raises(ValueError, match="norm='batchnorm'"):
        SimplifiedBlock(8, 2, norm="batchnorm")
    with pytest.raises(TypeError, match="beta_ff must be a number"):
        SimplifiedBlock(8, 2, beta_ff=None)
