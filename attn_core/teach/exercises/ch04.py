"""Checks for the exercises of chapter 4 (cross-attention)."""

from __future__ import annotations

from typing import Callable

import torch

from ...ops.masks import causal_mask
from ..seq2seq_tasks import reverse_seq2seq
from ..tasks import SEP
from ._common import compare, report

__all__ = ["check_teacher_forcing"]


def check_teacher_forcing(fn: Callable[[torch.Tensor], tuple]) -> bool:
    """Exercise 4.3: ``fn(src)`` returns ``(tgt_in, tgt_out)`` for the reversal task.

    ``tgt_out`` is the reversed source; ``tgt_in`` is what the decoder reads: the start
    token ``SEP`` (0) followed by ``tgt_out`` shifted right by one.

    Shapes:
        src: ``(B, n)``; tgt_in, tgt_out: ``(B, n)``
    """
    name = "4.3 teacher forcing"
    batch = reverse_seq2seq(3, n=6, vocab_size=12, generator=torch.Generator().manual_seed(45))
    try:
        tgt_in, tgt_out = fn(batch.src.clone())
    except Exception as e:
        return report(name, False, f"{type(e).__name__}: {e}")
    if not (isinstance(tgt_out, torch.Tensor) and torch.equal(tgt_out.long(), batch.tgt_out)):
        return compare(f"{name}: tgt_out", tgt_out, batch.tgt_out.double(), atol=0.0)
    if isinstance(tgt_in, torch.Tensor) and tgt_in.shape == batch.tgt_in.shape and torch.equal(tgt_in, tgt_out):
        return report(name, False, "tgt_in equals tgt_out: the decoder would read the answer it must predict")
    if isinstance(tgt_in, torch.Tensor) and tgt_in.shape == batch.tgt_in.shape and not (tgt_in[:, 0] == SEP).all():
        return report(name, False, f"tgt_in must start with the start token SEP={SEP}")
    if not (isinstance(tgt_in, torch.Tensor) and torch.equal(tgt_in.long(), batch.tgt_in)):
        return compare(f"{name}: tgt_in", tgt_in, batch.tgt_in.double(), atol=0.0)
    return report(name, True, "tgt_out is the reversed source, tgt_in the start token then tgt_out[:, :-1]")


# The exercises of the revised chapter (issue 25): what a decoder-only model does instead of
# cross-attention, as a mask, and what each design costs, counted.
__all__ += ["check_prefix_lm_mask", "check_score_entries"]


def _prefix_lm(T_src: int, T_tgt: int) -> torch.Tensor:
    T = T_src + T_tgt
    allowed = causal_mask(T)  # (T, T)
    allowed[:, :T_src] = True  # every position reads the whole source
    allowed[:T_src, T_src:] = False  # the source never reads the target
    return allowed


def check_prefix_lm_mask(fn: Callable[[int, int], torch.Tensor]) -> bool:
    """Exercise 4.1: ``fn(T_src, T_tgt)``: the mask that makes one self-attention over ``[source; target]``
    see what an encoder (bidirectional) and a decoder (causal, reading the whole source) see.

    Shapes:
        fn's output: ``(T_src + T_tgt, T_src + T_tgt)``, boolean, ``True`` = may attend
    """
    name = "4.1 prefix-LM mask"
    for T_src, T_tgt in ((3, 2), (5, 4), (1, 3), (4, 1)):
        T = T_src + T_tgt
        where = f"T_src={T_src}, T_tgt={T_tgt}"
        try:
            got = fn(T_src, T_tgt)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"fn({T_src}, {T_tgt}) raised {type(e).__name__}: {e}")
        if not isinstance(got, torch.Tensor) or got.dtype != torch.bool or tuple(got.shape) != (T, T):
            what = f"{type(got).__name__}" if not isinstance(got, torch.Tensor) else f"{got.dtype}, {tuple(got.shape)}"
            return report(name, False, f"{where}: expected a boolean ({T}, {T}) tensor, got {what}")
        want = _prefix_lm(T_src, T_tgt)
        if torch.equal(got, want):
            continue
        if torch.equal(got, causal_mask(T)):
            return report(name, False, f"{where}: a plain causal mask: the source cannot read its own later tokens")
        if bool(got[:T_src, T_src:].any()):
            return report(name, False, f"{where}: a source token reads the target (the encoder never sees it)")
        if not bool(got[T_src:, :T_src].all()):
            return report(name, False, f"{where}: a target token cannot read the whole source")
        if not torch.equal(got[T_src:, T_src:], causal_mask(T_tgt)):
            return report(name, False, f"{where}: the target part must be causal (each token itself included)")
        return report(name, False, f"{where}: {int((got != want).sum())} entries differ")
    return report(name, True, "4 shapes match, one-token source and target included")


def _allowed(*masks: torch.Tensor) -> int:
    return sum(int(m.sum()) for m in masks)


def check_score_entries(fn: Callable[[int, int, str], int]) -> bool:
    """Exercise 4.2: ``fn(T_src, T_tgt, design)``: the score entries one layer computes and keeps.

    ``design`` is ``"encoder-decoder"`` (a bidirectional encoder self-attention over the
    source, a causal decoder self-attention over the target, a cross-attention from the
    target to the source), ``"decoder-only"`` (one causal self-attention over
    ``[source; target]``) or ``"prefix-lm"`` (the same with exercise 4.1's mask). The
    answer counts the allowed (unmasked) entries; the check counts them in the masks.
    """
    cases = []
    for T_src, T_tgt in ((6, 4), (100, 20), (3, 9)):
        full = torch.ones(T_src, T_src, dtype=torch.bool)
        cross = torch.ones(T_tgt, T_src, dtype=torch.bool)
        measured = {
            "encoder-decoder": _allowed(full, causal_mask(T_tgt), cross),
            "decoder-only": _allowed(causal_mask(T_src + T_tgt)),
            "prefix-lm": _allowed(_prefix_lm(T_src, T_tgt)),
        }
        cases += [(dict(T_src=T_src, T_tgt=T_tgt, design=d), n) for d, n in measured.items()]
    # check_counts hints at "keys and values" for half the answer; these are plain counts.
    for kwargs, want in cases:
        try:
            got = fn(**kwargs)
        except Exception as e:
            return report("4.2 score entries", False, f"{type(e).__name__}: {e}")
        if got != want:
            return report("4.2 score entries", False, f"{kwargs}: got {got!r}, counted {want}")
    return report("4.2 score entries", True, "3 designs × 3 shapes equal the entries counted in the masks")
