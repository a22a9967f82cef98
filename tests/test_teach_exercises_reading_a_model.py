"""attn_core.teach.exercises.reading_a_model: the right and wrong answers of exercises R.1 and R.2
(ANSWERS, held to the standard by tests/test_teach_exercises_standard.py)."""

from __future__ import annotations

import torch

from attn_core.teach.exercises.reading_a_model import check_duplicate_token_score, check_uniform_sink_baseline


def _baseline(T, min_query):
    # query t sees t + 1 keys, evenly: 1 / (t + 1) on position 0
    return sum(1 / (t + 1) for t in range(min_query, T)) / (T - min_query)


def _duplicate(w, n):
    T = w.shape[-1]
    return w.diagonal(offset=-n, dim1=-2, dim2=-1)[..., : T - n].mean(-1)


def _induction(w, n):  # the induction score's diagonal (the token after the earlier copy)
    return w.diagonal(offset=1 - n, dim1=-2, dim2=-1)[..., : w.shape[-1] - n].mean(-1)


ANSWERS = {
    check_uniform_sink_baseline: (
        [_baseline, lambda T, m: torch.tensor(_baseline(T, m))],  # a 0-d tensor is fine
        [
            (lambda T, m: 1 / T, "first_token_score of the uniform"),  # as if every query saw all T
            # 1/t instead of 1/(t + 1) (query t sees t + 1 keys, itself included)
            (lambda T, m: sum(1 / max(t, 1) for t in range(m, T)) / (T - m), "first_token_score of the uniform"),
            (lambda T, m: _baseline(T, 0), "first_token_score of the uniform"),  # min_query ignored
            (lambda T, m: "0.1", "got '0.1'"),
        ],
    ),
    check_duplicate_token_score: (
        [_duplicate],
        [
            (_induction, "a pure duplicate-token head"),
            # every query of the diagonal, with a wrong count: the sum over T instead of the mean over T - n
            (lambda w, n: w.diagonal(offset=-n, dim1=-2, dim2=-1).sum(-1) / w.shape[-1], "duplicate-token head"),
            # the diagonal of the transposed map (keys above the main diagonal: the future)
            (lambda w, n: w.diagonal(offset=n, dim1=-2, dim2=-1).mean(-1), "duplicate-token head"),
            (lambda w, n: _duplicate(w, n).sum(), "expected shape"),  # one number for all heads
        ],
    ),
}
