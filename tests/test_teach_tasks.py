"""attn_core.teach.tasks: every task's invariants, determinism from the generator, and bad input."""

from __future__ import annotations

import functools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attn_core.teach.tasks import (
    IGNORE_INDEX,
    NEW,
    SEEN,
    SEP,
    SEP_LABEL,
    associative_recall_task,
    copy_task,
    induction_task,
    reverse_task,
    seen_before_task,
    sort_task,
    token_labels,
)

TRANSFORMS = {copy_task: lambda x: x, reverse_task: lambda x: x.flip(1), sort_task: lambda x: x.sort(1).values}


def _g(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@settings(max_examples=10, deadline=None)
@given(B=st.integers(1, 4), n=st.integers(1, 9), V=st.integers(2, 20), seed=st.integers(0, 100))
def test_separator_tasks(B, n, V, seed):
    for task, transform in TRANSFORMS.items():
        inputs, targets = task(B, n=n, vocab_size=V, generator=_g(seed))
        assert inputs.shape == targets.shape == (B, 2 * n)
        assert inputs.dtype == targets.dtype == torch.long
        x = inputs[:, :n]
        assert ((x >= 1) & (x < V)).all()  # data tokens never collide with the separator
        assert (inputs[:, n] == SEP).all()
        assert (targets[:, :n] == IGNORE_INDEX).all()
        assert torch.equal(targets[:, n:], transform(x))  # the answer is scored, and right
        assert torch.equal(inputs[:, 1:], torch.where(targets[:, :-1] == IGNORE_INDEX, inputs[:, 1:], targets[:, :-1]))


@settings(max_examples=10, deadline=None)
@given(B=st.integers(1, 6), n=st.integers(2, 12), extra=st.integers(0, 8), seed=st.integers(0, 100))
def test_induction_invariants(B, n, extra, seed):
    V = n + extra
    inputs, targets = induction_task(B, n=n, vocab_size=V, generator=_g(seed))
    assert inputs.shape == targets.shape == (B, 2 * n - 1)
    for b in range(B):
        scored = (targets[b] != IGNORE_INDEX).nonzero().flatten()
        p = int(scored[0])  # the pattern length: the first scored position
        assert max(2, n // 2) <= p <= n
        assert len(scored) == p - 1 and torch.equal(scored, torch.arange(p, 2 * p - 1))
        pattern = inputs[b, :p]
        assert len(set(pattern.tolist())) == p  # distinct tokens
        assert torch.equal(inputs[b, p : 2 * p - 1], pattern[: p - 1])  # the repeat
        for t in scored.tolist():
            # the token at t occurred once before, at t - p; the target is what followed it
            earlier = (inputs[b, :t] == inputs[b, t]).nonzero().flatten()
            assert earlier.tolist() == [t - p]
            assert targets[b, t] == inputs[b, t - p + 1]


def test_induction_pattern_length_varies():
    _, targets = induction_task(64, n=10, vocab_size=20, generator=_g(3))
    lengths = {int((row != IGNORE_INDEX).nonzero()[0]) for row in targets}
    assert len(lengths) > 3 and min(lengths) >= 5 and max(lengths) <= 10
    _, fixed = induction_task(8, n=6, vocab_size=10, min_n=6, generator=_g(3))
    assert all(int((row != IGNORE_INDEX).nonzero()[0]) == 6 for row in fixed)


def test_associative_recall():
    inputs, targets = associative_recall_task(16, n_pairs=5, vocab_size=20, generator=_g(1))
    assert inputs.shape == targets.shape == (16, 11)
    assert (targets[:, :-1] == IGNORE_INDEX).all()
    keys, values = inputs[:, 0:10:2], inputs[:, 1:10:2]
    assert (keys < 10).all() and (values >= 10).all()
    for b in range(16):
        assert len(set(keys[b].tolist())) == 5
        i = keys[b].tolist().index(int(inputs[b, -1]))
        assert targets[b, -1] == values[b, i]


@pytest.mark.parametrize("task", [copy_task, reverse_task, sort_task, induction_task, associative_recall_task])
def test_same_generator_seed_same_batch(task):
    a, b = task(4, generator=_g(7)), task(4, generator=_g(7))
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    c = task(4, generator=_g(8))
    assert not all(torch.equal(x, y) for x, y in zip(a, c))
    # usable as a trainer's batch_fn via functools.partial
    fn = functools.partial(task, vocab_size=40)
    assert fn(2, generator=_g(0))[0].shape[0] == 2


def test_bad_input():
    with pytest.raises(ValueError, match="n <= vocab_size, got n=10, vocab_size=8"):
        induction_task(2, n=10, vocab_size=8)
    with pytest.raises(ValueError, match="min_n must be <= n, got min_n=7, n=6"):
        induction_task(2, n=6, min_n=7)
    with pytest.raises(ValueError, match="batch_size=0"):
        copy_task(0)
    with pytest.raises(TypeError, match="n must be an int"):
        reverse_task(2, n=2.5)
    with pytest.raises(ValueError, match="vocab_size=1"):
        sort_task(2, vocab_size=1)
    with pytest.raises(ValueError, match="n_pairs=9, vocab_size=16"):
        associative_recall_task(2, n_pairs=9, vocab_size=16)
    with pytest.raises(TypeError, match="generator must be a torch.Generator"):
        copy_task(2, generator=0)


def test_token_labels():
    x, _ = copy_task(1, n=4, vocab_size=20, generator=_g(3))
    labels = token_labels(x[0])
    assert labels[4] == SEP_LABEL and not SEP_LABEL.isalpha()  # the separator is not a letter
    assert token_labels(torch.tensor([SEP, 1, 2, 12, 26, 27])) == [SEP_LABEL, "a", "b", "l", "z", "27"]
    assert all(label.isalpha() for i, label in enumerate(labels) if i != 4)
    with pytest.raises(TypeError, match="ids must be"):
        token_labels([1, 2])
    with pytest.raises(ValueError, match="1-D tensor of integer token ids, got shape \\(1, 2\\)"):
        token_labels(torch.tensor([[1, 2]]))
    with pytest.raises(ValueError, match="non-negative, got -1"):
        token_labels(torch.tensor([1, -1]))


# --------------------------------------------------------------------------- seen_before_task (chapter 15)
def test_seen_before_task_against_a_loop():
    g = torch.Generator().manual_seed(0)
    x, y = seen_before_task(4, n=12, vocab_size=6, generator=g)
    assert x.shape == y.shape == (4, 13) and (x[:, 0] == 0).all() and (y[:, 0] == IGNORE_INDEX).all()
    assert ((x[:, 1:] >= 2) & (x[:, 1:] < 6)).all()
    for b in range(4):
        data = x[b, 1:].tolist()
        assert y[b, 1:].tolist() == [int(data[t] in data[:t]) for t in range(12)]


def test_seen_before_task_with_a_window_and_without_bos():
    x, y = seen_before_task(3, n=10, vocab_size=5, bos=False, window=3, generator=torch.Generator().manual_seed(1))
    assert x.shape == y.shape == (3, 10)
    for b in range(3):
        data = x[b].tolist()
        assert y[b].tolist() == [int(data[t] in data[max(0, t - 2) : t]) for t in range(10)]
    assert SEEN == 1 and NEW == 0


def test_seen_before_task_bad_input():
    with pytest.raises(ValueError, match="vocab_size must be >= 3, got vocab_size=2"):
        seen_before_task(2, vocab_size=2)
    with pytest.raises(ValueError, match="window must be >= 1, got window=0"):
        seen_before_task(2, window=0)
