"""Checks for the exercises of chapter 13 (efficient attention)."""

from __future__ import annotations

from typing import Callable

import torch

from ...ops.attention import attention
from ._common import compare, report

__all__ = [
    "check_merge_stats",
    "check_fa1_traffic",
    "check_backward_from_lse",
    "check_unequal_tiles",
]


def _inputs(seed: int, *shape: int, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64) * scale


def check_merge_stats(fn: Callable[..., tuple]) -> bool:
    """Exercise 13.1: ``fn(m1, l1, m2, l2)`` merges the softmax statistics of two blocks.

    For a block ``x``, ``m = max(x)`` and ``l = Σ exp(x - m)``. The merge of two blocks
    must equal the statistics of their concatenation: ``(m, l)`` with ``m = max(m1, m2)``.
    Tensors of statistics are merged element-wise; a block that is all ``-inf``
    (``m = -inf``, ``l = 0``) must not produce NaN.

    Shapes:
        m1, l1, m2, l2: ``(N,)``; fn's output: two tensors ``(N,)``
    """

    def stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        m = x.amax(-1)
        safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        return m, torch.exp(x - safe[:, None]).sum(-1)

    cases = [
        (_inputs(130, 6, 5, scale=3.0), _inputs(131, 6, 7, scale=3.0)),
        (_inputs(132, 4, 3, scale=300.0), _inputs(133, 4, 2, scale=300.0)),
    ]
    a, b = _inputs(134, 3, 4), torch.full((3, 2), float("-inf"), dtype=torch.float64)
    a[0] = float("-inf")  # row 0: both blocks fully masked (m = -inf, l = 0 on both sides)
    cases.append((a, b))  # rows 1-2: the second block is fully masked
    for i, (x1, x2) in enumerate(cases):
        m1, l1 = stats(x1)
        m2, l2 = stats(x2)
        m, l = stats(torch.cat((x1, x2), dim=-1))
        try:
            got = fn(m1, l1, m2, l2)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report("13.3 merge stats", False, f"{type(e).__name__}: {e}")
        if not (isinstance(got, (tuple, list)) and len(got) == 2):
            return report("13.3 merge stats", False, f"expected a pair (m, l), got {type(got).__name__}")
        gm, gl = got
        if not (isinstance(gm, torch.Tensor) and isinstance(gl, torch.Tensor)):
            return report("13.3 merge stats", False, "expected two tensors")
        if gl.isnan().any():
            return report("13.3 merge stats", False, f"case {i + 1}: NaN in l (a fully masked block has m = -inf)")
        if not torch.equal(gm, m):
            return report("13.3 merge stats", False, f"case {i + 1}: m should be the larger of m1 and m2")
        if not torch.allclose(gl, l, rtol=1e-10, atol=0):
            return report("13.3 merge stats", False, f"case {i + 1}: l is off; rescale each sum by exp(m_i - m)")
    return report("13.3 merge stats", True, f"{len(cases)} cases, including large scores and a masked block")


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
    name = "13.2 backward from the log-sum-exp"
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
                    hint = ": the softmax's gradient is P ∘ (dP − rowsum(dP ∘ P)); rowsum(dP ∘ P) = rowsum(dO ∘ O)"
                err = (g_.detach().double() - w_).abs().max().item()
                return report(name, False, f"{which}, T_q={T_q}, T_k={T_k}: max abs difference {err:.1e}{hint}")
    return report(name, True, "3 shapes, dq, dk and dv equal to autograd within 1e-10")


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
        where = f"T={T}, block_q={b_q}, block_k={b_k}"
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
    return report(name, True, f"{len(cases)} cases, blocks of unequal sizes in both orders, within 1e-10")
