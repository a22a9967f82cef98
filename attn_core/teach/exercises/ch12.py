"""Checks for the exercises of chapter 12 (the KV cache and incremental decoding)."""

from __future__ import annotations

from typing import Callable

import torch
from torch.utils.flop_counter import FlopCounterMode

from ...caches.kv import KVCache
from ...ops.attention import attention
from ...positions.rope import RotaryEmbedding
from ._common import describe, report

__all__ = [
    "check_copies_history",
    "check_cached_attention",
    "check_scores_computed",
    "check_chunk_prediction",
]

# Exercise 12.1: caches that look alike from outside (one class name, one signature,
# ``update(k, v) -> (k_all, v_all)`` with ``k, v`` of shape ``(1, 2, 1, 8)``), some of which
# copy their whole history at every append. Each keeps room for ``_ROOM`` positions.
_H, _D, _ROOM = 2, 8, 2048


def _storage() -> torch.Tensor:
    return torch.zeros(1, _H, _ROOM, _D)  # (B, H, max_len, D)


class _Slot:
    """Writes one position into preallocated storage, returns views (KVCache)."""

    def __init__(self) -> None:
        self.cache = KVCache(batch_size=1, n_kv_heads=_H, head_dim=_D, max_len=_ROOM)

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.cache.update(k, v)


class _Counted(_Slot):
    """A slot cache that also writes its count into a device tensor at every append."""

    def __init__(self) -> None:
        super().__init__()
        self.count = torch.zeros(1, dtype=torch.long)

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.count.add_(k.shape[2])  # bookkeeping: a fixed few bytes per append
        return super().update(k, v)


class _Cat:
    """Grows by ``torch.cat``: a new tensor holding the history and the new position."""

    def __init__(self) -> None:
        self.k = self.v = torch.zeros(1, _H, 0, _D)

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.k, self.v = torch.cat([self.k, k], dim=2), torch.cat([self.v, v], dim=2)
        return self.k, self.v


class _Clone(_Slot):
    """Preallocated storage at one address, but returns copies of the history."""

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k_all, v_all = super().update(k, v)
        return k_all.clone(), v_all.clone()


class _Growing:
    """Grows its storage when full (copying it once), returns views."""

    first = 16  # the room it starts with

    def __init__(self) -> None:
        self.k, self.v = torch.zeros(2, 1, _H, self.first, _D).unbind(0)
        self.size = 0

    def more(self, room: int) -> int:
        """The slots added when the storage is full."""
        return room  # doubling: amortised constant

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.size == self.k.shape[2]:  # full: more room, the history copied once
            extra = self.more(self.size)
            self.k = torch.cat([self.k, self.k.new_zeros(1, _H, extra, _D)], dim=2)
            self.v = torch.cat([self.v, self.v.new_zeros(1, _H, extra, _D)], dim=2)
        self.k[:, :, self.size : self.size + 1].copy_(k)
        self.v[:, :, self.size : self.size + 1].copy_(v)
        self.size += 1
        return self.k[:, :, : self.size], self.v[:, :, : self.size]


class _DoublingLate(_Growing):
    """Doubles from 120 slots: copies at 120, 240, 480, 960, 1920 appends."""

    first = 120


class _Chunked(_Growing):
    """Grows by 64 slots when full: a copy every 64 appends, so quadratic in all."""

    first = 64

    def more(self, room: int) -> int:
        return 64


class _Spill(_Cat):
    """Preallocated for 256 positions, then grows by ``torch.cat`` (copies beyond 256)."""

    def __init__(self) -> None:
        super().__init__()
        self.small = _Slot()

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.small.cache.size < 256:
            self.k, self.v = self.small.update(k, v)
            return self.k, self.v
        return super().update(k, v)


def copies_candidates() -> list[tuple[type, bool, str]]:
    """Exercise 12.1's candidates ``(cache class, copies, what)`` in a fixed mixed order."""
    return [
        (_Growing, False, "doubles its room when full, from 16"),
        (_Cat, True, "grows by torch.cat"),
        (_Counted, False, "writes 1 position + a counter"),
        (_Chunked, True, "grows by 64 slots when full"),
        (_Spill, True, "copies past 256 positions"),
        (_DoublingLate, False, "doubles its room when full, from 120"),
        (_Slot, False, "writes 1 position per append"),
        (_Clone, True, "returns copies of its history"),
    ]


def _named(cls: type) -> Callable[[], object]:
    """A factory whose caches all look alike: one class name, one docstring."""

    def make_cache() -> object:
        cache = cls()
        cache.__class__ = type("Cache", (cls,), {"__doc__": "A key/value cache."})
        return cache

    return make_cache


