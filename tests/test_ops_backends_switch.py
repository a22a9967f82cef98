"""attn_core.ops.backends.switch: attention() hands windows and sinks to chapter 21's Triton kernel first.

On this CPU the kernel runs in Triton's interpreter, and only in ``"always"`` mode: the
shapes are small. The reference is attention()'s explicit path (``return_weights=True``),
in values and in gradients.
"""

from __future__ import annotations

import pytest
import torch

import attn_core.ops.attention as core
from attn_core import DecoderConfig, DecoderLM, attention
from attn_core.config import LayerPattern
from attn_core.ops.backends import flash_kernels
from attn_core.ops.backends.flex import set_flex_mode
from attn_core.ops.backends.switch import (
    FLASH,
    KERNEL_MODES,
    KernelSwitch,
    flash_mode,
    flash_route,
    set_flash_mode,
    use_flash,
)
from conftest import qkv

needs_triton = pytest.mark.skipif(flash_kernels.triton is None, reason="triton is not installed: pip install triton")
DEVICE = "cpu" if flash_kernels.INTERPRETED else "cuda"


@pytest.fixture
def flash_always():
    previous = set_flash_mode("always")
    yield
    set_flash_mode(previous)


@pytest.fixture
def spy_flash(monkeypatch):
    """Record each call of the kernel's entry for checked arguments, which attention() calls."""
    import attn_core.ops.backends.flash as flash

    calls = []
    real = flash._flash_attention_checked

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(flash, "_flash_attention_checked", spy)
    return calls


# --------------------------------------------------------------------------- the switch
def test_switch_modes_and_bad_input():
    switch = KernelSwitch("kernel X")
    assert KERNEL_MODES == ("auto", "always", "never") and switch.mode == "auto"
    assert switch.allows(("a",), auto=True) and not switch.allows(("a",), auto=False)
    assert switch.set_mode("always") == "auto" and switch.allows(("a",), auto=False)
    assert switch.set_mode("never") == "always" and not switch.allows(("a",), auto=True)
    with pytest.raises(ValueError, match=r"mode must be one of \('auto', 'always', 'never'\), got mode='fast'"):
        switch.set_mode("fast")
    assert flash_mode() == "auto"  # the package's default: CUDA only


def test_a_failure_in_auto_mode_is_remembered_with_a_warning_and_raised_in_always_mode():
    switch = KernelSwitch("kernel X")

    def fail():
        raise RuntimeError("out of resources: shared memory")

    with pytest.warns(RuntimeWarning, match=r"kernel X failed for \('a', 1\) \(RuntimeError: out of resources"):
        assert switch.attempt(("a", 1), fail) is None
    assert switch.refused == {("a", 1)} and not switch.allows(("a", 1), auto=True)
    assert switch.allows(("b", 1), auto=True)
    assert switch.attempt(("b", 1), lambda: 7) == 7 and switch.refused == {("a", 1)}
    switch.set_mode("always")
    with pytest.raises(RuntimeError, match="out of resources"):
        switch.attempt(("a", 1), fail)


@pytest.mark.parametrize(
    "change, why",
    [
        (dict(D=8), "head width below 16"),
        (dict(D=24), "head width not a power of two"),
        (dict(dtype=torch.float64), "no float64 kernel"),
        (dict(H_kv=3), "H_kv does not divide H"),
        (dict(T_q=9, T_k=5), "causal with more queries than keys"),
        (dict(D_v=32), "values wider than keys"),
    ],
)
def test_use_flash_refuses_what_the_kernel_does_not_compute_in_every_mode(flash_always, change, why):
    shape = dict(B=1, H=4, T_q=5, D=16, T_k=None, H_kv=2, D_v=None, dtype=torch.float32) | change
    q, k, v = qkv(**shape)
    assert use_flash(*qkv(B=1, H=4, T_q=5, D=16, H_kv=2), is_causal=True, window=2, sinks=None)
    assert not use_flash(q, k, v, is_causal=True, window=2, sinks=None), why


