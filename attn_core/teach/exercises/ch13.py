"""Checks for the exercises of chapter 13 (efficient attention)."""

from __future__ import annotations

from typing import Callable

import torch

from ...ops.attention import attention
from ...ops.efficient import tiled_attention
from ..measure import peak_tensor_memory
from ._common import compare, report

__all__ = [
    "check_tiled_peak_prediction",
    "check_fa1_traffic",
    "check_backward_from_lse",
    "check_unequal_tiles",
]


def _inputs(seed: int, *shape: int, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64) * scale


def _tiled_peak_mib(block: int) -> float:
    """The peak (MiB) of a causal ``tiled_attention`` forward pass at exercise 13.3's shape."""
    q, k, v = (torch.empty(1, 2, 1024, 64, device="meta") for _ in range(3))
    with torch.no_grad():
        return peak_tensor_memory(tiled_attention, q, k, v, is_causal=True, block_size=block) / 2**20


def check_tiled_peak_prediction(predicted: dict) -> bool:
    """Exercise 13.3, a prediction: the peak memory of ``tiled_attention``'s forward pass.

    ``predicted`` maps the block sizes ``64`` and ``256`` to MiB: the peak that
    ``peak_tensor_memory`` reports for a causal ``tiled_attention`` of float32 inputs
    ``(1, 2, 1024, 64)`` under ``torch.no_grad()`` (the inputs exist beforehand and are not
    counted). Right within 15% of the value measured here (on meta tensors: the same storage
    sizes, no arithmetic).
    """
    name = "13.3 the tiled peak"
    if not isinstance(predicted, dict) or set(predicted) != {64, 256}:
        return report(name, False, f"give a dict with the keys 64 and 256, got {predicted!r}")
    for block in (64, 256):
        answer = predicted[block]
        if isinstance(answer, bool) or not isinstance(answer, (int, float)):
            return report(name, False, f"block {block}: a number of MiB, not {answer!r}")
    measured = {block: _tiled_peak_mib(block) for block in (64, 256)}
    for block, mib in measured.items():
        if abs(predicted[block] - mib) > 0.15 * mib:
            return report(
                name,
                False,
                f"block {block}: {predicted[block]!r} MiB is not within 15% of the measured peak; "
                "which tensors are alive at once, and how large is each?",
            )
    values = ", ".join(f"block {b} {mib:.2f} MiB" for b, mib in measured.items())
    return report(name, True, f"measured {values}")


def fa1_traffic_elements(T: int, head_dim: int, block_q: int, block_k: int) -> int:
    """The reference count of exercise 13.1, by simulating Algorithm 1's loops.

    Per batch element and head, non-causal: line 2 writes ``O = 0``, ``l = 0``,
    ``m = -inf`` (``T·(d + 2)``); the outer loop reads each key/value block once; for every
    (key/value block, query block) pair the inner loop reads ``Q_i, O_i, l_i, m_i`` and
    writes ``O_i, l_i, m_i`` back. The last block of each kind may be shorter.
    """
    d = head_dim
    elements = T * (d + 2)  # line 2: O, l, m initialised in HBM
    for j in range(0, T, block_k):
        b_k = min(block_k, T - j)
        elements += 2 * b_k * d  # K_j, V_j loaded once
        for i in range(0, T, block_q):
            b_q = min(block_q, T - i)
            elements += b_q * (2 * d + 2)  # read Q_i, O_i, l_i, m_i
            elements += b_q * (d + 2)  # write O_i, l_i, m_i
    return elements


