"""attn_core.teach.exercises.ch04 (the exercises of issue 25): each check passes a right answer and
fails the plausible wrong ones, printing why and never raising."""

from __future__ import annotations

import torch

from attn_core.teach.exercises.ch04 import check_prefix_lm_mask, check_score_entries


def _prefix_lm(T_src, T_tgt):
    T = T_src + T_tgt
    pos = torch.arange(T)
    causal = pos[None, :] <= pos[:, None]  # (T, T)
    return causal | (pos[None, :] < T_src)  # every row also reads the whole source


def test_prefix_lm_mask(capsys):
    assert check_prefix_lm_mask(_prefix_lm)
    assert "correct" in capsys.readouterr().out

    def plain_causal(T_src, T_tgt):
        return torch.ones(T_src + T_tgt, T_src + T_tgt, dtype=torch.bool).tril()

    def source_reads_all(T_src, T_tgt):  # the source rows see the target too
        m = _prefix_lm(T_src, T_tgt)
        m[:T_src] = True
        return m

    def target_bidirectional(T_src, T_tgt):
        m = _prefix_lm(T_src, T_tgt)
        m[T_src:, T_src:] = True
        return m

    def target_skips_itself(T_src, T_tgt):
        m = _prefix_lm(T_src, T_tgt)
        idx = torch.arange(T_src, T_src + T_tgt)
        m[idx, idx] = False
        return m

    def target_misses_source(T_src, T_tgt):
        m = _prefix_lm(T_src, T_tgt)
        m[T_src:, :T_src] = False
        return m

    def as_int(T_src, T_tgt):
        return _prefix_lm(T_src, T_tgt).int()

    expected = {
        plain_causal: "plain causal",
        source_reads_all: "reads the target",
        target_bidirectional: "must be causal",
        target_skips_itself: "must be causal",
        target_misses_source: "whole source",
        as_int: "boolean",
    }
    for wrong, words in expected.items():
        assert not check_prefix_lm_mask(wrong), wrong.__name__
        assert words in capsys.readouterr().out, wrong.__name__


def _entries(T_src, T_tgt, design):
    causal = T_tgt * (T_tgt + 1) // 2
    if design == "decoder-only":
        T = T_src + T_tgt
        return T * (T + 1) // 2
    # encoder-decoder and prefix-lm keep the same entries: S², T_tgt·S and the causal target
    return T_src * T_src + T_tgt * T_src + causal


def test_score_entries(capsys):
    assert check_score_entries(_entries)
    assert "correct" in capsys.readouterr().out

    def full_squares(T_src, T_tgt, design):  # forgets that causal masks halve the squares
        if design == "decoder-only":
            return (T_src + T_tgt) ** 2
        return T_src**2 + T_tgt**2 + T_tgt * T_src

    def no_cross(T_src, T_tgt, design):
        if design == "encoder-decoder":
            return T_src * T_src + T_tgt * (T_tgt + 1) // 2
        return _entries(T_src, T_tgt, design)

    def prefix_as_causal(T_src, T_tgt, design):
        return _entries(T_src, T_tgt, "decoder-only" if design == "prefix-lm" else design)

    def strict_causal(T_src, T_tgt, design):  # T(T-1)/2: forgets the diagonal
        if design == "decoder-only":
            T = T_src + T_tgt
            return T * (T - 1) // 2
        return _entries(T_src, T_tgt, design)

    for wrong in (full_squares, no_cross, prefix_as_causal, strict_causal):
        assert not check_score_entries(wrong), wrong.__name__
        assert "counted" in capsys.readouterr().out
    assert not check_score_entries(lambda **kw: 1 / 0)
    assert "ZeroDivisionError" in capsys.readouterr().out
