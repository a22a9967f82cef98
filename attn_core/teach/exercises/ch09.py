"""Checks for the exercises of chapter 9 (normalisation)."""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from ._common import mismatch, report

__all__: list[str] = []


def _inputs(seed: int, *shape: int, scale: float = 1.0, shift: float = 0.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64) * scale + shift


def _run(name: str, fn: Callable, *args):
    """Call the learner's function; a crash becomes a printed verdict, not an exception."""
    try:
        return True, fn(*args)
    except Exception as e:  # a learner's bug should print, not stop the notebook
        return False, report(name, False, f"{type(e).__name__}: {e}")


# ---- issue 25: an exercise that needs a test design ----

__all__ += ["PLACEMENTS", "check_placement_probe"]

#: The four places a norm can sit around one sub-layer ``f``, as :func:`check_placement_probe` names them.
PLACEMENTS = {
    "pre": "x + f(norm(x))  (GPT-2, LLaMA)",
    "post": "norm(x + f(x))  (the original transformer, BERT)",
    "sandwich": "x + norm2(f(norm1(x)))  (CogView, NormFormer; Gemma 2/3)",
    "olmo2": "x + norm(f(x))  (Swin V2's res-post-norm; OLMo 2)",
}


def _placement_steps(d: int, seed: int) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    # One sub-layer wired each way; RMSNorms with gain 1 (as at initialisation), and a
    # stand-in sub-layer f with weights drawn from `seed`.
    g = torch.Generator().manual_seed(seed)
    W1 = torch.randn(d, 3 * d, generator=g, dtype=torch.float64) / d**0.5
    W2 = torch.randn(3 * d, d, generator=g, dtype=torch.float64) / (3 * d) ** 0.5
    shift = torch.randn(d, generator=g, dtype=torch.float64)

    def f(t: torch.Tensor) -> torch.Tensor:  # (..., d) -> (..., d), with a bias
        return F.gelu(t @ W1) @ W2 + shift

    def norm(t: torch.Tensor) -> torch.Tensor:  # RMSNorm, gain 1
        return F.rms_norm(t, (d,), eps=1e-6)

    return {
        "pre": lambda x: x + f(norm(x)),
        "post": lambda x: norm(x + f(x)),
        "sandwich": lambda x: x + norm(f(norm(x))),
        "olmo2": lambda x: x + norm(f(x)),
    }


def check_placement_probe(fn: Callable[[Callable[[torch.Tensor], torch.Tensor], int], str]) -> bool:
    """Exercise 9.1: ``fn(step, d_model)`` tells where the norm sits in a residual step.

    ``step`` maps a ``(B, T, d_model)`` float64 stream to the stream after one sub-layer,
    wired one of four ways (:data:`PLACEMENTS`): ``"pre"``, ``"post"``, ``"sandwich"`` or
    ``"olmo2"``. Its norms are RMSNorms with gain 1. ``fn`` may call ``step`` on any
    input it makes, and returns the name. The check hides each wiring behind a fresh
    sub-layer, twice, at two widths.
    """
    name = "9.1 where is the norm?"
    wrong = []
    for d, seed in ((16, 0), (64, 1)):
        for placement, step in _placement_steps(d, seed).items():
            try:
                got = fn(step, d)
            except Exception as e:  # a learner's bug should print, not stop the notebook
                return report(name, False, f"{type(e).__name__}: {e}")
            if got != placement:
                wrong.append(f"{placement} (d={d}) called {got!r}")
    if wrong:
        return report(name, False, "; ".join(wrong))
    return report(name, True, "8 hidden sub-layers, each placement named")


# ---- issue 25: a derivation checked numerically ----

__all__ += ["check_rms_norm_backward"]


def _rms_backward_variants(x: torch.Tensor, w: torch.Tensor, g: torch.Tensor, eps: float) -> dict[str, torch.Tensor]:
    """The right gradient and the plausible wrong ones, for the hints.

    Shapes:
        x, g: ``(..., d)``; w: ``(d,)``; every entry: ``(..., d)``
    """
    d = x.shape[-1]
    r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)  # (..., 1)
    gw = g * w  # (..., d)
    along_x = (gw * x).sum(-1, keepdim=True)  # (..., 1)
    return {
        "right": r * gw - r**3 * x * along_x / d,
        "rms constant": r * gw,
        "no 1/d": r * gw - r**3 * x * along_x,
        "no gain": r * g - r**3 * x * (g * x).sum(-1, keepdim=True) / d,
    }


