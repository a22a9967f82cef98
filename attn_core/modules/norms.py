"""Normalisation layers written out: LayerNorm (Ba et al., 2016) and RMSNorm (Zhang & Sennrich, 2019).

Both rescale each token vector on its own (over the last axis, never across tokens or
the batch), then apply a learned per-feature gain:

    LayerNorm(x) = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias
    RMSNorm(x)   =  x            / sqrt(mean(x²) + eps) * weight

RMSNorm drops the centring and the bias: one reduction instead of two, and in practice
no loss in quality (LLaMA, Mistral, DeepSeek use it).

The statistics are computed in (at least) float32 even for float16/bfloat16 inputs and
the result is cast back to the input's dtype: a float16 sum of squares of a few hundred
features overflows (its largest value is 65504), and a float16 mean loses digits.

Shape legend:
    ...  any leading dimensions, typically ``(B, T)``
    d    the normalised width (``d_model``)
"""

from __future__ import annotations

import torch
from torch import nn

from ..checks import check_choice, check_int, check_number, check_tensor

__all__ = [
    "LayerNorm",
    "RMSNorm",
    "HeadsRMSNorm",
    "make_norm",
    "NORM_KINDS",
    "NORM_POSITIONS",
    "QK_NORM_KINDS",
    "make_qk_norm",
    "check_qk_norm",
]

#: The names :func:`make_norm` (and the blocks' ``norm=`` argument) accept.
NORM_KINDS = ("layernorm", "rmsnorm")
#: Where a transformer block puts its normalisation (``norm_position=``): before the
#: sub-layer (``x + f(norm(x))``), after the residual addition (``norm(x + f(x))``), or
#: both before and after the sub-layer, inside the residual branch (``"sandwich"``,
#: Gemma 2/3: ``x + norm₂(f(norm₁(x)))``), or after the sub-layer only, inside the residual
#: branch (``"post_sublayer"``, OLMo 2/3: ``x + norm(f(x))``).
NORM_POSITIONS = ("pre", "post", "sandwich", "post_sublayer")
#: The QK-norms of an attention layer (``qk_norm=``): ``False`` none, ``True`` one RMSNorm per
#: head over its ``D`` dimensions (a gain shared by the heads: Qwen3, Gemma 3), ``"all_heads"``
#: one RMSNorm over all ``H·D`` query (``H_kv·D`` key) dimensions of a token, as OLMo 2/3 apply
#: it to the whole projection before the heads are split (:class:`HeadsRMSNorm`).
QK_NORM_KINDS = (False, True, "all_heads")


def _check_input(x: object, d: int) -> torch.Tensor:
    return check_tensor("x", x, ("...", ("d", d)), floating=True)


def _work_dtype(dtype: torch.dtype) -> torch.dtype:
    # float16/bfloat16 -> float32; float32 and float64 stay as they are.
    return torch.promote_types(dtype, torch.float32)