def check_copies_history(fn: Callable[[Callable[[], object]], bool]) -> bool:
    """Exercise 12.1: ``fn(make_cache)`` says whether a cache copies its history at every append.

    ``make_cache()`` returns a new, empty cache with ``update(k, v) -> (k_all, v_all)``
    (``k, v``: ``(1, 2, 1, 8)`` float32; room for 2,048 positions). "Copies its history"
    means that the bytes an append writes grow with the positions already cached, over a
    long run. Eight candidates: a slot cache, one with a few bytes of bookkeeping per append,
    two that double their storage when full (from 16 and from 120 slots: a copy now and
    then, constant on average), ``torch.cat``, one that grows by 64 slots when full (a copy
    every 64 appends: quadratic in all), one preallocated for 256 positions that then grows
    by ``torch.cat``, and one that stores in place but returns copies. A test that looks at
    one step, at short histories only, at exact byte counts, or at two windows of one run
    (where the doublings fall decides it) gets one of them wrong.

    Shapes:
        k, v: ``(1, 2, 1, 8)``; the returned keys and values: ``(1, 2, T, 8)``
    """
    name = "12.1 copies history"
    candidates = copies_candidates()
    for i, (cls, copies, what) in enumerate(candidates, start=1):
        try:
            with torch.random.fork_rng(devices=[]):  # the learner's draws leave the notebook's alone
                got = fn(_named(cls))
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"cache {i} raised {type(e).__name__}: {e}")
        if not isinstance(got, bool):
            return report(name, False, f"cache {i}: returned {describe(got)}, not a bool")
        if got != copies:
            return report(name, False, f"cache {i}/{len(candidates)}: said {got}, but it {what}")
    n = sum(copies for _, copies, _ in candidates)
    return report(name, True, f"right on {len(candidates)} caches ({n} copy, {len(candidates) - n} do not)")


# Exercise 12.2: the cases a cached attention call must match the full pass on: lists of
# chunk lengths fed one call after another (a prefill, then decoding steps or more chunks).
_CHUNKS = ([1, 1, 1, 1, 1, 1], [5], [5, 1, 1, 1], [3, 4, 1, 2])


def check_cached_attention(fn: Callable[..., torch.Tensor]) -> bool:
    """Exercise 12.2: ``fn(q, k, v, cache, rope)``, one call of a cached decoding loop.

    ``q, k, v`` are the new tokens' queries, keys and values before RoPE, ``cache`` the
    :class:`~attn_core.KVCache` of the tokens before them, ``rope`` a
    :class:`~attn_core.RotaryEmbedding`; ``fn`` returns the new tokens' attention outputs.
    Each case feeds one sequence in chunks (one token at a time; a prefill alone; a
    prefill then single tokens; chunks of several lengths) and compares every output with
    the full causal pass in float64.

    Shapes:
        q, k, v: ``(B, H, T_new, D)``; fn's output: ``(B, H, T_new, D)``
    """
    name = "12.2 cached attention"
    g = torch.Generator().manual_seed(1201)
    rope = RotaryEmbedding(8)
    wrong = []  # the feeding orders that differ from the full pass
    for chunks in _CHUNKS:
        T = sum(chunks)
        q, k, v = torch.randn(3, 2, 2, T, 8, generator=g, dtype=torch.float64).unbind(0)
        full = attention(rope(q), rope(k), v, is_causal=True)  # (B, H, T, D)
        cache = KVCache(batch_size=2, n_kv_heads=2, head_dim=8, max_len=T, dtype=torch.float64)
        start = 0
        for call, n in enumerate(chunks, start=1):
            new = slice(start, start + n)
            try:
                with torch.no_grad():
                    got = fn(q[:, :, new], k[:, :, new], v[:, :, new], cache, rope)
            except Exception as e:  # a learner's bug should print, not stop the notebook
                return report(name, False, f"chunks {chunks}: {type(e).__name__}: {e}")
            want = full[:, :, new]
            if not isinstance(got, torch.Tensor) or got.shape != want.shape:
                return report(name, False, f"chunks {chunks}: {describe(got)}, not {tuple(want.shape)}")
            err = (got.double() - want).abs().max().item()
            if not err <= 1e-9:
                wrong.append(call)
                break
            start += n
    if wrong:
        # Which orders fail is the exercise's question: the verdict says how many, and
        # on which call of a failing order, not which order.
        where = "at call 1" if wrong == [1] * len(wrong) else "past call 1"
        return report(name, False, f"{len(wrong)} of {len(_CHUNKS)} feeding orders != the full pass, {where}")
    return report(name, True, f"equals the full pass in {len(_CHUNKS)} feeding orders (float64)")


