"""The book's one rule for a verdict between trained variants, and the floors it is read against.

Training a small model is a random experiment: the seed picks the initial weights and the
batches, and two seeds of the same variant land at different losses. Whether variant A is
better than variant B is therefore a statistical question, and the book answers it the
same way in every chapter, with :func:`compare_variants`:

* **Pair where you can.** When the variants ran with the same seeds on the same data,
  seed ``i`` of A and seed ``i`` of B saw the same batches; most of their noise is shared
  and cancels in the difference ``d_i = a_i - b_i``. The statistic is the mean of the
  ``d_i`` and its standard error ``SE = sd(d) / sqrt(n)`` (Student's paired t). Without
  shared seeds, Welch's unpaired standard error.
* **Fix the rule before the run.** A difference is called when the 95% t-interval of the
  mean difference excludes zero: ``|Δ| > t(0.975, n - 1) · SE``. Otherwise the verdict is
  *indistinguishable at this budget*, which is not "equal".
* **Print what the rule could detect.** The minimum detectable effect ``MDE = (t(0.975) +
  t(0.80)) · SE`` is the true difference the rule would call four times out of five at
  this noise and this number of seeds. An "indistinguishable" beside an MDE of 0.3 bits
  says little; beside 0.01 bits it says a lot.
* **Read it against a floor and, where one exists, a ceiling.** Beside the variants the
  page prints what a model with no attention (or no learning) achieves on the same data
  (chance, a unigram or bigram table: :mod:`.floors`) and the best
  achievable. When every variant sits at the floor (nothing was learned) or at the
  ceiling (the task is too easy to tell them apart), the verdict is ``no finding``,
  whatever the differences say.

A verdict printed by a lesson must come out the same on another CPU and in the perturbed
run, so a lesson passes ``expect=`` (the verdict its prose states) and the call asserts
it *with a margin*: the difference must clear the threshold by ``margin`` (25%), or stay
below it by as much, and the variants must clear the floor and ceiling lines (or sit
inside them, for a "no finding") by as much; else the design needs more seeds.

The output has one fixed format; the lessons' nbval sanitize file masks each
``name=<number>`` value and compares everything else, the verdicts included::

    held-out bits/char (lower is better), 3 seeds, paired by seed
      floor: unigram table of the text           floor=4.85
      MHA                                        mean=2.314 SE=0.004
      GQA-2                                      mean=2.320 SE=0.003
      GQA-2 - MHA: Δ=+0.006 SE=0.002 MDE=0.011   indistinguishable
      rule: a difference when |Δ| > 4.30·SE (95%, 2 df); MDE = 5.36·SE
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

__all__ = [
    "VERDICTS",
    "Difference",
    "Comparison",
    "compare_variants",
    "t_quantile",
]

#: Every verdict :func:`compare_variants` can give.
VERDICTS = ("better", "worse", "indistinguishable", "no finding: all at the floor", "no finding: all at the ceiling")

# Student's t quantiles for 1..30 degrees of freedom (from the t distribution's tables);
# past 30 the normal quantile is within 3% and is used.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)
_T975 += (2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086)
_T975 += (2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
_T80 = (1.376, 1.061, 0.978, 0.941, 0.920, 0.906, 0.896, 0.889, 0.883, 0.879)
_T80 += (0.876, 0.873, 0.870, 0.868, 0.866, 0.865, 0.863, 0.862, 0.861, 0.860)
_T80 += (0.859, 0.858, 0.858, 0.857, 0.856, 0.856, 0.855, 0.855, 0.854, 0.854)
_Z = {0.975: 1.960, 0.80: 0.842}

# A variant within this fraction of the floor-to-ceiling range (or of |floor| when no
# ceiling is known) of the floor, beyond its own noise, has learned nothing measurable.
_RESOLUTION = 0.01
# The most characters a line's values can take ("Δ=+1.23e-05 SE=1.23e-05 MDE=1.23e-05"):
# a line is wrapped by its names and verdict only, so that it wraps alike on every machine.
_VALUES_WIDTH = 38


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile for ``p`` in (0.975, 0.80) and ``df >= 1`` degrees of freedom."""
    if p not in _Z:
        raise ValueError(f"p must be 0.975 or 0.80, got p={p}")
    if isinstance(df, bool) or not isinstance(df, int) or df < 1:
        raise ValueError(f"df must be an int >= 1, got df={df!r}")
    table = _T975 if p == 0.975 else _T80
    return table[df - 1] if df <= len(table) else _Z[p]


