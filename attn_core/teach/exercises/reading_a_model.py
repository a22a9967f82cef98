"""Checks for the exercises of the appendix "Reading a trained model" (the Shakespeare model).

* R.1 the even-spread baseline of a sink score: what uniform causal attention puts on
  position 0, derived (no attention map);
* R.2 a duplicate-token score (a head that attends to the earlier copy of the current
  token itself, not to the token after it): a variant of the appendix's induction score.

The checks run on seeded random maps and on maps built to have one behaviour, not on the
model, so they are quick; what the learner writes is then used on the model in the appendix.
"""

from __future__ import annotations

from typing import Callable

import torch

from ...ops.masks import causal_mask
from ..heads import first_token_score, induction_score
from ._common import report

__all__ = ["check_uniform_sink_baseline", "check_duplicate_token_score"]

F64 = torch.float64


def _call(name: str, fn: Callable, *args):
    """The learner's result and True, or (None, False) after printing why."""
    try:
        return fn(*args), True
    except Exception as e:  # a learner's bug should print, not stop the notebook
        report(name, False, f"{type(e).__name__}: {e}")
        return None, False


def check_uniform_sink_baseline(fn: Callable[[int, int], float]) -> bool:
    """Exercise R.1: ``fn(T, min_query)``: the first-token score of uniform causal attention.

    Uniform causal attention spreads each query's weight evenly over the keys it can see.
    ``fn`` returns, as a float, the mean weight on position 0 over the queries
    ``min_query .. T-1`` (what :func:`attn_core.teach.heads.first_token_score` gives such a map),
    derived without building the map. The check builds the map and compares.
    """
    name = "R.1 the even-spread sink baseline"
    for T, min_query in ((128, 8), (16, 8), (10, 0), (33, 32)):
        uniform = causal_mask(T).to(F64)
        uniform = uniform / uniform.sum(-1, keepdim=True)  # (T, T): rows sum to 1
        want = first_token_score(uniform, min_query=min_query).item()
        got, ok = _call(name, fn, T, min_query)
        if not ok:
            return False
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if isinstance(got, bool) or not isinstance(got, (int, float)) or not abs(got - want) < 1e-6:
            return report(
                name,
                False,
                f"T={T}, min_query={min_query}: got {got!r}; first_token_score of the uniform causal map is {want:.6f}",
            )
    return report(name, True, "equals first_token_score of uniform causal maps for 4 (T, min_query)")


def _duplicate(weights: torch.Tensor, period: int) -> torch.Tensor:
    T = weights.shape[-1]
    # Keys t - period for the queries t = period .. T-1: the diagonal at offset -period.
    return weights.diagonal(offset=-period, dim1=-2, dim2=-1)[..., : T - period].mean(-1)


def check_duplicate_token_score(fn: Callable[[torch.Tensor, int], torch.Tensor]) -> bool:
    """Exercise R.2: ``fn(weights, period)``: the mean weight on the earlier copy of the query's own token.

    On a passage written twice (period ``n``), a query ``t >= n`` in the second copy has its own
    token at ``t - n``; a duplicate-token head attends there (an induction head attends to
    ``t - n + 1``, the token after it). The mean runs over the queries ``n .. T-1``.

    Checked on random maps and on two built maps: a pure duplicate-token head (score 1) and a
    pure induction head (score 0).

    Shapes:
        weights: ``(..., T, T)``; output: ``(...)``
    """
    name = "R.2 duplicate-token score"
    g = torch.Generator().manual_seed(2002)
    random_maps = []
    for shape, period in (((2, 4, 12, 12), 6), ((3, 10, 10), 4), ((16, 16), 8)):
        w = torch.softmax(torch.randn(*shape, generator=g, dtype=F64), -1)
        random_maps.append((w, period))
    # the built maps first: a score that confuses the two heads fails on them, and is told so
    cases = []
    T, n = 12, 6
    duplicate = torch.zeros(T, T, dtype=F64)
    duplicate[torch.arange(T), torch.arange(T).sub(n).clamp(min=0)] = 1.0  # row t -> key t - n (or 0)
    cases.append((duplicate, n))
    induction = torch.zeros(T, T, dtype=F64)
    induction[torch.arange(T), torch.arange(T).sub(n - 1).clamp(min=0)] = 1.0  # row t -> key t - n + 1
    cases.append((induction, n))
    cases += random_maps
    assert abs(_duplicate(duplicate, n).item() - 1) < 1e-12 and induction_score(induction, n).item() == 1.0
    for i, (w, period) in enumerate(cases):
        want = _duplicate(w, period)
        got, ok = _call(name, fn, w.clone(), period)
        if not ok:
            return False
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            return report(name, False, f"weights {tuple(w.shape)}: got {shape}, expected shape {tuple(want.shape)}")
        err = (got.double() - want).abs().max().item()
        if not err < 1e-12:
            what = ["a pure duplicate-token head (score 1)", "a pure induction head (score 0)"] + ["a random map"] * 3
            return report(name, False, f"{what[i]}, period {period}: max |Δ| {err:.3g} from the expected score")
    return report(name, True, "random maps, a pure duplicate-token head (1) and a pure induction head (0)")
