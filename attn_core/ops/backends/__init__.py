"""The kernels behind :func:`attn_core.ops.attention.attention`, and the one place that chooses among them.

What lives here. The backends, one module each: :mod:`.explicit` (every step written out,
the reference), :mod:`.sdpa` (PyTorch's fused ``scaled_dot_product_attention``), :mod:`.flex`
(FlexAttention's block mask, sinks by the log-sum-exp) and :mod:`.flash` with
:mod:`.flash_kernels` (FlashAttention-2 in Triton); :mod:`.call`, the :class:`~.call.Call` that
all of them receive. And in this module the table that chooses: :data:`TABLE`, one
:class:`Backend` row per kernel in the order they are tried; :func:`run`, which goes down the
rows for a call; and the modes of the optional kernels (:func:`set_mode`, :func:`mode`,
:func:`use`). The backend modules import :mod:`attn_core.checks`, :mod:`attn_core.ops.masks`
and :mod:`.call`, never this table, so that it can import them all and the choice stays
here; Triton is imported only when the Triton kernel first runs (:mod:`.flash` imports
:mod:`.flash_kernels` then).

How a call is chosen. ``attention()`` checks its arguments and hands the table a
:class:`~.call.Call`, whose :attr:`~.call.Call.needs` are the options it asks for that not
every backend computes (a mask, dropout, a window, sinks, soft-capping, the weights). A row
may answer if it *handles* all of them and, when it has preferences, the call needs one of
the options it is *preferred for*: the fused kernels are for windows and sinks, and a plain
call is SDPA's (its own FlashAttention or cuDNN kernels are faster than ours there). The
fused kernels then run only if their mode lets them and the call is not
:func:`~.flash.unsupported`. Every plan ends with SDPA or the explicit path, which take any
call they handle.

Each optional kernel (``"flash"``, ``"flex"``) has a process-wide mode:

* ``"auto"`` (the default): where the row's ``auto`` condition holds (CUDA, for both). A
  kernel that fails to build for some inputs (a compiler's limit, not the caller's error) is
  remembered under the row's ``key``, with a warning, and those inputs go to the next row
  from then on.
* ``"always"``: wherever the kernel runs, the CPU included (Triton's interpreter, eager
  FlexAttention): how the tests compare the kernels with the explicit path. Errors propagate.
* ``"never"``: the next row.
"""

from __future__ import annotations

import contextlib
import inspect
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ...checks import check_choice
from . import explicit, flash, flex, sdpa
from .call import NEEDS, Call, need_names

__all__ = [
    "MODES", "KernelSwitch", "Backend", "FLASH", "FLEX", "SDPA", "EXPLICIT", "TABLE",
    "run", "plan", "describe", "set_mode", "mode", "use",
]  # fmt: skip

MODES = ("auto", "always", "never")


