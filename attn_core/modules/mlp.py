"""Position-wise MLPs: the GELU feed-forward of GPT-2 and the gated SwiGLU of PaLM and LLaMA (GeGLU: Gemma).

Attention mixes information *across* positions; the MLP then transforms each position's
vector on its own, with the same weights at every position.

* :class:`FeedForward`: ``down(gelu(up(x)))``, hidden width ``4·d_model`` by default; the
  exact GELU (``"gelu"``) or GPT-2's tanh approximation (``"gelu_tanh"``).
* :class:`SwiGLU`: ``down(silu(gate(x)) * up(x))``, hidden width ``⅔·4·d_model`` rounded
  up (:func:`swiglu_hidden_dim`), so that it costs what the GELU MLP costs. With
  ``activation="gelu_tanh"`` the gate is the tanh GELU instead: Gemma's GeGLU
  (``"geglu_tanh"``), the same three matrices.
* :class:`ClampedSwiGLU`: gpt-oss's experts, ``down((clamp(up) + 1) · g·σ(α·g))`` with
  ``g = min(gate, limit)`` and ``up`` clamped to ``[-limit, limit]`` (``limit`` 7, ``α`` 1.702).
* :func:`make_mlp` builds either from its name, as the blocks' ``mlp=`` argument does.

Shape legend:
    ...      any leading dimensions, typically ``(B, T)``
    d_model  width of the input and output, ``d_ff`` the hidden width
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..checks import check_choice, check_int, check_number, check_tensor
from .dropout import Dropout

__all__ = [
    "FeedForward",
    "SwiGLU",
    "ClampedSwiGLU",
    "swiglu_hidden_dim",
    "mlp_hidden_dim",
    "make_mlp",
    "MLP_KINDS",
    "GELU_APPROXIMATIONS",
    "GLU_ACTIVATIONS",
]

#: The names :func:`make_mlp` (and the blocks' ``mlp=`` argument) accept. ``"gelu"`` is the
#: exact GELU, ``x·Φ(x)``; ``"gelu_tanh"`` is the tanh approximation GPT-2 was trained with
#: (``0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))``), the same two matrices. ``"geglu_tanh"`` is
#: the gated MLP with that GELU as its gate (Gemma 2/3), SwiGLU's three matrices.
MLP_KINDS = ("gelu", "swiglu", "gelu_tanh", "geglu_tanh")
#: :class:`FeedForward`'s ``approximate=`` choices, as ``torch.nn.functional.gelu`` names them.
GELU_APPROXIMATIONS = ("none", "tanh")
#: :class:`SwiGLU`'s ``activation=`` choices: the gate's nonlinearity.
GLU_ACTIVATIONS = ("silu", "gelu_tanh")
_GLU_GATES = {"silu": F.silu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}


class FeedForward(nn.Module):
    """Position-wise MLP with a GELU: ``down(gelu(up(x)))`` (GPT-2, BERT).

    Every position goes through the same two-layer network on its own: attention mixes
    information *across* positions, the MLP transforms each position's vector.

    Args:
        d_model: Width of the input and output.
        d_ff: Hidden width; default ``4 * d_model`` (the original transformer's ratio).
        dropout: Dropout on the output, in training mode.
        bias: Give both linear layers a bias (GPT-2 does).
        approximate: ``"none"``: the exact GELU ``x·Φ(x)`` (the default); ``"tanh"``: GPT-2's
            tanh approximation, as ``torch.nn.functional.gelu(approximate="tanh")``.

    Shapes:
        x: ``(..., d_model)``; output: ``(..., d_model)``
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int | None = None,
        *,
        dropout: float = 0.0,
        bias: bool = True,
        approximate: str = "none",
    ) -> None:
        super().__init__()
        check_int("d_model", d_model)
        d_ff = mlp_hidden_dim("gelu", d_model, d_ff)
        self.approximate = check_choice("approximate", approximate, GELU_APPROXIMATIONS)
        self.d_model, self.d_ff = d_model, d_ff
        self.up_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = Dropout(check_number("dropout", dropout, low=0.0, high=1.0, high_open=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Shapes: x ``(..., d_model)`` -> ``(..., d_model)``."""
        check_tensor("x", x, ("...", ("d_model", self.d_model)), like=self.up_proj.weight)
        return self.dropout(self.down_proj(F.gelu(self.up_proj(x), approximate=self.approximate)))

    def extra_repr(self) -> str:
        gelu = "" if self.approximate == "none" else f", approximate={self.approximate!r}"
        return f"d_model={self.d_model}, d_ff={self.d_ff}{gelu}"


def swiglu_hidden_dim(d_model: int, multiple_of: int = 8) -> int:
    """LLaMA's SwiGLU hidden width: ``⅔ · 4 · d_model``, rounded *up* to a multiple of ``multiple_of``.

    ``swiglu_hidden_dim(4096, 256) == 11008``, LLaMA-7B's value.
    """
    check_int("d_model", d_model)
    check_int("multiple_of", multiple_of)
    hidden = int(2 * (4 * d_model) / 3)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


class SwiGLU(nn.Module):
    """Gated MLP with a SiLU ("swish") gate: ``down(silu(gate(x)) * up(x))`` (Shazeer, 2020).

    Why the hidden width is ``⅔ · 4 · d_model``: a GELU MLP with hidden width ``4d`` has
    two ``d × 4d`` matrices, ``8d²`` parameters. SwiGLU has *three* matrices (gate, up,
    down); with hidden width ``f`` that is ``3·d·f`` parameters, and ``3·d·f = 8d²`` gives
    ``f = ⅔ · 4d = 8d/3``. So the gated MLP costs the same parameters and FLOPs as the
    one it replaces, which makes the comparison fair (Shazeer's paper and LLaMA both do
    this). The width is then rounded up to a multiple of ``multiple_of`` so that the
    matrices tile well on hardware (LLaMA uses 256: 4096 -> 11008).

    Args:
        d_model: Width of the input and output.
        d_ff: Hidden width; default :func:`swiglu_hidden_dim` ``(d_model, multiple_of)``.
        multiple_of: Rounding of the default hidden width.
        dropout: Dropout on the output, in training mode.
        bias: Give the linear layers biases (LLaMA does not).
        activation: The gate's nonlinearity: ``"silu"`` (SwiGLU, the default) or
            ``"gelu_tanh"`` (GeGLU with the tanh GELU, Gemma 2/3:
            ``down(gelu_tanh(gate(x)) * up(x))``).

    Shapes:
        x: ``(..., d_model)``; output: ``(..., d_model)``
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int | None = None,
        *,
        multiple_of: int = 8,
        dropout: float = 0.0,
        bias: bool = False,
        activation: str = "silu",
    ) -> None:
        super().__init__()
        check_int("d_model", d_model)
        self.activation = check_choice("activation", activation, GLU_ACTIVATIONS)
        d_ff = swiglu_hidden_dim(d_model, multiple_of) if d_ff is None else check_int("d_ff", d_ff)
        self.d_model, self.d_ff = d_model, d_ff
        self.gate_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.up_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = Dropout(check_number("dropout", dropout, low=0.0, high=1.0, high_open=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Shapes: x ``(..., d_model)`` -> ``(..., d_model)``."""
        check_tensor("x", x, ("...", ("d_model", self.d_model)), like=self.up_proj.weight)
        gate = _GLU_GATES[self.activation](self.gate_proj(x))  # (..., d_ff)
        return self.dropout(self.down_proj(gate * self.up_proj(x)))

    def extra_repr(self) -> str:
        act = "" if self.activation == "silu" else f", activation={self.activation!r}"
        return f"d_model={self.d_model}, d_ff={self.d_ff}{act}"


class ClampedSwiGLU(SwiGLU):
    """gpt-oss's expert MLP: a SwiGLU whose gate and up projections are clamped, with a shifted, sharper gate.

    ``down((u + 1) · g · σ(α·g))`` with ``g = min(gate(x), limit)`` (clamped from above only)
    and ``u = clamp(up(x), -limit, limit)``: the clamps bound what one expert can add (the
    checkpoints are trained with them), ``g·σ(α·g)`` with ``α = 1.702`` is the sigmoid
    approximation of GELU (``σ(1.702·g) ≈ Φ(g)``), and ``u + 1`` lets the gate pass the
    input through when ``up`` is 0. Hugging Face's ``GptOssExperts._apply_gate``.

    Args:
        d_model: Width of the input and output.
        d_ff: Hidden width (default as :class:`SwiGLU`'s).
        limit: The clamp (gpt-oss: 7.0), > 0.
        alpha: The gate's sigmoid slope (gpt-oss: 1.702), > 0.
        **kwargs: :class:`SwiGLU`'s ``multiple_of``, ``dropout``, ``bias`` (its gate is this class's).

    Shapes:
        x: ``(..., d_model)``; output: ``(..., d_model)``
    """

    def __init__(
        self, d_model: int, d_ff: int | None = None, *, limit: float = 7.0, alpha: float = 1.702, **kwargs
    ) -> None:
        if "activation" in kwargs:
            raise ValueError(f"ClampedSwiGLU's gate is g·σ(alpha·g), got activation={kwargs['activation']!r}")
        super().__init__(d_model, d_ff, **kwargs)
        self.limit = check_number("limit", limit, low=0.0, low_open=True)
        self.alpha = check_number("alpha", alpha, low=0.0, low_open=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Shapes: x ``(..., d_model)`` -> ``(..., d_model)``."""
        check_tensor("x", x, ("...", ("d_model", self.d_model)), like=self.up_proj.weight)
        gate = self.gate_proj(x).clamp(max=self.limit)  # (..., d_ff): from above only
        up = self.up_proj(x).clamp(-self.limit, self.limit)  # (..., d_ff)
        return self.dropout(self.down_proj((up + 1) * gate * torch.sigmoid(self.alpha * gate)))

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, d_ff={self.d_ff}, limit={self.limit:g}, alpha={self.alpha:g}"


def make_mlp(kind: str, d_model: int, d_ff: int | None, *, bias: bool, dropout: float = 0.0) -> nn.Module:
    """``"gelu"`` -> :class:`FeedForward`, ``"gelu_tanh"`` -> the same with GPT-2's tanh GELU,
    ``"swiglu"`` -> :class:`SwiGLU`, ``"geglu_tanh"`` -> the same with the tanh GELU as its gate."""
    check_choice("mlp", kind, MLP_KINDS)
    if kind in ("gelu", "gelu_tanh"):
        approximate = "tanh" if kind == "gelu_tanh" else "none"
        return FeedForward(d_model, d_ff, dropout=dropout, bias=bias, approximate=approximate)
    activation = "gelu_tanh" if kind == "geglu_tanh" else "silu"
    return SwiGLU(d_model, d_ff, dropout=dropout, bias=bias, activation=activation)


def mlp_hidden_dim(kind: str, d_model: int, d_ff: int | None = None) -> int:
    """The hidden width an MLP of ``kind`` gets: ``d_ff`` if given, else the kind's default.

    The defaults are those of :class:`FeedForward` (``4·d_model``, both GELUs) and :class:`SwiGLU`
    (:func:`swiglu_hidden_dim`, both gates); :class:`~attn_core.DecoderConfig` and the parameter
    formulas read them from here.
    """
    check_choice("mlp", kind, MLP_KINDS)
    if d_ff is not None:
        return check_int("d_ff", d_ff)
    return 4 * check_int("d_model", d_model) if kind in ("gelu", "gelu_tanh") else swiglu_hidden_dim(d_model)
