"""attn_core.teach.exercises.ch21: the right and wrong answers of exercises 21.1-21.4 (ANSWERS, held to the
standard by tests/test_teach_exercises_standard.py).

The solutions of 21.4 (the loops of a forward kernel and of the dQ kernel) live here, not in
the chapter: the chapter runs the checks on its unfinished scaffolds. Here the same scaffolds,
read from the chapter, are completed with the right loop body and with the typical mistakes.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import shutil
import tempfile
from pathlib import Path

import torch

from attn_core.ops.backends import flash_kernels
from attn_core.teach.exercises.ch21 import (
    _tiles,
    check_combine_with_sink,
    check_dq_kernel,
    check_fixed_share,
    check_forward_loop,
    check_softcap_kernel,
    check_visited_tiles,
)

triton = flash_kernels.triton
NO_TRITON = "triton is not installed: pip install triton"


# ----------------------------------------------------------------------------- 21.1 visited tiles
def tiles_from_a_mask(T, block, window):
    """Counting a dense mask's tiles: right, but no (T, T) mask fits at T = 10^6."""
    if T * T > 10**10:  # what allocating the mask would raise, without trying it
        raise RuntimeError(f"can't allocate a {T} x {T} mask")
    return _tiles(T, block, window)


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
# The chapter's scaffolds, read from the notebook, with their loop bodies written: the right
# answer as below, each wrong one with one typical mistake edited in. Triton reads a kernel's
# source from its file, so each is written to a module of its own.
CHAPTER = Path(__file__).parents[1] / "book" / "21_flash_attention_triton.ipynb"

FORWARD_BODY = """\
        s = tl.dot(q, tl.trans(k)) * sm_scale  # (BLOCK, BLOCK)
        ok = cols[None, :] < T_k  # the lanes past T_k hold no key
        if IS_CAUSAL:  # query i sits at position T_k - T_q + i
            ok = ok & (cols[None, :] <= rows[:, None] + T_k - T_q)
        s = tl.where(ok, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        alpha = tl.exp(m - m_new)  # rescales what was summed under the old maximum
        p = tl.exp(s - m_new[:, None])
        l = l * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p, v)
        m = m_new
"""
FORWARD_MISTAKES = {  # the words of the verdict: the edits that make the mistake
    "how does acc change when m rises?": [("acc = acc * alpha[:, None] +", "acc = acc +")],
    "out: max abs difference": [("l = l * alpha +", "l = l +")],  # l not rescaled
    "every query also sees the keys after it": [("ok = ok & (cols[None, :] <= rows[:, None] + T_k - T_q)", "pass")],
    "aligned top-left": [("rows[:, None] + T_k - T_q", "rows[:, None]")],
    "lanes past T": [("ok = cols[None, :] < T_k", "ok = cols[None, :] >= 0")],
    "not multiplied by sm_scale": [(" * sm_scale", "")],
    # base 2, as the chapter's kernel: out is right, the stored m + log(l) is not
    "out is right, lse is not": [(" * sm_scale", " * sm_scale * 1.4426950408889634"), ("tl.exp(", "tl.exp2(")],
}
DQ_BODY = """\
        s = tl.dot(q, tl.trans(k)) * sm_scale
        ok = cols[None, :] < T_k
        if IS_CAUSAL:
            ok = ok & (cols[None, :] <= rows[:, None] + T_k - T_q)
        p = tl.where(ok, tl.exp(s - lse[:, None]), 0.0)  # the forward's weights, recomputed
        dp = tl.dot(do, tl.trans(v))  # dP = dO Vᵀ
        ds = p * (dp - delta[:, None])  # the softmax's backward
        dq += tl.dot(ds, k) * sm_scale
"""
DQ_MISTAKES = {
    "second term": [("p * (dp - delta[:, None])", "p * dp")],
    "1/sm_scale times too large": [("dq += tl.dot(ds, k) * sm_scale", "dq += tl.dot(ds, k)")],
    "without the causal mask": [("ok = ok & (cols[None, :] <= rows[:, None] + T_k - T_q)", "pass")],
    "aligned top-left": [("rows[:, None] + T_k - T_q", "rows[:, None]")],
    "dQ: max abs difference": [("tl.exp(s - lse[:, None])", "tl.exp(s)")],  # P not normalised
}


def _scaffold(title: str) -> str:
    cells = json.loads(CHAPTER.read_text())["cells"]
    source = next("".join(c["source"]) for c in cells if "".join(c["source"]).startswith(title))
    assert source.count("        pass\n") == 1, f"the scaffold {title!r} has one loop body to write"
    return source


_MODULES = Path(tempfile.mkdtemp(prefix="ch21_scaffolds_"))
atexit.register(shutil.rmtree, _MODULES, ignore_errors=True)


def _kernel(title: str, name: str, body: str | None, edits=()):
    """The chapter's scaffold ``title`` with ``body`` as its loop body (None: as the chapter leaves it)."""
    for old, new in edits:
        assert old in body, old
        body = body.replace(old, new)
    source = _scaffold(title) if body is None else _scaffold(title).replace("        pass\n", body)
    module_name = f"ch21_{name}_{len(list(_MODULES.iterdir()))}"
    path = _MODULES / f"{module_name}.py"
    path.write_text("import triton\nimport triton.language as tl\n\n\n" + source + "\n")
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


ANSWERS = {
    check_visited_tiles: (
        [visited_tiles],
        [
            (lambda T, b, w: (T // b) * (T // b + 1) // 2, "is the last, ragged block counted?"),
            (lambda T, b, w: -(-T // b) * (-(-T // b) + 1) // 2, "expected"),  # the window ignored
            (lambda T, b, w: visited_tiles(T, b, None if w is None else w + b), "expected"),  # off by a block
            (lambda T, b, w: visited_tiles(T, b, None if w is None else w - 1), "expected"),  # off by one position
            (lambda T, b, w: (-(-T // b)) ** 2, "expected"),  # no block skipped
            (tiles_from_a_mask, "no mask fits"),  # right, but cannot reach T = 10^6
        ],
    ),
    check_fixed_share: (
        [lambda t, r: (t - r) / (1 - r)],
        [
            (lambda t, r: t - r, "expected"),  # the saving not rescaled
            (lambda t, r: t / r, "expected"),  # time per tile
            (lambda t, r: (1 - t) / (1 - r), "expected"),  # the share that shrinks
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
    forward, dq = "# Exercise 4a", "# Exercise 4b"
    ANSWERS[check_forward_loop] = (
        [_kernel(forward, "forward_kernel", FORWARD_BODY)],
        [(_kernel(forward, "forward_kernel", None), "m, l and acc never change")]  # the chapter's scaffold
        + [(_kernel(forward, "forward_kernel", FORWARD_BODY, e), w) for w, e in FORWARD_MISTAKES.items()],
    )
    ANSWERS[check_dq_kernel] = (
        [_kernel(dq, "dq_kernel", DQ_BODY)],
        [(_kernel(dq, "dq_kernel", None), "dq stays zero")]  # the chapter's scaffold
        + [(_kernel(dq, "dq_kernel", DQ_BODY, e), w) for w, e in DQ_MISTAKES.items()],
    )
