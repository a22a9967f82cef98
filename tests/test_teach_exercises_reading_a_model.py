"""attn_core.teach.exercises.reading_a_model: each check passes a right answer and fails plausible wrong ones."""

from __future__ import annotations

import torch

from attn_core.teach.exercises.reading_a_model import check_duplicate_token_score, check_uniform_sink_baseline


def _baseline(T, min_query):
    # query t sees t + 1 keys, evenly: 1 / (t + 1) on position 0
    return sum(1 / (t + 1) for t in range(min_query, T)) / (T - min_query)


def test_uniform_sink_baseline(capsys):
    assert check_uniform_sink_baseline(_baseline)
    assert "correct" in capsys.readouterr().out
    assert not check_uniform_sink_baseline(lambda T, m: 1 / T)  # as if every query saw all T
    assert "first_token_score of the uniform" in capsys.readouterr().out
    # 1/t instead of 1/(t + 1) (query t sees t + 1 keys, itself included)
    assert not check_uniform_sink_baseline(lambda T, m: sum(1 / max(t, 1) for t in range(m, T)) / (T - m))
    assert not check_uniform_sink_baseline(lambda T, m: _baseline(T, 0))  # min_query ignored
    assert check_uniform_sink_baseline(lambda T, m: torch.tensor(_baseline(T, m)))  # a 0-d tensor is fine
    assert not check_uniform_sink_baseline(lambda T, m: "0.1")
    assert not check_uniform_sink_baseline(lambda T, m: 1 / 0)
    assert "ZeroDivisionError" in capsys.readouterr().out


def _duplicate(w, n):
    T = w.shape[-1]
    return w.diagonal(offset=-n, dim1=-2, dim2=-1)[..., : T - n].mean(-1)


def test_duplicate_token_score(capsys):
    assert check_duplicate_token_score(_duplicate)
    assert "correct" in capsys.readouterr().out
    # the induction score's diagonal (the token after the earlier copy)
    induction = lambda w, n: w.diagonal(offset=1 - n, dim1=-2, dim2=-1)[..., : w.shape[-1] - n].mean(-1)  # noqa: E731
    assert not check_duplicate_token_score(induction)
    # every query of the diagonal, with a wrong count: the sum over T instead of the mean over T - n
    assert not check_duplicate_token_score(lambda w, n: w.diagonal(offset=-n, dim1=-2, dim2=-1).sum(-1) / w.shape[-1])
    # the diagonal of the transposed map (keys above the main diagonal: the future)
    assert not check_duplicate_token_score(lambda w, n: w.diagonal(offset=n, dim1=-2, dim2=-1).mean(-1))
    assert not check_duplicate_token_score(lambda w, n: _duplicate(w, n).sum())  # one number for all heads
    assert "expected shape" in capsys.readouterr().out
    assert not check_duplicate_token_score(lambda w, n: 1 / 0)
    assert "ZeroDivisionError" in capsys.readouterr().out
