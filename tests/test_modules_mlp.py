"""attn_core.modules.mlp.

FeedForward, SwiGLU and its GeGLU form against their formulas, hidden-width defaults, bad input.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attn_core import FeedForward, SwiGLU
from attn_core.modules.mlp import swiglu_hidden_dim


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
    [
        (dict(d_model=0), "d_model=0"),
        (dict(d_model=8, d_ff=0), "d_ff=0"),
        (dict(d_model=8, dropout=1.0), "dropout=1.0"),
    ],
)
def test_mlp_bad_input(cls, kwargs, message):
    with pytest.raises(ValueError, match=message):
        cls(**kwargs)


# --------------------------------------------------------------------------- GPT-2's tanh GELU
def test_feedforward_tanh_gelu_matches_torch():
    torch.manual_seed(0)
    ff = FeedForward(8, approximate="tanh")
    x = torch.randn(2, 3, 8, dtype=torch.float64)
    ff = ff.double()
    up = F.linear(x, ff.up_proj.weight, ff.up_proj.bias)
    expected = F.linear(F.gelu(up, approximate="tanh"), ff.down_proj.weight, ff.down_proj.bias)
    assert torch.allclose(ff(x), expected, atol=1e-12)
    # GPT-2's formula, written out: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
    z = torch.linspace(-6, 6, 101, dtype=torch.float64)
    formula = 0.5 * z * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (z + 0.044715 * z**3)))
    assert torch.allclose(F.gelu(z, approximate="tanh"), formula, atol=1e-12)
    # ... and it is not the exact GELU (the two differ in the third decimal near |x| = 2).
    assert not torch.allclose(FeedForward(8)(x.float()), FeedForward(8, approximate="tanh")(x.float()))
    assert "approximate='tanh'" in repr(ff) and "approximate" not in repr(FeedForward(8))


def test_default_feedforward_is_exact_gelu():
    torch.manual_seed(0)
    ff = FeedForward(8)
    assert ff.approximate == "none"
    x = torch.randn(4, 8, dtype=torch.float64)
    ff = ff.double()
    exact = 0.5 * ff.up_proj(x) * (1 + torch.erf(ff.up_proj(x) / 2**0.5))  # x·Φ(x)
    assert torch.allclose(ff(x), ff.down_proj(exact), atol=1e-12)


def test_make_mlp_gelu_tanh_and_config():
    from attn_core import DecoderConfig, DecoderLM, parameter_count
    from attn_core.modules.mlp import MLP_KINDS, make_mlp, mlp_hidden_dim

    assert "gelu_tanh" in MLP_KINDS
    m = make_mlp("gelu_tanh", 8, None, bias=True)
    assert isinstance(m, FeedForward) and m.approximate == "tanh" and m.d_ff == 32 == mlp_hidden_dim("gelu_tanh", 8)
    assert make_mlp("gelu", 8, None, bias=True).approximate == "none"
    config = DecoderConfig.gpt2_like(mlp="gelu_tanh")
    model = DecoderLM(config)
    assert all(block.mlp.approximate == "tanh" for block in model.blocks)
    # Same matrices as the exact-GELU preset: the same count, by module and by formula.
    assert model.num_parameters() == parameter_count(config) == parameter_count(DecoderConfig.gpt2_like())
    # The presets are unchanged: exact GELU.
    assert all(block.mlp.approximate == "none" for block in DecoderLM(DecoderConfig.gpt2_like()).blocks)


# --------------------------------------------------------------------------- Gemma's GeGLU (tanh GELU gate)
def test_geglu_tanh_matches_formula():
    from attn_core.modules.mlp import MLP_KINDS, make_mlp, mlp_hidden_dim

    torch.manual_seed(0)
    m = make_mlp("geglu_tanh", 8, 24, bias=True).double()
    assert "geglu_tanh" in MLP_KINDS and isinstance(m, SwiGLU) and m.activation == "gelu_tanh"
    x = torch.randn(2, 3, 8, dtype=torch.float64) * 2
    gate = F.linear(x, m.gate_proj.weight, m.gate_proj.bias)
    expected = m.down_proj(F.gelu(gate, approximate="tanh") * m.up_proj(x))
    assert torch.allclose(m(x), expected, atol=1e-12)
    # The same three matrices as SwiGLU; only the gate's nonlinearity differs.
    swiglu = make_mlp("swiglu", 8, 24, bias=True).double()
    swiglu.load_state_dict(m.state_dict())
    assert swiglu.activation == "silu" and not torch.allclose(swiglu(x), m(x), atol=1e-3)
    assert (
        mlp_hidden_dim("geglu_tanh", 48)
        == mlp_hidden_dim("swiglu", 48)
        == make_mlp("geglu_tanh", 48, None, bias=False).d_ff
    )
    assert "activation='gelu_tanh'" in repr(m) and "activation" not in repr(swiglu)


def test_geglu_tanh_in_the_config_counts_as_swiglu():
    from attn_core import DecoderConfig, DecoderLM, parameter_count

    config = DecoderConfig.llama_like(mlp="geglu_tanh")
    model = DecoderLM(config)
    assert all(block.mlp.activation == "gelu_tanh" for block in model.blocks)
    assert model.num_parameters() == parameter_count(config) == parameter_count(DecoderConfig.llama_like())


@pytest.mark.parametrize("activation", ["gelu", "relu", None])
def test_swiglu_bad_activation(activation):
    with pytest.raises(ValueError, match=f"activation={activation!r}"):
        SwiGLU(8, activation=activation)


@pytest.mark.parametrize("approximate", ["tanh ", "erf", None])
def test_feedforward_bad_approximate(approximate):
    with pytest.raises(ValueError, match=f"approximate={approximate!r}"):
        FeedForward(8, approximate=approximate)
