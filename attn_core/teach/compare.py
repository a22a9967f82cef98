"""Compare two results the way the book's lessons do: against a stated tolerance.

Two floating-point computations of the same thing (our attention and PyTorch's, the
cached and the uncached decoder) rarely agree to the last bit, and *which* bits differ
depends on the CPU: an AVX-512 machine, an AVX2 machine and a plain SSE build pick
different kernels and sum in different orders. Printing the raw difference (``9.7e-08``
here, ``0.0e+00`` there) makes a lesson's output depend on the reader's machine. So the
lessons print the tolerance a result is held to and *assert* it:

    >>> assert_close(ours, reference, label="attn_core vs SDPA")
    attn_core vs SDPA: equal within float32 rounding (max |Δ| < 1e-05)

a trained or measured result is printed as what was measured *and* the bound it is held
to, in one fixed format, ``label: <value> (held above <bound>)``:

    >>> assert_above(accuracy, 0.95, label="token accuracy")
    token accuracy: 0.969 (held above 0.95)

    >>> assert_between(gap, 0.1, 0.5, label="gap in bits/char")
    gap in bits/char: 0.24 (held between 0.1 and 0.5)

and, for a result that must differ (a bug's output, an ablation), the lower bound:

    >>> assert_differ(buggy, reference, more_than=0.1, label="without the mask")
    without the mask: max |Δ| 0.83 (held above 0.1)

The reader sees the measurement; the guarantee is the bound. Training amplifies a CPU's
rounding differences, so the value's digits may differ on another machine: the lessons'
nbval sanitize file masks exactly the value slot (the number right before ``" (held "``),
and compares the label, the bound and the verdict. All of them raise ``AssertionError``
(with the measured value) when the claim fails, so a lesson that uses them still fails
when ``attn_core`` is wrong.

Shapes:
    actual, expected: any two tensors (or array-likes) of the same shape
"""

from __future__ import annotations

import torch

__all__ = [
    "DEFAULT_TOLERANCE",
    "max_abs_diff",
    "assert_close",
    "assert_differ",
    "assert_above",
    "assert_below",
    "assert_between",
    "format_value",
]

# The default tolerance per dtype: a few hundred units in the last place of a result of
# order one, loose enough for any kernel's summation order (sums over a few hundred
# terms) and tight enough that any real bug (a wrong scale, a missing mask) exceeds it.
DEFAULT_TOLERANCE = {
    torch.float64: 1e-10,
    torch.float32: 1e-5,
    torch.bfloat16: 5e-2,
    torch.float16: 1e-2,
}

_DTYPE_NAMES = {
    torch.float64: "float64",
    torch.float32: "float32",
    torch.bfloat16: "bfloat16",
    torch.float16: "float16",
}


def _as_tensor(name: str, x: object) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.detach()
    try:
        return torch.as_tensor(x)
    except (TypeError, ValueError, RuntimeError) as err:
        raise TypeError(f"{name} must be a tensor or array-like, got {type(x).__name__}") from err


def max_abs_diff(actual: object, expected: object) -> float:
    """The largest ``|actual - expected|``, computed in float64 (``inf`` if any NaN differs).

    Raises:
        TypeError: an argument is not a tensor or array-like.
        ValueError: the shapes differ (no broadcasting: a silent broadcast hides bugs).
    """
    a, b = _as_tensor("actual", actual), _as_tensor("expected", expected)
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: actual {tuple(a.shape)} vs expected {tuple(b.shape)}")
    if a.numel() == 0:
        return 0.0
    a, b = a.to(torch.float64), b.to(torch.float64)
    same_nan = torch.isnan(a) & torch.isnan(b)
    diff = (a - b).abs().masked_fill(same_nan, 0.0)
    if torch.isnan(diff).any():
        return float("inf")
    return diff.max().item()


def _tolerance_for(actual: torch.Tensor, expected: torch.Tensor) -> tuple[float, str]:
    # Hold a mixed comparison to the looser of the two dtypes (e.g. float32 vs float64).
    dtypes = [t.dtype for t in (actual, expected) if t.dtype in DEFAULT_TOLERANCE]
    if not dtypes:
        raise TypeError(f"no default tolerance for dtypes {actual.dtype} and {expected.dtype}: pass tol=")
    dtype = max(dtypes, key=lambda d: DEFAULT_TOLERANCE[d])
    return DEFAULT_TOLERANCE[dtype], _DTYPE_NAMES[dtype]


def assert_close(
    actual: object, expected: object, *, tol: float | None = None, label: str = "", quiet: bool = False
) -> float:
    """Assert ``max |actual - expected| < tol`` and print the claim (not the raw digits).

    Args:
        actual, expected: The two results, same shape.
        tol: The tolerance; by default :data:`DEFAULT_TOLERANCE` of the (looser) dtype.
        label: What is compared, printed first.
        quiet: Do not print (assert only).

    Returns:
        The measured maximum absolute difference (for further checks; printing it would
        make the output machine-dependent).

    Raises:
        AssertionError: the difference is not below ``tol``; the message gives both.
        ValueError: ``tol`` is not positive, or the shapes differ.
    """
    a, b = _as_tensor("actual", actual), _as_tensor("expected", expected)
    if tol is None:
        tol, what = _tolerance_for(a, b)
        what = f"equal within {what} rounding"
    else:
        if not isinstance(tol, (int, float)) or isinstance(tol, bool):
            raise TypeError(f"tol must be a number, got {type(tol).__name__}")
        if not tol > 0:
            raise ValueError(f"tol must be > 0, got tol={tol}")
        what = "equal within the tolerance"
    diff = max_abs_diff(a, b)
    prefix = f"{label}: " if label else ""
    if not diff < tol:
        raise AssertionError(f"{prefix}max |Δ| = {diff:.3g} is not below tol={tol:.0e}")
    if not quiet:
        print(f"{prefix}{what} (max |Δ| < {tol:.0e})")
    return diff