@dataclass(frozen=True)
class Difference:
    """One comparison ``a - b`` of :func:`compare_variants`.

    Attributes:
        a, b: The variants' names.
        delta: Mean of ``a``'s results minus ``b``'s (paired: the mean per-seed difference).
        se: Its standard error.
        df: Degrees of freedom of the t-interval.
        threshold: ``t(0.975, df) · se``: the rule calls a difference past it.
        mde: ``(t(0.975, df) + t(0.80, df)) · se``: detected 80% of the time.
        verdict: ``a``'s verdict against ``b``, one of :data:`VERDICTS`.
    """

    a: str
    b: str
    delta: float
    se: float
    df: int
    threshold: float
    mde: float
    verdict: str

    @property
    def strength(self) -> float:
        """``|delta| / threshold`` (``inf`` when the noise is zero and the difference is not)."""
        if self.threshold == 0:
            return 0.0 if self.delta == 0 else math.inf
        return abs(self.delta) / self.threshold


@dataclass(frozen=True)
class Comparison:
    """What :func:`compare_variants` found: the variants' means and every difference asked for.

    Attributes:
        metric: What was measured.
        better: ``"lower"`` or ``"higher"``.
        means: Each variant's mean over its seeds.
        ses: Each variant's standard error of the mean.
        differences: One :class:`Difference` per pair, in the order asked.
        floor, ceiling: ``(label, value)``; ``ceiling`` may be ``None``.
        floor_clearance: How far the variant furthest above the floor clears it, in units
            of that variant's own noise (its 95% half-interval plus the resolution): at most
            1 means every variant sits at the floor.
        ceiling_distance: How far the variant furthest from the ceiling stays below it, in
            the same units: at most 1 means every variant sits at the ceiling (``None``
            without a ceiling).
    """

    metric: str
    better: str
    means: dict[str, float]
    ses: dict[str, float]
    differences: list[Difference]
    floor: tuple[str, float]
    ceiling: tuple[str, float] | None
    floor_clearance: float = math.inf
    ceiling_distance: float | None = None

    def __getitem__(self, pair: tuple[str, str]) -> Difference:
        for d in self.differences:
            if (d.a, d.b) == tuple(pair):
                return d
        raise KeyError(f"no difference {pair!r}; compared: {[(d.a, d.b) for d in self.differences]}")

    def verdict(self, a: str, b: str) -> str:
        """The verdict of ``a`` against ``b``."""
        return self[a, b].verdict


def _numbers(name: str, values: object) -> list[float]:
    if isinstance(values, torch.Tensor):
        values = values.detach().flatten().tolist()
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise TypeError(f"results[{name!r}] must be a sequence of numbers (one per seed), got {type(values).__name__}")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"results[{name!r}] must hold finite numbers, got {v!r}")
        out.append(float(v))
    if len(out) < 3:
        raise ValueError(f"results[{name!r}] has {len(out)} seeds: a verdict needs at least 3")
    return out


def _labelled(name: str, value: object) -> tuple[str, float] | None:
    if value is None:
        return None
    ok = isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str)
    if not ok or isinstance(value[1], bool) or not isinstance(value[1], (int, float)):
        raise TypeError(f"{name} must be a (label, value) pair such as ('unigram table', 4.85), got {value!r}")
    return value[0], float(value[1])


def _difference(a: list[float], b: list[float], paired: bool) -> tuple[float, float, int]:
    """Mean difference ``a - b``, its standard error and degrees of freedom."""
    if paired:
        d = [x - y for x, y in zip(a, b)]
        return statistics.fmean(d), statistics.stdev(d) / math.sqrt(len(d)), len(d) - 1
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        df = len(a) + len(b) - 2
    else:  # Welch-Satterthwaite, rounded down (the conservative side)
        df = max(1, int((va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))))
    return statistics.fmean(a) - statistics.fmean(b), se, df


def _fmt(v: float, signed: bool = False) -> str:
    """Three significant digits; a difference below 1e-12 (float rounding of equal runs) is 0."""
    if abs(v) < 1e-12:
        return "+0" if signed else "0"
    return f"{v:+.3g}" if signed else f"{v:.3g}"


