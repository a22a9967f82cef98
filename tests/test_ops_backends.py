"""attn_core.ops.backends: the table that chooses the backend of attention(), and the kernels' modes.

The table's rows in order, what each one handles, prefers and refuses (with the errors'
exact words), the modes (``set_mode``, ``mode``, ``use``), the remembered refusal, and
``attention()`` answered by each row. On this CPU the Triton kernel runs in Triton's
interpreter, and only in ``"always"`` mode: the shapes are small. The reference is the
explicit path (``return_weights=True``), in values and in gradients.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from attn_core import DecoderConfig, DecoderLM, attention
from attn_core.config import LayerPattern
from attn_core.ops import backends
from attn_core.ops.backends import EXPLICIT, FLASH, FLEX, MODES, SDPA, TABLE, KernelSwitch, flash_kernels
from attn_core.ops.backends.call import Call
from conftest import qkv

needs_triton = pytest.mark.skipif(flash_kernels.triton is None, reason="triton is not installed: pip install triton")
DEVICE = "cpu" if flash_kernels.INTERPRETED else "cuda"


@pytest.fixture
def flash_always():
    with backends.use(flash="always"):
        yield


@pytest.fixture
def answered(monkeypatch):
    """The names of the rows whose ``run`` computed each call, in order."""
    names = []
    for row in TABLE:

        def spy(call, row=row, real=row.run):
            names.append(row.name)
            return real(call)

        monkeypatch.setattr(row, "run", spy)
    return names


@pytest.fixture
def spy_flash(monkeypatch):
    """The options of each launch of the Triton kernel from the table (its ``run``)."""
    calls = []
    real = FLASH.run

    def spy(call):
        calls.append(dict(is_causal=call.is_causal, scale=call.softmax_scale, window=call.window, sinks=call.sinks))
        return real(call)

    monkeypatch.setattr(FLASH, "run", spy)
    return calls


# --------------------------------------------------------------------------- the table
def test_the_table_in_order_with_what_each_row_handles_and_prefers():
    assert [row.name for row in TABLE] == ["flash", "flex", "sdpa", "explicit"]
    assert TABLE == (FLASH, FLEX, SDPA, EXPLICIT)
    band = {"window", "sinks"}
    assert FLASH.handles == FLASH.prefers == FLEX.handles == FLEX.prefers == band
    assert SDPA.handles == {"mask", "dropout", "window"} and not SDPA.prefers
    assert EXPLICIT.handles == {"mask", "dropout", "window", "sinks", "softcap", "weights"} and not EXPLICIT.prefers
    assert [row.switch is None for row in TABLE] == [False, False, True, True]  # only the fused kernels have a mode


@pytest.mark.parametrize(
    "needs, rows",
    [
        ((), ("sdpa",)),  # a plain call is SDPA's: the fused kernels are for windows and sinks
        (("mask",), ("sdpa",)),
        (("dropout",), ("sdpa",)),
        (("window",), ("flash", "flex", "sdpa")),
        (("sinks",), ("flash", "flex", "explicit")),
        (("window", "sinks"), ("flash", "flex", "explicit")),
        (("window", "dropout"), ("sdpa",)),  # the fused kernels drop no weights
        (("window", "mask"), ("sdpa",)),
        (("sinks", "mask"), ("explicit",)),
        (("sinks", "dropout"), ("explicit",)),
        (("window", "softcap"), ("explicit",)),
        (("weights",), ("explicit",)),
    ],
)
def test_plan_lists_the_rows_that_may_answer(needs, rows):
    assert backends.plan(*needs) == rows


def test_plan_refuses_an_unknown_need():
    with pytest.raises(ValueError, match=r"need must be one of \('mask', .*\), got need='causal'"):
        backends.plan("causal")


def test_describe_prints_three_lines_per_row_from_the_code():
    lines = backends.describe().splitlines()
    assert [lines[i].split()[0] for i in range(0, 12, 3)] == ["flash", "flex", "sdpa", "explicit"]
    assert lines[0] == "flash (mode: auto; preferred for: window, sinks)"
    assert lines[6] == "sdpa (mode: -; preferred for: any call)"
    assert lines[1] == "    handles: window, sinks"
    assert (
        lines[2] == '    "auto" runs it on: CUDA, Triton installed, not inside torch.compile.'
    )  # its auto's docstring
    assert lines[5].endswith("CUDA, float16/bfloat16/float32, head widths >= 16.")
    assert lines[10] == "    handles: mask, dropout, window, sinks, softcap, weights"
    assert lines[11].endswith("(no mode: every call it handles)")
    assert max(len(line) for line in lines) <= 78  # printed in a chapter, whose column fits about 80
    with backends.use(flash="never"):
        assert backends.describe().splitlines()[0] == "flash (mode: never; preferred for: window, sinks)"


# --------------------------------------------------------------------------- why a row refuses a call
def _call(change=None, **options):
    shape = dict(B=1, H=4, T_q=5, D=16, T_k=None, H_kv=2, D_v=None, dtype=torch.float32) | (change or {})
    return Call(*qkv(**shape), is_causal=options.pop("is_causal", True), **options)


WIDTH = "the head width D must be a power of two in [16, 256] for the kernel's tiles, got D={}"


@pytest.mark.parametrize(
    "change, error, message",
    [
        (dict(D=8), ValueError, WIDTH.format(8)),
        (dict(D=24), ValueError, WIDTH.format(24)),
        (dict(dtype=torch.float64), TypeError,
         "q must be float32, float16 or bfloat16 for the kernel, got dtype=torch.float64"),
        (dict(H_kv=3), ValueError, "the number of query heads must be a multiple of the number of key/value heads, "
         "got H=4 (q.shape=(1, 4, 5, 16)) and H_kv=3 (k.shape=(1, 3, 5, 16))"),
        (dict(T_q=9, T_k=5), ValueError,
         "is_causal needs T_k >= T_q (queries are the last T_q of T_k positions), got T_q=9, T_k=5"),
        (dict(D_v=32), ValueError,
         "k and v must have the same shape, got k.shape=(1, 2, 5, 16), v.shape=(1, 2, 5, 32)"),
    ],
)  # fmt: skip
def test_flash_unsupported_says_why_in_its_public_errors_words(change, error, message):
    from attn_core.ops.backends.flash import flash_attention

    assert FLASH.unsupported(_call()) is None
    call = _call(change)
    why = FLASH.unsupported(call)
    assert type(why) is error and str(why) == message
    with pytest.raises(error) as raised:  # flash_attention raises the same error
        flash_attention(call.q, call.k, call.v, is_causal=True)
    assert str(raised.value) == message


def test_flash_unsupported_inputs_it_would_read_wrongly():
    q, k, v = qkv(B=2, H=4, T_q=5, D=16)
    _, k1, v1 = qkv(B=1, H=4, T_q=5, D=16, H_kv=2)  # one batch of keys for both batches of queries
    assert str(FLASH.unsupported(Call(q, k1, v1, is_causal=True))) == (
        "k must have q's batch size and head width, got q.shape=(2, 4, 5, 16), k.shape=(1, 2, 5, 16)"
    )
    assert str(FLASH.unsupported(Call(q[0], k[0], v[0]))) == "q must have shape (B, H, T, D), got (4, 5, 16)"
    assert str(FLASH.unsupported(Call(q, k[0], v[0]))) == "k must have shape (B, H, T, D), got (4, 5, 16)"
    assert str(FLASH.unsupported(Call(q, k.double(), v.double()))) == (
        "q, k, v must share a dtype, got q=torch.float32, k=torch.float64, v=torch.float64"
    )
    meta = k.to("meta")
    assert str(FLASH.unsupported(Call(q, meta, v))) == "q, k, v must be on one device, got q=cpu, k=meta, v=cpu"
    why = FLASH.unsupported(Call(q, k, v, sinks=torch.zeros(4, device="meta")))
    assert str(why) == "sinks must be on q's device, got sinks=meta, q=cpu"


def test_flex_sdpa_and_explicit_unsupported(monkeypatch):
    import attn_core.ops.backends.flex as flex

    q, k, v = qkv(1, 2, 6, 4)
    assert FLEX.unsupported(Call(q, k, v)) is None
    why = FLEX.unsupported(Call(q[0], k[0], v[0]))
    assert type(why) is ValueError and str(why) == "FlexAttention takes q of shape (B, H, T, D), got q.shape=(2, 6, 4)"
    with pytest.raises(ValueError, match=r"got q.shape=\(2, 6, 4\)"):  # flex_attention's own error
        flex.flex_attention(q[0], k[0], v[0], scale=0.5, is_causal=True, window=None)
    monkeypatch.setattr(flex, "HAS_FLEX", False)
    why = FLEX.unsupported(Call(q, k, v))
    assert (
        type(why) is ImportError
        and str(why) == "FlexAttention needs PyTorch >= 2.5 (torch.nn.attention.flex_attention)"
    )
    assert SDPA.unsupported is None and EXPLICIT.unsupported is None  # they take every call they handle


def test_auto_conditions_and_keys():
    call = _call(is_causal=True, window=2)
    assert not FLASH.auto(call) and not FLEX.auto(call)  # the CPU: no kernel in "auto" mode
    assert FLASH.key(call) == (16, 2, True, True, False, torch.float32, "cpu")
    assert FLASH.key(_call(is_causal=False, sinks=torch.zeros(4))) == (16, 2, False, False, True, torch.float32, "cpu")
    assert FLEX.key(call) == (16, 16, 5, 5, torch.float32, "cpu")


# --------------------------------------------------------------------------- modes
def test_set_mode_and_mode():
    assert MODES == ("auto", "always", "never")
    assert backends.mode("flash") == backends.mode("flex") == "auto"  # the package's default: CUDA only
    try:
        assert backends.set_mode("flash", "always") == "auto" and backends.mode("flash") == "always"
        assert backends.set_mode("flash", "never") == "always" and backends.mode("flex") == "auto"
    finally:
        backends.set_mode("flash", "auto")


@pytest.mark.parametrize("name", ["sdpa", "explicit", "triton", "FLASH"])
def test_bad_names_raise_naming_the_value(name):
    message = rf"name must be one of \('flash', 'flex'\), got name='{name}'"
    with pytest.raises(ValueError, match=message):
        backends.set_mode(name, "always")
    with pytest.raises(ValueError, match=message):
        backends.mode(name)
    with pytest.raises(ValueError, match=message):
        with backends.use(**{name: "always"}):
            pass


@pytest.mark.parametrize("value", ["fast", "Always", None, True])
def test_bad_modes_raise_naming_the_value(value):
    message = rf"mode must be one of \('auto', 'always', 'never'\), got mode={value!r}"
    with pytest.raises(ValueError, match=message):
        backends.set_mode("flex", value)
    with pytest.raises(ValueError, match=message):
        with backends.use(flash="always", flex=value):
            pass
    assert backends.mode("flash") == "auto"  # use() checks every mode before it sets any


def test_use_sets_modes_and_restores_them_on_exit_and_after_an_error():
    with backends.use(flash="always", flex="never"):
        assert (backends.mode("flash"), backends.mode("flex")) == ("always", "never")
        with backends.use(flex="always"):
            assert (backends.mode("flash"), backends.mode("flex")) == ("always", "always")
        assert backends.mode("flex") == "never"
    assert (backends.mode("flash"), backends.mode("flex")) == ("auto", "auto")
    with pytest.raises(RuntimeError, match="inside"):
        with backends.use(flex="always"):
            raise RuntimeError("inside")
    assert backends.mode("flex") == "auto"


def test_kernel_switch_modes_and_bad_input():
    switch = KernelSwitch("kernel X")
    assert switch.mode == "auto" and switch.refused == set()
    assert switch.set_mode("always") == "auto" and switch.set_mode("never") == "always"
    with pytest.raises(ValueError, match=r"mode must be one of \('auto', 'always', 'never'\), got mode='fast'"):
        switch.set_mode("fast")


def test_a_failure_in_auto_mode_is_remembered_with_a_warning_and_raised_in_always_mode():
    switch = KernelSwitch("kernel X")

    def fail():
        raise RuntimeError("out of resources: shared memory")

    with pytest.warns(RuntimeWarning, match=r"kernel X failed for \('a', 1\) \(RuntimeError: out of resources"):
        assert switch.attempt(("a", 1), fail) is None
    assert switch.refused == {("a", 1)}
    assert switch.attempt(("b", 1), lambda x: x + 1, 6) == 7 and switch.refused == {("a", 1)}
    switch.set_mode("always")
    with pytest.raises(RuntimeError, match="out of resources"):
        switch.attempt(("a", 1), fail)


# --------------------------------------------------------------------------- attention() picks each row
@pytest.mark.parametrize(
    "options, modes, row",
    [
        (dict(is_causal=True), {}, "sdpa"),
        (dict(mask=torch.ones(8, 8, dtype=torch.bool)), {}, "sdpa"),
        (dict(is_causal=True, window=3), {}, "sdpa"),  # the CPU in "auto" mode: a dense mask
        (dict(is_causal=True, return_weights=True), {}, "explicit"),
        (dict(is_causal=True, softcap=5.0), {}, "explicit"),
        (dict(is_causal=True, sinks=torch.zeros(2)), {}, "explicit"),
        (dict(is_causal=True, window=3), dict(flash="always"), "flash"),
        (dict(is_causal=True, sinks=torch.zeros(2)), dict(flash="always", flex="always"), "flash"),
        (dict(is_causal=True, window=3), dict(flex="always"), "flex"),
        (dict(is_causal=True, sinks=torch.zeros(2)), dict(flash="never", flex="always"), "flex"),
        (dict(is_causal=True, window=3, dropout_p=0.5), dict(flash="always", flex="always"), "sdpa"),
        (dict(is_causal=True, sinks=torch.zeros(2), mask=torch.ones(8, 8, dtype=torch.bool)),
         dict(flash="always", flex="always"), "explicit"),
        (dict(is_causal=True, window=3, softcap=5.0), dict(flash="always", flex="always"), "explicit"),
    ],
)  # fmt: skip
def test_attention_takes_the_first_row_that_takes_the_call(answered, options, modes, row):
    if row == "flash" and flash_kernels.triton is None:
        pytest.skip("triton is not installed")
    q, k, v = qkv(1, 2, 8, 16)
    with backends.use(**modes):
        attention(q, k, v, **options)
    assert answered == [row]


def test_a_kernel_the_call_does_not_fit_hands_it_to_the_next_row(answered):
    q, k, v = qkv(1, 2, 8, 8)  # a head width of 8: not the Triton kernel's
    with backends.use(flash="always", flex="always"):
        attention(q, k, v, is_causal=True, window=3)
    assert answered == ["flex"]


def test_the_decoding_step_drops_its_causal_mask(monkeypatch):
    seen = []
    real = SDPA.run
    monkeypatch.setattr(SDPA, "run", lambda call: seen.append((call.is_causal, call.window)) or real(call))
    q, k, v = qkv(1, 2, 1, 16, T_k=9)
    attention(q, k, v, is_causal=True)
    attention(q, k, v, is_causal=True, window=9)  # the window holds every key
    attention(q, k, v, is_causal=True, window=4)  # it hides the oldest
    assert seen == [(False, None), (False, None), (True, 4)]


def test_a_kernel_failure_in_auto_mode_is_remembered_and_the_next_row_answers(monkeypatch, answered):
    def fail(call):
        raise RuntimeError("out of resources")

    monkeypatch.setattr(FLASH, "auto", lambda call: True)  # as on a GPU
    monkeypatch.setattr(FLASH, "run", fail)
    monkeypatch.setattr(FLASH.switch, "refused", set())
    q, k, v = qkv(1, 2, 8, 16)
    sinks = torch.tensor([0.5, -1.0])
    with pytest.warns(
        RuntimeWarning, match=r"Triton kernel failed for \(16, 1, True, True, True, torch.float32, 'cpu'\)"
    ):
        out = attention(q, k, v, is_causal=True, window=3, sinks=sinks)
    expected, _ = attention(q, k, v, is_causal=True, window=3, sinks=sinks, return_weights=True)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-6)
    assert FLASH.switch.refused == {(16, 1, True, True, True, torch.float32, "cpu")}
    monkeypatch.setattr(FLASH, "run", lambda call: pytest.fail("a refused key was offered again"))
    attention(q, k, v, is_causal=True, window=3, sinks=sinks)  # no warning, no attempt
    with backends.use(flash="always"), pytest.raises(RuntimeError, match="out of resources"):
        monkeypatch.setattr(FLASH, "run", fail)  # "always" ignores the memo, and the error propagates
        attention(q, k, v, is_causal=True, window=3, sinks=sinks)


def test_auto_mode_keeps_the_cpu_off_the_fused_kernels(answered):
    q, k, v = qkv(1, 4, 6, 16)
    attention(q, k, v, is_causal=True, window=2, sinks=torch.zeros(4))
    attention(q, k, v, is_causal=True, window=2)
    assert answered == ["explicit", "sdpa"]


def test_importing_attn_core_imports_no_triton():
    code = "import sys, attn_core, attn_core.ops.backends.flash; assert 'triton' not in sys.modules, 'triton'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


# --------------------------------------------------------------------------- attention() on the Triton kernel
def test_inputs_the_kernel_would_reject_are_never_offered_to_it(flash_always, monkeypatch):
    """A kernel error in "auto" mode refuses its key for good: an input the kernel cannot take
    (a broadcast batch, tensors on two devices) must not reach it, or valid inputs with the
    same key would lose the kernel."""
    monkeypatch.setattr(FLASH, "run", lambda call: pytest.fail("offered to the kernel"))
    q, _, _ = qkv(B=2, H=4, T_q=5, D=16)
    _, k, v = qkv(B=1, H=4, T_q=5, D=16, H_kv=2)  # one batch of keys for both batches of queries
    out = attention(q, k, v, is_causal=True, window=2)
    expected, _ = attention(q, k.expand(2, -1, -1, -1), v.expand(2, -1, -1, -1), is_causal=True, window=2,
                            return_weights=True)  # fmt: skip
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-6)


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
def test_the_kernel_is_tried_before_flex_attention(spy_flash, monkeypatch):
    monkeypatch.setattr(FLEX, "run", lambda call: pytest.fail("FlexAttention before the Triton kernel"))
    with backends.use(flash="always", flex="always"):
        q, k, v = (t.to(DEVICE) for t in qkv(1, 2, 8, 16))
        attention(q, k, v, is_causal=True, window=3)
    assert spy_flash == [dict(is_causal=True, scale=0.25, window=3, sinks=None)]


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
