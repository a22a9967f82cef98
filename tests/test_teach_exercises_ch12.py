"""attn_core.teach.exercises.ch12: the right and wrong answers of exercises 12.1-12.3 (ANSWERS, held to
the standard by tests/test_teach_exercises_standard.py)."""

from __future__ import annotations

import torch

from attn_core import attention
from attn_core.teach.exercises.ch12 import (
    check_cached_attention,
    check_chunk_prediction,
    check_copies_history,
    check_scores_computed,
    copies_candidates,
    measured_scores,
)
from attn_core.teach.measure import memory_traffic

_K = torch.zeros(1, 2, 1, 8)  # (B, H, 1, D): one new position


def _written(make_cache, steps):
    cache = make_cache()
    return [memory_traffic(cache.update, _K, _K).written for _ in range(steps)]


def _copies(make_cache, n=1024):  # mean bytes per append over 2n appends against over n
    w = _written(make_cache, 2 * n)
    return sum(w) / (2 * n) > 1.5 * sum(w[:n]) / n


def _copies_windows(make_cache, n=1024, window=256):  # the last window against the first
    w = _written(make_cache, n)
    return sum(w[-window:]) > 2 * sum(w[:window])


def _copies_one_step(make_cache, n=1000):  # the last append against the first
    w = _written(make_cache, n)
    return w[-1] > 2 * w[0]


def _copies_from_pointers(make_cache):  # does the returned storage ever move?
    cache, seen = make_cache(), set()
    for _ in range(1024):
        seen.add(cache.update(_K, _K)[0].data_ptr())
    return len(seen) > 1


def _copies_short(make_cache):  # compares step 1 with step 100 only
    w = _written(make_cache, 101)
    return w[100] > 2 * w[1]


def _copies_exact(make_cache):  # anything but one position per append counts as a copy
    return any(w != 2 * _K.nbytes for w in _written(make_cache, 64))


def _cached_attention(q, k, v, cache, rope, *, bug=None):
    T_new = q.shape[-2]
    pos = cache.size
    if bug == "shown":
        pos = cache.size + T_new - 1  # the page's: the newest token's position
    elif bug == "zero":
        pos = 0
    elif bug == "shifted":  # every position one more: RoPE sees only differences (right)
        pos = cache.size + 1
    elif bug == "after update":  # the count read once the new tokens are in
        pos = cache.size + T_new
    q_pos = cache.size + T_new - 1 if bug == "query last" else pos
    q, k = rope(q, offset=q_pos), rope(k, offset=pos)
    k_all, v_all = cache.update(k, v)
    return attention(q, k_all, v_all, is_causal=True)


def _scores(prompt_len, new_tokens, chunk, *, causal=False, all_fed=False, full_chunks=False):
    total, cached = 0, 0
    feeds = [min(chunk, prompt_len - s) for s in range(0, prompt_len, chunk)]
    if full_chunks:
        feeds = [chunk] * len(feeds)
    feeds += [1] * (new_tokens if all_fed else new_tokens - 1)
    for n in feeds:
        cached += n
        total += n * (cached - n) + (n * (n + 1) // 2 if causal else n * n)
    return total


def test_candidates_are_what_they_say():
    for cls, copies, what in copies_candidates():
        assert _copies(lambda cls=cls: cls()) == copies, what


def test_measured_scores_match_the_dense_formula():
    for P, N, C in ((12, 5, 4), (10, 4, 4), (7, 3, 16), (1, 1, 1)):
        assert measured_scores(P, N, C) == _scores(P, N, C)


ANSWERS = {
    check_copies_history: (
        [_copies, lambda m: _copies(m, n=1000), lambda m: _copies(m, n=700)],
        [
            (_copies_from_pointers, "doubles its room"),
            (_copies_short, "grows by 64"),
            (_copies_exact, "doubles its room"),
            (_copies_windows, "from 120"),
            (lambda m: _copies_windows(m, n=600, window=100), "from 16"),
            (_copies_one_step, "grows by 64"),
            (lambda m: _copies_one_step(m, n=2000), "grows by 64"),
            (lambda make_cache: True, "said True"),
        ],
    ),
    check_cached_attention: (
        [_cached_attention, lambda *a: _cached_attention(*a, bug="shifted")],
        [
            (lambda *a: _cached_attention(*a, bug="shown"), "2 of 4 feeding orders"),
            (lambda *a: _cached_attention(*a, bug="zero"), "!= the full pass"),
            (lambda *a: _cached_attention(*a, bug="after update"), "past call 1"),
            (lambda *a: _cached_attention(*a, bug="query last"), "at call 1"),
        ],
    ),
    check_scores_computed: (
        [_scores],
        [
            (lambda P, N, C: (P + N - 1) * (P + N) // 2, "masked scores count"),
            (lambda P, N, C: _scores(P, N, C, all_fed=True), "isn't fed"),
            (lambda P, N, C: _scores(P, N, C) + P, "prompt's last call"),
            (lambda P, N, C: _scores(P, N, C, full_chunks=True), "last chunk full"),
            (lambda P, N, C: float(_scores(P, N, C)), "an int"),
        ],
    ),
    check_chunk_prediction: (
        [0.5625, 9 / 16, 0.56],
        [
            (None, "no prediction yet"),
            (0.5, "unmasked triangle"),
            (1 / 0.5625, "which computes fewer"),
            (0.6, "off by more than 0.005"),
            ("0.5625", "expected a number"),
        ],
    ),
}
