"""Checks for the exercises of chapter 5 (multi-query attention)."""

from __future__ import annotations

from typing import Callable

import torch

from ...caches.kv import KVCache
from ._common import check_counts, report

__all__ = ["check_decode_intensity", "check_step_intensity", "check_max_batch"]


# Predictions about a decoding step and about memory, each checked against a measurement
# (FLOPs counted by PyTorch, bytes of real tensors and caches).


def _measured_intensity(H: int, H_kv: int, n_new: int, T: int = 64, D: int = 8) -> float:
    """FLOPs of one decoding step's attention, counted by PyTorch, per float16 byte of cache."""
    from torch.utils.flop_counter import FlopCounterMode

    q = torch.zeros(1, H_kv, (H // H_kv) * n_new, D)  # a group's queries as the rows of one matmul
    k = v = torch.zeros(1, H_kv, T, D)  # (B, H_kv, T, D)
    with FlopCounterMode(display=False) as counter:
        torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v
    cache_bytes = 2 * H_kv * T * D * 2  # keys and values, float16
    return counter.get_total_flops() / cache_bytes


def check_decode_intensity(fn: Callable[[int, int, int], float]) -> bool:
    """Exercise 5.1: ``fn(n_heads, n_kv_heads, n_new)``: FLOPs per byte of cache a decoding step does.

    One step of attention for ``n_new`` new tokens at once (1 for plain decoding, more for
    speculative decoding or multi-token prediction), ``n_heads`` query heads sharing
    ``n_kv_heads`` key/value heads, a float16 cache of ``T`` positions. The answer is
    compared with the FLOPs PyTorch's ``FlopCounterMode`` counts in the step divided by the
    bytes of keys and values it reads; it must not depend on ``T`` or the head width.
    """
    name = "5.1 FLOPs per byte of cache"
    for H, H_kv, n_new in ((8, 8, 1), (8, 1, 1), (32, 8, 1), (16, 1, 4), (8, 2, 3)):
        want = _measured_intensity(H, H_kv, n_new)
        try:
            got = float(fn(H, H_kv, n_new))
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        if not abs(got - want) <= 1e-9 * want:
            hint = ""
            if abs(got - 2 * want) <= 1e-9 * want:
                hint = " (a cache holds keys *and* values)"
            elif abs(got * want - n_new**2) <= 1e-9 * n_new**2:  # H_kv/H instead of H/H_kv
                hint = " (which of H and H_kv is read, which is computed with?)"
            return report(
                name, False, f"H={H}, H_kv={H_kv}, n_new={n_new}: got {got:g}, counted {want:g} FLOPs/byte{hint}"
            )
    return report(name, True, "equal to the counted FLOPs per byte in 5 shapes")


def check_max_batch(fn: Callable[..., int]) -> bool:
    """Exercise 5.3: ``fn(free_bytes, n_layers, n_kv_heads, head_dim, context, bytes_per_element)``.

    The largest number of sequences of ``context`` tokens whose KV caches (one per layer)
    fit in ``free_bytes``. Compared with the bytes of real :class:`~attn_core.KVCache`
    objects for one sequence.
    """
    cases = []
    for free, L, H_kv, D, T, dtype in (
        (2**30, 4, 8, 16, 256, torch.float32),
        (2**30, 4, 1, 16, 256, torch.float32),
        (10**9, 3, 2, 32, 1000, torch.float16),
        (5 * 10**6, 2, 4, 8, 100, torch.bfloat16),
    ):
        per_sequence = L * KVCache(1, H_kv, D, max_len=T, dtype=dtype).nbytes()
        size = torch.empty((), dtype=dtype).element_size()
        kwargs = dict(free_bytes=free, n_layers=L, n_kv_heads=H_kv, head_dim=D, context=T, bytes_per_element=size)
        cases.append((kwargs, free // per_sequence))
    return check_counts("5.3 largest batch", fn, cases, "equal to what real caches allow in 4 settings")


def _measured_step_intensity(B: int, P: int, L: int, H: int, H_kv: int, D: int, T: int) -> float:
    """FLOPs per byte of one decoding step, counted on meta tensors (no memory, no arithmetic).

    The weights are one float16 matrix of ``P`` elements that every sequence multiplies (read
    once per step); each layer's attention reads its own float16 cache per sequence.
    """
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        w = torch.empty(P // 64, 64, dtype=torch.float16)  # the weights: P elements
        x = torch.empty(B, 64, dtype=torch.float16)  # (B, 64): one new token per sequence
        q = torch.empty(B, H_kv, H // H_kv, D, dtype=torch.float16)  # a group's queries as rows
        k = v = torch.empty(B, H_kv, T, D, dtype=torch.float16)  # (B, H_kv, T, D): one layer
        with FlopCounterMode(display=False) as counter:
            x @ w.T  # (B, P // 64)
            for _ in range(L):
                torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v
    read = w.nbytes + L * (k.nbytes + v.nbytes)  # weights once; every layer's cache, every sequence
    return counter.get_total_flops() / read


def check_step_intensity(fn: Callable[..., float]) -> bool:
    """Exercise 5.2: ``fn(batch, n_params, n_layers, n_heads, n_kv_heads, head_dim, context)``.

    FLOPs per byte of one whole decoding step of a batch: float16 weights of ``n_params``
    elements (a multiply and an add per weight and sequence) and each sequence's float16
    cache of ``context`` positions in every layer. Compared with the FLOPs PyTorch counts on
    meta tensors of those sizes divided by their bytes; the cases vary the batch, so that
    an answer that treats the weights or the cache like the other shows.
    """
    name = "5.2 FLOPs per byte of a step"
    cases = (  # batch, n_params, n_layers, n_heads, n_kv_heads, head_dim, context
        (1, 64 * 1000, 2, 8, 8, 16, 128),
        (4, 64 * 5000, 3, 8, 1, 16, 256),
        (16, 64 * 200, 2, 4, 2, 8, 64),
        (64, 64 * 100, 1, 8, 1, 8, 512),
    )
    for case in cases:
        B, P, L, H, H_kv, D, T = case
        want = _measured_step_intensity(*case)
        try:
            got = float(fn(B, P, L, H, H_kv, D, T))
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        if abs(got - want) <= 1e-9 * want:
            continue
        cache = 4 * L * H_kv * T * D  # float16 keys and values of one sequence
        hints = {  # the typical slips, recognised by their values
            B: "the attention's FLOPs and the cache's bytes are missing",
            H / H_kv: "the weights are missing: every step reads them too",
            B * (2 * P + 4 * L * H * T * D) / (2 * P + cache): "each sequence reads its own cache",
            (2 * P + 4 * L * H * T * D) / (2 * P + cache): "the weights are read once per step, for the whole batch",
        }
        hint = next((f" ({why})" for value, why in hints.items() if abs(got - value) <= 1e-9 * value), "")
        return report(
            name,
            False,
            f"batch={B}, n_params={P}, n_layers={L}, H={H}, H_kv={H_kv}, D={D}, T={T}: "
            f"got {got:g}, counted {want:g} FLOPs/byte{hint}",
        )
    return report(name, True, f"equals the counted FLOPs per byte, {len(cases)} settings")
