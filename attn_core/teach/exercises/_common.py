"""Shared helpers for the exercise checks."""

from __future__ import annotations

import torch


def report(name: str, ok: bool, detail: str = "") -> bool:
    """Print a one-line verdict for exercise ``name`` and return ``ok``."""
    mark = "correct" if ok else "not yet"
    print(f"[{name}] {mark}" + (f": {detail}" if detail else ""))
    return bool(ok)


def mismatch(got: object, expected: torch.Tensor, *, atol: float) -> str | None:
    """Why ``got`` is not ``expected`` within ``atol`` (its type, shape or values), or None.

    Silent: a check that compares several cases prints one verdict, not one line per case.
    """
    if not isinstance(got, torch.Tensor):
        return f"expected a torch.Tensor, got {type(got).__name__}"
    if got.shape != expected.shape:
        return f"shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
    err = (got.detach().double() - expected.detach().double()).abs().max().item()
    if not err <= atol:
        return f"max abs difference {err:.2e} (tolerance {atol:.0e})"
    return None


def describe(got: object) -> str:
    """What a learner returned, in a few words: a tensor's dtype and shape (never its values), else its type."""
    if isinstance(got, torch.Tensor):
        return f"a {str(got.dtype).replace('torch.', '')} tensor of shape {tuple(got.shape)}"
    return type(got).__name__


def compare(name: str, got: object, expected: torch.Tensor, *, atol: float = 1e-5) -> bool:
    """Compare a learner's tensor with the reference: type, shape, then values."""
    problem = mismatch(got, expected, atol=atol)
    if problem:
        return report(name, False, problem)
    # The tolerance, not the measured digits: those differ from CPU to CPU (the check's
    # output is compared by the notebook tests on every reader's machine).
    return report(name, True, f"equal within {atol:.0e}" if atol > 0 else "exactly equal")


def check_counts(name: str, fn, cases: list[tuple[dict, int]], success: str) -> bool:
    """Call ``fn(**kwargs)`` for each case and compare the count it returns with ``want``.

    A learner's exception or wrong count is reported (with a hint when the answer is half
    the measured one: a cache holds keys *and* values) instead of raised.
    """
    for kwargs, want in cases:
        try:
            got = fn(**kwargs)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        if got != want:
            hint = " (keys *and* values)" if got == want // 2 else ""
            return report(name, False, f"{kwargs}: got {got!r}, measured {want}{hint}")
    return report(name, True, success)
