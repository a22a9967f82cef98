"""attn_core.modules.norms: LayerNorm and RMSNorm equal PyTorch's, half precision, gradients, bad input."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attn_core import LayerNorm, RMSNorm


def _randomise(ours: torch.nn.Module, ref: torch.nn.Module, seed: int = 0) -> None:
    """Give both modules the same random affine parameters (ones/zeros would hide a swap)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in ours.named_parameters():
            value = torch.randn(p.shape, generator=g, dtype=p.dtype)
            p.copy_(value)
            getattr(ref, name).copy_(value)


@settings(max_examples=15, deadline=None)
@given(
    d=st.integers(1, 33),
    lead=st.lists(st.integers(1, 3), min_size=0, max_size=2),
    eps=st.sampled_from([1e-5, 1e-6, 1e-2, 0.3]),
    bias=st.booleans(),
    scale=st.floats(0.01, 100.0),
)
def test_layernorm_equals_torch(d, lead, eps, bias, scale):
    # float64: an offset of 3 with a spread of 0.01 cancels digits in float32, where two
    # correct implementations may then differ in the 4th decimal.
    x = torch.randn(*lead, d, generator=torch.Generator().manual_seed(d), dtype=torch.float64) * scale + 3.0
    ours, ref = LayerNorm(d, eps=eps, bias=bias).double(), torch.nn.LayerNorm(d, eps=eps, bias=bias).double()
    _randomise(ours, ref)
    assert torch.allclose(ours(x), ref(x), atol=1e-10, rtol=1e-10)
    # float32 on well-conditioned input (zero mean)
    x32 = (x - 3.0).float() / scale
    ours32, ref32 = LayerNorm(d, eps=eps, bias=bias), torch.nn.LayerNorm(d, eps=eps, bias=bias)
    _randomise(ours32, ref32)
    assert torch.allclose(ours32(x32), ref32(x32), atol=1e-5, rtol=1e-5)


@settings(max_examples=15, deadline=None)
@given(
    d=st.integers(1, 33),
    lead=st.lists(st.integers(1, 3), min_size=0, max_size=2),
    eps=st.sampled_from([1e-6, 1e-5, 1e-2, 0.3]),
    scale=st.floats(0.01, 100.0),
)
def test_rmsnorm_equals_torch(d, lead, eps, scale):
    x = torch.randn(*lead, d, generator=torch.Generator().manual_seed(d), dtype=torch.float64) * scale
    ours, ref = RMSNorm(d, eps=eps).double(), torch.nn.RMSNorm(d, eps=eps).double()
    _randomise(ours, ref)
    assert torch.allclose(ours(x), ref(x), atol=1e-10, rtol=1e-10)
    ours32, ref32 = RMSNorm(d, eps=eps), torch.nn.RMSNorm(d, eps=eps)
    _randomise(ours32, ref32)
    assert torch.allclose(ours32(x.float()), ref32(x.float()), atol=1e-5, rtol=1e-5)


