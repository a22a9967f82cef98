"""attn_core.teach.exercises.ch10: the right and wrong answers of exercises 10.1-10.3 (ANSWERS, held to
the standard by tests/test_teach_exercises_standard.py)."""

from __future__ import annotations

import torch

from attn_core import DecoderLM
from attn_core.teach.exercises.ch10 import (
    check_causality_test,
    check_parameter_formula,
    check_uniform_previous_score,
)


def _previous(T):
    return sum(1 / (t + 1) for t in range(1, T)) / (T - 1)


def _previous_harmonic(T):  # the closed form with harmonic numbers is right too
    return (sum(1 / k for k in range(1, T + 1)) - 1) / (T - 1)


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


def last_token_only(model, T, vocab_size):  # changes the last token only: a leak that skips it goes unseen
    idx = torch.randint(0, vocab_size, (4, T), generator=torch.Generator().manual_seed(0))
    changed = idx.clone()
    changed[:, -1] = (changed[:, -1] + 1) % vocab_size
    return bool(torch.allclose(_logits(model, changed)[:, :-1], _logits(model, idx)[:, :-1]))


def needs_every_key(model, T, vocab_size):  # "causal" = sees the past and not the future
    idx = torch.randint(0, vocab_size, (4, T), generator=torch.Generator().manual_seed(0))
    if not right_probe(model, T, vocab_size):
        return False
    changed = idx.clone()
    changed[:, 0] = (changed[:, 0] + 1) % vocab_size
    return not torch.allclose(_logits(model, changed)[:, -1], _logits(model, idx)[:, -1])


def _counted(config, *, unique=True, biases=True):
    """The parameters of the model built on the meta device (no memory), counted."""
    with torch.device("meta"):
        model = DecoderLM(config)
    return sum(p.numel() for n, p in model.named_parameters(remove_duplicate=unique) if biases or "bias" not in n)


ANSWERS = {
    check_uniform_previous_score: (
        [_previous, _previous_harmonic],
        [
            (lambda T: 1 / T, "last query"),
            (lambda T: sum(1 / t for t in range(1, T)) / (T - 1), "itself too"),
            (lambda T: sum(1 / (t + 1) for t in range(T)) / T, "expected"),  # counts query 0
            (lambda T: 1 / 2, "expected"),
        ],
    ),
    check_causality_test: (
        [right_probe],
        [
            (next_token_only, "'sees t + 2': said causal"),
            (all_positions, "'causal': said not causal"),
            (needs_every_key, "'causal window': said not causal"),
            (lambda m, T, V: True, "'prefix LM': said causal"),
            (last_token_only, "'prefix LM': said causal"),
            (lambda m, T, V: 1, "bool"),
        ],
    ),
    check_parameter_formula: (
        [_counted],
        [
            (lambda c: _counted(c, unique=False), "expected"),  # a tied head counted twice
            (lambda c: _counted(c, biases=False), "expected"),  # the biases forgotten
            (lambda c: _counted(c) - c.d_model, "expected"),  # the final norm's gain forgotten
        ],
    ),
}


def test_causality_test_names_the_model_a_one_step_probe_misses(capsys):
    assert not check_causality_test(next_token_only)
    assert "'first sees last': said causal" in capsys.readouterr().out
