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

Every check reads only Python values and a tensor's metadata (shape, dtype, device), never
its data: a check costs no host-device synchronisation, so the layers run them on every
call, decoding steps included. The checks that must read data (:func:`check_index_range`)
are for functions off that path.
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
    "check_like",
    "check_mask",
    "check_index_range",
    "check_made_for",
    "first_weight",
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
    like: torch.Tensor | None = None,
    owner: str = "the layer's weights",
) -> torch.Tensor:
    """Return ``value`` if it is a tensor of the given shape pattern and dtype kind; raise otherwise.

    Args:
        name: The argument's name, for the message.
        value: What was passed.
        shape: A shape pattern (see the module docstring), e.g. ``("B", "T", ("d_model", 8))``
            or ``("...", "T", "D")``; ``None`` accepts any shape.
        floating: Require a floating-point dtype.
        integer: Require an integer dtype (token ids; ``bool`` is refused).
        like: A tensor whose dtype and device ``value`` must share (a layer's weight):
            see :func:`check_like`, which is called after the shape check.
        owner: What ``like`` is, for the message (plural: "the layer's weights").

    Raises:
        TypeError: Not a tensor, or the wrong kind of dtype (or not ``like``'s dtype).
        ValueError: A shape that does not fit the pattern; the message shows both. A device
            unlike ``like``'s.
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
    if like is not None:
        check_like(name, value, like, owner=owner)
    return value


# The method that casts a tensor or a module to a dtype, for the hint in check_like's message.
_CAST_METHOD = {torch.float32: "float", torch.float64: "double", torch.float16: "half", torch.bfloat16: "bfloat16"}


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _cast_hint(dtype: torch.dtype) -> str:
    method = _CAST_METHOD.get(dtype)
    return f".{method}()" if method else f".to({dtype})"


def check_like(
    name: str,
    value: torch.Tensor,
    reference: torch.Tensor,
    *,
    owner: str = "the layer's weights",
    verb: str = "are",
    fix: str = "",
) -> torch.Tensor:
    """Return ``value`` if it has ``reference``'s dtype and device; raise a message that says how to fix it.

    The input of a layer must have the dtype and the device of its weights, or the first
    matmul fails deep inside torch ("expected m1 and m2 to have the same dtype"). The
    usual slips: a float64 tensor made from NumPy, integer token ids given to a layer
    that expects activations, a layer moved to the GPU and an input left on the CPU.
    Under ``torch.autocast`` the activations legitimately differ from the weights, so the
    dtype is not compared there.

    Args:
        name: The argument's name, for the message.
        value: The tensor passed.
        reference: The tensor it must match (a weight, a cache's storage).
        owner, verb: What ``reference`` is, for the message: "the layer's weights" "are", "q" "is".
        fix: The hint after the dtype message's colon; the default suggests casting the input
            or the layer.

    Raises:
        TypeError: ``value.dtype != reference.dtype``, e.g. "x has dtype float64 but the
            layer's weights are float32: call .float() on the input or .double() on the layer".
        ValueError: ``value.device != reference.device``.
    """
    if value.dtype != reference.dtype and not _autocast_on(value.device.type):
        if fix:
            hint = fix
        elif not value.dtype.is_floating_point:
            hint = (
                f"the input must hold floating-point values (token ids go through an embedding first), "
                f"e.g. {name}{_cast_hint(reference.dtype)}"
            )
        else:
            hint = f"call {_cast_hint(reference.dtype)} on the input or {_cast_hint(value.dtype)} on the layer"
        raise TypeError(
            f"{name} has dtype {_dtype_name(value.dtype)} but {owner} {verb} {_dtype_name(reference.dtype)}: {hint}"
        )
    if value.device != reference.device:
        layer = f" or .to('{value.device}') on the layer" if owner == "the layer's weights" else ""
        raise ValueError(
            f"{name} is on {value.device} but {owner} {verb} on {reference.device}: "
            f"call .to('{reference.device}') on {name}{layer}"
        )
    return value


def _autocast_on(device_type: str) -> bool:
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:  # torch < 2.4 asks per device kind, without an argument
        return torch.is_autocast_enabled() or torch.is_autocast_cpu_enabled()


def check_mask(
    name: str,
    mask: object,
    shape: tuple,
    *,
    allow_float: bool = True,
    target: str = "the scores' shape",
    context: str = "",
) -> torch.Tensor | None:
    """Return ``mask`` (or None) if it is a boolean mask, or a float bias, of a shape that broadcasts to ``shape``.

    The one rule of every mask in attn_core: boolean, ``True`` = may attend; or floating,
    added to the scores (``-inf`` or ``torch.finfo(dtype).min`` where blocked). An integer
    mask is refused: a 0/1 tensor would be added as a bias of 0 and 1 and block nothing.

    Args:
        name: The argument's name, for the message.
        mask: What was passed.
        shape: The shape the mask must broadcast to, e.g. the scores' ``(B, H, T_q, T_k)``.
        allow_float: Accept a float bias too (``False``: boolean only).
        target, context: What ``shape`` is, and where it comes from, for the message.

    Raises:
        TypeError: Not a tensor, or a dtype that is neither boolean nor (if allowed) floating.
        ValueError: A shape that does not broadcast to ``shape``.
    """
    if mask is None:
        return None
    check_tensor(name, mask)
    if mask.dtype != torch.bool and not (allow_float and mask.dtype.is_floating_point):
        kinds = "boolean (True = may attend) or floating (an additive bias)" if allow_float else "boolean"
        extra = ": convert a 0/1 mask with .bool()" if not mask.dtype.is_floating_point else ""
        raise TypeError(f"{name} must be {kinds}, got dtype={mask.dtype}{extra}")
    try:
        ok = torch.broadcast_shapes(mask.shape, shape) == torch.Size(shape)
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(f"{name} of shape {tuple(mask.shape)} does not broadcast to {target} {tuple(shape)}{context}")
    return mask


def check_index_range(
    name: str, value: torch.Tensor, high: int, *, what: str = "index", high_name: str = ""
) -> torch.Tensor:
    """Return ``value`` if every entry is in ``[0, high)``; raise ``ValueError`` naming the first bad one.

    ``what`` names one entry ("expert id"), ``high_name`` the bound ("n_experts"), for the message.

    Reads the data (one host-device synchronisation on a GPU): for losses and statistics,
    not for a layer's forward on the decoding path.
    """
    if value.numel() and (bool((value < 0).any()) or bool((value >= high).any())):
        bad = value[(value < 0) | (value >= high)].flatten()[0].item()
        bound = f"{high_name}={high}" if high_name else f"{high}"
        raise ValueError(f"every {what} in {name} must be in [0, {bound}), got {bad} (in {name}={_preview(value)})")
    return value


def _preview(t: torch.Tensor, n: int = 8) -> str:
    flat = t.flatten().tolist()
    return str(flat[:n])[:-1] + ", ...]" if len(flat) > n else str(flat)


def _fits(actual: tuple[int, ...], pattern: tuple) -> bool:
    # A plain loop, no generator: every layer checks its inputs on every call, decoding
    # steps included, where the checks' Python calls are a measurable part of a step.
    n_pattern, n_actual = len(pattern), len(actual)
    first = 1 if n_pattern and pattern[0] == "..." else 0  # "..." matches any leading axes
    n_axes = n_pattern - first
    if n_actual < n_axes or (not first and n_actual != n_axes):
        return False
    offset = n_actual - n_pattern  # pattern[j] describes actual[offset + j]
    for j in range(first, n_pattern):
        axis = pattern[j]
        if not isinstance(axis, str) and actual[offset + j] != axis[1]:
            return False
    return True


def first_weight(module: torch.nn.Module) -> torch.Tensor | None:
    """The module's first floating-point parameter (or buffer): the dtype and device its inputs must have.

    What :func:`check_like` compares an input with when a module has no single obvious
    weight (a block, a mixture of experts). ``None`` for a module without any. The order
    is that of ``module.parameters()`` (then ``module.buffers()``), searched depth first
    without building their generators: a block asks on every call.
    """
    found = _first_floating(module, "_parameters")
    return found if found is not None else _first_floating(module, "_buffers")


def _first_floating(module: torch.nn.Module, kind: str) -> torch.Tensor | None:
    # The module's own tensors first, then each child's, as named_modules() visits them.
    for t in getattr(module, kind).values():
        if t is not None and t.is_floating_point():
            return t
    for child in module._modules.values():
        if child is not None:
            found = _first_floating(child, kind)
            if found is not None:
                return found
    return None


def check_made_for(name: str, holds: dict[str, object], needs: dict[str, object], *, fix: str) -> None:
    """Raise ``ValueError`` if an object prepared earlier (a cache) was made for other sizes than this call needs.

    Args:
        name: The argument's name (``kv_cache``).
        holds: The sizes it was made for, e.g. ``{"batch_size": 3, "n_kv_heads": 2}``.
        needs: The sizes this call needs, under the same names.
        fix: How to make the right one, after the colon.

    Example: ``kv_cache was made for batch_size=3, but this call needs batch_size=2: make it with
    this layer's make_cache(2, max_len)``.
    """
    bad = [key for key in needs if holds.get(key) != needs[key]]
    if bad:
        made = ", ".join(f"{key}={holds.get(key)!r}" for key in bad)
        need = ", ".join(f"{key}={needs[key]!r}" for key in bad)
        raise ValueError(f"{name} was made for {made}, but this call needs {need}: {fix}")
