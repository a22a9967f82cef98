"""attn_core.simplified: shaped attention, SAS and SAS-P blocks, and the causality bug they must avoid."""

from __future__ import annotations

import pytest
import torch

import attn_core.core as core
from attn_core import KVCache, ShapedAttention, SimplifiedBlock, causal_mask, centring_matrix
from attn_core.simplified import _leaky_shaped_attention


def _randomise_queries(module: torch.nn.Module, std: float = 0.5, seed: int = 0) -> None:
    """Move W_Q (and the gains) off their initial values: at init A = I hides most bugs."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, ShapedAttention):
                m.q_proj.weight.copy_(torch.randn(m.q_proj.weight.shape, generator=g) * std)
                for gain in (m.alpha, m.beta, m.gamma):
                    gain.add_(torch.randn(gain.shape, generator=g) * 0.2)


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
    _randomise_queries(attn)
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


# --------------------------------------------------------------------------- causality: bug and fix
def _module_and_leaky_copy(seed: int = 0):
    """A shaped-attention module with random queries, and the buggy function on the same weights."""
    torch.manual_seed(seed)
    attn = ShapedAttention(12, 3).double().eval()
    _randomise_queries(attn, seed=seed)

    def leaky(x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        split = lambda t: t.view(B, T, 3, 4).transpose(1, 2)  # (B, T, 12) -> (B, 3, T, 4)
        out, _ = _leaky_shaped_attention(split(attn.q_proj(x)), split(attn.k_proj(x)), split(x),
                                         attn.alpha, attn.beta, attn.gamma)
        return out.transpose(1, 2).reshape(B, T, 12)

    return attn, leaky


def _leaks(fn, T: int = 6) -> bool:
    """Perturb the tokens after position t; report whether any output at a position <= t moves."""
    x = torch.randn(2, T, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    out = fn(x)
    for t in range(T - 1):
        x2 = x.clone()
        x2[:, t + 1 :] += 1.0
        if not torch.allclose(out[:, : t + 1], fn(x2)[:, : t + 1], atol=1e-10):
            return True
    return False


def test_leaky_version_fails_causality_and_fixed_version_passes():
    attn, leaky = _module_and_leaky_copy()
    assert _leaks(leaky)
    assert not _leaks(lambda x: attn(x))
    # The same weights: the bug's matrix has weight on future keys, the module's is lower-triangular.
    x = torch.randn(1, 6, 12, dtype=torch.float64)
    _, A = attn(x, return_weights=True)
    assert (A.triu(1) == 0).all()
    split = lambda t: t.view(1, 6, 3, 4).transpose(1, 2)  # (1, 6, 12) -> (1, 3, 6, 4)
    _, A_bug = _leaky_shaped_attention(split(attn.q_proj(x)), split(attn.k_proj(x)), split(x),
                                       attn.alpha, attn.beta, attn.gamma)
    assert (A_bug.triu(1).abs() > 1e-3).any()
    assert not torch.allclose(A_bug, A, atol=1e-3)


def test_leaky_version_looks_right_at_init():
    # With W_Q = 0 and β = γ the two mistakes cancel: A = I, so only a causality test
    # with trained (or random) queries reveals the bug.
    g = torch.Generator().manual_seed(0)
    k, v = torch.randn(2, 3, 6, 4, generator=g, dtype=torch.float64), torch.randn(2, 3, 6, 4, dtype=torch.float64)
    ones = torch.ones(3, dtype=torch.float64)
    out, A = _leaky_shaped_attention(torch.zeros_like(k), k, v, ones, ones, ones)
    assert torch.allclose(A, torch.eye(6, dtype=torch.float64).expand_as(A), atol=1e-12)
    assert torch.allclose(out, v, atol=1e-12)


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("value_proj", [False, True])
def test_module_and_blocks_are_causal(parallel, value_proj):
    torch.manual_seed(0)
    block = SimplifiedBlock(16, 4, parallel=parallel, value_proj=value_proj).eval()
    _randomise_queries(block)
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
    _randomise_queries(block)
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
    _randomise_queries(block)
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