def assert_differ(actual: object, expected: object, *, more_than: float, label: str = "", quiet: bool = False) -> float:
    """Assert ``max |actual - expected| > more_than`` and print ``label: max |Δ| <value> (held above <bound>)``.

    For results that must *not* agree: a planted bug, an ablation, a layer without its mask.

    Returns:
        The measured maximum absolute difference.

    Raises:
        AssertionError: the difference is not above ``more_than``.
        ValueError: ``more_than`` is negative, or the shapes differ.
    """
    if not isinstance(more_than, (int, float)) or isinstance(more_than, bool):
        raise TypeError(f"more_than must be a number, got {type(more_than).__name__}")
    if more_than < 0:
        raise ValueError(f"more_than must be >= 0, got more_than={more_than}")
    diff = max_abs_diff(actual, expected)
    prefix = f"{label}: " if label else ""
    if not diff > more_than:
        raise AssertionError(f"{prefix}max |Δ| = {diff:.3g} is not above {more_than:g}")
    if not quiet:
        print(f"{prefix}max |Δ| {format_value(diff)} (held above {more_than:g})")
    return diff


def format_value(value: float) -> str:
    """A measured value as the lessons print it: three significant digits, whole numbers whole.

    ``0.96875 -> "0.969"``, ``163.0 -> "163"``, ``524288 -> "524,288"``, ``1.3e-15 -> "1.3e-15"``.
    """
    v = float(value)
    if v != v or v in (float("inf"), float("-inf")):
        return str(v)
    if v == int(v) and abs(v) < 1e15:
        return f"{int(v):,}"
    return f"{v:.3g}"


def _as_number(name: str, x: object) -> float:
    if isinstance(x, torch.Tensor) and x.numel() == 1 and not x.dtype == torch.bool:
        return float(x)
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(x).__name__} ({x!r})")
    return float(x)


def _distinct(v: float, bounds: tuple[float, ...]) -> str:
    """``format_value(v)``, with more digits where three would print a bound's own digits.

    A soft-capped logit of 4.99998 held below 5 would read "5 (held below 5)".
    """
    text = format_value(v)
    digits = 3
    while digits < 9 and any(v != b and text == f"{b:g}" for b in bounds):
        digits += 1
        text = f"{v:.{digits}g}"
    return text


def _claim(prefix: str, v: float, bounds: tuple[float, ...], held: str, ok: bool, quiet: bool) -> float:
    """Raise if the claim failed, else print ``prefix<value> (held <held>)``; return the value."""
    if not ok:
        raise AssertionError(f"{prefix}{v:.4g} is not {held}")
    if not quiet:
        print(f"{prefix}{_distinct(v, bounds)} (held {held})")
    return v


def assert_above(value: object, bound: float, *, label: str = "", quiet: bool = False) -> float:
    """Assert ``value > bound`` and print ``"label: <value> (held above <bound>)"``.

    For a trained or measured result whose digits vary from CPU to CPU: the reader sees
    the value, the claim the text makes is the bound, and the lesson fails if it does not
    hold (the value's digits are masked when nbval compares the output).

    Returns:
        ``value`` as a float.

    Raises:
        AssertionError: ``value`` is not above ``bound`` (the message gives both).
        TypeError: ``value`` or ``bound`` is not a number.
    """
    v, b = _as_number("value", value), _as_number("bound", bound)
    prefix = f"{label}: " if label else ""
    return _claim(prefix, v, (b,), f"above {b:g}", v > b, quiet)


def assert_below(value: object, bound: float, *, label: str = "", quiet: bool = False) -> float:
    """Assert ``value < bound`` and print ``"label: <value> (held below <bound>)"``.

    Raises:
        AssertionError: ``value`` is not below ``bound``.
        TypeError: ``value`` or ``bound`` is not a number.
    """
    v, b = _as_number("value", value), _as_number("bound", bound)
    prefix = f"{label}: " if label else ""
    return _claim(prefix, v, (b,), f"below {b:g}", v < b, quiet)


def assert_between(value: object, low: float, high: float, *, label: str = "", quiet: bool = False) -> float:
    """Assert ``low < value < high`` and print ``"label: <value> (held between <low> and <high>)"``.

    Raises:
        AssertionError: ``value`` is outside the open interval.
        TypeError: an argument is not a number.
        ValueError: ``low >= high``.
    """
    v, lo, hi = _as_number("value", value), _as_number("low", low), _as_number("high", high)
    if not lo < hi:
        raise ValueError(f"low must be below high, got low={lo:g}, high={hi:g}")
    prefix = f"{label}: " if label else ""
    held = f"between {lo:g} and {hi:g}"
    return _claim(prefix, v, (lo, hi), held, lo < v < hi, quiet)
