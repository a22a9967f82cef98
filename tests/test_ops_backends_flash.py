"""attn_core.ops.backends.flash: the Triton FlashAttention kernels equal attention() in values and gradients.

On a machine without CUDA the kernels run in Triton's interpreter (TRITON_INTERPRET=1, set
by attn_core on import, before anything imports triton), so the shapes are small: the interpreter
runs each program in Python, tile by tile. The reference is attn_core.attention in float64.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from attn_core import attention, causal_mask
from attn_core.ops.backends import flash as flash_module
from attn_core.ops.backends import flash_kernels
from attn_core.ops.backends.flash import LOG2E, flash_attention, flash_backward, flash_forward

needs_triton = pytest.mark.skipif(flash_kernels.triton is None, reason="triton is not installed: pip install triton")
DEVICE = "cpu" if flash_kernels.INTERPRETED else "cuda"
TOL = dict(rtol=1e-4, atol=2e-5)  # float32 kernel vs float64 reference


def _inputs(B, H, H_kv, T_q, T_k, D, *, sinks=False, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T_q, D, generator=g)
    k = torch.randn(B, H_kv, T_k, D, generator=g)
    v = torch.randn(B, H_kv, T_k, D, generator=g)
    s = torch.randn(H, generator=g) if sinks else None
    d_out = torch.randn(B, H, T_q, D, generator=g)
    to = lambda t: None if t is None else t.to(DEVICE, dtype).requires_grad_()
    return to(q), to(k), to(v), to(s), d_out.to(DEVICE, dtype)


def _grads(fn, q, k, v, s, d_out, **kw):
    """Output and gradients (q, k, v[, sinks]) of fn, with inputs of float64 if asked through the tensors."""
    out = fn(q, k, v, sinks=s, **kw)
    leaves = [q, k, v] + ([s] if s is not None else [])
    return out, torch.autograd.grad(out, leaves, d_out)


def _reference(q, k, v, s, d_out, **kw):
    f64 = lambda t: None if t is None else t.detach().double().requires_grad_()
    return _grads(attention, f64(q), f64(k), f64(v), f64(s), d_out.double(), **kw)


def _assert_matches(got, want, **tol):
    (out, grads), (ref_out, ref_grads) = got, want
    torch.testing.assert_close(out.double(), ref_out, **(tol or TOL))
    for name, g, r in zip(("dq", "dk", "dv", "dsinks"), grads, ref_grads):
        torch.testing.assert_close(g.double(), r, **(tol or TOL), msg=lambda m, name=name: f"{name}: {m}")


# (B, H, H_kv, T_q, T_k, D, options): T is never a multiple of the 32-wide interpreter blocks.
CASES = {
    "full": (1, 2, 2, 40, 40, 16, {}),
    "causal": (1, 2, 2, 40, 40, 16, dict(is_causal=True)),
    "gqa_causal_Tq<Tk": (1, 2, 1, 37, 70, 16, dict(is_causal=True)),
    "full_Tq>Tk": (1, 2, 1, 50, 21, 16, {}),
    "window": (1, 2, 2, 75, 75, 16, dict(is_causal=True, window=9)),
    "window_Tq<Tk": (1, 2, 1, 20, 75, 32, dict(is_causal=True, window=40)),
    "sinks_causal": (1, 2, 2, 45, 45, 16, dict(is_causal=True, sinks=True)),
    "sinks_full": (2, 1, 1, 33, 47, 16, dict(sinks=True)),
    "sinks_window_decode": (1, 2, 1, 1, 70, 16, dict(is_causal=True, window=20, sinks=True)),
    "scale": (1, 1, 1, 17, 17, 64, dict(is_causal=True, scale=0.3)),
}


@needs_triton
@pytest.mark.parametrize("case", list(CASES))
def test_values_and_gradients_equal_attention(case):
    B, H, H_kv, T_q, T_k, D, options = CASES[case]
    options = dict(options)
    q, k, v, s, d_out = _inputs(B, H, H_kv, T_q, T_k, D, sinks=options.pop("sinks", False))
    _assert_matches(_grads(flash_attention, q, k, v, s, d_out, **options), _reference(q, k, v, s, d_out, **options))


@needs_triton
@pytest.mark.parametrize("is_causal", [False, True])
def test_equals_sdpa_with_gqa(is_causal):
    q, k, v, _, _ = _inputs(1, 4, 2, 48, 48, 16, seed=3)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, enable_gqa=True)
    torch.testing.assert_close(flash_attention(q, k, v, is_causal=is_causal), ref, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- the causal backward (issue #4541)
@needs_triton
def test_backward_honours_is_causal_and_catches_the_tutorials_bug():
    """Triton's tutorial backward (triton-lang/triton#4541) ignored ``causal``: it always masked.

    The forward was right for both settings, only the gradients of non-causal attention
    were wrong. Both settings are checked here on the same inputs, and the buggy variant
    (the backward run with the causal mask after a non-causal forward) must fail the same
    comparison, so that this test is one that would have caught it.
    """
    q, k, v, _, d_out = _inputs(1, 1, 1, 40, 40, 16, seed=5)
    for is_causal in (False, True):
        _assert_matches(
            _grads(flash_attention, q, k, v, None, d_out, is_causal=is_causal),
            _reference(q, k, v, None, d_out, is_causal=is_causal),
        )
    out, lse, _ = flash_forward(q.detach(), k.detach(), v.detach(), is_causal=False)
    wrong = flash_backward(q, k, v, out, lse, d_out, is_causal=True, scale=None, window=None, sinks=None)
    _, ref_grads = _reference(q, k, v, None, d_out, is_causal=False)
    for name, g, r in zip(("dq", "dk", "dv"), wrong, ref_grads):
        assert (g.double() - r).abs().max() > 1e-2, f"the buggy backward's {name} was not caught"


@needs_triton
def test_causal_backward_is_bottom_right_aligned():
    """With T_q < T_k the last query sees every key: a top-left causal backward zeroes most of dK."""
    q, k, v, _, d_out = _inputs(1, 1, 1, 8, 72, 16, seed=2)
    _, (dq, dk, dv) = _grads(flash_attention, q, k, v, None, d_out, is_causal=True)
    assert dk[..., :64, :].abs().amax() > 1e-3  # keys 0..63 are seen by every query
    _assert_matches(
        _grads(flash_attention, q, k, v, None, d_out, is_causal=True),
        _reference(q, k, v, None, d_out, is_causal=True),
    )


# ----------------------------------------------------------------------------- block skipping
def _tiles_needed(T_q, T_k, block_m, block_n, window):
    """Key blocks holding at least one allowed (query, key) pair, per query block: from the dense mask."""
    allowed = causal_mask(T_q, T_k, window=window)  # (T_q, T_k)
    n_m, n_n = -(-T_q // block_m), -(-T_k // block_n)
    padded = torch.zeros(n_m * block_m, n_n * block_n, dtype=torch.bool)
    padded[:T_q, :T_k] = allowed
    return padded.view(n_m, block_m, n_n, block_n).any(dim=(1, 3)).sum(dim=1)  # (n_m,)


@needs_triton
@pytest.mark.parametrize(
    "T_q, T_k, block_m, block_n, window",
    [(64, 64, 16, 16, None), (50, 70, 16, 32, None), (96, 96, 16, 16, 20), (40, 100, 32, 16, 33), (1, 100, 16, 16, 7)],
)
def test_causal_and_window_visit_only_the_needed_blocks(T_q, T_k, block_m, block_n, window):
    q, k, v, _, _ = _inputs(1, 1, 1, T_q, T_k, 16)
    out, _, visited = flash_forward(
        q.detach(), k.detach(), v.detach(), is_causal=True, window=window, block_m=block_m, block_n=block_n
    )
    assert visited[0].tolist() == _tiles_needed(T_q, T_k, block_m, block_n, window).tolist()
    ref = attention(q.detach(), k.detach(), v.detach(), is_causal=True, window=window)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


@needs_triton
def test_without_gradients_the_forward_launches_alone(monkeypatch):
    """No input needs a gradient (or grad mode is off): no autograd function, the same values."""
    q, k, v, s, _ = _inputs(1, 2, 1, 21, 37, 16, sinks=True, seed=5)
    q, k, v, s = (t.detach() for t in (q, k, v, s))
    expected = flash_forward(q, k, v, is_causal=True, window=9, sinks=s)[0]

    def refuse(*args):
        raise AssertionError("the autograd function ran")

    monkeypatch.setattr(flash_module._FlashAttention, "apply", refuse)
    assert torch.equal(flash_attention(q, k, v, is_causal=True, window=9, sinks=s), expected)
    with torch.no_grad():
        out = flash_attention(q.requires_grad_(), k, v, is_causal=True, window=9, sinks=s)
    assert torch.equal(out, expected)
    # a sink that needs its gradient is enough to take the autograd function
    with pytest.raises(AssertionError, match="autograd function ran"):
        flash_attention(q.detach(), k, v, is_causal=True, window=9, sinks=s.requires_grad_())


@needs_triton
def test_causal_square_visits_the_lower_triangle_of_blocks():
    q, k, v, _, _ = _inputs(1, 1, 1, 128, 128, 16)
    _, _, visited = flash_forward(q.detach(), k.detach(), v.detach(), is_causal=True, block_m=16, block_n=16)
    n = 128 // 16
    assert visited.sum().item() == n * (n + 1) // 2  # of n² = 64 tiles without causality
    _, _, full = flash_forward(q.detach(), k.detach(), v.detach(), block_m=16, block_n=16)
    assert full.sum().item() == n * n


@needs_triton
def test_block_sizes_do_not_change_the_result():
    q, k, v, s, _ = _inputs(1, 2, 1, 45, 61, 16, sinks=True)
    args = (q.detach(), k.detach(), v.detach())
    kw = dict(is_causal=True, window=13, sinks=s.detach())
    a, lse_a, _ = flash_forward(*args, block_m=16, block_n=64, **kw)
    b, lse_b, _ = flash_forward(*args, block_m=64, block_n=16, **kw)
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(lse_a, lse_b, rtol=1e-5, atol=1e-5)


@needs_triton
def test_lse_is_the_base2_log_sum_exp_with_the_sink():
    q, k, v, s, _ = _inputs(1, 2, 2, 20, 30, 16, sinks=True)
    _, lse, _ = flash_forward(q.detach(), k.detach(), v.detach(), sinks=s.detach())
    scores = (q @ k.transpose(-1, -2)).detach().double() / 4.0  # (1, 2, 20, 30); scale 1/√16
    with_sink = torch.cat([scores, s.detach().double()[None, :, None, None].expand(1, 2, 20, 1)], dim=-1)
    torch.testing.assert_close(lse.double(), torch.logsumexp(with_sink, -1) * LOG2E, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- half precision
@needs_triton
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_inputs(dtype):
    q, k, v, s, d_out = _inputs(1, 2, 1, 40, 40, 16, sinks=True, dtype=dtype)
    out, grads = _grads(flash_attention, q, k, v, s, d_out, is_causal=True)
    assert out.dtype == dtype and all(g.dtype == dtype for g in grads)
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.float16 else dict(rtol=5e-2, atol=5e-2)
    _assert_matches((out, grads), _reference(q, k, v, s, d_out, is_causal=True), **tol)


# ----------------------------------------------------------------------------- bad input
BAD = [
    (lambda q, k, v: (q.long(), k, v), {}, TypeError, "dtype=torch.int64"),
    (lambda q, k, v: (q.double(), k.double(), v.double()), {}, TypeError, "float64"),
    (lambda q, k, v: (q.half(), k, v), {}, TypeError, "share a dtype"),
    (lambda q, k, v: (q[0], k[0], v[0]), {}, ValueError, "q must have shape (B, H, T, D)"),
    (lambda q, k, v: (q[..., :12], k[..., :12], v[..., :12]), {}, ValueError, "D=12"),
    (lambda q, k, v: (q.repeat(1, 1, 1, 3)[..., :24], k, v), {}, ValueError, "k.shape"),
    (lambda q, k, v: (q, k, v[..., :4, :]), {}, ValueError, "v.shape=(1, 2, 4, 16)"),
    (lambda q, k, v: (q.repeat(1, 3, 1, 1)[:, :3], k, v), {}, ValueError, "H=3"),
    (lambda q, k, v: (q, k, v), dict(is_causal=True, window=0), ValueError, "window=0"),
    (lambda q, k, v: (q, k, v), dict(window=4), ValueError, "window=4"),
    (lambda q, k, v: (q, k, v), dict(is_causal=1), TypeError, "is_causal"),
    (lambda q, k, v: (q, k, v), dict(scale=-1.0), ValueError, "scale=-1"),
    (lambda q, k, v: (q, k, v), dict(sinks=torch.zeros(3)), ValueError, "sinks.shape=(3,)"),
    (lambda q, k, v: (q, k[..., :4, :], v[..., :4, :]), dict(is_causal=True), ValueError, "T_q=8, T_k=4"),
]


@needs_triton
@pytest.mark.parametrize("make, kw, exc, text", BAD)
def test_bad_input(make, kw, exc, text):
    q, k, v, _, _ = _inputs(1, 2, 2, 8, 8, 16)
    q, k, v = make(q.detach(), k.detach(), v.detach())
    with pytest.raises(exc) as info:
        flash_attention(q, k, v, **kw)
    assert text in str(info.value)


@needs_triton
def test_bad_block_size():
    q, k, v, _, _ = _inputs(1, 1, 1, 8, 8, 16)
    with pytest.raises(ValueError, match="block_m=24"):
        flash_forward(q, k, v, block_m=24)


def test_without_triton_the_package_imports_and_says_how_to_install():
    code = (
        "import sys; sys.modules['triton'] = None\n"  # makes `import triton` raise ImportError
        "import torch, attn_core, attn_core.ops.backends.flash as f, attn_core.ops.backends.flash_kernels as fk\n"
        "assert fk.triton is None and not fk.INTERPRETED\n"
        "try:\n"
        "    f.flash_attention(torch.zeros(1, 1, 2, 16), torch.zeros(1, 1, 2, 16), torch.zeros(1, 1, 2, 16))\n"
        "except ImportError as e:\n"
        "    assert 'pip install triton' in str(e), e\n"
        "else:\n"
        "    raise SystemExit('no ImportError')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_kernel_source_returns_the_kernels_and_refuses_other_names():
    src = flash_module.kernel_source("forward")
    assert src.lstrip().startswith("@_jit") and "def _flash_fwd(" in src and "tl.dot" in src
    assert "def _flash_bwd_dq(" in flash_module.kernel_source("backward_dq")
    with pytest.raises(ValueError, match="name='fwd'"):
        flash_module.kernel_source("fwd")


@needs_triton
def test_non_contiguous_inputs_from_a_b_t_h_d_layout():
    """Projections give (B, T, H, D); the heads-first views are not contiguous."""
    g = torch.Generator().manual_seed(8)
    x = torch.randn(3, 1, 35, 2, 16, generator=g).to(DEVICE)  # (qkv, B, T, H, D)
    q, k, v = (t.transpose(1, 2).requires_grad_() for t in x)  # (B, H, T, D) views
    assert not q.is_contiguous()
    d_out = torch.randn(1, 2, 35, 16, generator=g).to(DEVICE)
    _assert_matches(
        _grads(flash_attention, q, k, v, None, d_out, is_causal=True),
        _reference(q, k, v, None, d_out, is_causal=True),
    )
