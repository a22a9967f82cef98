"""attn_core.teach.exercises.ch10 (the exercises of issue 25): each check passes a right answer and
fails the plausible wrong ones, printing why and never raising."""

from __future__ import annotations

import torch

from attn_core.teach.exercises.ch10 import check_causality_test, check_uniform_previous_score


def test_uniform_previous_score(capsys):
    def right(T):
        return sum(1 / (t + 1) for t in range(1, T)) / (T - 1)

    assert check_uniform_previous_score(right)
    assert "correct" in capsys.readouterr().out
    # the closed form with harmonic numbers is right too
    assert check_uniform_previous_score(lambda T: (sum(1 / k for k in range(1, T + 1)) - 1) / (T - 1))
    capsys.readouterr()
    expected = {
        (lambda T: 1 / T): "last query",
        (lambda T: sum(1 / t for t in range(1, T)) / (T - 1)): "itself too",
        (lambda T: sum(1 / (t + 1) for t in range(T)) / T): "expected",  # counts query 0
        (lambda T: 1 / 2): "expected",
    }
    for wrong, words in expected.items():
        assert not check_uniform_previous_score(wrong)
        assert words in capsys.readouterr().out
    assert not check_uniform_previous_score(lambda T: 1 / 0)
    assert "ZeroDivisionError" in capsys.readouterr().out


def _logits(model, idx):
    with torch.no_grad():
        return model(idx)


def right_probe(model, T, vocab_size):
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, vocab_size, (4, T), generator=g)
    base = _logits(model, idx)
    for t in range(T - 1):
        changed = idx.clone()
        changed[:, t + 1 :] = (changed[:, t + 1 :] + 1) % vocab_size  # every later token
        if not torch.allclose(_logits(model, changed)[:, : t + 1], base[:, : t + 1]):
            return False
    return True


def next_token_only(model, T, vocab_size):  # change t + 1, look at t only
    idx = torch.randint(0, vocab_size, (4, T), generator=torch.Generator().manual_seed(0))
    base = _logits(model, idx)
    for t in range(T - 1):
        changed = idx.clone()
        changed[:, t + 1] = (changed[:, t + 1] + 1) % vocab_size
        if not torch.allclose(_logits(model, changed)[:, t], base[:, t]):
            return False
    return True


def all_positions(model, T, vocab_size):  # compares the changed positions too
    idx = torch.randint(0, vocab_size, (4, T), generator=torch.Generator().manual_seed(0))
    changed = idx.clone()
    changed[:, T // 2 :] = (changed[:, T // 2 :] + 1) % vocab_size
    return bool(torch.allclose(_logits(model, changed), _logits(model, idx)))


def needs_every_key(model, T, vocab_size):  # "causal" = sees the past and not the future
    idx = torch.randint(0, vocab_size, (4, T), generator=torch.Generator().manual_seed(0))
    if not right_probe(model, T, vocab_size):
        return False
    changed = idx.clone()
    changed[:, 0] = (changed[:, 0] + 1) % vocab_size
    return not torch.allclose(_logits(model, changed)[:, -1], _logits(model, idx)[:, -1])


def test_causality_test(capsys):
    assert check_causality_test(right_probe)
    assert "correct" in capsys.readouterr().out
    expected = {
        next_token_only: "'sees t + 2': said causal",
        all_positions: "'causal': said not causal",
        needs_every_key: "'causal window': said not causal",
        (lambda m, T, V: True): "'no mask': said causal",
    }
    for wrong, words in expected.items():
        assert not check_causality_test(wrong)
        assert words in capsys.readouterr().out
    assert "'first sees last': said causal" in (check_causality_test(next_token_only) or capsys.readouterr().out)
    assert not check_causality_test(lambda m, T, V: 1)
    assert "bool" in capsys.readouterr().out
    assert not check_causality_test(lambda m, T, V: 1 / 0)
    assert "ZeroDivisionError" in capsys.readouterr().out
