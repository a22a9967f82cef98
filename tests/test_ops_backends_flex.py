"""attn_core.ops.backends.flex.

Windows through FlexAttention's block mask and sinks by the log-sum-exp equal the explicit path.
"""

from __future__ import annotations

import pytest
import torch

from attn_core.ops import backends
from attn_core.ops.attention import attention
from attn_core.ops.backends import FLEX
from attn_core.ops.backends.call import Call
from attn_core.ops.backends.flex import HAS_FLEX, flex_attention, sink_correction
from conftest import qkv

F64 = torch.float64
pytestmark = pytest.mark.skipif(not HAS_FLEX, reason="this PyTorch has no torch.nn.attention.flex_attention")


@pytest.fixture
def flex_always():
    with backends.use(flex="always"):
        yield


@pytest.fixture
def flex_calls(monkeypatch):
    """Every call the table hands to FlexAttention."""
    calls = []
    real = FLEX.run
    monkeypatch.setattr(FLEX, "run", lambda call: calls.append(call) or real(call))
    return calls


@pytest.mark.parametrize(
    "T_q, T_k, window, H_kv", [(20, 20, 5, 4), (20, 20, 1, 2), (7, 20, 6, 1), (1, 20, 4, 4), (20, 20, None, 4)]
)
@pytest.mark.parametrize("with_sinks", [False, True])
def test_flex_path_equals_explicit_in_float64(flex_always, T_q, T_k, window, H_kv, with_sinks):
    if window is None and not with_sinks:
        pytest.skip("plain causal attention does not take the flex path")
    q, k, v = qkv(2, 4, T_q, 8, T_k=T_k, H_kv=H_kv, dtype=F64, seed=3)
    sinks = torch.linspace(-1.0, 2.0, 4, dtype=F64) if with_sinks else None
    expected, _ = attention(q, k, v, is_causal=True, window=window, sinks=sinks, return_weights=True)
    fused = attention(q, k, v, is_causal=True, window=window, sinks=sinks)
    assert torch.allclose(fused, expected, rtol=0, atol=1e-12)
    with backends.use(flex="never"):  # and the explicit path itself is what the CPU computes by default
        assert torch.allclose(attention(q, k, v, is_causal=True, window=window, sinks=sinks), expected, atol=1e-12)


def test_flex_lse_is_the_natural_log_sum_exp(flex_always):
    q, k, v = qkv(1, 2, 9, 4, dtype=F64, seed=4)
    out, lse = flex_attention(q, k, v, scale=0.5, is_causal=True, window=3)
    scores = (q @ k.transpose(-1, -2)) * 0.5
    i = torch.arange(9)
    band = (i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] < 3)
    expected = torch.logsumexp(scores.masked_fill(~band, float("-inf")), dim=-1)
    assert torch.allclose(lse, expected, atol=1e-12)


def test_sink_correction_equals_a_softmax_with_an_extra_logit():
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(2, 3, 5, 6, generator=g, dtype=F64)
    v = torch.randn(2, 3, 6, 4, generator=g, dtype=F64)
    sinks = torch.tensor([-2.0, 0.0, 3.0], dtype=F64)
    out = torch.softmax(scores, -1) @ v
    with_sink = torch.cat([scores, sinks[:, None, None].expand(2, 3, 5, 1)], dim=-1)
    expected = torch.softmax(with_sink, -1)[..., :-1] @ v
    corrected = sink_correction(out, torch.logsumexp(scores, -1), sinks)
    assert torch.allclose(corrected, expected, atol=1e-14)
    # a fully masked row (lse = -inf) keeps a zero output, as on the explicit path
    empty = sink_correction(torch.zeros(1, 3, 1, 4, dtype=F64), torch.full((1, 3, 1), float("-inf"), dtype=F64), sinks)
    assert torch.equal(empty, torch.zeros_like(empty))
    # the wrong sign (σ(sink − lse)) would not match
    wrong = out * torch.sigmoid(sinks[:, None] - torch.logsumexp(scores, -1))[..., None]
    assert not torch.allclose(wrong, expected, atol=1e-3)