class KernelSwitch:
    """The mode of one optional fused kernel, and the inputs it failed to build for.

    Args:
        name: The kernel's name, for warnings.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.mode = "auto"
        self.refused: set[tuple] = set()

    def set_mode(self, mode: str) -> str:
        """Set the mode; return the previous one.

        Raises:
            ValueError: ``mode`` not one of :data:`MODES`.
        """
        check_choice("mode", mode, MODES)
        previous, self.mode = self.mode, mode
        return previous

    def attempt(self, key: tuple, run: Callable[..., Any], *args: Any) -> Any:
        """``run(*args)``, or ``None`` if it raises in ``"auto"`` mode (``key`` is then refused from now on).

        Compilers refuse some inputs with errors that have no common type (Inductor's
        lowering errors, Triton's out-of-resources), so any exception counts; in
        ``"always"`` mode it propagates.
        """
        try:
            return run(*args)
        except Exception as error:  # noqa: BLE001 - see the docstring
            if self.mode == "always":
                raise
            self.refused.add(key)
            warnings.warn(
                f"{self.name} failed for {key} ({type(error).__name__}: {error}); "
                "those inputs take the next path from now on",
                RuntimeWarning,
                stacklevel=3,  # attention()'s line, as before the table
            )
            return None


@dataclass(eq=False)
class Backend:
    """One row of the table: a kernel, what it computes, and when it runs.

    Attributes:
        name: What :func:`set_mode` and the warnings call it.
        handles: The options of :data:`~.call.NEEDS` it computes: a call that needs another skips it.
        prefers: The options it is chosen for: a call that needs none of them skips it (empty: any call).
        run: Computes a :class:`~.call.Call`: the output, or ``(output, weights)`` when asked.
        switch: Its mode and the inputs it failed for; None for a backend that takes every
            call it handles (SDPA, explicit).
        unsupported: Why it cannot compute a call, as the error its own public entry raises;
            None if it can. Asked in every mode.
        auto: Whether ``"auto"`` mode runs it on a call (the first line of its docstring says when).
        key: What a failure to build is remembered under (what the kernel is compiled for).
        finish: Work on ``run``'s result outside the refusal memo (FlexAttention's sink
            correction), or None.

    The fields are plain attributes so that a test can stand in for a kernel (``monkeypatch``);
    nothing else changes them.
    """

    name: str
    handles: frozenset[str]
    prefers: frozenset[str]
    run: Callable[[Call], Any]
    switch: KernelSwitch | None = None
    unsupported: Callable[[Call], Exception | None] | None = None
    auto: Callable[[Call], bool] | None = None
    key: Callable[[Call], tuple] | None = None
    finish: Callable[[Call, Any], Any] | None = None

    def takes(self, needs: frozenset[str]) -> bool:
        """Whether a call that needs ``needs`` may come to this row (before modes and inputs are asked)."""
        return needs <= self.handles and (not self.prefers or bool(needs & self.prefers))


_BAND = frozenset({"window", "sinks"})
FLASH = Backend(
    "flash", _BAND, _BAND, flash.run, KernelSwitch("attn_core.ops.backends.flash's Triton kernel"),
    flash.unsupported, flash.auto, flash.key,
)  # fmt: skip
FLEX = Backend(
    "flex", _BAND, _BAND, flex.run, KernelSwitch("FlexAttention"), flex.unsupported, flex.auto, flex.key, flex.finish
)
SDPA = Backend("sdpa", frozenset({"mask", "dropout", "window"}), frozenset(), sdpa.run)
EXPLICIT = Backend("explicit", frozenset(NEEDS), frozenset(), explicit.run)

#: The backends in the order they are tried: the Triton kernel skips the blocks outside a
#: window and starts its online softmax at the sink (on an H200, a window of 512 at T = 4096
#: in 0.86 of full causal SDPA's time, against 1.3 for compiled FlexAttention; with sinks 1.8
#: against 2.9: ``data/gpu``); SDPA builds a window as a dense mask and has no sinks; the
#: explicit path computes everything.
TABLE = (FLASH, FLEX, SDPA, EXPLICIT)
_SWITCHES = {row.name: row.switch for row in TABLE if row.switch is not None}


def _plan(needs: frozenset[str]) -> tuple[Backend, ...]:
    rows = [row for row in TABLE if row.takes(needs)]
    last = next(i for i, row in enumerate(rows) if row.switch is None)  # takes every call it handles
    return tuple(rows[: last + 1])


# The rows that may answer each combination of needs, computed once: a call then costs one
# index into this tuple (Call.needs is its bits), not a set operation per row.
_PLANS = tuple(_plan(need_names(bits)) for bits in range(1 << len(NEEDS)))


def run(call: Call) -> Any:
    """Compute ``call`` on the first row of its plan that takes it: the output, or ``(output, weights)``.

    A fused kernel is skipped in ``"never"`` mode, in ``"auto"`` mode where its ``auto``
    condition fails or its ``key`` failed before, and in every mode for a call it does not
    support; a failure in ``"auto"`` mode is remembered and the next row answers.

    Shapes:
        as :func:`attn_core.ops.attention.attention`
    """
    for row in _PLANS[call.needs]:
        switch = row.switch
        if switch is None:  # SDPA or explicit: the end of every plan
            return row.run(call)
        chosen = switch.mode
        if chosen == "never" or (chosen == "auto" and not row.auto(call)) or row.unsupported(call) is not None:
            continue
        key = row.key(call)
        if chosen == "auto" and key in switch.refused:
            continue
        result = switch.attempt(key, row.run, call)
        if result is not None:
            return result if row.finish is None else row.finish(call, result)
    raise AssertionError("unreachable: every plan ends with a backend without a switch")


def plan(*needs: str) -> tuple[str, ...]:
    """The names of the rows that may answer a call needing ``needs``, in order (before modes and inputs).

    Raises:
        ValueError: A name not in :data:`~.call.NEEDS`.
    """
    for name in needs:
        check_choice("need", name, NEEDS)
    return tuple(row.name for row in _plan(frozenset(needs)))


def describe() -> str:
    """The table as text, three short lines a row: its mode and preference, what it handles, where "auto" runs it.

    Where ``"auto"`` runs a row is the first line of its ``auto``'s docstring: the code's own words.
    """
    lines = []
    for row in TABLE:
        handles = ", ".join(n for n in NEEDS if n in row.handles)
        prefers = ", ".join(n for n in NEEDS if n in row.prefers) or "any call"
        when = inspect.getdoc(row.auto).splitlines()[0] if row.auto else "(no mode: every call it handles)"
        lines += [
            f"{row.name} (mode: {mode(row.name) if row.switch else '-'}; preferred for: {prefers})",
            f"    handles: {handles}",
            f'    "auto" runs it on: {when}',
        ]
    return "\n".join(lines)


def _switch(name: str) -> KernelSwitch:
    check_choice("name", name, tuple(_SWITCHES))
    return _SWITCHES[name]


def set_mode(name: str, mode: str) -> str:
    """Choose when the optional kernel ``name`` (``"flash"``, ``"flex"``) runs; return its previous mode.

    Args:
        name: The row's name.
        mode: One of :data:`MODES`.

    Raises:
        ValueError: An unknown ``name`` (SDPA and the explicit path have no mode) or ``mode``.
    """
    return _switch(name).set_mode(mode)


def mode(name: str) -> str:
    """The current mode of the optional kernel ``name`` (:func:`set_mode`).

    Raises:
        ValueError: An unknown ``name``.
    """
    return _switch(name).mode


@contextlib.contextmanager
def use(**modes: str) -> Iterator[None]:
    """Set kernels' modes for a ``with`` block (``with use(flash="always"):``); restore them on exit, errors included.

    Raises:
        ValueError: An unknown name or mode (checked before any mode is set).
    """
    for name, value in modes.items():
        _switch(name)
        check_choice("mode", value, MODES)
    previous = {name: set_mode(name, value) for name, value in modes.items()}
    try:
        yield
    finally:
        for name, value in previous.items():
            set_mode(name, value)
