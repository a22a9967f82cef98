"""Argument checks shared by every module: one rule, messages that name the values.

The rule: a value of the wrong *type* raises ``TypeError``; a value of the right type but
outside what is allowed (a size below 1, a probability of 1.5, a shape that does not
fit) raises ``ValueError``. Every message names the argument and the value it got, e.g.
``d_model must be >= 1, got d_model=0``.

Each check returns the value (converted where that helps, e.g. a number to ``float``),
so that ``self.d = check_int("d", d)`` checks and stores in one line.

Shape patterns (:func:`check_tensor`): a tuple of axis names such as
``("B", "T", ("d_model", 8))``. A string is an axis of any size; a ``(name, size)`` pair
must have that size; a leading ``"..."`` stands for any number of leading axes.
"""

from __future__ import annotations

import math
from collections.abc import Collection

import torch

__all__ = [
    "check_int",
    "check_number",
    "check_bool",
    "check_choice",
    "check_instance",
    "check_callable",
    "check_tensor",
]


def check_int(name: str, value: object, *, minimum: int = 1) -> int:
    """Return ``value`` if it is an int ``>= minimum``; raise otherwise.

    Raises:
        TypeError: ``value`` is not an int (``bool`` is refused too).
        ValueError: ``value < minimum``.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {name}={value}")
    return value


def check_number(
    name: str,
    value: object,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """Return ``value`` as a float if it is a finite real number in the given range; raise otherwise.

    Args:
        name: The argument's name, for the message.
        value: What was passed.
        low, high: Bounds (``None``: unbounded on that side).
        low_open, high_open: Exclude the bound itself (``dropout`` is in ``[0, 1)``:
            ``low=0, high=1, high_open=True``).

    Raises:
        TypeError: ``value`` is not an int or float (``bool`` is refused too).
        ValueError: ``value`` is NaN, infinite, or outside the range.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} ({value!r})")
    below = low is not None and (value <= low if low_open else value < low)
    above = high is not None and (value >= high if high_open else value > high)
    if math.isnan(value) or math.isinf(value) or below or above:
        finite = "" if low is not None and high is not None else "finite "
        raise ValueError(
            f"{name} must be a {finite}number {_interval(low, high, low_open, high_open)}, got {name}={value!r}"
        )
    return float(value)


def _interval(low, high, low_open, high_open) -> str:
    if low is not None and high is not None:
        return f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    if low is not None:
        return f"{'>' if low_open else '>='} {low:g}"
    if high is not None:
        return f"{'<' if high_open else '<='} {high:g}"
    return ""


def check_bool(name: str, value: object) -> bool:
    """Return ``value`` if it is a ``bool``; raise ``TypeError`` otherwise (``0``/``1`` included)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} ({value!r})")
    return value


def check_choice(name: str, value: object, choices: Collection[object]) -> object:
    """Return ``value`` if it is one of ``choices``; raise ``ValueError`` listing them otherwise."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {name}={value!r}")
    return value


def check_instance(name: str, value: object, cls: type | tuple[type, ...], *, optional: bool = False) -> object:
    """Return ``value`` if it is an instance of ``cls`` (or ``None`` when ``optional``); raise ``TypeError``."""
    if (optional and value is None) or isinstance(value, cls):
        return value
    names = " or ".join(_type_name(c) for c in (cls if isinstance(cls, tuple) else (cls,)))
    article = "an" if names[0] in "aeiouAEIO" or names.startswith("nn.") else "a"
    raise TypeError(f"{name} must be {article} {names}{' or None' if optional else ''}, got {type(value).__name__}")


def _type_name(cls: type) -> str:
    """``nn.Module``, ``torch.Generator``, ``attn_core.KVCache``: the name a reader types."""
    module = cls.__module__
    if module.startswith("torch.nn"):
        return f"nn.{cls.__name__}"
    if module.startswith("torch"):
        return f"torch.{cls.__name__}"
    if module.startswith("attn_core"):
        return f"attn_core.{cls.__name__}"
    return cls.__name__


def check_callable(name: str, value: object) -> object:
    """Return ``value`` if it can be called; raise ``TypeError`` otherwise."""
    if not callable(value):
        raise TypeError(f"{name} must be callable, got {type(value).__name__}")
    return value


def check_tensor(
    name: str,
    value: object,
    shape: tuple | None = None,
    *,
    floating: bool = False,
    integer: bool = False,
) -> torch.Tensor:
    """Return ``value`` if it is a tensor of the given shape pattern and dtype kind; raise otherwise.

    Args:
        name: The argument's name, for the message.
        value: What was passed.
        shape: A shape pattern (see the module docstring), e.g. ``("B", "T", ("d_model", 8))``
            or ``("...", "T", "D")``; ``None`` accepts any shape.
        floating: Require a floating-point dtype.
        integer: Require an integer dtype (token ids; ``bool`` is refused).

    Raises:
        TypeError: Not a tensor, or the wrong kind of dtype.
        ValueError: A shape that does not fit the pattern; the message shows both.
    """
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if floating and not value.dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating-point tensor, got dtype={value.dtype}")
    if integer and (value.dtype.is_floating_point or value.dtype.is_complex or value.dtype == torch.bool):
        raise TypeError(f"{name} must be an integer tensor, got dtype={value.dtype}")
    if shape is not None and not _fits(tuple(value.shape), shape):
        axes = ", ".join(a if isinstance(a, str) else f"{a[0]}={a[1]}" for a in shape)
        raise ValueError(f"{name} must have shape ({axes}), got {tuple(value.shape)}")
    return value


def _fits(actual: tuple[int, ...], pattern: tuple) -> bool:
    rest = pattern[1:] if pattern[:1] == ("...",) else pattern
    if len(actual) < len(rest) or (rest is pattern and len(actual) != len(pattern)):
        return False
    tail = actual[len(actual) - len(rest) :]
    return all(isinstance(axis, str) or size == axis[1] for size, axis in zip(tail, rest))
