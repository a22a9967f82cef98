"""Checks for the exercises of chapter 14 (the variants compared): the design of the experiment.

14.1 asks how many seeds the book's verdict rule needs to see a given difference, 14.2 for a
test that decides whether a layer knows the order of its tokens, 14.3 for the bug in a
paired comparison that passes the obvious tests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Callable

import torch
from torch import nn

from ...layers.multihead import MultiHeadAttention
from ...ops.attention import attention
from ...ops.delta_rule import delta_rule_recurrent
from ...ops.linear_attention import l2_normalize, linear_attention_recurrent
from ...positions.rope import RotaryEmbedding
from ..evidence import compare_variants
from ._common import report

__all__ = [
    "check_seeds_needed",
    "check_order_test",
    "check_paired_difference",
    "OrderCandidate",
]

_MOST_SEEDS = 200  # the search for the reference stops here


def _rule_mde(sd_diff: float, n: int) -> float:
    """The MDE :func:`compare_variants` reports for ``n`` paired seeds whose differences have sample sd ``sd_diff``."""
    spread = torch.arange(n, dtype=torch.float64) - (n - 1) / 2  # sample sd made exactly sd_diff
    diffs = (spread / spread.std() * sd_diff).tolist()
    results = {"B": [3.0 + d for d in diffs], "A": [3.0] * n}
    comparison = compare_variants(
        results, metric="loss", better="lower", floor=("floor", 8.0), baseline="A", quiet=True
    )
    return comparison["B", "A"].mde


def check_seeds_needed(fn: Callable[[float, float], int]) -> bool:
    """Exercise 14.1: ``fn(sd_diff, effect)`` returns the fewest seeds (at least 3) at which the
    book's rule, paired by seed, has a minimum detectable effect no larger than ``effect``,
    when the per-seed differences between two variants scatter with standard deviation
    ``sd_diff``.

    The reference asks the rule itself: it gives :func:`compare_variants` paired results with
    that scatter for 3, 4, 5, ... seeds and reads the MDE it reports.
    """
    name = "14.1 seeds needed"
    cases = ((0.01, 0.1), (0.05, 0.05), (0.05, 0.1), (0.1, 0.05), (0.03, 0.05))
    for sd_diff, effect in cases:
        want = next(n for n in range(3, _MOST_SEEDS) if _rule_mde(sd_diff, n) <= effect)
        try:
            got = fn(sd_diff, effect)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        if isinstance(got, bool) or not isinstance(got, int):
            return report(name, False, f"sd {sd_diff}, effect {effect}: expected an int, got {got!r}")
        if got != want:
            if got < 3:
                why = "the rule needs at least 3"
            elif got < want:
                why = f"its MDE {_rule_mde(sd_diff, got):.3g} > effect"
            else:
                why = "fewer already reach it"
            return report(name, False, f"sd {sd_diff}, effect {effect}: {got} seeds; {why}")
    return report(name, True, f"{len(cases)} cases match the MDE the rule reports")


# ---------------------------------------------------------------- 14.2: does a layer know order?


class OrderCandidate(nn.Module):
    """One hidden layer of exercise 14.2: causal, ``(B, T, d_model) -> (B, T, d_model)``.

    Every candidate is this class, with the same attributes and call; only the mixing inside
    differs (and whether it depends on the order of the tokens before a position).

    Shapes:
        x, output: ``(B, T, d_model)``
    """

    def __init__(self, kind: str, d_model: int = 16, n_heads: int = 2) -> None:
        super().__init__()
        self.d_model, self._kind, self._heads = d_model, kind, n_heads
        width = d_model // n_heads
        self._rope = RotaryEmbedding(width) if kind == "rope" else None
        self._attn = MultiHeadAttention(d_model, n_heads, causal=True, rope=self._rope)
        self._qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self._beta = nn.Linear(d_model, n_heads, bias=False)
        self._conv = nn.Conv1d(d_model, d_model, 4, groups=d_model, bias=False)
        self._first = nn.Linear(d_model, d_model, bias=False)

    def _heads_of(self, t: torch.Tensor) -> torch.Tensor:
        B, T, _ = t.shape
        return t.view(B, T, self._heads, -1).transpose(1, 2)  # (B, H, T, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        kind = self._kind
        if kind in ("softmax", "rope"):
            return self._attn(x)
        if kind == "local":  # order-blind attention plus a 4-tap causal convolution
            padded = nn.functional.pad(x.transpose(1, 2), (3, 0))  # (B, d_model, T + 3)
            return self._attn(x) + self._conv(padded).transpose(1, 2)
        if kind == "first":  # order-blind attention plus what the first token says
            return self._attn(x) + self._first(x[:, :1])
        q, k, v = (self._heads_of(t) for t in self._qkv(x).chunk(3, dim=-1))  # (B, H, T, D) each
        if kind == "linear":
            out, _ = linear_attention_recurrent(q, k, v)
        elif kind == "recency":  # softmax scores lowered by 0.001 per position of distance
            distance = torch.arange(T)[:, None] - torch.arange(T)[None, :]  # (T, T)
            out = attention(q, k, v, is_causal=True, mask=-1e-3 * distance.clamp(min=0).to(x.dtype))
        else:  # "delta"
            beta = torch.sigmoid(self._beta(x)).transpose(1, 2)  # (B, H, T)
            out, _ = delta_rule_recurrent(l2_normalize(q), l2_normalize(k), v, beta)
        return out.transpose(1, 2).reshape(B, T, self.d_model)


# kind -> (knows order, how the check names it to a learner who misjudged it)
_ORDER_KINDS = {
    "softmax": (False, "attention without positions"),
    "rope": (True, "attention with rotary positions"),
    "linear": (False, "linear attention (a running sum)"),
    "local": (True, "order only among the last few tokens"),
    "first": (True, "order only at the first token"),
    "recency": (True, "a weak recency bias"),
    "delta": (True, "a delta-rule layer"),
}
_ORDER_SHUFFLE = ("recency", "softmax", "local", "delta", "linear", "first", "rope")


def order_candidates() -> list[tuple[str, OrderCandidate]]:
    """The hidden layers of exercise 14.2, in the order the check runs them, built from a seeded generator."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(14)
        return [(kind, OrderCandidate(kind).eval()) for kind in _ORDER_SHUFFLE]


