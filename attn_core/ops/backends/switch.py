"""When :func:`attn_core.attention` hands a sliding window or sinks to a fused kernel.

SDPA has no window that skips work and no sinks, so without a fused kernel both take the
explicit path, which builds every ``T_q × T_k`` score. Two fused kernels compute them
without that matrix: the Triton FlashAttention kernel (:mod:`attn_core.ops.backends.flash`) and PyTorch's
FlexAttention (:mod:`attn_core.ops.backends.flex`). On CUDA, :func:`~attn_core.attention` tries the
Triton kernel first, then FlexAttention, then the explicit path. (On an H200, with a
window of 512 at T = 4096, ``attention()`` on the Triton kernel took 0.86 of full causal
SDPA's time, against 1.3 for compiled FlexAttention; with sinks 1.8 against 2.9:
``data/gpu``.)

Each kernel has a :class:`KernelSwitch`, a process-wide mode:

* ``"auto"`` (the default): on CUDA, for the inputs the kernel computes. A kernel that
  fails to build for some inputs (a compiler's limit, not the caller's error) is
  remembered, with a warning, and those inputs go to the next option from then on.
* ``"always"``: wherever the kernel runs, the CPU included (Triton's interpreter, eager
  FlexAttention): how the tests compare the kernels with the explicit path. Errors propagate.
* ``"never"``: the next option.

:func:`attn_core.ops.backends.flex.set_flex_mode` and :func:`set_flash_mode` set them. The Triton
kernel's switch lives here, not in :mod:`attn_core.ops.backends.flash`, so that reading it does not
import Triton.
"""

from __future__ import annotations

import functools
import importlib.util
import warnings
from collections.abc import Callable
from typing import TypeVar

import torch

from ...checks import check_choice

__all__ = ["KERNEL_MODES", "KernelSwitch", "FLASH", "set_flash_mode", "flash_mode", "use_flash"]

KERNEL_MODES = ("auto", "always", "never")
_Result = TypeVar("_Result")


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
            ValueError: ``mode`` not one of :data:`KERNEL_MODES`.
        """
        check_choice("mode", mode, KERNEL_MODES)
        previous, self.mode = self.mode, mode
        return previous

    def allows(self, key: tuple, *, auto: bool) -> bool:
        """Whether the kernel may run: always, never, or in ``"auto"`` mode if ``auto`` and ``key`` never failed."""
        if self.mode == "auto":
            return auto and key not in self.refused
        return self.mode == "always"

    def attempt(self, key: tuple, run: Callable[[], _Result]) -> _Result | None:
        """``run()``, or ``None`` if it raises in ``"auto"`` mode (``key`` is then refused from now on).

        Compilers refuse some inputs with errors that have no common type (Inductor's
        lowering errors, Triton's out-of-resources), so any exception counts; in
        ``"always"`` mode it propagates.
        """
        try:
            return run()
        except Exception as error:  # noqa: BLE001 - see the docstring
            if self.mode == "always":
                raise
            self.refused.add(key)
            warnings.warn(
                f"{self.name} failed for {key} ({type(error).__name__}: {error}); "
                "those inputs take the next path from now on",
                RuntimeWarning,
                stacklevel=3,
            )
            return None


FLASH = KernelSwitch("attn_core.ops.backends.flash's Triton kernel")
_FLASH_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def set_flash_mode(mode: str) -> str:
    """Choose when :func:`~attn_core.attention` uses the Triton FlashAttention kernel; return the previous mode.

    Raises:
        ValueError: ``mode`` not one of :data:`KERNEL_MODES`.
    """
    return FLASH.set_mode(mode)


def flash_mode() -> str:
    """The current mode of the Triton kernel (:func:`set_flash_mode`)."""
    return FLASH.mode


def flash_route(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, is_causal: bool, window, sinks) -> tuple | None:
    """The kernel's key if attention on ``q, k, v`` may take the Triton kernel now, else None.

    :func:`use_flash`, answered with the key that :meth:`KernelSwitch.attempt` remembers a
    failure under: what a kernel is compiled for (head width, group size, options, dtype,
    device). :func:`attn_core.attention` calls this once per call; the shapes are read once,
    because on a GPU the host's microseconds before a launch are time the device waits.
    """
    if FLASH.mode == "never" or q.dim() != 4 or k.dim() != 4 or v.shape != k.shape:
        return None
    B, H, T_q, D = q.shape
    B_k, H_kv, T_k, D_k = k.shape
    if not (q.dtype == k.dtype == v.dtype and q.dtype in _FLASH_DTYPES and 16 <= D <= 256 and D & (D - 1) == 0):
        return None
    # attention() broadcasts a batch of 1 in k and v; the kernel reads one batch per query batch
    if B_k != B or D_k != D or H % H_kv or (is_causal and T_q > T_k):
        return None
    device = q.device
    if k.device != device or v.device != device or (sinks is not None and sinks.device != device):
        return None  # torch's own error, on the next path, names the devices
    auto = device.type == "cuda" and _has_triton() and not torch.compiler.is_compiling()
    key = (D, H // H_kv, is_causal, window is not None, sinks is not None, q.dtype, str(device))
    return key if FLASH.allows(key, auto=auto) else None


def use_flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, is_causal: bool, window, sinks) -> bool:
    """Whether attention on ``q, k, v`` may take the Triton kernel in the current mode.

    The kernel's own conditions come first, in every mode (4-D tensors of one dtype and
    device, float32/float16/bfloat16, one batch size, values as wide as keys, a head width
    that is a power of two in [16, 256], ``H_kv`` dividing ``H``, causal only with
    ``T_q <= T_k``). ``"auto"`` also asks for CUDA, Triton installed, not inside
    ``torch.compile`` (which compiles FlexAttention itself), and inputs that never failed
    to build.
    """
    return flash_route(q, k, v, is_causal=is_causal, window=window, sinks=sinks) is not None


@functools.cache
def _has_triton() -> bool:
    """Whether Triton is installed (found, not imported: importing it takes a fraction of a second)."""
    return importlib.util.find_spec("triton") is not None
