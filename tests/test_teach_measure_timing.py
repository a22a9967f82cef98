"""attn_core.teach.measure.timing: interleaved rounds, medians, ratios, matmul throughput."""

from __future__ import annotations

import time

import pytest

from attn_core.teach.measure import timing
from attn_core.teach.measure.timing import (
    Timing,
    matmul_throughput,
    paired_ratio,
    paired_ratios,
    ratio_summary,
    time_interleaved,
)


def test_rounds_are_interleaved_and_rotated():
    calls = []
    t = time_interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, rounds=3, warmup=1)
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b"]  # warm-up, then rotated rounds
    assert [len(t[n].seconds) for n in "ab"] == [3, 3]


def test_medians_and_ratios_order_the_work():
    t = time_interleaved({"short": lambda: time.sleep(0.002), "long": lambda: time.sleep(0.02)}, rounds=5, warmup=0)
    assert t["long"].median > t["short"].median
    assert paired_ratio(t["long"], t["short"]) > 2


def test_min_seconds_repeats_short_calls():
    count = []
    time_interleaved({"tiny": lambda: count.append(1)}, rounds=2, warmup=0, min_seconds=0.01)
    assert len(count) > 3  # one calibration call plus several calls per round


def test_timing_statistics():
    t = Timing("x", [1.0, 2.0, 3.0, 4.0, 100.0])
    assert t.median == 3.0
    assert Timing("y", [2.0, 4.0]).spread == pytest.approx(2.0 / 3.0)  # range / median
    # Interquartile range over the median from 4 rounds on: quartiles 1.5 and 52 (the outlier
    # moves the upper one halfway, not all the way as it would the range).
    assert t.spread == pytest.approx((52.0 - 1.5) / 3.0)


