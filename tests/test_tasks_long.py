"""attn_core.teach.tasks.needle_recall_task (chapter 20): invariants, determinism, bad input."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attn_core.teach.tasks import IGNORE_INDEX, QUERY, needle_recall_task


def _g(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@settings(max_examples=20, deadline=None)
@given(
    B=st.integers(1, 5),
    n=st.integers(2, 40),
    n_filler=st.integers(1, 10),
    n_needles=st.integers(1, 6),
    score_all=st.booleans(),
    seed=st.integers(0, 100),
)
def test_needle_invariants(B, n, n_filler, n_needles, score_all, seed):
    x, y = needle_recall_task(B, n=n, n_filler=n_filler, n_needles=n_needles, score_all=score_all, generator=_g(seed))
    assert x.shape == y.shape == (B, n) and x.dtype == y.dtype == torch.long
    assert (x[:, -1] == QUERY).all()
    is_needle = x > n_filler
    assert (is_needle.sum(1) == 1).all()  # exactly one needle per row
    assert not is_needle[:, -1].any()  # never at the query
    assert ((x[:, :-1] >= 1) & (x[:, :-1] <= n_filler + n_needles)).all()
    needle = x[is_needle]  # (B,)
    assert torch.equal(y[:, -1], needle)  # the query's answer is the needle
    where = is_needle.int().argmax(1)  # (B,)
    t = torch.arange(n)[None, :]
    scored = y != IGNORE_INDEX
    if score_all:
        assert torch.equal(scored, t >= where[:, None])
        assert (y[scored] == needle[:, None].expand(B, n)[scored]).all()
    else:
        assert torch.equal(scored, (t == n - 1).expand(B, n))


def test_needle_positions_cover_every_distance():
    x, _ = needle_recall_task(4000, n=8, generator=_g(1))
    where = (x > 12).int().argmax(1)
    counts = torch.bincount(where, minlength=8)
    assert counts[7] == 0 and (counts[:7] > 450).all()  # uniform over 0..n-2


def test_needle_is_deterministic_given_the_generator():
    a = needle_recall_task(3, n=10, generator=_g(5))
    b = needle_recall_task(3, n=10, generator=_g(5))
    c = needle_recall_task(3, n=10, generator=_g(6))
    assert all(torch.equal(u, v) for u, v in zip(a, b))
    assert not torch.equal(a[0], c[0])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(n=1), "n=1"),
        (dict(n_filler=0), "n_filler=0"),
        (dict(n_needles=0), "n_needles=0"),
        (dict(score_all=1), "score_all"),
    ],
)
def test_needle_bad_input(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        needle_recall_task(2, **kwargs)


def test_needle_bad_generator():
    with pytest.raises(TypeError, match="generator"):
        needle_recall_task(2, generator=0)
