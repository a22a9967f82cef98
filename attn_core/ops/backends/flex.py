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

In the table of backends (:mod:`attn_core.ops.backends`) FlexAttention comes second, after
the Triton FlashAttention kernel, for a window or sinks without the options it lacks
(weights, soft-capping, dropout, an explicit mask). This module gives its row: why a call is
:func:`unsupported`, when ``"auto"`` mode runs it (:func:`auto`: CUDA, where it is compiled),
the :func:`key` a failure to compile is remembered under, :func:`run` and :func:`finish`.
``backends.use(flex="always")`` runs it on the CPU too (unfused, eager): how the tests compare
it with the explicit path in float64.

Shape legend:
    B, H, H_kv  batch, query heads, key/value heads (``H_kv`` divides ``H``)
    T_q, T_k    queries and keys; ``D`` query/key width, ``D_v`` value width
"""

from __future__ import annotations

import functools
import warnings

import torch

from .call import Call

__all__ = ["HAS_FLEX", "flex_attention", "sink_correction", "unsupported", "auto", "key", "run", "finish"]

try:  # PyTorch >= 2.5
    from torch.nn.attention import flex_attention as _flex_module

    HAS_FLEX = True
except ImportError:  # pragma: no cover - older PyTorch: the explicit path only
    _flex_module = None
    HAS_FLEX = False

_FUSED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def unsupported(call: Call) -> Exception | None:
    """Why FlexAttention cannot compute ``call``, as the error :func:`flex_attention` raises; None if it can.

    Here: PyTorch without FlexAttention, tensors that are not ``(B, H, T, D)``.
    """
    if not HAS_FLEX:
        return ImportError("FlexAttention needs PyTorch >= 2.5 (torch.nn.attention.flex_attention)")
    if call.q.dim() != 4:
        return ValueError(f"FlexAttention takes q of shape (B, H, T, D), got q.shape={tuple(call.q.shape)}")
    return None


def auto(call: Call) -> bool:
    """CUDA, float16/bfloat16/float32, head widths >= 16.

    ``"auto"`` mode's condition: where the compiled (fused) kernel runs; 16 is its smallest
    head width in PyTorch 2.11.
    """
    q = call.q
    return q.is_cuda and q.dtype in _FUSED_DTYPES and min(q.shape[-1], call.v.shape[-1]) >= 16


def key(call: Call) -> tuple:
    """What a compiled kernel is built for, and a failure remembered under: widths, lengths, dtype, device.

    Compiling can fail for shapes its templates do not cover (measured on an H200 with
    PyTorch 2.11: heads of width 8; width 16 with T = 100).
    """
    q, k = call.q, call.k
    return (q.shape[-1], call.v.shape[-1], q.shape[-2], k.shape[-2], q.dtype, str(q.device))


def run(call: Call) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The table's entry: the kernel on a call :func:`unsupported` accepted; ``(output, lse)``, lse only with sinks.

    Shapes:
        as :func:`flex_attention`
    """
    return _flex_attention(
        call.q, call.k, call.v, call.softmax_scale, call.is_causal, call.window, return_lse=call.sinks is not None
    )


def finish(call: Call, result: tuple[torch.Tensor, torch.Tensor | None]) -> torch.Tensor:
    """The output from :func:`run`'s ``(output, lse)``: renormalised for the call's sinks, if any.

    A step after the kernel, not in it: the table remembers a failure of :func:`run` as the
    kernel's, and this is no compiler's.

    Shapes:
        as :func:`sink_correction`
    """
    out, lse = result
    return out if call.sinks is None else sink_correction(out, lse, call.sinks)


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

    Raises:
        ImportError: PyTorch has no FlexAttention (before 2.5).
        ValueError: Tensors that are not ``(B, H, T, D)``.
    """
    error = unsupported(Call(q, k, v))
    if error is not None:
        raise error
    return _flex_attention(q, k, v, scale, is_causal, window, return_lse)


def _flex_attention(q, k, v, scale, is_causal, window, return_lse):
    """:func:`flex_attention` after its check."""
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