def test_matmul_throughput_is_flops_over_the_median_time(monkeypatch):
    seen = {}

    def fake_timing(fns, **kwargs):
        seen.update(kwargs)
        fns["matmul"]()  # the timed work runs
        return {"matmul": Timing("matmul", [0.25, 0.5, 1.0])}

    monkeypatch.setattr(timing, "time_interleaved", fake_timing)
    assert matmul_throughput(n=64, rounds=3) == pytest.approx(2 * 64**3 / 0.5 / 1e9)  # 2·n³ per product
    assert seen["rounds"] == 3


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(rounds=0), ValueError, "rounds=0"),
        (dict(rounds=2, warmup=-1), ValueError, "warmup=-1"),
        (dict(rounds=True), TypeError, "rounds must be an int"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        time_interleaved({"a": lambda: None}, **kwargs)
    with pytest.raises(ValueError, match="different lengths"):
        paired_ratio(Timing("a", [1.0]), Timing("b", [1.0, 2.0]))


def test_cpu_clock_ignores_sleeping():
    """clock="cpu" counts this process's CPU seconds: a sleep (the machine busy elsewhere) costs none."""

    def spin():  # 10 ms of this process's CPU time, however long the wall clock takes
        end = time.process_time() + 0.01
        while time.process_time() < end:
            pass

    t = time_interleaved({"sleep": lambda: time.sleep(0.02), "spin": spin}, rounds=3, warmup=0, clock="cpu")
    assert t["sleep"].median < 0.005 and t["spin"].median >= 0.01
    wall = time_interleaved({"sleep": lambda: time.sleep(0.02)}, rounds=2, warmup=0)
    assert wall["sleep"].median >= 0.02


def test_ratio_summary_quartiles_and_verdict():
    a = Timing("a", [2.0, 2.2, 1.8, 2.1, 2.0])
    b = Timing("b", [1.0, 1.0, 1.0, 1.0, 1.0])
    assert paired_ratios(a, b) == [2.0, 2.2, 1.8, 2.1, 2.0]
    s = ratio_summary(a, b)
    assert (s.median, s.rounds) == (2.0, 5)
    assert s.low == pytest.approx(1.9) and s.high == pytest.approx(2.15)  # quartiles of the 5 ratios
    assert s.verdict == "slower" and ratio_summary(b, a).verdict == "faster"
    noisy = ratio_summary(Timing("c", [0.8, 1.3, 0.9, 1.2]), Timing("d", [1.0] * 4))
    assert noisy.verdict == "indistinguishable"  # 1 lies between the quartiles
    few = ratio_summary(Timing("e", [1.5, 3.0]), Timing("f", [1.0, 1.0]))
    assert (few.low, few.high) == (1.5, 3.0)  # fewer than 4 rounds: the range
    assert s.ci_low <= s.median <= s.ci_high and 1.8 <= s.ci_low and s.ci_high <= 2.2
    assert str(s) == f"2.00× (95% CI {s.ci_low:.2f}-{s.ci_high:.2f})"
    with pytest.raises(ValueError, match="different lengths"):
        ratio_summary(Timing("a", [1.0]), Timing("b", [1.0, 2.0]))
    with pytest.raises(ValueError, match="margin must be > 0, got margin=0"):
        ratio_summary(a, b, margin=0)


def test_ratio_verdict_uses_the_interval_and_the_equivalence_margin():
    base = Timing("base", [1.0] * 9)
    # Within ±10% in every round: equivalent, although every ratio is above 1.
    close = ratio_summary(Timing("close", [1.02, 1.03, 1.04, 1.02, 1.05, 1.03, 1.04, 1.02, 1.03]), base)
    assert close.verdict == "equivalent" and close.ci_low > 1
    # Clearly above 1 and beyond the margin: slower; the mirror image is faster.
    slow = Timing("slow", [1.5, 1.6, 1.4, 1.5, 1.55, 1.45, 1.5, 1.6, 1.4])
    assert ratio_summary(slow, base).verdict == "slower"
    assert ratio_summary(base, slow).verdict == "faster"
    # 1 inside a wide interval: the noise cannot tell.
    wide = ratio_summary(Timing("wide", [0.6, 1.5, 0.7, 1.6, 0.8, 1.4, 1.0, 0.9, 1.3]), base)
    assert wide.ci_low < 1 < wide.ci_high and wide.verdict == "indistinguishable"
    # A wider margin turns the same measurement into "equivalent"; the interval is seeded.
    assert ratio_summary(slow, base, margin=0.7).verdict == "equivalent"
    assert ratio_summary(slow, base).ci_low == ratio_summary(slow, base).ci_low


def test_clock_argument_is_checked():
    with pytest.raises(ValueError, match="clock must be one of"):
        time_interleaved({"a": lambda: None}, rounds=1, clock="gpu")
    with pytest.raises(ValueError, match="clock='cpu' times CPU work only"):
        time_interleaved({"a": lambda: None}, rounds=1, clock="cpu", device="meta")


def test_assert_ratio_prints_the_median_beside_its_bounds(capsys):
    from attn_core.teach.measure import assert_ratio

    slow = Timing("slow", [1.5, 1.6, 1.4, 1.5, 1.55, 1.45, 1.5, 1.6, 1.4])
    s = ratio_summary(slow, Timing("base", [1.0] * 9))
    assert assert_ratio(s, label="slow / base", above=1.2, verdict="slower") is s
    assert_ratio(s, label="slow / base", above=1.2, below=2)
    a, b = capsys.readouterr().out.splitlines()
    assert a == f"slow / base: 1.5 (held above 1.2), 95% CI {s.ci_low:.3g}-{s.ci_high:.3g}, slower"
    assert b.startswith("slow / base: 1.5 (held between 1.2 and 2), 95% CI ")
    with pytest.raises(AssertionError, match=r"median ratio 1.5 .* is not above 2"):
        assert_ratio(s, label="slow / base", above=2)
    with pytest.raises(AssertionError, match="verdict 'slower'"):
        assert_ratio(s, label="slow / base", above=1, verdict="equivalent")
    with pytest.raises(ValueError, match="give a bound"):
        assert_ratio(s, label="slow / base")
    with pytest.raises(ValueError, match="verdict must be one of"):
        assert_ratio(s, label="x", above=1, verdict="quicker")
