"""Checks for the exercises of chapter 21 (FlashAttention in Triton).

* 21.1 counts the tiles a causal, windowed kernel must visit (a formula to derive);
* 21.2 writes Gemma 2's soft-cap as a Triton kernel (Triton has no ``tanh``, and a
  ragged last block must be masked);
* 21.3 combines Flash-Decoding's partial results when the attention has a sink.

The learner's kernel of 21.2 runs in Triton's interpreter on a CPU (:mod:`attn_core.ops.backends.flash_kernels` chooses
it when it is imported); the other checks need no Triton.
"""

from __future__ import annotations

import math
import warnings
from typing import Callable

import torch

from ...ops.attention import attention
from ...ops.backends import flash_kernels
from ...ops.masks import causal_mask
from ._common import report

__all__ = ["check_visited_tiles", "check_softcap_kernel", "check_combine_with_sink"]

# imported (or not) by attn_core.ops.backends.flash_kernels, after it chose the interpreter
triton = flash_kernels.triton


def _mismatch(got: object, want: torch.Tensor, atol: float) -> str | None:
    """Why ``got`` is not ``want`` within ``atol`` (type, shape or values), or None: silent when it is."""
    if not isinstance(got, torch.Tensor):
        return f"expected a torch.Tensor, got {type(got).__name__}"
    if got.shape != want.shape:
        return f"shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    err = (got.detach().double() - want.double()).abs().max().item()
    return None if err <= atol else f"max abs difference {err:.2e} (tolerance {atol:.0e})"