def test_flex_window_in_float32_matches_explicit(flex_always):
    q, k, v = qkv(1, 4, 64, 16, H_kv=2, dtype=torch.float32, seed=5)
    sinks = torch.zeros(4)
    expected, _ = attention(q, k, v, is_causal=True, window=16, sinks=sinks, return_weights=True)
    fused = attention(q, k, v, is_causal=True, window=16, sinks=sinks)
    assert torch.allclose(fused, expected, atol=1e-5)  # float32 sums in another order


def test_options_the_kernel_lacks_keep_the_explicit_path(flex_always, flex_calls):
    q, k, v = qkv(1, 2, 6, 4, dtype=F64)
    sinks = torch.zeros(2, dtype=F64)
    attention(q, k, v, is_causal=True, window=2, sinks=sinks, softcap=5.0)
    attention(q, k, v, is_causal=True, window=2, return_weights=True)
    attention(q, k, v, is_causal=True, window=2, mask=torch.ones(6, 6, dtype=torch.bool))
    assert flex_calls == []


def test_default_mode_keeps_the_cpu_on_the_explicit_path(flex_calls):
    assert backends.mode("flex") == "auto"
    q, k, v = qkv(1, 2, 6, 16, dtype=torch.float32)
    attention(q, k, v, is_causal=True, window=2, sinks=torch.zeros(2))
    assert flex_calls == []


def test_the_row_runs_the_kernel_and_finishes_with_the_sink_correction():
    q, k, v = qkv(1, 2, 9, 4, dtype=F64, seed=8)
    sinks = torch.tensor([-1.0, 2.0], dtype=F64)
    call = Call(q, k, v, is_causal=True, window=3, sinks=sinks)
    out, lse = FLEX.run(call)
    assert torch.equal(FLEX.finish(call, (out, lse)), sink_correction(out, lse, sinks))
    plain = Call(q, k, v, is_causal=True, window=3)
    out, lse = FLEX.run(plain)
    assert lse is None and FLEX.finish(plain, (out, lse)) is out  # no sinks: no log-sum-exp asked for


def test_a_shape_the_kernel_refuses_falls_back_in_auto_mode(monkeypatch):
    def refuse(call):
        raise RuntimeError("NYI: embedding dimension must be at least 16")

    monkeypatch.setattr(FLEX, "auto", lambda call: True)  # as on a GPU
    monkeypatch.setattr(FLEX, "run", refuse)
    monkeypatch.setattr(FLEX.switch, "refused", set())
    q, k, v = qkv(1, 2, 6, 4, dtype=torch.float32)
    with backends.use(flash="never"), pytest.warns(RuntimeWarning, match="FlexAttention failed for .*NYI"):
        out = attention(q, k, v, is_causal=True, window=2)
    torch.testing.assert_close(out, attention(q, k, v, is_causal=True, window=2, return_weights=True)[0])
    assert FLEX.switch.refused == {FLEX.key(Call(q, k, v))} == {(4, 4, 6, 6, torch.float32, "cpu")}
    with backends.use(flex="always"), pytest.raises(RuntimeError, match="NYI"):
        attention(q, k, v, is_causal=True, window=2)  # "always" ignores the memo and the width


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
@pytest.mark.parametrize("dtype, atol", [(torch.float32, 1e-5), (torch.bfloat16, 5e-2)], ids=str)
def test_compiled_flex_on_cuda_matches_float64(dtype, atol):
    q, k, v = (t.cuda() for t in qkv(2, 4, 100, 64, T_k=100, H_kv=2, dtype=F64, seed=6))
    sinks = torch.linspace(-1.0, 1.0, 4, dtype=F64, device="cuda")
    expected, _ = attention(q, k, v, is_causal=True, window=16, sinks=sinks, return_weights=True)
    fused = attention(q.to(dtype), k.to(dtype), v.to(dtype), is_causal=True, window=16, sinks=sinks.to(dtype))
    assert torch.allclose(fused.double(), expected, atol=atol)  # measured on an H200: 9e-7 float32, 2.3e-2 bf16


def test_without_sinks_the_lse_is_not_asked_for(flex_always):
    q, k, v = qkv(1, 2, 9, 4, dtype=F64, seed=7)
    out, lse = flex_attention(q, k, v, scale=0.5, is_causal=True, window=3, return_lse=False)
    assert lse is None
    expected, _ = flex_attention(q, k, v, scale=0.5, is_causal=True, window=3)
    assert torch.allclose(out, expected, atol=1e-14)