def test_auto_mode_keeps_the_cpu_off_the_kernel(monkeypatch):
    import attn_core.ops.backends.flash as flash

    assert flash_mode() == "auto"
    monkeypatch.setattr(flash, "_flash_attention_checked", lambda *a, **kw: pytest.fail("the kernel ran on the CPU"))
    q, k, v = qkv(1, 4, 6, 16)
    assert not use_flash(q, k, v, is_causal=True, window=2, sinks=None)
    attention(q, k, v, is_causal=True, window=2, sinks=torch.zeros(4))


def test_flash_route_gives_the_key_a_failure_is_remembered_under(flash_always):
    q, k, v = qkv(B=1, H=4, T_q=5, D=16, H_kv=2)
    key = flash_route(q, k, v, is_causal=True, window=2, sinks=None)
    assert key == (16, 2, True, True, False, torch.float32, "cpu")
    assert flash_route(q, k, v, is_causal=False, window=None, sinks=torch.zeros(4)) == (
        16, 2, False, False, True, torch.float32, "cpu"
    )  # fmt: skip
    FLASH.refused.add(key)
    try:
        assert flash_route(q, k, v, is_causal=True, window=2, sinks=None) == key  # "always" ignores refusals
        set_flash_mode("auto")
        assert flash_route(q, k, v, is_causal=True, window=2, sinks=None) is None
    finally:
        FLASH.refused.discard(key)
    set_flash_mode("never")
    assert flash_route(q, k, v, is_causal=True, window=2, sinks=None) is None


def test_inputs_the_kernel_would_reject_are_never_offered_to_it(flash_always, monkeypatch):
    """A kernel error in "auto" mode refuses its key for good: an input the kernel cannot take
    (a broadcast batch, tensors on two devices) must not reach it, or valid inputs with the
    same key would lose the kernel."""
    import attn_core.ops.backends.flash as flash

    monkeypatch.setattr(flash, "_flash_attention_checked", lambda *a, **kw: pytest.fail("offered to the kernel"))
    q, _, _ = qkv(B=2, H=4, T_q=5, D=16)
    _, k, v = qkv(B=1, H=4, T_q=5, D=16, H_kv=2)  # one batch of keys for both batches of queries
    assert flash_route(q, k, v, is_causal=True, window=2, sinks=None) is None
    out = attention(q, k, v, is_causal=True, window=2)
    expected, _ = attention(q, k.expand(2, -1, -1, -1), v.expand(2, -1, -1, -1), is_causal=True, window=2,
                            return_weights=True)  # fmt: skip
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-6)
    q, k, v = qkv(B=1, H=4, T_q=5, D=16)
    sinks = torch.zeros(4)
    for k_, v_, sinks_ in ((k.to("meta"), v, sinks), (k, v.to("meta"), sinks), (k, v, sinks.to("meta"))):
        assert flash_route(q, k_, v_, is_causal=True, window=None, sinks=sinks_) is None
    assert flash_route(q, k, v, is_causal=True, window=None, sinks=sinks) is not None


@needs_triton
def test_attention_enters_the_kernel_past_its_argument_checks(flash_always, spy_flash, monkeypatch):
    """attention() has checked its arguments: checking them again would cost host time per launch."""
    import attn_core.ops.backends.flash as flash

    q, k, v = (t.to(DEVICE) for t in qkv(1, 4, 9, 16, H_kv=2))
    sinks = torch.linspace(-1.0, 1.0, 4, device=DEVICE)
    expected = flash.flash_attention(q, k, v, is_causal=True, window=4, sinks=sinks)
    monkeypatch.setattr(flash, "_check_inputs", lambda *a, **kw: pytest.fail("the arguments were checked twice"))
    out = attention(q, k, v, is_causal=True, window=4, sinks=sinks)
    assert len(spy_flash) == 1 and torch.equal(out, expected)


