"""The book's verdict rule (attn_core.teach.evidence): the statistics, the report, the floors."""

from __future__ import annotations

import configparser
import math
import re
import statistics
from pathlib import Path

import pytest

from attn_core.teach.evidence import VERDICTS, compare_variants, t_quantile

FLOOR = ("chance", 8.0)


def _run(results, **kw):
    kw.setdefault("metric", "loss")
    kw.setdefault("better", "lower")
    kw.setdefault("floor", FLOOR)
    return compare_variants(results, **kw)


def test_t_quantiles_match_the_tables_and_approach_the_normal():
    assert t_quantile(0.975, 1) == pytest.approx(12.706)
    assert t_quantile(0.975, 2) == pytest.approx(4.303)
    assert t_quantile(0.80, 4) == pytest.approx(0.941)
    assert t_quantile(0.975, 1000) == pytest.approx(1.960)
    # Monotone in the degrees of freedom: more seeds, a smaller factor.
    qs = [t_quantile(0.975, df) for df in range(1, 40)]
    assert all(a >= b for a, b in zip(qs, qs[1:]))


def test_paired_difference_is_the_mean_of_per_seed_differences():
    a, b = [2.0, 2.5, 3.0], [1.9, 2.45, 2.8]
    c = _run({"b": b, "a": a}, quiet=True)
    d = c["a", "b"]
    diffs = [x - y for x, y in zip(a, b)]
    assert d.delta == pytest.approx(statistics.fmean(diffs))
    assert d.se == pytest.approx(statistics.stdev(diffs) / math.sqrt(3))
    assert d.df == 2
    assert d.threshold == pytest.approx(4.303 * d.se)
    assert d.mde == pytest.approx((4.303 + 1.061) * d.se)


def test_pairing_removes_shared_seed_noise():
    # Seeds differ a lot, A is always worse by 0.1: paired finds it, unpaired cannot.
    base = [1.0, 2.0, 3.0, 1.5, 2.5]
    worse = [x + 0.1 + 0.01 * i for i, x in enumerate(base)]
    paired = _run({"base": base, "worse": worse}, quiet=True)
    unpaired = _run({"base": base, "worse": worse}, paired=False, quiet=True)
    assert paired.verdict("worse", "base") == "worse"
    assert unpaired.verdict("worse", "base") == "indistinguishable"
    d = unpaired["worse", "base"]
    va, vb = statistics.variance(worse) / 5, statistics.variance(base) / 5
    assert d.se == pytest.approx(math.sqrt(va + vb))


def test_direction_follows_better():
    low, high = [0.5, 0.51, 0.52], [0.9, 0.92, 0.91]
    lower = _run({"low": low, "high": high}, quiet=True)
    assert lower.verdict("high", "low") == "worse"
    higher = _run({"low": low, "high": high}, better="higher", floor=("chance", 0.1), quiet=True)
    assert higher.verdict("high", "low") == "better"


def test_all_at_the_floor_or_ceiling_is_no_finding():
    # Every variant within noise of the floor (or past it): nothing learned, no verdict.
    at_floor = _run({"a": [7.99, 8.01, 8.02], "b": [8.3, 8.4, 8.35]}, quiet=True)
    assert at_floor.verdict("b", "a") == "no finding: all at the floor"
    # One variant clearly above the floor: a finding again.
    learned = _run({"a": [7.99, 8.01, 8.02], "b": [5.0, 5.1, 5.05]}, quiet=True)
    assert learned.verdict("b", "a") == "better"
    ceil = _run(
        {"a": [1.0, 1.0, 0.999], "b": [0.998, 1.0, 1.0]},
        better="higher",
        floor=("chance", 0.125),
        ceiling=("perfect", 1.0),
        quiet=True,
    )
    assert ceil.verdict("b", "a") == "no finding: all at the ceiling"


def test_expect_is_asserted_with_a_margin():
    base, other = [1.0, 1.1, 1.2], [1.3, 1.42, 1.5]
    _run({"base": base, "other": other}, expect={"other": "worse"}, quiet=True)
    with pytest.raises(AssertionError, match="the rule says 'worse', the page states 'better'"):
        _run({"base": base, "other": other}, expect={"other": "better"}, quiet=True)
    # A difference just past the threshold (1.1x) holds, but not by the margin: refused.
    s = 0.01  # per-seed differences m - s, m, m + s: SE = s / sqrt(3)
    m = 1.1 * t_quantile(0.975, 2) * s / math.sqrt(3)
    just = [b + m + e for b, e in zip(base, (-s, 0.0, s))]
    assert _run({"base": base, "other": just}, quiet=True).verdict("other", "base") == "worse"
    with pytest.raises(AssertionError, match="margin"):
        _run({"base": base, "other": just}, expect={"other": "worse"}, quiet=True)