_BACKWARD_HINTS = {
    "rms constant": "the RMS depends on x too: its derivative adds a term along x",
    "no 1/d": "the mean square is a mean: ∂ms/∂x_j = 2 x_j / d",
    "no gain": "the gain w multiplies the output: the incoming gradient reaches x̂ as g ⊙ w",
}


def check_rms_norm_backward(fn: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float], torch.Tensor]) -> bool:
    """Exercise 9.2: ``fn(x, weight, grad_out, eps)`` is RMSNorm's gradient with respect to ``x``, without autograd.

    ``y = x / sqrt(mean(x²) + eps) ⊙ weight`` over the last axis; ``grad_out`` is
    ``∂L/∂y``; ``fn`` returns ``∂L/∂x``. Compared with autograd in float64 at two ``eps``
    (a large one shows whether ``eps`` sits in the right place).

    Shapes:
        x, grad_out: ``(..., d)``; weight: ``(d,)``; fn's output: ``(..., d)``
    """
    name = "9.2 RMSNorm backward"
    x = _inputs(95, 2, 3, 8, scale=2.0, shift=0.5)
    weight = _inputs(96, 8, scale=0.5, shift=1.0)
    grad_out = _inputs(97, 2, 3, 8)
    for eps in (1e-6, 0.5):
        xg = x.clone().requires_grad_(True)
        y = F.rms_norm(xg, (8,), weight, eps=eps)
        (want,) = torch.autograd.grad(y, xg, grad_out)
        ok, got = _run(name, fn, x.clone(), weight.clone(), grad_out.clone(), eps)
        if not ok:
            return False
        wrong_values = (
            isinstance(got, torch.Tensor)
            and got.shape == want.shape
            and not torch.allclose(got.detach().double(), want, atol=1e-8)
        )
        if wrong_values:
            for key, wrong in _rms_backward_variants(x, weight, grad_out, eps).items():
                if key != "right" and torch.allclose(got.detach().double(), wrong, atol=1e-8):
                    return report(name, False, f"eps={eps}: {_BACKWARD_HINTS[key]}")
        problem = mismatch(got, want, atol=1e-8)
        if problem:
            return report(name, False, f"eps={eps}: {problem}")
    along = (x * want).sum(-1).abs().max().item()  # eps = 0.5 here: not scale-invariant
    xg = x.clone().requires_grad_(True)
    (g0,) = torch.autograd.grad(F.rms_norm(xg, (8,), weight, eps=1e-12), xg, grad_out)
    along0 = (x * g0).sum(-1).abs().max().item()
    return report(
        name,
        True,
        f"|x·∂L/∂x| {'<' if along0 < 1e-10 else '>='} 1e-10 at eps=1e-12, {along:.2f} at eps=0.5",
    )


# ---- predict, then run: where epsilon pulls LayerNorm's output below RMS 1 ----

__all__ += ["check_spread_at_rms"]


def check_spread_at_rms(fn: Callable[[float, float], float]) -> bool:
    """Exercise 9.3: ``fn(target, eps)`` is the spread at which LayerNorm's output has RMS ``target``.

    The check runs ``F.layer_norm`` (float64, gain 1, bias 0) on a vector of mean 3 and
    standard deviation ``fn(target, eps)``, for targets 0.1, 0.5 and 0.9 at ``eps`` 1e-5 and
    1e-2, and compares the output's RMS with ``target`` (relative tolerance 1e-4).
    """
    name = "9.3 spread at a given RMS"
    base = _inputs(93, 64)
    base = (base - base.mean()) / base.std(unbiased=False)  # (64,): mean 0, σ 1 exactly
    for eps in (1e-5, 1e-2):
        for target in (0.1, 0.5, 0.9):
            ok, sigma = _run(name, fn, target, eps)
            if not ok:
                return False
            if isinstance(sigma, torch.Tensor) and sigma.numel() == 1:
                sigma = sigma.item()
            if isinstance(sigma, bool) or not isinstance(sigma, (int, float)) or not sigma > 0:
                return report(name, False, f"fn({target}, {eps:g}) must be a positive number, got {sigma!r}")
            rms = F.layer_norm(sigma * base + 3.0, (64,), eps=eps).pow(2).mean().sqrt().item()
            if abs(rms - target) > 1e-4 * target:
                return report(
                    name,
                    False,
                    f"eps={eps:g}: at σ={sigma:.4g} LayerNorm's output RMS is {rms:.4f}, not {target}",
                )
    return report(name, True, "hit RMS 0.1, 0.5, 0.9 at eps 1e-5 and 1e-2")