# --------------------------------------------------------------------------- attention() on the kernel
@needs_triton
@pytest.mark.parametrize(
    "T_q, T_k, H_kv, window, with_sinks",
    [
        (40, 40, 4, 7, False),
        (40, 40, 2, None, True),
        (9, 40, 1, 12, True),
        (1, 40, 4, None, True),
        (1, 40, 2, 5, False),
    ],
)
def test_windows_and_sinks_take_the_kernel_and_equal_the_explicit_path(
    flash_always, spy_flash, T_q, T_k, H_kv, window, with_sinks
):
    q, k, v = (t.to(DEVICE).requires_grad_() for t in qkv(1, 4, T_q, 16, T_k=T_k, H_kv=H_kv, seed=T_q + H_kv))
    sinks = torch.linspace(-1.0, 2.0, 4, device=DEVICE).requires_grad_() if with_sinks else None
    leaves = [q, k, v] + ([sinks] if with_sinks else [])
    d_out = torch.randn(1, 4, T_q, 16, generator=torch.Generator().manual_seed(1)).to(DEVICE)

    out = attention(q, k, v, is_causal=True, window=window, sinks=sinks)
    grads = torch.autograd.grad(out, leaves, d_out)
    assert len(spy_flash) == 1  # the kernel answered, not FlexAttention or the explicit path
    expected, _ = attention(q, k, v, is_causal=True, window=window, sinks=sinks, return_weights=True)
    expected_grads = torch.autograd.grad(expected, leaves, d_out)
    tol = dict(rtol=1e-4, atol=2e-5)  # float32 sums in another order (tile by tile)
    torch.testing.assert_close(out, expected, **tol)
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want, **tol)


@needs_triton
def test_the_kernel_is_tried_before_flex_attention(flash_always, spy_flash, monkeypatch):
    monkeypatch.setattr(core, "flex_or_none", lambda *a, **kw: pytest.fail("FlexAttention before the Triton kernel"))
    previous = set_flex_mode("always")
    try:
        q, k, v = (t.to(DEVICE) for t in qkv(1, 2, 8, 16))
        attention(q, k, v, is_causal=True, window=3)
    finally:
        set_flex_mode(previous)
    assert spy_flash == [dict(is_causal=True, scale=0.25, window=3, sinks=None)]


def test_a_kernel_failure_in_auto_mode_falls_back_to_the_next_path(monkeypatch):
    import attn_core.ops.backends.flash as flash

    def fail(*args, **kwargs):
        raise RuntimeError("out of resources")

    monkeypatch.setattr(core, "flash_route", lambda *a, **kw: ("key",))  # as on a GPU
    monkeypatch.setattr(flash, "_flash_attention_checked", fail)
    monkeypatch.setattr(FLASH, "refused", set())
    q, k, v = qkv(1, 2, 8, 16)
    sinks = torch.tensor([0.5, -1.0])
    with pytest.warns(RuntimeWarning, match="Triton kernel failed"):
        out = attention(q, k, v, is_causal=True, window=3, sinks=sinks)
    expected, _ = attention(q, k, v, is_causal=True, window=3, sinks=sinks, return_weights=True)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-6)
    assert FLASH.refused == {("key",)}


def test_options_the_kernel_lacks_keep_the_explicit_path(flash_always, monkeypatch):
    import attn_core.ops.backends.flash as flash

    monkeypatch.setattr(flash, "_flash_attention_checked", lambda *a, **kw: pytest.fail("an option it lacks"))
    q, k, v = qkv(1, 2, 6, 16)
    attention(q, k, v, is_causal=True, window=2, softcap=5.0)
    attention(q, k, v, is_causal=True, window=2, return_weights=True)
    attention(q, k, v, is_causal=True, window=2, mask=torch.ones(6, 6, dtype=torch.bool))
    attention(q, k, v, is_causal=True, window=2, dropout_p=0.5)  # the kernel drops no weights


@needs_triton
def test_a_windowed_model_with_sinks_trains_through_the_kernel(flash_always, spy_flash):
    pattern = LayerPattern(layer_types=("sliding", "full"), sliding_window=6)
    config = DecoderConfig(
        vocab_size=50,
        d_model=64,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        max_len=32,
        pattern=pattern,
        attention_sinks=True,
    )
    torch.manual_seed(0)
    model = DecoderLM(config).to(DEVICE)
    idx = torch.randint(0, 50, (2, 20)).to(DEVICE)
    logits = model(idx)
    logits.square().mean().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    assert len(spy_flash) == 2  # one call per layer
    model.zero_grad()
    expected, _ = model(idx, return_weights=True)  # the explicit path in every layer
    expected.square().mean().backward()
    torch.testing.assert_close(logits, expected, rtol=1e-4, atol=2e-5)
    for got, p in zip(grads, model.parameters()):
        torch.testing.assert_close(got, p.grad, rtol=1e-3, atol=1e-6)