def test_the_floor_and_ceiling_calls_need_the_margin_too():
    # b clears the floor (8.0) by 0.09 against a noise of 0.08 (no seed scatter; the
    # resolution, 1% of 8): a difference, but too close to the floor line to be stated.
    a, b = [8.0, 8.0, 8.0], [7.91, 7.91, 7.91]
    c = _run({"a": a, "b": b}, quiet=True)
    assert c.floor_clearance == pytest.approx(0.09 / 0.08) and c.verdict("b", "a") == "better"
    with pytest.raises(AssertionError, match="margin of the rule's floor line"):
        _run({"a": a, "b": b}, expect={"b": "better"}, quiet=True)
    _run({"a": a, "b": [7.5, 7.5, 7.5]}, expect={"b": "better"}, quiet=True)
    # All at the ceiling, but one variant at 0.9 of its noise from it: not stated either.
    ceil = dict(better="higher", floor=("chance", 0.0), ceiling=("perfect", 1.0), quiet=True)
    runs = {"a": [1.0, 1.0, 1.0], "b": [0.99, 0.995, 1.0]}
    d = _run(runs, **ceil).ceiling_distance
    assert d <= 1
    if d > 0.8:
        with pytest.raises(AssertionError, match="ceiling line"):
            _run(runs, expect={"b": "no finding: all at the ceiling"}, **ceil)
    far = {"a": [1.0, 1.0, 1.0], "b": [1.0, 1.0, 0.9999]}
    _run(far, expect={"b": "no finding: all at the ceiling"}, **ceil)


def test_explicit_pairs_and_named_expectations():
    r = {"a": [1.0, 1.1, 1.2], "b": [2.0, 2.1, 2.2], "c": [2.0, 2.12, 2.2]}
    c = _run(r, pairs=[("b", "a"), ("c", "b")], expect={"b - a": "worse", "c - b": "indistinguishable"}, quiet=True)
    assert [(d.a, d.b) for d in c.differences] == [("b", "a"), ("c", "b")]


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(results={"a": [1.0, 2.0], "b": [1.0, 2.0]}), ValueError, "at least 3"),
        (dict(results={"a": [1.0, 2.0, 3.0]}), ValueError, "at least two"),
        (dict(results={"a": [1, 2, 3], "b": [1, 2, 3, 4]}), ValueError, "seed counts"),
        (dict(results={"a": [1, 2, float("nan")], "b": [1, 2, 3]}), ValueError, "finite"),
        (dict(results={"a": "123", "b": [1, 2, 3]}), TypeError, "sequence of numbers"),
        (dict(results={"a": [1, 2, 3], "b": [1, 2, 3]}, better="smaller"), ValueError, "better must be"),
        (dict(results={"a": [1, 2, 3], "b": [1, 2, 3]}, floor=8.0), TypeError, "label, value"),
        (dict(results={"a": [1, 2, 3], "b": [1, 2, 3]}, baseline="z"), ValueError, "unknown variant 'z'"),
        (dict(results={"a": [1, 2, 3], "b": [1, 2, 3]}, expect={"b": "same"}), ValueError, "must be one of"),
    ],
)
def test_bad_input_is_named(kwargs, error, match):
    with pytest.raises(error, match=match):
        _run(quiet=True, **kwargs)


def _sanitize(text: str) -> str:
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(Path(__file__).parent / "nbval_sanitize.cfg")
    for section in cfg.sections():
        text = re.sub(cfg[section]["regex"], cfg[section]["replace"], text)
    return text


def test_report_fits_the_page_and_masks_only_values(capsys):
    runs = {"attention only": [2.31, 2.32, 2.30], "hybrid, 3 DeltaNet + 1 attention": [2.4, 2.45, 2.43]}
    kw = dict(
        metric="held-out bits/char", ceiling=("entropy", 1.0), expect={"hybrid, 3 DeltaNet + 1 attention": "worse"}
    )
    _run(runs, floor=("unigram table of the text", 4.85), **kw)
    first = capsys.readouterr().out
    nudged = {k: [x + 1e-4 * (i + 1) for i, x in enumerate(v)] for k, v in runs.items()}
    _run(nudged, floor=("unigram table of the text", 4.851), **kw)
    second = capsys.readouterr().out
    assert first != second and _sanitize(first) == _sanitize(second)
    assert all(len(line) <= 78 for line in first.splitlines()), first
    masked = _sanitize(first)
    assert "worse" in masked and "3 seeds" in masked and "4.30·SE" in masked
    assert "floor: unigram table of the text = VALUE" in masked
    assert not re.search(r"(mean|SE|Δ|MDE)=[-+]?\d", masked)


def test_a_printed_report_states_every_verdict(capsys):
    runs = {"a": [1.0, 1.1, 1.2], "b": [2.0, 2.1, 2.2], "c": [1.0, 1.12, 1.2]}
    with pytest.raises(ValueError, match="missing 'c'.*'b': 'worse'"):
        _run(runs, expect={"b": "worse"})
    _run(runs, expect={"b": "worse", "c": "indistinguishable"})
    assert "indistinguishable" in capsys.readouterr().out


def test_every_verdict_is_listed():
    assert set(VERDICTS) >= {"better", "worse", "indistinguishable"}
