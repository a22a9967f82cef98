"""attn_core.teach.exercises.ch08 (the exercises of issue 25): each check passes a right answer and
fails the plausible wrong ones, printing why and never raising."""

from __future__ import annotations

import math

import torch

from attn_core import ALiBi
from attn_core.teach.exercises.ch08 import check_alibi_reach


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


# ---- 8.2: the RoPE score from the distance alone ----

from attn_core import RotaryEmbedding  # noqa: E402
from attn_core.teach.exercises.ch08 import check_rope_relative_score, check_sinusoidal_shift  # noqa: E402


def rope_score(q, k, delta, *, sign=1.0, pairs="half", base=10000.0, sine=True):
    D = q.shape[-1]
    theta = base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)  # (D/2,)
    if pairs == "half":
        q1, q2, k1, k2 = q[: D // 2], q[D // 2 :], k[: D // 2], k[D // 2 :]
    else:
        q1, q2, k1, k2 = q[0::2], q[1::2], k[0::2], k[1::2]
    a = sign * delta * theta
    s = (q2 * k1 - q1 * k2) * a.sin() if sine else 0.0
    return ((q1 * k1 + q2 * k2) * a.cos() + s).sum().item()


def test_rope_relative_score(capsys):
    assert check_rope_relative_score(rope_score)
    assert "correct" in capsys.readouterr().out
    # rotating both to positions that differ by delta is the same thing, and is accepted
    rope = RotaryEmbedding(8)

    def rotated(q, k, d):
        return (rope(q[None], offset=max(0, -d))[0] @ rope(k[None], offset=max(0, d))[0]).item()

    assert check_rope_relative_score(rotated)
    capsys.readouterr()
    expected = {
        (lambda q, k, d: rope_score(q, k, d, sign=-1.0)): "-delta",
        (lambda q, k, d: rope_score(q, k, d, pairs="interleaved")): "pairs neighbours",
        (lambda q, k, d: (q @ k).item()): "unrotated",
        (lambda q, k, d: rope_score(q, k, d, sine=False)): "expected",
        (lambda q, k, d: rope_score(q, k, d, base=500000.0)): "expected",
        (lambda q, k, d: 1 / 0): "ZeroDivisionError",
    }
    for wrong, words in expected.items():
        assert not check_rope_relative_score(wrong)
        assert words in capsys.readouterr().out


# ---- 8.3: the sinusoids shifted by a matrix ----


def shift(d, k, *, sign=1.0, order="sin_cos"):
    M = torch.zeros(d, d, dtype=torch.float64)
    for i in range(d // 2):
        w = 10000.0 ** (-2 * i / d)
        c, s = math.cos(k * w), sign * math.sin(k * w)
        if order == "sin_cos":  # (sin, cos) in (2i, 2i+1), as the encoding stores them
            M[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, s], [-s, c]], dtype=torch.float64)
        else:  # the RoPE-style block, as if the pair were (cos, sin)
            M[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, -s], [s, c]], dtype=torch.float64)
    return M


def test_sinusoidal_shift(capsys):
    assert check_sinusoidal_shift(shift)
    assert "correct" in capsys.readouterr().out
    assert check_sinusoidal_shift(lambda d, k: shift(d, k).tolist())  # lists are accepted
    capsys.readouterr()
    expected = {
        (lambda d, k: shift(d, k, sign=-1.0)): "shifts by -k",
        (lambda d, k: shift(d, k, order="cos_sin")): "shifts by -k",
        (lambda d, k: shift(d, k).T.contiguous()): "shifts by -k",
        (lambda d, k: torch.eye(d, dtype=torch.float64)): "off PE[p + k]",
        (lambda d, k: shift(d, 1)): "off PE[p + k]",  # ignores k
        (lambda d, k: shift(d, k)[:, :2]): "expected a",
        (lambda d, k: 1 / 0): "ZeroDivisionError",
    }
    for wrong, words in expected.items():
        assert not check_sinusoidal_shift(wrong)
        assert words in capsys.readouterr().out