def check_order_test(knows_order: Callable[[nn.Module], bool]) -> bool:
    """Exercise 14.2: ``knows_order(layer)`` decides whether the output of a causal layer at
    the last position depends on the order of the tokens before it.

    ``layer`` maps ``(B, T, layer.d_model)`` float tensors to the same shape. The check runs
    the test on seven hidden layers (the same class, attributes and call, in a mixed order):
    order-blind ones whose float rounding still moves when tokens are permuted, and order-aware
    ones whose dependence shows only among the last few tokens, only at the first token, or
    only weakly.
    """
    name = "14.2 order test"
    for kind, layer in order_candidates():
        truth, what = _ORDER_KINDS[kind]
        try:
            with torch.random.fork_rng(devices=[]), torch.no_grad():
                got = knows_order(layer)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        if not isinstance(got, bool):
            return report(name, False, f"expected True or False, got {got!r}")
        if got != truth:
            said = "order-aware" if got else "order-blind"
            return report(name, False, f"{what}: called {said}")
    return report(name, True, f"{len(_ORDER_KINDS)} hidden layers, blind and aware, decided right")


# ---------------------------------------------------------------- 14.3: the paired comparison


def check_paired_difference(fn: Callable[[Sequence[float], Sequence[float]], tuple[float, float]]) -> bool:
    """Exercise 14.3: ``fn(a, b)`` returns ``(mean difference, its standard error)`` of two
    variants' per-seed results ``a`` and ``b`` (entry ``i`` of both from seed ``i``), paired by
    seed, as the book's rule computes them.

    The reference is what :func:`compare_variants` reports, on results whose seeds rank the
    variants differently (where pairing by rank and pairing by seed disagree).
    """
    name = "14.3 paired difference"
    cases = (
        ([3.19, 3.25, 3.21, 3.30, 3.17], [3.27, 3.31, 3.26, 3.35, 3.28]),
        ([2.0, 2.4, 2.1, 2.2], [2.3, 2.1, 2.5, 2.2]),
        ([1.0, 1.1, 1.2], [1.0, 1.1, 1.2]),
        ([5.0, 4.0, 6.0, 5.5, 4.5, 5.2], [5.1, 4.2, 5.9, 5.8, 4.4, 5.6]),
    )
    for case, (a, b) in enumerate(cases, 1):
        diff = compare_variants(
            {"a": a, "b": b}, metric="loss", better="lower", floor=("floor", 10.0), baseline="b", quiet=True
        )
        want = diff["a", "b"]
        try:
            got = fn(list(a), list(b))
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        ok = isinstance(got, tuple) and len(got) == 2 and all(isinstance(v, (int, float)) for v in got)
        if not ok:
            return report(name, False, f"expected a (difference, standard error) pair, got {got!r}")
        delta, se = got
        if not math.isclose(delta, want.delta, abs_tol=1e-9):
            return report(name, False, f"case {case}: the mean difference is off by {delta - want.delta:+.3g}")
        if not math.isclose(se, want.se, rel_tol=1e-6, abs_tol=1e-12):
            return report(name, False, f"case {case} ({len(a)} seeds): SE {se:.4g}, the rule's {want.se:.4g}")
    return report(name, True, f"{len(cases)} cases match the rule's Δ and SE (to 1e-6)")
