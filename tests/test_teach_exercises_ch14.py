"""attn_core.teach.exercises.ch14: the right and wrong answers of exercises 14.1-14.3 (ANSWERS, held to
the standard by tests/test_teach_exercises_standard.py): for 14.1, the normal quantiles, the threshold
alone, an unpaired standard error, the t of 5 seeds at every count; for 14.2, the lazy tests (every
position compared, exact equality, a loose tolerance, one early swap, the last two swapped); for 14.3,
the sort left in, the sort moved, Welch's standard error, the population standard deviation."""

from __future__ import annotations

import math
import statistics

import torch

from attn_core.teach.evidence import t_quantile
from attn_core.teach.exercises.ch14 import (
    check_order_test,
    check_paired_difference,
    check_seeds_needed,
    order_candidates,
)

# ---------------------------------------------------------------- 14.1


def _seeds(mde_of):
    def seeds_needed(sd_diff, effect):
        return next(n for n in range(3, 1000) if mde_of(sd_diff, n) <= effect)

    return seeds_needed


def _t_mde(sd, n):
    return (t_quantile(0.975, n - 1) + t_quantile(0.80, n - 1)) * sd / math.sqrt(n)


_right_seeds = _seeds(_t_mde)
_normal = _seeds(lambda sd, n: (1.960 + 0.842) * sd / math.sqrt(n))  # z in place of t
_threshold_only = _seeds(lambda sd, n: t_quantile(0.975, n - 1) * sd / math.sqrt(n))  # detected half the time
_unpaired = _seeds(lambda sd, n: _t_mde(sd * math.sqrt(2), n))  # Welch's SE of two variants of this scatter
_five_seed_t = _seeds(lambda sd, n: 3.72 * sd / math.sqrt(n))  # the printed 3.72 used at every count


def _closed_form(sd, effect):  # n = (3.72 sd / effect)^2, no minimum of 3 seeds
    return math.ceil((3.72 * sd / effect) ** 2)


# ---------------------------------------------------------------- 14.2


def _shuffled_last(layer, tol=1e-5, compare_all=False, trials=10):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 12, layer.d_model, generator=g)
    base = layer(x)
    for _ in range(trials):
        y = x.clone()
        y[:, :-1] = x[:, torch.randperm(11, generator=g)]  # every token but the last
        moved = layer(y) - base if compare_all else layer(y)[:, -1] - base[:, -1]
        if moved.abs().max() > tol * base.abs().max():
            return True
    return False


def _right_order(layer):
    return _shuffled_last(layer)


def _swap(i, j, tol=1e-5):
    def knows_order(layer):
        x = torch.randn(4, 12, layer.d_model, generator=torch.Generator().manual_seed(0))
        y = x.clone()
        y[:, [i, j]] = x[:, [j, i]]
        return bool((layer(y)[:, -1] - layer(x)[:, -1]).abs().max() > tol)

    return knows_order


def _swap_two_pairs(layer):  # a right design by other means: two swaps, an early and a late one
    return _swap(0, 5)(layer) or _swap(9, 10)(layer)


# ---------------------------------------------------------------- 14.3


def _right_paired(a, b):
    d = [x - y for x, y in zip(a, b)]
    return statistics.fmean(d), statistics.stdev(d) / math.sqrt(len(d))


def _sorted_pairs(a, b):  # the page's bug: pairs by rank, not by seed
    return _right_paired(sorted(a), sorted(b))


def _sorted_differences(a, b):  # the sort moved onto the differences: harmless, the right answer
    d = sorted(x - y for x, y in zip(a, b))
    return statistics.fmean(d), statistics.stdev(d) / math.sqrt(len(d))


def _welch(a, b):
    se = math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))
    return statistics.fmean(a) - statistics.fmean(b), se


def _population_sd(a, b):
    d = [x - y for x, y in zip(a, b)]
    return statistics.fmean(d), statistics.pstdev(d) / math.sqrt(len(d))


def _sorted_one(a, b):  # the sort kept on one side only
    return _right_paired(a, sorted(b))


ANSWERS = {
    check_seeds_needed: (
        [_right_seeds],
        [
            (_normal, "> effect"),
            (_threshold_only, "> effect"),
            (_unpaired, "fewer already"),
            (_five_seed_t, "fewer already"),
            (_closed_form, "at least 3"),
        ],
    ),
    check_order_test: (
        [_right_order, _swap_two_pairs],
        [
            (lambda layer: _shuffled_last(layer, compare_all=True), "without positions: called order-aware"),
            (lambda layer: _shuffled_last(layer, tol=0.0), "called order-aware"),
            (lambda layer: _shuffled_last(layer, tol=1e-2), "weak recency bias: called order-blind"),
            (_swap(3, 4), "last few tokens"),
            (_swap(9, 10), "first token: called order-blind"),
        ],
    ),
    check_paired_difference: (
        [_right_paired, _sorted_differences],
        [
            (_sorted_pairs, "SE "),
            (_sorted_one, "SE "),
            (_welch, "SE "),
            (_population_sd, "SE "),
        ],
    ),
}


def test_order_candidates_are_what_the_check_says():
    # Each hidden layer's dependence on order, measured with far wider margins than a test needs.
    for kind, layer in order_candidates():
        with torch.no_grad():
            blind = not _shuffled_last(layer, tol=1e-4)
            aware = _shuffled_last(layer, tol=1e-3)
        assert blind or aware, kind
        assert blind == (kind in ("softmax", "linear")), kind
