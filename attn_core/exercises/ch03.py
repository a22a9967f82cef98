"""Checks for the exercises of chapter 3 (multi-head attention)."""

from __future__ import annotations

import copy
from typing import Callable

import torch
from torch import nn

from ..attention import MultiHeadAttention
from ._common import compare, report

__all__ = ["check_split_heads", "check_merge_heads", "check_mha_from_torch"]


def _inputs(seed: int, *shape: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def check_split_heads(fn: Callable[[torch.Tensor, int], torch.Tensor]) -> bool:
    """Exercise 3.1: ``fn(x, n_heads)`` splits the last axis into heads and moves heads before time.

    Head ``h`` owns features ``h·D .. (h+1)·D - 1`` of every token.

    Shapes:
        x: ``(B, T, H·D)``; fn's output: ``(B, H, T, D)``
    """
    name = "3.1 split heads"
    B, T, H, D = 2, 5, 3, 4
    x = _inputs(30, B, T, H * D)
    try:
        got = fn(x, H)
    except Exception as e:  # a learner's bug should print, not stop the notebook
        return report(name, False, f"{type(e).__name__}: {e}")
    expected = x.view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
    if isinstance(got, torch.Tensor) and got.shape == expected.shape and not torch.equal(got, expected):
        if torch.equal(got, x.reshape(B, H, T, D)):
            return report(
                name, False, "x.view(B, H, T, D) mixes tokens into heads: view as (B, T, H, D), then transpose"
            )
    return compare(name, got, expected, atol=0.0)


def check_merge_heads(fn: Callable[[torch.Tensor], torch.Tensor]) -> bool:
    """Exercise 3.2: ``fn(x)`` undoes the split: heads side by side again, for every token.

    Shapes:
        x: ``(B, H, T, D)``; fn's output: ``(B, T, H·D)``
    """
    name = "3.2 merge heads"
    B, H, T, D = 2, 3, 5, 4
    x = _inputs(31, B, H, T, D)
    try:
        got = fn(x)
    except Exception as e:
        return report(name, False, f"{type(e).__name__}: {e}")
    expected = x.transpose(1, 2).reshape(B, T, H * D)  # (B, T, H·D)
    if isinstance(got, torch.Tensor) and got.shape == expected.shape and not torch.equal(got, expected):
        if torch.equal(got, x.reshape(B, T, H * D)):
            return report(name, False, "reshaped without moving the head axis back: transpose(1, 2) first")
    return compare(name, got, expected, atol=0.0)


def check_mha_from_torch(fn: Callable[[nn.MultiheadAttention], MultiHeadAttention]) -> bool:
    """Exercise 3.3: ``fn(ref)`` builds a :class:`~attn_core.MultiHeadAttention` computing what ``ref`` computes.

    ``ref`` is a ``torch.nn.MultiheadAttention(batch_first=True, bias=True)`` with random
    weights: its stacked ``in_proj_weight``/``in_proj_bias`` (q, k, v) and ``out_proj`` must
    be split into the four projections of ``MultiHeadAttention``. The check compares the
    outputs on a random batch, in float64, and that ``ref`` was left untouched.

    Shapes:
        x: ``(B, T, d_model)``; both outputs ``(B, T, d_model)``
    """
    name = "3.3 weights from nn.MultiheadAttention"
    with torch.random.fork_rng(devices=[]):  # building the layer must not move the notebook's RNG
        torch.manual_seed(33)
        ref = nn.MultiheadAttention(12, 3, bias=True, batch_first=True).double()
        with torch.no_grad():
            for p in ref.parameters():  # biases are zero at init: make every number count
                p.normal_(0.0, 0.3)
    before = {k: v.clone() for k, v in ref.state_dict().items()}
    x = _inputs(32, 2, 5, 12)  # (B, T, d_model)
    try:
        with torch.random.fork_rng(devices=[]):  # nor must the learner's layer
            layer = fn(ref)
        if not isinstance(layer, MultiHeadAttention):
            return report(name, False, f"expected an attn_core.MultiHeadAttention, got {type(layer).__name__}")
        got = copy.deepcopy(layer).double()(x)  # compared in float64, whatever dtype it was built in
    except Exception as e:
        return report(name, False, f"{type(e).__name__}: {e}")
    if any(not torch.equal(v, ref.state_dict()[k]) for k, v in before.items()):
        return report(name, False, "the reference layer was modified: copy its weights, do not change them")
    with torch.no_grad():
        expected = ref(x, x, x, need_weights=False)[0]  # (B, T, d_model)
    if layer.q_proj.bias is None:
        return report(name, False, "the reference has biases: build MultiHeadAttention(..., bias=True)")
    if layer.q_proj.weight.dtype != torch.float64:
        return report(name, False, "the reference is float64: build the layer in float64 too (.double())")
    return compare(name, got, expected, atol=1e-10)
