"""Sliding windows and attention sinks on a fused kernel: FlexAttention's block mask and a log-sum-exp correction.

Handed to ``scaled_dot_product_attention`` as a dense ``(T_q, T_k)`` mask, a sliding window
computes every score and throws most of them away; PyTorch's FlexAttention
(``torch.nn.attention.flex_attention``) takes the window as a *block mask* and skips the
blocks that lie wholly outside it, so a window of ``w`` costs about ``w / T`` of full
attention. Sinks (gpt-oss) add one logit per head to every softmax denominator, which no
fused kernel offers; but a kernel that returns each row's log-sum-exp ``ℓ = log Σ_k e^{s_k}``
gives them for free, since the weights with a sink are those without, times
``e^ℓ / (e^ℓ + e^{sink})``::

    out_with_sink = out · σ(ℓ − sink)

(a fully masked row: ``ℓ = −∞``, so its output stays 0, as on the explicit path).

:func:`attn_core.ops.attention.attention` takes this path on CUDA (compiled FlexAttention) when a
window or sinks meet no other option the kernel lacks (weights, soft-capping, dropout, an
explicit mask) and the Triton FlashAttention kernel did not take them first
(:mod:`attn_core.ops.backends.switch`); elsewhere, and on the CPU by default, it keeps the
explicit path. :func:`set_flex_mode` forces either (the tests compare the two in float64
on the CPU, where FlexAttention runs unfused).

Shape legend:
    B, H, H_kv  batch, query heads, key/value heads (``H_kv`` divides ``H``)
    T_q, T_k    queries and keys; ``D`` query/key width, ``D_v`` value width
"""

from __future__ import annotations

import functools
import warnings

import torch

from .switch import KERNEL_MODES, KernelSwitch

__all__ = [
    "FLEX_MODES",
    "HAS_FLEX",
    "set_flex_mode",
    "flex_mode",
    "use_flex",
    "sink_correction",
    "flex_attention",
    "flex_or_none",
    "FLEX",
]

try:  # PyTorch >= 2.5
    from torch.nn.attention import flex_attention as _flex_module

    HAS_FLEX = True
except ImportError:  # pragma: no cover - older PyTorch: the explicit path only
    _flex_module = None
    HAS_FLEX = False

#: ``"auto"``: FlexAttention on CUDA only; ``"always"``: wherever it runs (CPU: unfused, for tests); ``"never"``.
FLEX_MODES = KERNEL_MODES
FLEX = KernelSwitch("FlexAttention")


def set_flex_mode(mode: str) -> str:
    """Choose when :func:`~attn_core.ops.attention.attention` uses FlexAttention; return the previous mode.

    Raises:
        ValueError: ``mode`` not one of :data:`FLEX_MODES`.
    """
    return FLEX.set_mode(mode)


def flex_mode() -> str:
    """The current mode (:func:`set_flex_mode`)."""
    return FLEX.mode