def measured_scores(prompt_len: int, new_tokens: int, chunk: int) -> int:
    """q·k scores per head that cached decoding computes, counted by PyTorch's FLOP counter.

    The prompt goes in chunks of ``chunk`` tokens, then ``new_tokens - 1`` single tokens
    (the last new token is never fed back); every call attends over the cache (on ``meta``
    tensors: no memory, no time). One call over ``T_q`` queries and ``T_k`` keys counts
    ``4·D·T_q·T_k`` FLOPs per head (the scores and the weighted sum of the values).
    """
    H, D = 2, 8
    cache = KVCache(1, H, D, prompt_len + new_tokens, device="meta")
    feeds = [min(chunk, prompt_len - s) for s in range(0, prompt_len, chunk)] + [1] * (new_tokens - 1)
    with FlopCounterMode(display=False) as counter:
        for n in feeds:
            q = k = v = torch.empty(1, H, n, D, device="meta")  # (B, H, T_new, D)
            attention(q, *cache.update(k, v), is_causal=True)
    return counter.get_total_flops() // (4 * H * D)


def check_scores_computed(fn: Callable[[int, int, int], int]) -> bool:
    """Exercise 12.3: ``fn(prompt_len, new_tokens, chunk)`` is the number of q·k scores per
    head and layer computed while a prompt is prefilled in chunks of ``chunk`` tokens and
    ``new_tokens`` tokens are generated, by an attention that computes every score of its
    rectangle (the masked ones too) and skips none.

    The reference is *measured* (:func:`measured_scores`, PyTorch's FLOP counter on the
    attention calls), on cases where the last chunk is shorter, where one chunk holds the
    whole prompt, and where only one token is generated.
    """
    name = "12.3 scores computed"
    cases = ((12, 5, 4), (10, 4, 4), (7, 3, 16), (9, 1, 2), (6, 6, 1), (16, 8, 16))
    for P, N, C in cases:
        want = measured_scores(P, N, C)
        try:
            got = fn(P, N, C)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        if not isinstance(got, int) or isinstance(got, bool) or got != want:
            T = P + N - 1  # positions fed
            causal = T * (T + 1) // 2
            hint = ""
            if got == causal:
                hint = "; masked scores count too"
            elif isinstance(got, int) and got - want == P + N:
                hint = "; the last token isn't fed"
            elif isinstance(got, int) and got - want == P:
                hint = "; the first new token comes out of the prompt's last call"
            elif got == want:
                hint = "; a count is an int"
            elif isinstance(got, int) and got > want and P % C:
                hint = "; is the last chunk full?"
            return report(name, False, f"P={P}, N={N}, C={C}: {got!r}, not {want}{hint}")
    return report(name, True, f"{len(cases)} cases match PyTorch's FLOP counter")


# Exercise 12.3, the prediction: chunks of 512 against one prefill, for a 4096-token prompt.
_PREDICTION_CASE = (4096, 1, 512)  # prompt_len, new_tokens, chunk


def check_chunk_prediction(prediction: object) -> bool:
    """Exercise 12.3, the prediction: the number of scores computed by a prefill of 4096
    tokens in chunks of 512, as a fraction of those of one prefill (``new_tokens = 1``),
    written before ``scores_computed`` is run.

    The reference is measured (:func:`measured_scores`, PyTorch's FLOP counter); a
    prediction within 0.005 of it is right.
    """
    name = "12.3 prediction"
    P, N, C = _PREDICTION_CASE
    want = measured_scores(P, N, C) / measured_scores(P, N, P)
    if prediction is None:
        return report(name, False, "no prediction yet (None): write it before running")
    if isinstance(prediction, bool) or not isinstance(prediction, (int, float)):
        return report(name, False, f"expected a number (chunked / one prefill), got {describe(prediction)}")
    got = float(prediction)
    if abs(got - want) <= 0.005:
        return report(name, True, f"{got:.4g} of one prefill's scores (the FLOP counter: {want:.4f})")
    if got >= 1:
        hint = "a chunk computes a smaller rectangle than one prefill; which computes fewer?"
    elif abs(got - 0.5) <= 0.005:
        hint = "one half is the unmasked triangle; a chunk also computes its own masked scores"
    else:
        hint = "count each chunk's rectangle, C queries by all the keys cached so far"
    return report(name, False, f"{got:.4g} is off by more than 0.005: {hint}")
