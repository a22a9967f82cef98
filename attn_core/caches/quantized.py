"""An int8 key/value cache: asymmetric min-max quantization, keys per channel, values per token.

A cache entry in int8 takes a quarter of the bytes of float32 (half of bf16), plus the
scales and zero points that undo the rounding. **Asymmetric min-max** quantization maps
the range ``[min, max]`` of a group of numbers onto the 256 codes of int8::

    scale = (max - min) / 255        zero = min + 128 * scale
    q = clamp(round((x - zero) / scale), -128, 127)        x ~ q * scale + zero

so every number comes back within ``scale / 2`` of itself (round to nearest), and the
group's ``min`` and ``max`` come back (up to float rounding) at the codes -128 and 127.

*Which* numbers share a scale decides the error. Keys have a few **outlier channels**:
channels whose values are large at every token. A scale shared along a token's channels
(per token) is set by the outlier and crushes the small channels to a few codes; a scale
shared along the tokens of one channel (per channel) sees only that channel's range.
Values have no such channels, and each output mixes values token by token with the
attention weights, so a per-token error stays in its own token. This is KIVI's choice
(Liu et al. 2024): keys per channel, values per token.

Per-channel statistics need several tokens. :class:`QuantizedKVCache` therefore keeps the
newest ``< group`` tokens in full precision (the *residual*) and quantizes them as one
block of ``group`` tokens when it fills up; values are quantized by the same blocks
(per token, so the block changes nothing but keeps both in step).

Shape legend:
    B      batch size
    H_kv   key/value heads stored
    T      positions stored so far; ``T_new`` added by one update
    D      width of one key/value head
    G      ``group``: tokens quantized together
"""

from __future__ import annotations

import torch

from ..checks import check_tensor

__all__ = ["quantize_int8", "dequantize_int8"]

_QMIN, _QMAX = -128, 127


def _stats_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32, or float64 for float64 input: scales of bf16/fp16 input are kept in float32."""
    return torch.promote_types(dtype, torch.float32)


def quantize_int8(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Quantize ``x`` to int8 with one scale and zero point per slice along ``dim`` (min-max, asymmetric).

    The statistics (``min``, ``max``) are reduced over ``dim``: ``dim`` is the axis whose
    entries *share* a scale. For keys ``(B, H_kv, G, D)`` per channel that is the token
    axis (``dim=2``); for values per token, the channel axis (``dim=-1``).

    A slice whose entries are all equal gets ``scale = 1`` and comes back exactly (a zero
    range would divide by zero). Non-finite input is not checked (that would read the data
    on the device) and gives non-finite scales.

    Args:
        x: A floating-point tensor, at least one entry along ``dim``.
        dim: The axis reduced over (negative counts from the end).

    Returns:
        ``(q, scale, zero)``: ``q`` int8 of ``x``'s shape; ``scale`` and ``zero`` of
        ``x``'s shape with ``dim`` of size 1 (``keepdim``), float32 (float64 for float64
        input). ``dequantize_int8(q, scale, zero)`` is within ``scale / 2`` of ``x``.

    Raises:
        TypeError: ``x`` is not a floating-point tensor; ``dim`` is not an int.
        ValueError: ``dim`` is out of range, or ``x`` has no entry along it.

    Shapes:
        x: ``(..., N, ...)`` with ``N`` at ``dim``
        returns: q ``(..., N, ...)`` int8; scale, zero ``(..., 1, ...)``
    """
    check_tensor("x", x, floating=True)
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"dim must be an int, got {type(dim).__name__} ({dim!r})")
    if not -x.dim() <= dim < x.dim():
        raise ValueError(f"dim must be in [{-x.dim()}, {x.dim()}) for x of shape {tuple(x.shape)}, got dim={dim}")
    if x.shape[dim] == 0:
        raise ValueError(f"x has no entry along dim={dim} to take statistics over: shape {tuple(x.shape)}")
    xf = x.detach().to(_stats_dtype(x.dtype))
    lo, hi = xf.amin(dim=dim, keepdim=True), xf.amax(dim=dim, keepdim=True)
    span = hi - lo
    scale = torch.where(span > 0, span / (_QMAX - _QMIN), torch.ones_like(span))
    zero = lo - _QMIN * scale  # the value that the code 0 stands for
    q = torch.round((xf - zero) / scale).clamp_(_QMIN, _QMAX).to(torch.int8)
    return q, scale, zero


def dequantize_int8(
    q: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """The values int8 codes stand for: ``q * scale + zero``, in ``dtype``.

    Args:
        q: int8 codes (from :func:`quantize_int8`).
        scale: Step between two codes; broadcasts to ``q`` (the same number of axes).
        zero: The value of the code 0; the shape of ``scale``.
        dtype: The floating-point dtype returned.

    Raises:
        TypeError: ``q`` is not int8, ``scale``/``zero`` not floating point, ``dtype`` not
            a floating-point dtype.
        ValueError: ``scale`` and ``zero`` differ in shape, or do not broadcast to ``q``
            axis by axis.

    Shapes:
        q: ``(..., N, ...)``; scale, zero: ``(..., 1, ...)`` (or any shape of ``q``'s
        rank that broadcasts to it)
        returns: ``q``'s shape, ``dtype``
    """
    check_tensor("q", q)
    if q.dtype != torch.int8:
        raise TypeError(f"q must be an int8 tensor, got dtype={q.dtype}")
    check_tensor("scale", scale, floating=True)
    check_tensor("zero", zero, floating=True)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
    if scale.shape != zero.shape:
        raise ValueError(f"scale and zero must have the same shape, got {tuple(scale.shape)} and {tuple(zero.shape)}")
    fits = scale.dim() == q.dim() and all(s in (1, n) for s, n in zip(scale.shape, q.shape))
    if not fits:
        raise ValueError(
            f"scale and zero of shape {tuple(scale.shape)} do not broadcast to q of shape {tuple(q.shape)}: "
            f"each axis must be 1 or q's size (as quantize_int8 returns them, keepdim=True)"
        )
    return (q.to(scale.dtype) * scale + zero).to(dtype)
