"""Exercises 15.5 (StreamingLLM's positions) and 15.1 (Longformer's window): each check passes a right
answer and fails plausible wrong ones."""

from __future__ import annotations

import torch

from attn_core.ops.masks import causal_mask
from attn_core.teach.exercises.ch15 import check_longformer_mask, check_streaming_positions


def right(t, sink_tokens, window):
    held = sorted(set(range(min(sink_tokens, t + 1))) | set(range(max(0, t - window + 1), t + 1)))
    return held, len(held) - 1


def test_right_answer_passes(capsys):
    assert check_streaming_positions(right)
    assert "correct" in capsys.readouterr().out


def test_text_position_for_the_query_fails(capsys):
    assert not check_streaming_positions(lambda t, s, w: (right(t, s, w)[0], t))
    assert "not in the cache" in capsys.readouterr().out


def test_window_off_by_one_fails(capsys):
    def wrong(t, s, w):
        held = sorted(set(range(min(s, t + 1))) | set(range(max(0, t - w), t + 1)))
        return held, len(held) - 1

    assert not check_streaming_positions(wrong)
    assert "counts the query itself" in capsys.readouterr().out


def test_forgotten_sinks_fail():
    assert not check_streaming_positions(lambda t, s, w: right(t, 0, w))


def test_sinks_counted_twice_fail():
    # A window that does not skip the sinks: held positions listed twice early in the stream.
    def wrong(t, s, w):
        held = list(range(min(s, t + 1))) + list(range(max(0, t - w + 1), t + 1))
        return held, len(held) - 1

    assert not check_streaming_positions(wrong)


def test_an_exception_is_reported_not_raised(capsys):
    def broken(t, s, w):
        raise NotImplementedError

    assert not check_streaming_positions(broken)
    assert "NotImplementedError" in capsys.readouterr().out


# Exercise 15.1: Longformer's symmetric window with global tokens.


def longformer_right(T, window, global_positions):
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    allowed = (i - j).abs() <= window // 2
    g = torch.zeros(T, dtype=torch.bool)
    g[list(global_positions)] = True
    return allowed | g[:, None] | g[None, :]


def test_longformer_right_answer_passes(capsys):
    assert check_longformer_mask(longformer_right)
    assert "correct" in capsys.readouterr().out


def test_longformer_a_causal_window_fails(capsys):
    # Chapter 15's (decoder) window of the same width: one-sided.
    def wrong(T, window, global_positions):
        g = torch.zeros(T, dtype=torch.bool)
        g[list(global_positions)] = True
        return causal_mask(T, window=window) | g[:, None] | g[None, :]

    assert not check_longformer_mask(wrong)
    assert "two-sided" in capsys.readouterr().out


def test_longformer_window_keys_on_each_side_off_by_one_fails(capsys):
    def wrong(T, window, global_positions):  # < instead of <=: one key too few per side
        i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
        allowed = (i - j).abs() < window // 2
        g = torch.zeros(T, dtype=torch.bool)
        g[list(global_positions)] = True
        return allowed | g[:, None] | g[None, :]

    assert not check_longformer_mask(wrong)
    assert "window // 2 on each side" in capsys.readouterr().out


def test_longformer_full_window_on_each_side_fails():
    def wrong(T, window, global_positions):  # w on each side: twice Longformer's window
        i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
        allowed = (i - j).abs() <= window
        g = torch.zeros(T, dtype=torch.bool)
        g[list(global_positions)] = True
        return allowed | g[:, None] | g[None, :]

    assert not check_longformer_mask(wrong)


def test_longformer_one_way_global_attention_fails(capsys):
    def wrong(T, window, global_positions):  # every token sees the global ones, not the reverse
        i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
        allowed = (i - j).abs() <= window // 2
        g = torch.zeros(T, dtype=torch.bool)
        g[list(global_positions)] = True
        return allowed | g[None, :]

    assert not check_longformer_mask(wrong)
    assert "both ways" in capsys.readouterr().out


def test_longformer_ignored_global_tokens_fail():
    def wrong(T, window, global_positions):
        i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
        return (i - j).abs() <= window // 2

    assert not check_longformer_mask(wrong)


def test_longformer_errors_and_wrong_types_report_without_raising(capsys):
    def broken(T, window, global_positions):
        raise RuntimeError("boom")

    assert not check_longformer_mask(broken)
    assert "RuntimeError: boom" in capsys.readouterr().out
    assert not check_longformer_mask(lambda T, w, g: [[True] * T] * T)
    assert not check_longformer_mask(lambda T, w, g: torch.ones(T, T + 1, dtype=torch.bool))
