"""attn_core.layers.self_attention: the single trainable head of chapter 1."""

import pytest
import torch
import torch.nn.functional as F

from attn_core import SelfAttention


def randn(*shape):
    return torch.randn(*shape, dtype=torch.float64)


@pytest.mark.parametrize("bias", [False, True])
def test_self_attention_matches_sdpa(bias):
    torch.manual_seed(0)
    layer = SelfAttention(6, 8, bias=bias).double()
    x = randn(2, 5, 6)
    want = F.scaled_dot_product_attention(layer.q_proj(x), layer.k_proj(x), layer.v_proj(x))
    out, w = layer(x, return_weights=True)
    assert out.shape == (2, 5, 8) and w.shape == (2, 5, 5)
    assert (out - want).abs().max().item() <= 1e-12
    assert (layer(x) - want).abs().max().item() <= 1e-12


def test_causal_self_attention_matches_sdpa():
    torch.manual_seed(0)
    layer = SelfAttention(6, 8, causal=True).double()
    x = randn(2, 5, 6)
    want = F.scaled_dot_product_attention(layer.q_proj(x), layer.k_proj(x), layer.v_proj(x), is_causal=True)
    assert (layer(x, return_weights=True)[0] - want).abs().max().item() <= 1e-12
    assert (layer(x) - want).abs().max().item() <= 1e-12


def test_future_tokens_do_not_change_the_past():
    torch.manual_seed(1)
    layer = SelfAttention(4, 4, causal=True).double()
    x = randn(1, 6, 4)
    changed = x.clone()
    changed[:, 4:] = randn(1, 2, 4)
    assert torch.equal(layer(x)[:, :4], layer(changed)[:, :4])


def test_gradcheck_float64():
    torch.manual_seed(2)
    layer = SelfAttention(3, 2, bias=True).double()
    x = randn(1, 4, 3).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: layer(t, return_weights=True)[0], (x,))


def test_bad_input_names_the_values():
    with pytest.raises(TypeError, match="d_out"):
        SelfAttention(4, "8")
    with pytest.raises(ValueError, match="d_in"):
        SelfAttention(0, 4)
    with pytest.raises(ValueError, match="x"):
        SelfAttention(6, 4)(torch.randn(2, 3, 5))