def test_eps_matters_and_defaults():
    # A tiny-variance input makes eps visible: the eps values must be honoured, not hard-coded.
    x = 1e-3 * torch.arange(16.0, dtype=torch.float64).view(2, 8)
    for eps in (1e-5, 1e-2):
        ln, ln_ref = LayerNorm(8, eps=eps).double(), torch.nn.LayerNorm(8, eps=eps).double()
        rms, rms_ref = RMSNorm(8, eps=eps).double(), torch.nn.RMSNorm(8, eps=eps).double()
        assert torch.allclose(ln(x), ln_ref(x), atol=1e-10)
        assert torch.allclose(rms(x), rms_ref(x), atol=1e-10)
    assert not torch.allclose(LayerNorm(8, eps=1e-5).double()(x), LayerNorm(8, eps=1e-2).double()(x), atol=1e-3)
    assert not torch.allclose(RMSNorm(8, eps=1e-5).double()(x), RMSNorm(8, eps=1e-2).double()(x), atol=1e-3)
    assert LayerNorm(8).eps == 1e-5 and RMSNorm(8).eps == 1e-6
    assert LayerNorm(8, bias=False).bias is None


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16])
def test_half_input_statistics_in_float32(kind, half):
    d = 256
    # Values around 100: a float16 sum of 256 squares (~2.6e6) overflows its 65504 maximum.
    x32 = torch.randn(4, d, generator=torch.Generator().manual_seed(0)) * 30 + 100
    x = x32.to(half)
    if kind == "layernorm":
        ours, ref = LayerNorm(d), torch.nn.LayerNorm(d)
    else:
        ours, ref = RMSNorm(d), torch.nn.RMSNorm(d, eps=1e-6)
    _randomise(ours, ref)
    out = ours(x)
    assert out.dtype == half
    assert torch.isfinite(out).all()
    # Reference: the float32 computation of the same (rounded) input, cast to half.
    expected = ref(x.float()).to(half)
    ulp = 2**-10 if half == torch.float16 else 2**-7
    assert ((out.float() - expected.float()).abs() <= ulp * expected.float().abs().clamp_min(1.0)).all()
    naive = (x * x).sum(-1) if half == torch.float16 else None  # the overflow the float32 statistics avoid
    if naive is not None:
        assert not torch.isfinite(naive).all()


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_half_module_matches_torch_half_module(kind):
    d = 64
    x = (torch.randn(3, 5, d, generator=torch.Generator().manual_seed(1)) * 4).half()
    if kind == "layernorm":
        ours, ref = LayerNorm(d).half(), torch.nn.LayerNorm(d).half()
    else:
        ours, ref = RMSNorm(d).half(), torch.nn.RMSNorm(d, eps=1e-6).half()
    out, expected = ours(x), ref(x)
    assert out.dtype == torch.float16
    assert torch.allclose(out.float(), expected.float(), atol=2e-3, rtol=2e-3)


def test_normalised_statistics():
    x = torch.randn(10, 32, dtype=torch.float64) * 5 + 2
    y = LayerNorm(32)(x.float()).double()
    assert torch.allclose(y.mean(-1), torch.zeros(10, dtype=torch.float64), atol=1e-5)
    assert torch.allclose(y.var(-1, unbiased=False), torch.ones(10, dtype=torch.float64), atol=1e-3)
    r = RMSNorm(32)(x.float()).double()
    assert torch.allclose(r.pow(2).mean(-1).sqrt(), torch.ones(10, dtype=torch.float64), atol=1e-4)


@pytest.mark.parametrize("cls", [LayerNorm, RMSNorm])
def test_gradcheck_float64(cls):
    norm = cls(5).double()
    with torch.no_grad():
        for p in norm.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    names = [n for n, _ in norm.named_parameters()]
    x = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    params = tuple(p.detach().clone().requires_grad_(True) for p in norm.parameters())

    def fn(x, *ps):  # the module's own forward, with the parameters as inputs
        return torch.func.functional_call(norm, dict(zip(names, ps)), (x,))

    assert torch.autograd.gradcheck(fn, (x, *params))


@pytest.mark.parametrize("cls", [LayerNorm, RMSNorm])
def test_bad_input(cls):
    with pytest.raises(ValueError, match="d=0"):
        cls(0)
    with pytest.raises(TypeError, match="d must be an int"):
        cls(4.0)
    with pytest.raises(ValueError, match="eps=-1"):
        cls(4, eps=-1)
    norm = cls(4)
    with pytest.raises(ValueError, match=r"\(\.\.\., d=4\), got \(2, 5\)"):
        norm(torch.randn(2, 5))
    with pytest.raises(TypeError, match="floating-point"):
        norm(torch.ones(2, 4, dtype=torch.long))
    with pytest.raises(TypeError, match="torch.Tensor"):
        norm([1.0, 2.0, 3.0, 4.0])