def compare_variants(
    results: Mapping[str, Sequence[float]],
    *,
    metric: str,
    better: str,
    floor: tuple[str, float],
    ceiling: tuple[str, float] | None = None,
    baseline: str | None = None,
    pairs: Sequence[tuple[str, str]] | None = None,
    paired: bool = True,
    expect: Mapping[str, str] | None = None,
    margin: float = 0.25,
    quiet: bool = False,
) -> Comparison:
    """Compare trained variants by the book's one rule, print the fixed report and assert ``expect``.

    Args:
        results: Variant name -> its result per seed (a loss, bits/char, an accuracy). With
            ``paired=True`` entry ``i`` of every variant must come from the same seed and data.
        metric: What the numbers are (``"held-out bits/char"``).
        better: ``"lower"`` or ``"higher"``.
        floor: ``(label, value)``: what no attention or no learning achieves on the same data.
        ceiling: ``(label, value)``: the best achievable, where one is known.
        baseline: Compare every other variant against this one (default: the first).
        pairs: Explicit ``(a, b)`` comparisons instead of "each against the baseline".
        paired: The variants share seeds and data (paired t); else Welch's unpaired t.
        expect: ``{a: verdict}`` (against the baseline) or ``{"a - b": verdict}`` (for an
            explicit pair): the verdicts the page's prose states, asserted with ``margin``.
            A printed report needs one for every difference (nbval compares them all).
        margin: How far a stated verdict must sit from the rule's threshold: a difference by
            a factor ``1 + margin`` past it, "indistinguishable" as far inside it.
        quiet: Assert only.

    Returns:
        The :class:`Comparison`.

    Raises:
        TypeError: a result, ``floor`` or ``ceiling`` has the wrong type.
        ValueError: fewer than 3 seeds, paired variants with different seed counts, an
            unknown name or verdict, ``better`` not "lower"/"higher".
        AssertionError: an ``expect`` verdict does not hold, or holds too close to the rule's
            threshold to come out the same on another machine.
    """
    if better not in ("lower", "higher"):
        raise ValueError(f"better must be 'lower' or 'higher', got better={better!r}")
    if not isinstance(results, Mapping) or len(results) < 2:
        raise ValueError(f"results must map at least two variant names to their per-seed results, got {results!r:.80}")
    values = {str(k): _numbers(str(k), v) for k, v in results.items()}
    floor_, ceiling_ = _labelled("floor", floor), _labelled("ceiling", ceiling)
    if floor_ is None:
        raise TypeError("floor is required: what a model with no attention (or no learning) achieves")
    if not margin >= 0:
        raise ValueError(f"margin must be >= 0, got margin={margin}")
    names = list(values)
    if paired and len({len(v) for v in values.values()}) > 1:
        counts = {k: len(v) for k, v in values.items()}
        raise ValueError(f"paired variants must have one result per shared seed, got seed counts {counts}")
    base = names[0] if baseline is None else baseline
    todo = list(pairs) if pairs is not None else [(n, base) for n in names if n != base]
    for a, b in [*todo, (base, base)]:
        for name in (a, b):
            if name not in values:
                raise ValueError(f"unknown variant {name!r}; results has {names}")
    sign = 1.0 if better == "lower" else -1.0  # sign * (x - y) > 0: x is worse than y

    means = {k: statistics.fmean(v) for k, v in values.items()}
    ses = {k: statistics.stdev(v) / math.sqrt(len(v)) for k, v in values.items()}
    scale = abs(ceiling_[1] - floor_[1]) if ceiling_ else abs(floor_[1])
    resolution = _RESOLUTION * scale

    def gap(name: str, ref: float) -> float:
        return sign * (means[name] - ref)  # > 0: worse than ref

    def noise(name: str) -> float:
        # The variant's own 95% half-interval, plus the resolution of the task's scale.
        return t_quantile(0.975, len(values[name]) - 1) * ses[name] + resolution

    def in_noise(x: float, n: float) -> float:
        return x / n if n > 0 else (0.0 if x <= 0 else math.inf)

    floor_clearance = max(in_noise(-gap(n, floor_[1]), noise(n)) for n in names)
    ceiling_distance = None if ceiling_ is None else max(in_noise(gap(n, ceiling_[1]), noise(n)) for n in names)
    at_floor = floor_clearance <= 1  # no variant clearly above the floor
    at_ceiling = ceiling_distance is not None and ceiling_distance <= 1  # every variant at the ceiling

    differences = []
    for a, b in todo:
        delta, se, df = _difference(values[a], values[b], paired)
        t975, t80 = t_quantile(0.975, df), t_quantile(0.80, df)
        threshold = t975 * se
        if at_floor:
            verdict = VERDICTS[3]
        elif at_ceiling:
            verdict = VERDICTS[4]
        elif abs(delta) > threshold:
            verdict = "worse" if sign * delta > 0 else "better"
        else:
            verdict = "indistinguishable"
        differences.append(Difference(a, b, delta, se, df, threshold, (t975 + t80) * se, verdict))
    comparison = Comparison(
        metric, better, means, ses, differences, floor_, ceiling_, floor_clearance, ceiling_distance
    )
    if not quiet:
        _print(comparison, values, paired)
    _check_expectations(comparison, expect or {}, base, margin, every=not quiet)
    return comparison


