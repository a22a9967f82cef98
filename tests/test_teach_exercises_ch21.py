"""attn_core.teach.exercises.ch21: the right and wrong answers of exercises 21.1-21.4 (ANSWERS, held to the
standard by tests/test_teach_exercises_standard.py).

The solutions of 21.4 (the loops of a forward kernel and of the dQ kernel) live here, not in
the chapter: the chapter runs the checks on its unfinished scaffold. Each solution kernel
takes constexpr switches for the typical mistakes; ``_Variant`` launches it with one switched,
through the same ``kernel[grid](...)`` call the check makes.
"""

from __future__ import annotations

import torch

from attn_core.ops.backends import flash_kernels
from attn_core.teach.exercises.ch21 import (
    check_combine_with_sink,
    check_dq_kernel,
    check_forward_loop,
    check_softcap_kernel,
    check_visited_tiles,
)

triton = flash_kernels.triton
NO_TRITON = "triton is not installed: pip install triton"


# ----------------------------------------------------------------------------- 21.1 visited tiles
def visited_tiles(T, block, window):
    n = -(-T // block)  # blocks per side, the ragged last one included
    total = 0
    for i in range(n):  # query block i: its last key block is i, its first is the window's
        first = 0 if window is None else max(0, i * block - window + 1) // block
        total += i + 1 - first
    return total


# ----------------------------------------------------------------------------- 21.2 soft-cap kernel
if triton is not None:
    tl = flash_kernels.tl

    @triton.jit
    def softcap_right(S, Out, n, cap, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        s = tl.load(S + offs, mask=offs < n, other=0.0)
        tl.store(Out + offs, cap * (2 * tl.sigmoid(2 * s / cap) - 1), mask=offs < n)

    @triton.jit
    def softcap_unmasked(S, Out, n, cap, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        s = tl.load(S + offs, mask=offs < n, other=0.0)
        tl.store(Out + offs, cap * (2 * tl.sigmoid(2 * s / cap) - 1))  # writes past n

    @triton.jit
    def softcap_overflows(S, Out, n, cap, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        e = tl.exp(2 * tl.load(S + offs, mask=offs < n, other=0.0) / cap)
        tl.store(Out + offs, cap * (e - 1) / (e + 1), mask=offs < n)  # inf / inf for large scores

    @triton.jit
    def softcap_no_inner_division(S, Out, n, cap, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        s = tl.load(S + offs, mask=offs < n, other=0.0)
        tl.store(Out + offs, cap * (2 * tl.sigmoid(2 * s) - 1), mask=offs < n)  # cap · tanh(s)

    @triton.jit
    def softcap_clamp(S, Out, n, cap, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        s = tl.load(S + offs, mask=offs < n, other=0.0)
        tl.store(Out + offs, tl.minimum(tl.maximum(s, -cap), cap), mask=offs < n)  # a hard cap


# ----------------------------------------------------------------------------- 21.3 combine with a sink
def combine_right(outs, lses, sink):
    every = torch.cat([lses, sink[None]])  # (S + 1,): the sink joins the denominator once
    m = every.max()
    w = torch.exp(lses - m)  # (S,); an empty split (lse = -inf) gets weight 0
    return (w[:, None] * outs).sum(0) / torch.exp(every - m).sum()


def combine_sink_in_each_split(outs, lses, sink):
    with_sink = torch.logaddexp(lses, sink)  # the sink counted once per split
    m = with_sink.max()
    return (torch.exp(lses - m)[:, None] * outs).sum(0) / torch.exp(with_sink - m).sum()


def combine_without_maximum(outs, lses, sink):
    w = torch.exp(lses)
    return (w[:, None] * outs).sum(0) / (w.sum() + torch.exp(sink))


def combine_without_sink(outs, lses, sink):
    w = torch.exp(lses - lses.max())
    return (w[:, None] * outs).sum(0) / w.sum()


def combine_mean(outs, lses, sink):
    return outs.mean(0)


if triton is not None:

    @triton.jit
    def softcap_stub(S, Out, n, cap, BLOCK: tl.constexpr):
        pass  # the notebook's stub


# ----------------------------------------------------------------------------- 21.4 the kernels' loops
class _Variant:
    """``kernel`` launched with some of its constexpr switches set: a wrong answer the check launches as usual."""

    def __init__(self, kernel, **switches):
        self.kernel, self.switches = kernel, switches

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.kernel[grid](*args, **kwargs, **self.switches)


if triton is not None:

    @triton.jit
    def forward_right(
        Q, K, V, Out, Lse, T, sm_scale,
        D: tl.constexpr, BLOCK: tl.constexpr, IS_CAUSAL: tl.constexpr,
        MASK: tl.constexpr = True, MASK_TAIL: tl.constexpr = True, SCALE: tl.constexpr = True,
        RESCALE_ACC: tl.constexpr = True, RESCALE_L: tl.constexpr = True, BASE_2: tl.constexpr = False,
        BODY: tl.constexpr = True,
    ):  # fmt: skip
        # The chapter's scaffold, its loop body written (BODY=False: as the chapter leaves it);
        # the other switches are the typical mistakes.
        rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)  # (BLOCK,) query positions
        offs_d = tl.arange(0, D)
        head = tl.program_id(1) * T * D  # this batch·head's (T, D) block of Q, K, V and Out
        q = tl.load(Q + head + rows[:, None] * D + offs_d[None, :], mask=rows[:, None] < T, other=0.0)
        m = tl.zeros([BLOCK], tl.float32) - float("inf")
        l = tl.zeros([BLOCK], tl.float32)
        acc = tl.zeros([BLOCK, D], tl.float32)
        for start in range(0, T, BLOCK):
            cols = start + tl.arange(0, BLOCK)  # (BLOCK,) key positions
            k = tl.load(K + head + cols[:, None] * D + offs_d[None, :], mask=cols[:, None] < T, other=0.0)
            v = tl.load(V + head + cols[:, None] * D + offs_d[None, :], mask=cols[:, None] < T, other=0.0)
            if BODY:
                s = tl.dot(q, tl.trans(k))  # (BLOCK, BLOCK)
                if SCALE:
                    s = s * sm_scale
                if BASE_2:  # scores in base 2, as the chapter's kernel: lse then comes out in the wrong units
                    s = s * 1.4426950408889634
                ok = rows[:, None] >= 0  # (BLOCK, 1): every pair, until masked
                if MASK_TAIL:
                    ok = ok & (cols[None, :] < T)
                if IS_CAUSAL and MASK:
                    ok = ok & (cols[None, :] <= rows[:, None])
                s = tl.where(ok, s, float("-inf"))
                m_new = tl.maximum(m, tl.max(s, 1))
                alpha = tl.exp2(m - m_new) if BASE_2 else tl.exp(m - m_new)
                p = tl.exp2(s - m_new[:, None]) if BASE_2 else tl.exp(s - m_new[:, None])
                l = (l * alpha if RESCALE_L else l) + tl.sum(p, 1)
                acc = (acc * alpha[:, None] if RESCALE_ACC else acc) + tl.dot(p, v)
                m = m_new
        tl.store(Out + head + rows[:, None] * D + offs_d[None, :], acc / l[:, None], mask=rows[:, None] < T)
        tl.store(Lse + tl.program_id(1) * T + rows, m + tl.log(l), mask=rows < T)

    @triton.jit
    def dq_right(
        Q, K, V, DO, Lse, Delta, DQ, T, sm_scale,
        D: tl.constexpr, BLOCK: tl.constexpr, IS_CAUSAL: tl.constexpr,
        MASK: tl.constexpr = True, DELTA: tl.constexpr = True, SCALE_DQ: tl.constexpr = True,
        SCALE_S: tl.constexpr = True, LSE: tl.constexpr = True, BODY: tl.constexpr = True,
    ):  # fmt: skip
        rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        offs_d = tl.arange(0, D)
        head = tl.program_id(1) * T * D
        q = tl.load(Q + head + rows[:, None] * D + offs_d[None, :], mask=rows[:, None] < T, other=0.0)
        do = tl.load(DO + head + rows[:, None] * D + offs_d[None, :], mask=rows[:, None] < T, other=0.0)
        lse = tl.load(Lse + tl.program_id(1) * T + rows, mask=rows < T, other=0.0)
        delta = tl.load(Delta + tl.program_id(1) * T + rows, mask=rows < T, other=0.0)
        dq = tl.zeros([BLOCK, D], tl.float32)
        for start in range(0, T, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            k = tl.load(K + head + cols[:, None] * D + offs_d[None, :], mask=cols[:, None] < T, other=0.0)
            v = tl.load(V + head + cols[:, None] * D + offs_d[None, :], mask=cols[:, None] < T, other=0.0)
            if BODY:
                s = tl.dot(q, tl.trans(k))
                if SCALE_S:
                    s = s * sm_scale
                p = tl.exp(s - lse[:, None]) if LSE else tl.exp(s)  # (BLOCK, BLOCK): the forward's weights
                ok = cols[None, :] < T
                if IS_CAUSAL and MASK:
                    ok = ok & (cols[None, :] <= rows[:, None])
                p = tl.where(ok, p, 0.0)
                dp = tl.dot(do, tl.trans(v))  # dP = dO Vᵀ
                ds = p * (dp - delta[:, None]) if DELTA else p * dp
                dq += tl.dot(ds, k) * sm_scale if SCALE_DQ else tl.dot(ds, k)
        tl.store(DQ + head + rows[:, None] * D + offs_d[None, :], dq, mask=rows[:, None] < T)


ANSWERS = {
    check_visited_tiles: (
        [visited_tiles],
        [
            (lambda T, b, w: (T // b) * (T // b + 1) // 2, "is the last, ragged block counted?"),
            (lambda T, b, w: -(-T // b) * (-(-T // b) + 1) // 2, "expected"),  # the window ignored
            (lambda T, b, w: visited_tiles(T, b, None if w is None else w + b), "expected"),  # off by a block
            (lambda T, b, w: visited_tiles(T, b, None if w is None else w - 1), "expected"),  # off by one position
            (lambda T, b, w: (-(-T // b)) ** 2, "expected"),  # no block skipped
        ],
    ),
    check_combine_with_sink: (
        [combine_right],
        [
            (combine_sink_in_each_split, "max abs difference"),
            (combine_without_maximum, "NaN"),
            (combine_without_sink, "max abs difference"),
            (combine_mean, "max abs difference"),
        ],
    ),
}
if triton is None:
    ANSWERS.update(dict.fromkeys((check_softcap_kernel, check_forward_loop, check_dq_kernel), NO_TRITON))
else:
    ANSWERS[check_softcap_kernel] = (
        [softcap_right],
        [
            (softcap_unmasked, "past n"),
            (softcap_overflows, "NaN"),
            (softcap_no_inner_division, "max abs difference"),
            (softcap_clamp, "max abs difference"),
            (softcap_stub, "wrote nothing"),
            (lambda *a, **k: None, "TypeError"),  # not a kernel: cannot be launched
        ],
    )
    ANSWERS[check_forward_loop] = (
        [forward_right],
        [
            (_Variant(forward_right, BODY=False), "m, l and acc never change"),  # the chapter's scaffold
            (_Variant(forward_right, RESCALE_ACC=False), "how does acc change when m rises?"),
            (_Variant(forward_right, RESCALE_L=False), "out: max abs difference"),
            (_Variant(forward_right, MASK=False), "every query also sees the keys after it"),
            (_Variant(forward_right, MASK_TAIL=False), "lanes past T"),
            (_Variant(forward_right, SCALE=False), "not multiplied by sm_scale"),
            (_Variant(forward_right, BASE_2=True), "out is right, lse is not"),
        ],
    )
    ANSWERS[check_dq_kernel] = (
        [dq_right],
        [
            (_Variant(dq_right, BODY=False), "dq stays zero"),  # the chapter's scaffold
            (_Variant(dq_right, DELTA=False), "second term"),
            (_Variant(dq_right, SCALE_DQ=False), "1/sm_scale times too large"),
            (_Variant(dq_right, MASK=False), "without the causal mask"),
            (_Variant(dq_right, SCALE_S=False), "dQ: max abs difference"),
            (_Variant(dq_right, LSE=False), "dQ: max abs difference"),
        ],
    )
