"""attn_core.teach.compare: comparisons printed as the tolerance they are held to."""

import math

import pytest
import torch

from attn_core import assert_close
from attn_core.teach.compare import (
    assert_above,
    assert_below,
    assert_between,
    assert_differ,
    format_value,
    max_abs_diff,
)


def test_max_abs_diff_in_float64():
    a = torch.tensor([1.0, 2.0, 3.0])
    assert max_abs_diff(a, a + torch.tensor([0.0, -0.5, 0.25])) == 0.5
    assert max_abs_diff(torch.zeros(0), torch.zeros(0)) == 0.0


def test_nan_in_the_same_place_is_equal_elsewhere_infinite():
    nan = float("nan")
    assert max_abs_diff(torch.tensor([nan, 1.0]), torch.tensor([nan, 1.0])) == 0.0
    assert max_abs_diff(torch.tensor([nan, 1.0]), torch.tensor([0.0, 1.0])) == math.inf


def test_assert_close_prints_the_tolerance_not_the_digits(capsys):
    a = torch.randn(4, 4)
    diff = assert_close(a, a + 1e-7, label="x")
    out = capsys.readouterr().out
    assert out == "x: equal within float32 rounding (max |Δ| < 1e-05)\n"
    assert 0 < diff < 1e-6
    assert_close(a.double(), a.double(), label="y")
    assert "float64 rounding (max |Δ| < 1e-10)" in capsys.readouterr().out


def test_assert_close_mixed_dtypes_use_the_looser_tolerance(capsys):
    assert_close(torch.ones(2), torch.ones(2, dtype=torch.float64))
    assert "float32" in capsys.readouterr().out


def test_assert_close_with_explicit_tolerance(capsys):
    assert_close(torch.ones(3), torch.ones(3) + 0.01, tol=0.1, label="z")
    assert capsys.readouterr().out == "z: equal within the tolerance (max |Δ| < 1e-01)\n"


def test_assert_close_fails_with_the_measured_value():
    with pytest.raises(AssertionError, match=r"max \|Δ\| = 0.5 is not below tol=1e-05"):
        assert_close(torch.zeros(2), torch.tensor([0.0, 0.5]))


def test_assert_differ(capsys):
    assert assert_differ(torch.zeros(2), torch.ones(2), more_than=0.5, label="bug") == 1.0
    assert capsys.readouterr().out == "bug: max |Δ| 1 (held above 0.5)\n"
    with pytest.raises(AssertionError, match="is not above 0.5"):
        assert_differ(torch.zeros(2), torch.zeros(2), more_than=0.5)


def test_bounds(capsys):
    assert assert_above(0.97, 0.95, label="acc") == 0.97
    assert assert_below(torch.tensor(0.1), 0.2, label="loss") == pytest.approx(0.1)
    assert capsys.readouterr().out == "acc: 0.97 (held above 0.95)\nloss: 0.1 (held below 0.2)\n"
    assert assert_between(0.24, 0.1, 0.5, label="gap") == 0.24
    assert capsys.readouterr().out == "gap: 0.24 (held between 0.1 and 0.5)\n"
    with pytest.raises(AssertionError, match="0.6 is not between 0.1 and 0.5"):
        assert_between(0.6, 0.1, 0.5)
    with pytest.raises(ValueError, match="low must be below high, got low=0.5, high=0.1"):
        assert_between(0.3, 0.5, 0.1)
    with pytest.raises(AssertionError, match="0.9 is not above 0.95"):
        assert_above(0.9, 0.95)
    with pytest.raises(AssertionError, match="is not below"):
        assert_below(0.3, 0.2)


def test_quiet_prints_nothing(capsys):
    assert_close(torch.ones(1), torch.ones(1), quiet=True)
    assert_above(1, 0, quiet=True)
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(
    "call, error, match",
    [
        (
            lambda: max_abs_diff(torch.ones(2), torch.ones(3)),
            ValueError,
            r"shapes differ: actual \(2,\) vs expected \(3,\)",
        ),
        (lambda: max_abs_diff(object(), torch.ones(1)), TypeError, "actual must be a tensor"),
        (lambda: assert_close(torch.ones(1), torch.ones(1), tol=0), ValueError, "tol must be > 0, got tol=0"),
        (lambda: assert_close(torch.ones(1), torch.ones(1), tol="1"), TypeError, "tol must be a number"),
        (
            lambda: assert_close(torch.ones(1, dtype=torch.int64), torch.ones(1, dtype=torch.int64)),
            TypeError,
            "no default tolerance",
        ),
        (lambda: assert_differ(torch.ones(1), torch.ones(1), more_than=-1), ValueError, "more_than must be >= 0"),
        (lambda: assert_above("0.9", 0.5), TypeError, "value must be a number"),
        (lambda: assert_below(0.1, None), TypeError, "bound must be a number"),
    ],
)
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize(
    "value, text",
    [
        (0.96875, "0.969"),
        (163.0, "163"),
        (524288, "524,288"),
        (1.3e-15, "1.3e-15"),
        (-2.5, "-2.5"),
        (float("inf"), "inf"),
    ],
)
def test_format_value(value, text):
    assert format_value(value) == text


def test_a_value_next_to_its_bound_gets_the_digits_that_tell_them_apart(capsys):
    assert_below(4.99998, 5.0 + 1e-9, label="soft-capped logit")
    assert_above(0.95004, 0.95, label="accuracy")
    assert capsys.readouterr().out == "soft-capped logit: 4.99998 (held below 5)\naccuracy: 0.95004 (held above 0.95)\n"


def _sanitize(text):
    """Apply tests/nbval_sanitize.cfg the way nbval does (each regex, in file order)."""
    import pathlib
    import re

    from nbval.plugin import get_sanitize_patterns

    patterns = get_sanitize_patterns((pathlib.Path(__file__).parent / "nbval_sanitize.cfg").read_text())
    for regex, replace in patterns:
        text = re.sub(regex, replace, text)
    return text


def test_sanitize_masks_only_the_value_slot(capsys):
    assert_above(0.969, 0.95, label="token accuracy")
    assert_above(0.971, 0.95, label="token accuracy")
    assert_differ(torch.zeros(2), torch.full((2,), 0.83), more_than=0.1, label="no mask")
    assert_between(1.5e-3, 1e-4, 2e-2, label="gap")
    a, b, c, d = capsys.readouterr().out.splitlines()
    assert _sanitize(a) == _sanitize(b) == "token accuracy: VALUE (held above 0.95)"
    assert _sanitize(c) == "no mask: max |Δ| VALUE (held above 0.1)"
    assert _sanitize(d) == "gap: VALUE (held between 0.0001 and 0.02)"
    # The label, the bound and the verdict are still compared.
    assert _sanitize(a) != _sanitize("token accuracy: 0.969 (held above 0.9)")
    assert _sanitize(a) != _sanitize("token accurac: 0.969 (held above 0.95)")
    assert _sanitize(a) != _sanitize("token accuracy: 0.969 (held below 0.95)")
    # A timing's interval is masked, its label, bound and verdict are not.
    line = "MHA / MQA: 6.38 (held above 1.2), 95% CI 5.91-6.8, slower"
    assert _sanitize(line) == "MHA / MQA: VALUE (held above 1.2), 95% CI VALUES, slower"
    # Numbers elsewhere in a line are not masked.
    assert _sanitize("3 heads, 0.5 each") == "3 heads, 0.5 each"