def check_fa1_traffic(fn: Callable[[int, int, int, int], int]) -> bool:
    """Exercise 13.1: ``fn(T, head_dim, block_q, block_k)`` counts the elements that
    FlashAttention-1's forward pass (Dao et al. 2022, Algorithm 1: key/value blocks in the
    outer loop, query blocks in the inner loop) moves between HBM and SRAM, per batch
    element and head, without a mask.

    What is counted: line 2 writes ``O``, ``l`` and ``m`` (initialised) to HBM; each key
    and value block is read once; for every pair (key/value block, query block) ``Q_i``,
    ``O_i``, ``l_i``, ``m_i`` are read and ``O_i``, ``l_i``, ``m_i`` written back. Blocks
    at the end of the sequence may be shorter than the block size.
    """
    name = "13.1 FlashAttention-1 traffic"
    cases = ((256, 64, 64, 64), (1000, 32, 128, 64), (300, 16, 50, 128), (4096, 64, 128, 128), (77, 8, 77, 10))
    for T, d, b_q, b_k in cases:
        want = fa1_traffic_elements(T, d, b_q, b_k)
        try:
            got = fn(T, d, b_q, b_k)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        if got != want:
            n_k = -(-T // b_k)
            hints = (
                (want - T * (d + 2), "line 2 writes O, l and m to HBM once, before the loops"),
                (want - n_k * T * (d + 2), "the inner loop writes O_i, l_i and m_i back"),
                (want - 4 * n_k * T - 2 * T, "l and m travel with O: one number each per query"),
            )
            hint = next((f" ({why})" for value, why in hints if got == value), "")
            return report(name, False, f"T={T}, d={d}, block_q={b_q}, block_k={b_k}: got {got!r}, want {want}{hint}")
    return report(name, True, f"{len(cases)} shapes, ragged last blocks included")


def check_backward_from_lse(fn: Callable[..., tuple]) -> bool:
    """Exercise 13.2: ``fn(q, k, v, o, lse, do)`` returns ``(dq, dk, dv)`` of attention
    (no mask, scale ``1/√D``) from what a FlashAttention-2 forward pass saved: the
    output ``o`` and one log-sum-exp per query, ``lse = logsumexp(q kᵀ / √D)`` along the
    keys. ``do`` is the gradient of the loss with respect to ``o``. The reference is
    autograd in float64.

    Shapes:
        q: ``(T_q, D)``; k: ``(T_k, D)``; v: ``(T_k, D_v)``; o, do: ``(T_q, D_v)``;
        lse: ``(T_q,)``; fn's output: tensors shaped like q, k, v
    """
    name = "13.2 backward from the LSE"
    for seed, (T_q, T_k, D, D_v) in enumerate(((5, 7, 4, 3), (16, 16, 8, 8), (3, 40, 6, 2)), start=140):
        q, k, v = _inputs(seed, T_q, D, scale=2.0), _inputs(seed + 1, T_k, D), _inputs(seed + 2, T_k, D_v)
        do = _inputs(seed + 3, T_q, D_v)
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out = attention(*leaves)  # (T_q, D_v)
        want = torch.autograd.grad(out, leaves, do)
        lse = torch.logsumexp(q @ k.T / D**0.5, dim=-1)  # (T_q,)
        try:
            got = fn(q, k, v, out.detach(), lse, do)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        if not (isinstance(got, (tuple, list)) and len(got) == 3):
            return report(name, False, "return the triple (dq, dk, dv)")
        for which, g_, w_ in zip(("dq", "dk", "dv"), got, want):
            if not (isinstance(g_, torch.Tensor) and g_.shape == w_.shape):
                return compare(f"{name}, {which}", g_, w_)
            if not torch.allclose(g_.detach().double(), w_, atol=1e-10, rtol=0):
                hint = ""
                if which in ("dq", "dk") and torch.allclose(g_.detach().double() / D**0.5, w_, atol=1e-10):
                    hint = ": the scores were scaled by 1/√D, so is their gradient"
                elif which in ("dq", "dk"):
                    hint = ": check the softmax's row term, rowsum(dP ∘ P): what is it in dO and O?"
                err = (g_.detach().double() - w_).abs().max().item()
                return report(name, False, f"{which}, T_q={T_q}, T_k={T_k}: max abs difference {err:.1e}{hint}")
    return report(name, True, "3 shapes; dq, dk, dv match autograd within 1e-10")


def check_unequal_tiles(fn: Callable[..., torch.Tensor]) -> bool:
    """Exercise 13.4: ``fn(q, k, v, block_q, block_k)`` is causal attention computed one
    ``(block_q, block_k)`` tile of scores at a time, right for any two block sizes.

    The reference is ``attention(q, k, v, is_causal=True)`` in float64. The cases include
    blocks of different sizes, in both orders, and lengths that no block size divides. A
    wrong output is described by what went wrong: a query that reads a later key (a changed
    future key moves its output) or one that misses an earlier key (a changed earlier key
    leaves its output alone).

    Shapes:
        q, k: ``(T, D)``; v: ``(T, D_v)``; fn's output: ``(T, D_v)``
    """
    name = "13.4 unequal tiles"
    cases = ((10, 4, 4), (12, 4, 2), (12, 2, 4), (13, 3, 5), (7, 8, 2))
    for seed, (T, b_q, b_k) in enumerate(cases, start=150):
        q, k, v = _inputs(seed, T, 6), _inputs(seed + 1, T, 6), _inputs(seed + 2, T, 3)
        want = attention(q, k, v, is_causal=True)

        def run(k_: torch.Tensor, v_: torch.Tensor, q=q, b_q=b_q, b_k=b_k) -> object:
            return fn(q.clone(), k_.clone(), v_.clone(), b_q, b_k)

        try:
            got = run(k, v)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        where = f"T={T}, blocks {b_q}, {b_k}"
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            return report(name, False, f"{where}: expected a tensor of shape {tuple(want.shape)}")
        if torch.allclose(got.double(), want, atol=1e-10, rtol=0):
            continue
        # Which way it is wrong, told by moving one key (and its value) at a time.
        for j in range(T):
            k2, v2 = k.clone(), v.clone()
            k2[j], v2[j] = k2[j] + 1.0, v2[j] + 1.0
            try:
                moved = (run(k2, v2).double() - got.double()).abs().amax(-1) > 1e-9
            except Exception as e:  # a learner's bug should print, not stop the notebook
                return report(name, False, f"{type(e).__name__}: {e}")
            leaks, misses = moved[:j], ~moved[j:]
            if leaks.any():
                i = int(leaks.nonzero()[0])
                return report(name, False, f"{where}: query {i} reads key {j}, which comes after it")
            if misses.any():
                i = j + int(misses.nonzero()[0])
                return report(name, False, f"{where}: query {i} skips key {j}, which it may read")
        err = (got.double() - want).abs().max().item()
        return report(name, False, f"{where}: max abs difference {err:.1e} (tolerance 1e-10)")
    return report(name, True, f"{len(cases)} cases, unequal blocks in both orders, within 1e-10")
