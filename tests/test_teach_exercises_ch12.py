"""attn_core.teach.exercises.ch12: the right and wrong answers of exercises 12.1-12.3 (ANSWERS, held to
the standard by tests/test_teach_exercises_standard.py)."""

from __future__ import annotations

import torch

from attn_core import generate
from attn_core.teach.exercises.ch12 import check_cache_bytes, check_greedy_decode, check_token_passes


def _token_passes(prompt_len, new_tokens, use_cache):
    if use_cache:
        return prompt_len + (new_tokens - 1)  # the prefill, then one position per step
    return sum(range(prompt_len, prompt_len + new_tokens))  # T + (T+1) + ... + (T+N-1)


def _cache_bytes(n_layers, n_kv_heads, head_dim, seq_len, batch_size, bytes_per_element):
    return 2 * n_layers * batch_size * n_kv_heads * seq_len * head_dim * bytes_per_element  # keys and values


def _greedy(model, prompt, n, *, position=-1):
    caches = model.make_caches(prompt.shape[0], prompt.shape[1] + n)
    logits = model(prompt, caches=caches)  # prefill: (B, T, V)
    tokens = [prompt]
    for step in range(n):
        nxt = logits[:, position].argmax(dim=-1, keepdim=True)  # (B, 1)
        tokens.append(nxt)
        if step + 1 < n:
            logits = model(nxt, caches=caches)  # (B, 1, V)
    return torch.cat(tokens, dim=1)  # (B, T + n)


ANSWERS = {
    check_token_passes: (
        [_token_passes],
        [
            (lambda T, N, use_cache: T + N if use_cache else _token_passes(T, N, False), "measured"),  # a step too many
            (lambda T, N, use_cache: T + N - 1 if use_cache else N * (T + N), "measured"),  # the longest pass N times
            (lambda T, N, use_cache: N if use_cache else _token_passes(T, N, False), "measured"),  # no prefill
        ],
    ),
    check_cache_bytes: (
        [_cache_bytes],
        [
            (lambda **kw: _cache_bytes(**kw) // 2, "keys and values"),
            (lambda **kw: _cache_bytes(**kw) // kw["batch_size"], "measured"),  # one sequence only
            (lambda **kw: _cache_bytes(**kw) // kw["n_layers"], "measured"),  # one layer only
        ],
    ),
    check_greedy_decode: (
        [_greedy],
        [
            (lambda model, prompt, n: generate(model, prompt, n, use_cache=False, temperature=0), "cache used?"),
            (lambda model, prompt, n: _greedy(model, prompt, n, position=0), "first different token"),
            (lambda model, prompt, n: _greedy(model, prompt, n)[:, prompt.shape[1] :], "shape"),  # no prompt
        ],
    ),
}
