"""attn_core.exercises.ch08 (the exercises of issue 25): each check passes a right answer and
fails the plausible wrong ones, printing why and never raising."""

from __future__ import annotations

import math

import torch

from attn_core import ALiBi
from attn_core.exercises.ch08 import check_alibi_reach


def right(slope, share):
    return math.ceil(math.log(1 / (1 - share)) / slope)


def test_alibi_reach(capsys):
    assert check_alibi_reach(right)
    assert "correct" in capsys.readouterr().out
    expected = {
        (lambda m, s: math.floor(math.log(1 / (1 - s)) / m)): "rounded down",
        (lambda m, s: math.ceil(math.log(2) / m)): "half-weight",
        (lambda m, s: math.ceil(math.log2(1 / (1 - s)) / m)): "expected",  # base-2 log
        (lambda m, s: math.ceil(math.log(1 / (1 - s)) * m)): "expected",  # times the slope
        (lambda m, s: math.ceil(-math.log(s) / m)): "expected",  # share of the far keys
        (lambda m, s: math.log(1 / (1 - s)) / m): "must be an int",
    }
    for wrong, words in expected.items():
        assert not check_alibi_reach(wrong)
        assert words in capsys.readouterr().out
    assert not check_alibi_reach(lambda m, s: 1 / 0)
    assert "ZeroDivisionError" in capsys.readouterr().out


def test_alibi_reach_matches_alibi_weights():
    # The closed form agrees with the softmax of ALiBi's own bias over a long past.
    alibi = ALiBi(8)
    T = 8000
    w = torch.softmax(alibi.bias(1, T)[:, 0].double(), dim=-1).flip(-1)  # (H, T): distance 0 first
    for h, m in enumerate(alibi.slopes.tolist()):
        for share in (0.5, 0.9):
            k = right(m, share)
            assert w[h, :k].sum() >= share > w[h, : k - 1].sum()
