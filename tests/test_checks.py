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
