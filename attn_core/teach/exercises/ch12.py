"""Checks for the exercises of chapter 12 (the KV cache and incremental decoding)."""

from __future__ import annotations

from typing import Callable

import torch

from ...caches.kv import KVCache
from ...config import DecoderConfig
from ...model.decoder import DecoderLM
from ...model.generation import generate
from ._common import report

__all__ = ["check_token_passes", "check_cache_bytes", "check_greedy_decode"]

_DTYPES = {2: torch.float16, 4: torch.float32, 8: torch.float64}


def _tiny_model(seed: int = 120) -> DecoderLM:
    with torch.random.fork_rng(devices=[]):  # building the model must not move the notebook's RNG
        torch.manual_seed(seed)
        cfg = DecoderConfig.llama_like(vocab_size=24, n_layers=2, d_model=32, n_heads=4, n_kv_heads=2, max_len=64)
        return DecoderLM(cfg).eval()


class _CountPositions:
    """Counts the token positions a model is run on (a forward pre-hook on the model)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.positions = self.calls = 0
        self.handle = model.register_forward_pre_hook(self._hook)

    def _hook(self, module, args) -> None:
        self.positions += args[0].shape[0] * args[0].shape[1]  # idx: (B, T)
        self.calls += 1

    def close(self) -> None:
        self.handle.remove()


def check_token_passes(fn: Callable[[int, int, bool], int]) -> bool:
    """Exercise 12.1: ``fn(prompt_len, new_tokens, use_cache)`` returns how many token positions the
    model processes while :func:`attn_core.generate` produces ``new_tokens`` tokens.

    The reference is *measured*: a hook counts the positions fed to a real model.
    """
    model = _tiny_model()
    for T, N in ((1, 1), (4, 6), (10, 3), (7, 20)):
        prompt = torch.ones(1, T, dtype=torch.long)
        for use_cache in (False, True):
            counter = _CountPositions(model)
            try:
                generate(model, prompt, N, use_cache=use_cache, temperature=0)
            finally:
                counter.close()
            try:
                got = fn(T, N, use_cache)
            except Exception as e:  # a learner's bug should print, not stop the notebook
                return report("12.1 token passes", False, f"{type(e).__name__}: {e}")
            if got != counter.positions:
                return report(
                    "12.1 token passes",
                    False,
                    f"prompt_len={T}, new_tokens={N}, use_cache={use_cache}: got {got!r}, "
                    f"measured {counter.positions} positions in {counter.calls} forward passes",
                )
    return report("12.1 token passes", True, "all 8 cases match the measured counts")


def check_cache_bytes(fn: Callable[..., int]) -> bool:
    """Exercise 12.2: ``fn(n_layers, n_kv_heads, head_dim, seq_len, batch_size, bytes_per_element)``
    returns the bytes of a model's key/value caches (keys *and* values, every layer).

    The reference allocates the :class:`~attn_core.KVCache` tensors and adds up their sizes.
    """
    cases = [(2, 4, 8, 16, 1, 4), (12, 12, 64, 1024, 8, 2), (32, 8, 128, 4096, 1, 2), (3, 1, 16, 5, 2, 8)]
    for L, H_kv, D, T, B, nbytes in cases:
        args = dict(n_layers=L, n_kv_heads=H_kv, head_dim=D, seq_len=T, batch_size=B, bytes_per_element=nbytes)
        # Measured on "meta" tensors (no memory is allocated), which have real sizes.
        cache = KVCache(B, H_kv, D, T, dtype=_DTYPES[nbytes], device="meta")
        want = L * cache.nbytes()
        try:
            got = fn(**args)
        except Exception as e:
            return report("12.2 cache bytes", False, f"{type(e).__name__}: {e}")
        if got != want:
            hint = " (keys and values: two tensors per layer)" if isinstance(got, int) and got * 2 == want else ""
            return report("12.2 cache bytes", False, f"{args}: got {got!r}, measured {want}{hint}")
    return report("12.2 cache bytes", True, "4 configurations match the allocated caches")


def check_greedy_decode(fn: Callable[[torch.nn.Module, torch.Tensor, int], torch.Tensor]) -> bool:
    """Exercise 12.3: ``fn(model, prompt, n)`` decodes ``n`` tokens greedily *with* the model's caches
    (``model.make_caches``, a prefill, then one token per step) and returns prompt + new tokens.

    Compared with ``generate(model, prompt, n, use_cache=False, temperature=0)``; the
    positions fed to the model are counted to check that the cache is really used.

    Shapes:
        prompt: ``(B, T)``; fn's output: ``(B, T + n)``
    """
    model = _tiny_model(121)
    g = torch.Generator().manual_seed(122)
    prompt = torch.randint(0, 24, (2, 5), generator=g)
    n = 12
    want = generate(model, prompt, n, use_cache=False, temperature=0)
    counter = _CountPositions(model)
    try:
        with torch.no_grad():
            got = fn(model, prompt, n)
    except Exception as e:
        return report("12.3 greedy decode", False, f"{type(e).__name__}: {e}")
    finally:
        counter.close()
    if not isinstance(got, torch.Tensor) or got.shape != want.shape:
        shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
        return report("12.3 greedy decode", False, f"expected a tensor of shape {tuple(want.shape)}, got {shape}")
    if not torch.equal(got.long(), want):
        bad = (got.long() != want).nonzero()[0].tolist()
        return report("12.3 greedy decode", False, f"first different token at (row, position) = {tuple(bad)}")
    most = 2 * (5 + n)  # prefill (B·T) plus one position per step per row, B = 2
    if counter.positions > most:
        return report(
            "12.3 greedy decode",
            False,
            f"right tokens, but the model processed {counter.positions} positions: is the cache used?",
        )
    return report("12.3 greedy decode", True, f"same tokens as generate(), {counter.positions} positions processed")