def _tiles(T: int, block: int, window: int | None) -> int:
    """Tiles (block × block) of a causal T × T mask with at least one allowed pair: what the kernel visits."""
    n = -(-T // block)
    padded = torch.zeros(n * block, n * block, dtype=torch.bool)
    padded[:T, :T] = causal_mask(T, window=window)
    return int(padded.view(n, block, n, block).any(dim=(1, 3)).sum())


def check_visited_tiles(fn: Callable[..., int]) -> bool:
    """Exercise 21.1: ``fn(T, block, window)`` is the number of tiles a causal kernel visits.

    Square causal attention over ``T`` positions, query and key blocks of ``block``
    (``T`` need not be a multiple of it: the last block is ragged), and a sliding
    ``window`` (None: none). The kernel visits a tile when at least one (query, key) pair
    in it is allowed, which is what :func:`attn_core.ops.backends.flash.flash_forward` counts.
    """
    name = "21.1 visited tiles"
    cases = [(256, 32, None), (100, 16, None), (256, 32, 64), (200, 16, 40), (160, 16, 18), (96, 32, 1), (64, 16, 100)]
    for T, block, window in cases:
        want = _tiles(T, block, window)
        try:
            got = fn(T, block, window)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        if got != want:
            hint = " (is the last, ragged block counted?)" if T % block else ""
            return report(name, False, f"T={T}, block={block}, window={window}: got {got!r}, expected {want}{hint}")
    return report(name, True, f"{len(cases)} cases (ragged blocks, windows from 1 to beyond T) match the dense mask")


def check_softcap_kernel(kernel) -> bool:
    """Exercise 21.2: ``kernel(S, Out, n, cap, BLOCK: tl.constexpr)`` is a Triton kernel that soft-caps scores.

    Gemma 2 caps attention scores with ``cap · tanh(s / cap)``; inside a fused kernel it is
    one line after the ``tl.dot``. Triton has no ``tanh``: build it from ``tl.exp`` or
    ``tl.sigmoid``, in a form that stays finite for scores far above the cap. The check
    launches ``kernel`` on ``n`` scores (not a multiple of ``BLOCK``) with
    ``grid = (cdiv(n, BLOCK),)``, compares ``Out[:n]`` with ``cap · tanh(S / cap)`` and
    checks that nothing was written past ``n`` (a masked ragged tail).

    Shapes:
        S: ``(n,)``; Out: ``(n + BLOCK,)`` (the check's buffer; only ``[:n]`` may be written)
    """
    name = "21.2 soft-cap kernel"
    if triton is None:
        return report(name, False, "Triton is not installed: pip install triton")
    n, block, sentinel = 1000, 128, 12345.0
    device = "cpu" if flash_kernels.INTERPRETED else "cuda"  # compiled kernels read GPU memory
    for cap, spread in ((50.0, 1.0), (5.0, 8.0), (2.0, 100.0)):
        g = torch.Generator().manual_seed(int(cap * 10))
        scores = (torch.randn(n, generator=g) * spread).to(device)  # (n,)
        out = torch.full((n + block,), sentinel, device=device)  # (n + BLOCK,): room for a write past the end
        try:
            with warnings.catch_warnings():  # the interpreter's NumPy warns when exp overflows to inf
                warnings.simplefilter("ignore", RuntimeWarning)
                kernel[(triton.cdiv(n, block),)](scores, out, n, cap, BLOCK=block)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        if (out[:n] == sentinel).all():
            return report(name, False, "the kernel wrote nothing to Out: tl.store the capped scores")
        if (out[n:] != sentinel).any():
            return report(name, False, f"cap={cap:g}: the kernel wrote past n={n}: mask the last block")
        if out[:n].isnan().any():
            return report(name, False, f"cap={cap:g}: NaN (exp overflows to inf for large scores: inf / inf)")
        out, scores = out.cpu(), scores.cpu()
        problem = _mismatch(out[:n], cap * torch.tanh(scores.double() / cap), atol=1e-5 * cap)
        if problem:
            return report(name, False, f"cap={cap:g}: {problem}")
    return report(name, True, "3 caps, scores up to 50 times the cap, the ragged last block masked")


def _partials(q, k, v, splits):
    """Per-split outputs and natural log-sum-exps of one query over consecutive key chunks (an empty chunk allowed)."""
    scores = k @ q / math.sqrt(q.shape[0])  # (T_k,)
    outs, lses = [], []
    for lo, hi in splits:
        s = scores[lo:hi]
        if hi == lo:  # a split with no key: lse = -inf, output 0 (what a kernel writes)
            outs.append(torch.zeros_like(v[0]))
            lses.append(torch.tensor(float("-inf"), dtype=q.dtype))
            continue
        outs.append(torch.softmax(s, 0) @ v[lo:hi])  # (D,)
        lses.append(torch.logsumexp(s, 0))
    return torch.stack(outs), torch.stack(lses)  # (S, D), (S,)


def check_combine_with_sink(fn: Callable[..., torch.Tensor]) -> bool:
    """Exercise 21.3: ``fn(outs, lses, sink)`` combines Flash-Decoding's splits of an attention with a sink.

    Each split ``s`` attended to its own chunk of keys and returned its normalised output
    ``outs[s]`` and the natural log-sum-exp of its scores ``lses[s]`` (``-inf`` for a
    split with no key). The result must equal one query's attention over all keys with a
    learned sink (:func:`attn_core.attention` with ``sinks=``). Scores as large as 1000
    and an empty split are among the cases.

    Shapes:
        outs: ``(S, D)``; lses: ``(S,)``; sink: ``()``; fn's output: ``(D,)``
    """
    name = "21.3 combine with a sink"
    cases = [
        (1.0, [(0, 10), (10, 20), (20, 33)], 0.5),
        (1.0, [(0, 5), (5, 5), (5, 33)], -1.0),  # an empty split
        (60.0, [(0, 16), (16, 33)], 900.0),  # lse near 1000: exp overflows float64 without a maximum
        (1.0, [(0, 33)], 3.0),
    ]
    for i, (spread, splits, sink) in enumerate(cases):
        g = torch.Generator().manual_seed(200 + i)
        q = torch.randn(16, generator=g, dtype=torch.float64) * spread
        k = torch.randn(33, 16, generator=g, dtype=torch.float64) * spread
        v = torch.randn(33, 16, generator=g, dtype=torch.float64)
        outs, lses = _partials(q, k, v, splits)
        sink_t = torch.tensor(sink, dtype=torch.float64)
        want = attention(q[None, None, None], k[None, None], v[None, None], sinks=sink_t[None])[0, 0, 0]  # (D,)
        try:
            got = fn(outs.clone(), lses.clone(), sink_t.clone())
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        if isinstance(got, torch.Tensor) and got.isnan().any():
            return report(name, False, f"case {i + 1}: NaN (an empty split has lse = -inf; large lse overflow exp)")
        problem = _mismatch(got, want, atol=1e-9)
        if problem:
            return report(name, False, f"case {i + 1}: {problem}")
    return report(name, True, f"{len(cases)} cases (an empty split, lse near 1000) equal attention(sinks=...)")
