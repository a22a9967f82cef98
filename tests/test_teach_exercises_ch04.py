"""attn_core.teach.exercises.ch04: the right and wrong answers of exercises 4.1-4.3 (ANSWERS, held to the
standard by tests/test_teach_exercises_standard.py)."""

from __future__ import annotations

import torch

from attn_core.teach.exercises.ch04 import check_prefix_lm_mask, check_score_entries, check_teacher_forcing
from attn_core.teach.tasks import SEP


def _prefix_lm(T_src, T_tgt):
    T = T_src + T_tgt
    pos = torch.arange(T)
    causal = pos[None, :] <= pos[:, None]  # (T, T)
    return causal | (pos[None, :] < T_src)  # every row also reads the whole source


def _plain_causal(T_src, T_tgt):
    return torch.ones(T_src + T_tgt, T_src + T_tgt, dtype=torch.bool).tril()


def _source_reads_all(T_src, T_tgt):  # the source rows see the target too
    m = _prefix_lm(T_src, T_tgt)
    m[:T_src] = True
    return m


def _target_bidirectional(T_src, T_tgt):
    m = _prefix_lm(T_src, T_tgt)
    m[T_src:, T_src:] = True
    return m


def _target_skips_itself(T_src, T_tgt):
    m = _prefix_lm(T_src, T_tgt)
    idx = torch.arange(T_src, T_src + T_tgt)
    m[idx, idx] = False
    return m


def _target_misses_source(T_src, T_tgt):
    m = _prefix_lm(T_src, T_tgt)
    m[T_src:, :T_src] = False
    return m


def _as_int(T_src, T_tgt):
    return _prefix_lm(T_src, T_tgt).int()


def _entries(T_src, T_tgt, design):
    causal = T_tgt * (T_tgt + 1) // 2
    if design == "decoder-only":
        T = T_src + T_tgt
        return T * (T + 1) // 2
    # encoder-decoder and prefix-lm keep the same entries: S², T_tgt·S and the causal target
    return T_src * T_src + T_tgt * T_src + causal


def _full_squares(T_src, T_tgt, design):  # forgets that causal masks halve the squares
    if design == "decoder-only":
        return (T_src + T_tgt) ** 2
    return T_src**2 + T_tgt**2 + T_tgt * T_src


def _no_cross(T_src, T_tgt, design):
    if design == "encoder-decoder":
        return T_src * T_src + T_tgt * (T_tgt + 1) // 2
    return _entries(T_src, T_tgt, design)


def _prefix_as_causal(T_src, T_tgt, design):
    return _entries(T_src, T_tgt, "decoder-only" if design == "prefix-lm" else design)


def _strict_causal(T_src, T_tgt, design):  # T(T-1)/2: forgets the diagonal
    if design == "decoder-only":
        T = T_src + T_tgt
        return T * (T - 1) // 2
    return _entries(T_src, T_tgt, design)


def _teacher_forcing(src):
    tgt_out = src.flip(-1)
    return torch.cat([torch.full_like(src[:, :1], SEP), tgt_out[:, :-1]], dim=1), tgt_out


ANSWERS = {
    check_prefix_lm_mask: (
        [_prefix_lm],
        [
            (_plain_causal, "plain causal"),
            (_source_reads_all, "reads the target"),
            (_target_bidirectional, "must be causal"),
            (_target_skips_itself, "must be causal"),
            (_target_misses_source, "whole source"),
            (_as_int, "boolean"),
        ],
    ),
    check_score_entries: (
        [_entries],
        [
            (_full_squares, "counted"),
            (_no_cross, "counted"),
            (_prefix_as_causal, "counted"),
            (_strict_causal, "counted"),
        ],
    ),
    check_teacher_forcing: (
        [_teacher_forcing],
        [
            (lambda src: (src.flip(-1), src.flip(-1)), "tgt_in equals tgt_out"),
            (lambda src: (_teacher_forcing(src)[1].roll(-1, 1), _teacher_forcing(src)[1]), "start token"),
            (lambda src: (_teacher_forcing(src.flip(-1))[0], src), "tgt_out"),  # not reversed
            (lambda src: (torch.cat([torch.full_like(src[:, :1], SEP), src[:, :-1]], 1), src.flip(-1)), "tgt_in"),
        ],
    ),
}
