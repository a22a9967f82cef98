"""attn_core.teach.exercises.ch21: each check passes a right answer and fails plausible wrong ones."""

from __future__ import annotations

import pytest
import torch

from attn_core.ops.backends import flash_kernels
from attn_core.teach.exercises.ch21 import check_combine_with_sink, check_softcap_kernel, check_visited_tiles

triton = flash_kernels.triton
needs_triton = pytest.mark.skipif(triton is None, reason="triton is not installed: pip install triton")


# ----------------------------------------------------------------------------- 21.1 visited tiles
def visited_tiles(T, block, window):
    n = -(-T // block)  # blocks per side, the ragged last one included
    total = 0
    for i in range(n):  # query block i: its last key block is i, its first is the window's
        first = 0 if window is None else max(0, i * block - window + 1) // block
        total += i + 1 - first
    return total


def test_visited_tiles_passes_the_formula(capsys):
    assert check_visited_tiles(visited_tiles)
    assert "correct" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrong",
    [
        lambda T, b, w: (T // b) * (T // b + 1) // 2,  # the ragged last block forgotten
        lambda T, b, w: -(-T // b) * (-(-T // b) + 1) // 2,  # the window ignored
        lambda T, b, w: visited_tiles(T, b, None if w is None else w + b),  # window off by a block
        lambda T, b, w: visited_tiles(T, b, None if w is None else w - 1),  # window off by one position
        lambda T, b, w: -((-T // b) ** 2),  # no block skipped
    ],
)
def test_visited_tiles_fails_wrong_counts(wrong, capsys):
    assert not check_visited_tiles(wrong)
    assert "not yet" in capsys.readouterr().out


def test_visited_tiles_reports_an_exception(capsys):
    def broken(T, block, window):
        raise NotImplementedError

    assert not check_visited_tiles(broken)
    assert "NotImplementedError" in capsys.readouterr().out


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


@needs_triton
def test_softcap_kernel_passes_a_right_kernel(capsys):
    assert check_softcap_kernel(softcap_right)
    assert "correct" in capsys.readouterr().out


@needs_triton
@pytest.mark.parametrize(
    "name, hint",
    [
        ("softcap_unmasked", "past n"),
        ("softcap_overflows", "NaN"),
        ("softcap_no_inner_division", "max abs difference"),
        ("softcap_clamp", "max abs difference"),
    ],
)
def test_softcap_kernel_fails_wrong_kernels(name, hint, capsys):
    assert not check_softcap_kernel(globals()[name])
    out = capsys.readouterr().out
    assert "not yet" in out and hint in out


@needs_triton
def test_softcap_kernel_reports_a_broken_kernel(capsys):
    assert not check_softcap_kernel(lambda *a, **k: None)  # not a kernel: cannot be launched
    assert "not yet" in capsys.readouterr().out


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


def test_combine_passes_the_right_combination(capsys):
    assert check_combine_with_sink(combine_right)
    assert "correct" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrong", [combine_sink_in_each_split, combine_without_maximum, combine_without_sink, combine_mean]
)
def test_combine_fails_wrong_combinations(wrong, capsys):
    assert not check_combine_with_sink(wrong)
    assert "not yet" in capsys.readouterr().out


if triton is not None:

    @triton.jit
    def softcap_stub(S, Out, n, cap, BLOCK: tl.constexpr):
        pass  # the notebook's stub


@needs_triton
def test_softcap_kernel_reports_the_stub(capsys):
    assert not check_softcap_kernel(softcap_stub)
    assert "wrote nothing" in capsys.readouterr().out
