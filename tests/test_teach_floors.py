"""Floors for trained results (attn_core.teach.floors): n-gram tables on the same data."""

from __future__ import annotations

import math

import pytest
import torch

from attn_core.teach.floors import ngram_cross_entropy


def test_ngram_floors():
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 4, (20000,), generator=g)
    # Uniform random symbols: a unigram table reaches the entropy, 2 bits; a bigram no better.
    assert ngram_cross_entropy(x, x, order=0, vocab_size=4) == pytest.approx(2.0, abs=0.01)
    assert ngram_cross_entropy(x[:10000], x[10000:], order=1, vocab_size=4) == pytest.approx(2.0, abs=0.02)
    # A deterministic cycle: the bigram table predicts it almost perfectly, the unigram cannot.
    cycle = torch.arange(4).repeat(1000)
    assert ngram_cross_entropy(cycle, cycle, order=1, vocab_size=4, alpha=1e-3) < 0.01
    assert ngram_cross_entropy(cycle, cycle, order=0, vocab_size=4) == pytest.approx(2.0, abs=1e-3)
    nats = ngram_cross_entropy(x, x, order=0, vocab_size=4, unit="nats")
    assert nats == pytest.approx(math.log(4), abs=0.01)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(train=torch.tensor([0.5, 1.0])), TypeError, "integer tensor"),
        (dict(train=torch.tensor([0, 9])), ValueError, r"outside \[0, 4\)"),
        (dict(order=3), ValueError, "order must be"),
        (dict(alpha=0.0), ValueError, "alpha"),
        (dict(test=torch.tensor([1])), ValueError, "more than order"),
    ],
)
def test_ngram_bad_input(kwargs, error, match):
    args = dict(train=torch.tensor([0, 1, 2, 3]), test=torch.tensor([0, 1, 2]), order=1, vocab_size=4)
    args.update(kwargs)
    with pytest.raises(error, match=match):
        ngram_cross_entropy(args.pop("train"), args.pop("test"), **args)
