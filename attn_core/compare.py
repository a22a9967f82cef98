"""Compare two results the way the book's lessons do: against a stated tolerance.

Two floating-point computations of the same thing (our attention and PyTorch's, the
cached and the uncached decoder) rarely agree to the last bit, and *which* bits differ
depends on the CPU: an AVX-512 machine, an AVX2 machine and a plain SSE build pick
different kernels and sum in different orders. Printing the raw difference (``9.7e-08``
here, ``0.0e+00`` there) makes a lesson's output depend on the reader's machine. So the
lessons print the tolerance a result is held to and *assert* it:

    >>> assert_close(ours, reference, label="attn_core vs SDPA")
    attn_core vs SDPA: equal within float32 rounding (max |Δ| < 1e-05)

a trained or measured result is printed as the bound it is held to, not one run's digits
(training amplifies the CPU's rounding differences):

    >>> assert_above(accuracy, 0.95, label="token accuracy")
    token accuracy: above 0.95

and, for a result that must differ (a bug's output, an ablation), the lower bound:

    >>> assert_differ(buggy, reference, more_than=0.1, label="without the mask")
    without the mask: differs (max |Δ| > 0.1)

Both raise ``AssertionError`` (with the measured value) when the claim fails, so a
lesson that uses them still fails when ``attn_core`` is wrong.

Shapes:
    actual, expected: any two tensors (or array-likes) of the same shape
"""

from __future__ import annotations

import torch

__all__ = ["DEFAULT_TOLERANCE", "max_abs_diff", "assert_close", "assert_differ", "assert_above", "assert_below"]

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
    """Assert ``max |actual - expected| > more_than`` and print the claim.

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
        print(f"{prefix}differs (max |Δ| > {more_than:g})")
    return diff


def _assert_bound(value: object, bound: object, side: str, label: str, quiet: bool) -> float:
    """The one check behind :func:`assert_above` (``side="above"``) and :func:`assert_below`."""
    for name, x in (("value", value), ("bound", bound)):
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            if isinstance(x, torch.Tensor) and x.numel() == 1:
                continue
            raise TypeError(f"{name} must be a number, got {type(x).__name__} ({x!r})")
    v, b = float(value), float(bound)
    prefix = f"{label}: " if label else ""
    if not (v > b if side == "above" else v < b):
        raise AssertionError(f"{prefix}{v:.4g} is not {side} {b:g}")
    if not quiet:
        print(f"{prefix}{side} {b:g}")
    return v


def assert_above(value: object, bound: float, *, label: str = "", quiet: bool = False) -> float:
    """Assert ``value > bound`` and print ``"label: above bound"`` (not the value itself).

    For a trained or measured result whose digits vary from CPU to CPU: the claim the
    text makes is the bound, and the lesson fails if it does not hold.

    Returns:
        ``value`` as a float.

    Raises:
        AssertionError: ``value`` is not above ``bound`` (the message gives both).
        TypeError: ``value`` or ``bound`` is not a number.
    """
    return _assert_bound(value, bound, "above", label, quiet)


def assert_below(value: object, bound: float, *, label: str = "", quiet: bool = False) -> float:
    """Assert ``value < bound`` and print ``"label: below bound"`` (see :func:`assert_above`).

    Raises:
        AssertionError: ``value`` is not below ``bound``.
        TypeError: ``value`` or ``bound`` is not a number.
    """
    return _assert_bound(value, bound, "below", label, quiet)