def _print(c: Comparison, values: dict[str, list[float]], paired: bool) -> None:
    # Every value stands at the end of its line or before a separator that does not depend
    # on its digits, so that masking the digits (nbval) leaves the rest of the line intact;
    # where a line could pass the page's 78 characters, its values go on the next line.
    counts = sorted({len(v) for v in values.values()})
    seeds = f"{counts[0]} seeds" if len(counts) == 1 else "seeds " + "/".join(str(len(v)) for v in values.values())
    how = "paired by seed" if paired else "unpaired (Welch)"
    print(f"{c.metric} ({c.better} is better), {seeds}, {how}")
    for kind, bound in (("floor", c.floor), ("ceiling", c.ceiling)):
        if bound is not None:
            print(f"  {kind}: {bound[0]} = {_fmt(bound[1])}")
    rows = [(k, "", f"mean={_fmt(c.means[k])} SE={_fmt(c.ses[k])}") for k in values]
    rows += [
        (f"{d.a} - {d.b}", f"{d.verdict}: ", f"Δ={_fmt(d.delta, True)} SE={_fmt(d.se)} MDE={_fmt(d.mde)}")
        for d in c.differences
    ]
    width = max(len(name) for name, _, _ in rows)
    for name, verdict, vals in rows:
        if 2 + width + 2 + len(verdict) + _VALUES_WIDTH <= 78:
            print(f"  {name:<{width}}  {verdict}{vals}")
        else:
            print(f"  {name}" + (f"  {verdict.rstrip(': ')}" if verdict else "") + f"\n      {vals}")
    for df in sorted({d.df for d in c.differences}):
        t975, t80 = t_quantile(0.975, df), t_quantile(0.80, df)
        print(f"  rule: a difference when |Δ| > {t975:.2f}·SE (95%, {df} df); MDE = {t975 + t80:.2f}·SE")


def _check_expectations(c: Comparison, expect: Mapping[str, str], base: str, margin: float, every: bool) -> None:
    # A printed verdict is compared by nbval on the reader's machine, so each one must be
    # stated (and held with the margin); a quiet call may assert some or none.
    named = {(a, b or base) for a, _, b in (k.partition(" - ") for k in expect)}
    missing = [f"{d.a!r}" if d.b == base else f"'{d.a} - {d.b}'" for d in c.differences if (d.a, d.b) not in named]
    if every and missing:
        found = {(d.a if d.b == base else f"{d.a} - {d.b}"): d.verdict for d in c.differences}
        raise ValueError(
            f"state every printed verdict in expect=: missing {', '.join(missing)} (the rule gives {found})"
        )
    for key, stated in expect.items():
        if stated not in VERDICTS:
            raise ValueError(f"expect[{key!r}] must be one of {VERDICTS}, got {stated!r}")
        a, _, b = key.partition(" - ")
        d = c[(a, b or base)]
        if d.verdict != stated:
            raise AssertionError(
                f"{d.a} - {d.b}: the rule says {d.verdict!r}, the page states {stated!r} "
                f"(Δ={d.delta:+.3g}, threshold {d.threshold:.3g}, SE {d.se:.3g}, {d.df} df)"
            )
        # Each verdict must hold with the margin on both of the rule's decisions: whether the
        # variants sit at the floor or the ceiling, and whether the difference passes the threshold.
        limits = {"floor": c.floor_clearance, "ceiling": c.ceiling_distance}
        if stated == VERDICTS[3]:
            checks = [("floor", limits["floor"], "<")]
        elif stated == VERDICTS[4]:
            checks = [("ceiling", limits["ceiling"], "<")]
        else:
            checks = [("floor", limits["floor"], ">")]
            if limits["ceiling"] is not None:
                checks.append(("ceiling", limits["ceiling"], ">"))
            checks.append(("threshold", d.strength, ">" if stated != "indistinguishable" else "<"))
        for what, ratio, side in checks:
            if (ratio < 1 + margin) if side == ">" else (ratio > 1 / (1 + margin)):
                measure = "|Δ|/threshold" if what == "threshold" else f"the distance from the {what} in noise units"
                raise AssertionError(
                    f"{d.a} - {d.b}: {stated!r} holds, but {measure} = {ratio:.2f} is within the "
                    f"{margin:.0%} margin of the rule's {what} line: another CPU could print another verdict; "
                    "add seeds or redesign the experiment"
                )