def _key(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple:
    return (q.shape[-1], v.shape[-1], q.shape[-2], k.shape[-2], q.dtype, str(q.device))


def use_flex(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether attention on ``q, k, v`` may take the FlexAttention path in the current mode.

    ``"auto"`` asks for CUDA, a dtype the fused kernel computes (float16, bfloat16,
    float32), head widths of at least 16 (the compiled kernel's minimum in PyTorch 2.11)
    and a shape it has not refused before (:func:`flex_or_none`).
    """
    if not HAS_FLEX or q.dim() != 4:
        return False
    fused_dtype = q.dtype in (torch.float16, torch.bfloat16, torch.float32)
    auto = q.is_cuda and fused_dtype and min(q.shape[-1], v.shape[-1]) >= 16
    return FLEX.allows(_key(q, k, v), auto=auto)


def flex_or_none(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: float,
    is_causal: bool,
    window: int | None,
    return_lse: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """:func:`flex_attention`, or ``None`` where the compiled kernel cannot be built for this shape (``"auto"`` mode).

    Compiling FlexAttention can fail for shapes its templates do not cover (measured on an
    H200 with PyTorch 2.11: heads of width 8; width 16 with T = 100). In ``"auto"`` mode
    that is no error of the caller's: the shape is remembered (:class:`KernelSwitch`) and
    the explicit path answers. In ``"always"`` mode the error propagates.

    Shapes:
        as :func:`flex_attention`
    """
    run = functools.partial(
        flex_attention, q, k, v, scale=scale, is_causal=is_causal, window=window, return_lse=return_lse
    )
    return FLEX.attempt(_key(q, k, v), run)


def sink_correction(out: torch.Tensor, lse: torch.Tensor, sinks: torch.Tensor) -> torch.Tensor:
    """Renormalise attention outputs for one extra logit per head in every denominator (gpt-oss's sinks).

    ``out · σ(lse − sink)`` with ``lse`` the natural log-sum-exp of each row's scores:
    the sink takes its share ``e^{sink} / (e^{lse} + e^{sink})`` of the mass and gives no value.
    Computed in at least float32, returned in ``out``'s dtype.

    Shapes:
        out: ``(B, H, T_q, D_v)``; lse: ``(B, H, T_q)``; sinks: ``(H,)``; output: as ``out``
    """
    work = torch.promote_types(out.dtype, torch.float32)
    keep = torch.sigmoid(lse.to(work) - sinks.to(work)[:, None])  # (B, H, T_q)
    return (out.to(work) * keep[..., None]).to(out.dtype)


@functools.lru_cache(maxsize=32)
def _block_mask(T_q: int, T_k: int, window: int | None, causal: bool, device: str):
    """The block mask of a causal band aligned bottom-right (query ``i`` is position ``T_k − T_q + i``); cached."""
    shift = T_k - T_q

    def band(b, h, q_idx, kv_idx):
        pos = q_idx + shift
        allowed = pos >= kv_idx
        if window is not None:
            allowed = allowed & (pos - kv_idx < window)
        return allowed

    if not causal:
        return None
    return _flex_module.create_block_mask(band, None, None, T_q, T_k, device=device)


@functools.lru_cache(maxsize=1)
def _compiled_flex():
    return torch.compile(_flex_module.flex_attention, dynamic=False)


def flex_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: float,
    is_causal: bool,
    window: int | None,
    return_lse: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """FlexAttention with a bottom-right causal (and sliding-window) block mask; returns ``(output, lse)``.

    Compiled (fused) on CUDA, eager (unfused, but the same function) elsewhere. With
    ``return_lse=False`` the kernel does not write the log-sum-exp, and ``lse`` is None.

    Shapes:
        q: ``(B, H, T_q, D)``; k: ``(B, H_kv, T_k, D)``; v: ``(B, H_kv, T_k, D_v)``
        output: ``(B, H, T_q, D_v)``; lse: ``(B, H, T_q)`` natural log-sum-exp of the scaled scores
    """
    T_q, T_k = q.shape[-2], k.shape[-2]
    block_mask = _block_mask(T_q, T_k, window, is_causal, str(q.device))
    kwargs = dict(block_mask=block_mask, scale=scale, enable_gqa=k.shape[-3] != q.shape[-3])  # GQA, MQA
    fn = _compiled_flex() if q.is_cuda else _flex_module.flex_attention
    with warnings.catch_warnings():
        # Eager FlexAttention warns that it is unfused: on the CPU that is what the tests want.
        warnings.simplefilter("ignore", UserWarning)
        if not return_lse:
            return fn(q, k, v, **kwargs), None
        if hasattr(_flex_module, "AuxRequest"):  # PyTorch >= 2.9
            out, aux = fn(q, k, v, return_aux=_flex_module.AuxRequest(lse=True), **kwargs)
            return out, aux.lse
        out, lse = fn(q, k, v, return_lse=True, **kwargs)
        return out, lse
