"""Checks for the exercises of chapter 5 (multi-query attention)."""

from __future__ import annotations

from typing import Callable

import torch

from ...caches.kv import KVCache
from ...layers.multihead import MultiHeadAttention
from ._common import check_counts, compare, report

__all__ = [
    "check_decode_one_by_one",
]


def check_decode_one_by_one(fn: Callable[[MultiHeadAttention, torch.Tensor], torch.Tensor]) -> bool:
    """Exercise 5.2: ``fn(layer, x)`` runs a causal layer one token at a time with the cache it makes.

    The learner builds ``layer.make_cache(B, T)``, calls the layer once per position with a
    ``(B, 1, d_model)`` slice and the cache, and concatenates the outputs. The check runs it
    on a multi-head and a multi-query layer (float64) and compares with the full pass
    ``layer(x)``; it also counts the calls, so that returning ``layer(x)`` does not pass.

    Shapes:
        x: ``(B, T, d_model)``; fn's output: ``(B, T, d_model)``
    """
    name = "5.2 decode one token at a time"
    g = torch.Generator().manual_seed(52)
    x = torch.randn(2, 6, 16, generator=g, dtype=torch.float64)  # (B, T, d_model)
    for n_kv_heads in (4, 1):
        with torch.random.fork_rng(devices=[]):  # building a layer must not move the notebook's RNG
            torch.manual_seed(52)
            layer = MultiHeadAttention(16, 4, n_kv_heads=n_kv_heads, causal=True).double()
        widths = []
        hook = layer.register_forward_pre_hook(lambda _, args, widths=widths: widths.append(args[0].shape[1]))
        try:
            with torch.no_grad():
                got = fn(layer, x)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        finally:
            hook.remove()
        if widths != [1] * x.shape[1]:
            return report(
                name, False, f"the layer was called with {widths} tokens per call: call it once per token, T = 1 each"
            )
        with torch.no_grad():
            expected = layer(x)  # (B, T, d_model)
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            err = (got.double() - expected).abs().max().item()
            if err > 1e-10:
                return report(
                    name,
                    False,
                    f"n_kv_heads={n_kv_heads}: max abs difference {err:.1e} from the full pass "
                    "(pass kv_cache= at every call, the same cache)",
                )
        elif not compare(name, got, expected, atol=1e-10):
            return False
    return report(name, True, "multi-head and multi-query layers: equal to the full pass within 1e-10")


# The exercises of the revised chapter (issue 25): predictions about a decoding step and
# about memory, each checked against a measurement (counted FLOPs, bytes of real caches).
__all__ += ["check_decode_intensity", "check_max_batch"]


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
    return report(name, True, "equal to the counted FLOPs per byte for 5 shapes (MHA, MQA, GQA, several new tokens)")


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