class LayerNorm(nn.Module):
    """Layer normalisation: centre, scale to unit variance, then gain and bias.

    Equal to ``torch.nn.LayerNorm(d, eps=eps, bias=bias)``. The variance is the
    *biased* one (divide by ``d``, not ``d - 1``), as in PyTorch and the paper.

    Args:
        d: Width of the last axis.
        eps: Added to the variance so that a constant vector does not divide by zero.
        bias: Learn an additive bias (``False``: gain only, as in some recent models).

    Attributes:
        weight: ``(d,)`` gain, initialised to ones.
        bias: ``(d,)`` bias, initialised to zeros, or ``None``.

    Shapes:
        x: ``(..., d)``; output: ``(..., d)``, same dtype as ``x``.

    Raises:
        TypeError: A non-int width, or an input that is not a floating tensor.
        ValueError: A width < 1, a negative eps, or an input whose last axis is not ``d``.
    """

    def __init__(self, d: int, eps: float = 1e-5, bias: bool = True) -> None:
        super().__init__()
        self.d, self.eps = check_int("d", d), check_number("eps", eps, low=0.0)
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise every vector along the last axis.

        Shapes:
            x: ``(..., d)``; output: ``(..., d)``
        """
        _check_input(x, self.d)
        xw = x.to(_work_dtype(x.dtype))  # statistics in float32 for half inputs
        mean = xw.mean(dim=-1, keepdim=True)  # (..., 1)
        centred = xw - mean  # (..., d)
        var = (centred * centred).mean(dim=-1, keepdim=True)  # (..., 1), biased variance
        y = centred * torch.rsqrt(var + self.eps)  # (..., d)
        # A half-precision gain times the float32 y is float32: the product casts it, exactly.
        y = y * self.weight
        if self.bias is not None:
            y = y + self.bias
        return y.to(x.dtype)

    def extra_repr(self) -> str:
        return f"d={self.d}, eps={self.eps:g}, bias={self.bias is not None}"


class RMSNorm(nn.Module):
    """Root-mean-square normalisation: scale to unit RMS, then a gain; no centring, no bias.

    Equal to ``torch.nn.RMSNorm(d, eps=eps)``. Note the default ``eps``: ``1e-6`` here
    (LLaMA's value); PyTorch's default ``None`` means ``torch.finfo(dtype).eps``.

    Args:
        d: Width of the last axis.
        eps: Added to the mean square so that a zero vector does not divide by zero.

    Attributes:
        weight: ``(d,)`` gain, initialised to ones.

    Shapes:
        x: ``(..., d)``; output: ``(..., d)``, same dtype as ``x``.

    Raises:
        TypeError: A non-int width, or an input that is not a floating tensor.
        ValueError: A width < 1, a negative eps, or an input whose last axis is not ``d``.
    """

    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.d, self.eps = check_int("d", d), check_number("eps", eps, low=0.0)
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise every vector along the last axis.

        Shapes:
            x: ``(..., d)``; output: ``(..., d)``
        """
        _check_input(x, self.d)
        xw = x.to(_work_dtype(x.dtype))  # statistics in float32 for half inputs
        mean_square = (xw * xw).mean(dim=-1, keepdim=True)  # (..., 1)
        y = xw * torch.rsqrt(mean_square + self.eps)  # (..., d)
        return (y * self.weight).to(x.dtype)  # a half gain times float32 y: float32, cast exactly

    def extra_repr(self) -> str:
        return f"d={self.d}, eps={self.eps:g}"


class HeadsRMSNorm(RMSNorm):
    """An :class:`RMSNorm` over all heads of a token at once, taking the heads split: OLMo 2/3's QK-norm.

    OLMo normalises the query projection's whole output (``H·D`` wide, one gain per
    dimension) before splitting it into heads; this module does the same to a tensor whose
    heads are already split, so that an attention layer calls it where it calls a per-head
    norm. Unlike the per-head norm, one head's scale changes the others' (they share the
    root mean square).

    Args:
        n_heads: ``H`` (``H_kv`` for keys).
        head_dim: ``D``.
        eps: As :class:`RMSNorm`'s.

    Attributes:
        weight: ``(H·D,)`` gain, head ``h``'s in ``[h·D, (h+1)·D)`` (the projection's row order).

    Shapes:
        x: ``(B, H, T, D)``; output: ``(B, H, T, D)``, same dtype as ``x``.
    """

    def __init__(self, n_heads: int, head_dim: int, eps: float = 1e-6) -> None:
        super().__init__(check_int("n_heads", n_heads) * check_int("head_dim", head_dim), eps=eps)
        self.n_heads, self.head_dim = n_heads, head_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise each token's ``H·D`` values together.

        Shapes:
            x: ``(B, H, T, D)``; output: ``(B, H, T, D)``
        """
        check_tensor("x", x, ("B", ("n_heads", self.n_heads), "T", ("head_dim", self.head_dim)), floating=True)
        B, H, T, D = x.shape
        merged = x.transpose(1, 2).reshape(B, T, H * D)  # (B, H, T, D) -> (B, T, H·D): a token's heads side by side
        return super().forward(merged).view(B, T, H, D).transpose(1, 2)  # (B, T, H·D) -> (B, H, T, D)

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}, head_dim={self.head_dim}, eps={self.eps:g}"


def make_qk_norm(kind: bool | str, n_heads: int, head_dim: int, eps: float = 1e-6) -> nn.Module | None:
    """The QK-norm of ``kind`` (:data:`QK_NORM_KINDS`) for ``n_heads`` heads of width ``head_dim``, or None."""
    if check_qk_norm(kind) == "all_heads":
        return HeadsRMSNorm(n_heads, head_dim, eps=eps)
    return RMSNorm(head_dim, eps=eps) if kind else None


def check_qk_norm(kind: object) -> bool | str:
    """``kind`` if it is one of :data:`QK_NORM_KINDS`; a TypeError for another type (1 is not True), else a
    ValueError naming it."""
    if not isinstance(kind, (bool, str)):
        raise TypeError(f"qk_norm must be a bool or 'all_heads', got qk_norm={kind!r} ({type(kind).__name__})")
    if kind not in QK_NORM_KINDS:
        raise ValueError(f"qk_norm must be one of {QK_NORM_KINDS}, got qk_norm={kind!r}")
    return kind


def make_norm(kind: str, d: int, eps: float | None = None) -> nn.Module:
    """``"layernorm"`` -> :class:`LayerNorm`, ``"rmsnorm"`` -> :class:`RMSNorm`, of width ``d``.

    ``eps=None`` keeps each norm's own default (``1e-5`` for LayerNorm, ``1e-6`` for
    RMSNorm); LLaMA-2/3 and Mistral use ``1e-5``, Qwen3 and DeepSeek ``1e-6``.
    """
    check_choice("norm", kind, NORM_KINDS)
    cls = LayerNorm if kind == "layernorm" else RMSNorm
    return cls(d) if eps is None else cls(d, eps=eps)
