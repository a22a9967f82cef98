"""Argument checks shared by the modules: clear errors that name the offending value."""

from __future__ import annotations


def check_int(name: str, value: object, *, minimum: int = 1) -> int:
    """Return ``value`` if it is an int ``>= minimum``; raise otherwise.

    Raises:
        TypeError: ``value`` is not an int (``bool`` is refused too).
        ValueError: ``value < minimum``; the message names ``name`` and ``value``.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {name}={value}")
    return value
