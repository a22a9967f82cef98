"""Helpers for the book's cells that print what they skip, kept out of the model code.

:func:`transformers_names` fetches named classes from ``transformers`` for a chapter's
parity cell, printing why the comparison is skipped where they are missing (Colab's
``transformers`` version varies).
"""

from __future__ import annotations

import importlib

__all__ = ["transformers_names"]


def transformers_names(*names: str, module: str = "transformers") -> tuple | None:
    """The named objects of ``transformers`` (or of ``module`` inside it), or ``None`` after printing why not.

    For the chapters' parity cells, which must run wherever ``transformers`` is missing or
    too old (its version in Colab varies): they compare only when every name exists.

    Example:
        >>> found = transformers_names("LlamaConfig", "LlamaForCausalLM")
        >>> if found is not None:
        ...     LlamaConfig, LlamaForCausalLM = found
    """
    try:
        mod = importlib.import_module(module)
    except ImportError as err:
        print(f"skipped: {module} cannot be imported ({err.__class__.__name__}); pip install transformers")
        return None
    missing = [n for n in names if not hasattr(mod, n)]
    if missing:
        version = getattr(importlib.import_module("transformers"), "__version__", "?")
        print(f"skipped: transformers {version} has no {', '.join(missing)} in {module}; a newer release has")
        return None
    return tuple(getattr(mod, n) for n in names)
