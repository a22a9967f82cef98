"""attn_core.checks: wrong type -> TypeError, wrong value -> ValueError, messages that name the values."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from attn_core.checks import (
    check_bool,
    check_callable,
    check_choice,
    check_instance,
    check_int,
    check_number,
    check_tensor,
)


def test_check_int():
    assert check_int("n", 3) == 3 and check_int("n", 0, minimum=0) == 0
    with pytest.raises(TypeError, match=r"n must be an int, got float \(2.0\)"):
        check_int("n", 2.0)
    with pytest.raises(TypeError, match=r"n must be an int, got bool \(True\)"):
        check_int("n", True)
    with pytest.raises(ValueError, match="n must be >= 1, got n=0"):
        check_int("n", 0)


def test_check_number():
    assert check_number("p", 0) == 0.0 and isinstance(check_number("p", 1), float)
    with pytest.raises(TypeError, match=r"p must be a number, got str \('0.5'\)"):
        check_number("p", "0.5")
    with pytest.raises(TypeError, match="p must be a number, got bool"):
        check_number("p", False)
    with pytest.raises(ValueError, match=r"p must be a number in \[0, 1\), got p=1.0"):
        check_number("p", 1.0, low=0.0, high=1.0, high_open=True)
    with pytest.raises(ValueError, match="lr must be a finite number > 0, got lr=0"):
        check_number("lr", 0, low=0.0, low_open=True)
    with pytest.raises(ValueError, match="x must be a finite number <= 2, got x=3"):
        check_number("x", 3, high=2)
    for bad in (math.nan, math.inf):
        with pytest.raises(ValueError, match="finite"):
            check_number("x", bad)


def test_check_bool_choice_instance_callable():
    assert check_bool("b", False) is False
    with pytest.raises(TypeError, match=r"b must be a bool, got int \(1\)"):
        check_bool("b", 1)
    assert check_choice("norm", "pre", ("pre", "post")) == "pre"
    with pytest.raises(ValueError, match=r"norm must be one of \('pre', 'post'\), got norm='mid'"):
        check_choice("norm", "mid", ("pre", "post"))
    assert check_instance("g", None, torch.Generator, optional=True) is None
    with pytest.raises(TypeError, match="model must be an nn.Module, got int"):
        check_instance("model", 3, nn.Module)
    with pytest.raises(TypeError, match="g must be a torch.Generator or None, got int"):
        check_instance("g", 3, torch.Generator, optional=True)
    with pytest.raises(TypeError, match="fn must be callable, got int"):
        check_callable("fn", 3)


def test_check_tensor_shapes_and_dtypes():
    x = torch.zeros(2, 3, 8)
    assert check_tensor("x", x, ("B", "T", ("d_model", 8))) is x
    assert check_tensor("x", x, ("...", ("d", 8)), floating=True) is x
    assert check_tensor("x", torch.zeros(8), ("...", ("d", 8))) is not None  # no leading axes
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, d_model=4\), got \(2, 3, 8\)"):
        check_tensor("x", x, ("B", "T", ("d_model", 4)))
    with pytest.raises(ValueError, match=r"x must have shape \(B, T\), got \(2, 3, 8\)"):
        check_tensor("x", x, ("B", "T"))
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., T, D\), got \(3,\)"):
        check_tensor("x", torch.zeros(3), ("...", "T", "D"))
    with pytest.raises(TypeError, match="x must be a torch.Tensor, got list"):
        check_tensor("x", [1.0])
    with pytest.raises(TypeError, match="x must be a floating-point tensor, got dtype=torch.int64"):
        check_tensor("x", torch.zeros(2, dtype=torch.long), floating=True)
    with pytest.raises(TypeError, match="idx must be an integer tensor, got dtype=torch.bool"):
        check_tensor("idx", torch.zeros(2, dtype=torch.bool), integer=True)


def _fits_reference(shape: tuple, pattern: tuple) -> bool:
    """What a shape pattern means, written the slow, obvious way."""
    if pattern[:1] == ("...",):
        rest = pattern[1:]
        if len(shape) < len(rest):
            return False
        shape = shape[len(shape) - len(rest) :]
    else:
        rest = pattern
    if len(shape) != len(rest):
        return False
    return all(isinstance(axis, str) or size == axis[1] for size, axis in zip(shape, rest))


def test_check_tensor_shape_patterns_agree_with_their_meaning():
    patterns = [
        (),
        ("T",),
        ("B", "T"),
        ("B", "T", ("d", 4)),
        (("d", 4),),
        ("...",),
        ("...", ("d", 4)),
        ("...", "T", "D"),
        ("...", ("T", 3), ("D", 4)),
    ]
    shapes = [(), (4,), (3,), (3, 4), (2, 3, 4), (2, 3, 5), (1, 2, 3, 4), (4, 4), (0, 4)]
    for pattern in patterns:
        for shape in shapes:
            fits = _fits_reference(shape, pattern)
            if fits:
                assert check_tensor("x", torch.zeros(shape), pattern).shape == shape
            else:
                with pytest.raises(ValueError, match=r"x must have shape"):
                    check_tensor("x", torch.zeros(shape), pattern)


def test_first_weight_is_the_first_of_parameters_then_buffers():
    from attn_core import DecoderConfig, DecoderLM
    from attn_core.checks import first_weight

    class BuffersOnly(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("steps", torch.zeros(2, dtype=torch.long))
            self.inner = nn.Module()
            self.inner.register_buffer("table", torch.zeros(3))

    class IntParameterFirst(nn.Module):
        def __init__(self):
            super().__init__()
            self.count = nn.Parameter(torch.zeros(1, dtype=torch.long), requires_grad=False)
            self.empty = None
            self.lin = nn.Linear(2, 2)

    model = DecoderLM(DecoderConfig.llama_like(vocab_size=16, n_layers=2, d_model=16, n_heads=2))
    cases = [model, model.blocks[1], model.blocks[1].mlp, IntParameterFirst(), BuffersOnly(), nn.ReLU()]
    for module in cases:
        floating = [t for t in (*module.parameters(), *module.buffers()) if t.is_floating_point()]
        expected = floating[0] if floating else None
        assert first_weight(module) is expected, type(module).__name__
