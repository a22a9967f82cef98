"""Speculative decoding: a cheap guesser proposes ``k`` tokens, the target checks them in one call.

Decoding one token costs one call of the large *target* model, and a decoding call is
bound by reading the weights, not by arithmetic: checking ``k + 1`` positions costs
about what checking one does. So a cheap **draft** proposes ``k`` tokens, the target
scores them all at once, and every proposal it agrees with is a token gained. The draft
is a small model, or no model at all: **prompt lookup** copies the tokens that followed
the last n-gram where it appeared before (code, quotes and summaries repeat their input).

The acceptance rule keeps the *target's* distribution whatever the draft proposes
(Leviathan et al. 2023; Chen et al. 2023). With target probabilities ``p`` and draft
probabilities ``q`` at a position, the proposal ``x`` is kept with probability
``min(1, p(x) / q(x))``; at the first rejection the token is drawn from
``norm(max(0, p - q))`` and the round ends; if all ``k`` are kept, the target's
distribution after them gives one more token free (the *bonus*). Greedy decoding is the
case of one-hot ``p`` and ``q``: keep a proposal while it is the target's argmax, so the
output is the target's own greedy output, token for token.

After a rejection the caches hold keys and values of tokens that were not kept:
``cache.truncate`` cuts them back (:meth:`~attn_core.caches.kv.SlotCache.truncate`), so
every layer's cache must be one that can be truncated (not a sliding window's ring, a
recurrent state, a static cache or an int8 cache).

Shape legend:
    T      prompt length; ``N`` new tokens; ``L`` tokens so far
    V      vocabulary size
    k      proposals per round (``m <= k`` this round)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..caches.quantized import QuantizedKVCache
from ..checks import check_instance, check_int, check_number, check_tensor

__all__ = ["PromptLookup", "SpeculativeStats", "speculative_generate", "accept_drafts"]


class PromptLookup:
    """A draft without a model: propose the tokens that followed the last n-gram's latest earlier occurrence.

    The longest n-gram (``max_ngram`` down to ``min_ngram`` tokens) ending the sequence
    that also occurs earlier is looked up, and the up to ``k`` tokens after its most
    recent earlier occurrence are proposed. No match: no proposal (the round is one plain
    target step). The proposals are certain, ``q = 1`` for the proposed token.

    Args:
        max_ngram: Longest suffix matched.
        min_ngram: Shortest suffix matched.
    """

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        self.max_ngram, self.min_ngram = check_int("max_ngram", max_ngram), check_int("min_ngram", min_ngram)
        if min_ngram > max_ngram:
            raise ValueError(f"min_ngram must be <= max_ngram, got min_ngram={min_ngram}, max_ngram={max_ngram}")

    def propose(self, tokens: list[int], k: int) -> list[int]:
        """Up to ``k`` tokens that followed the latest earlier occurrence of the sequence's last n-gram."""
        L = len(tokens)
        for n in range(min(self.max_ngram, L - 1), self.min_ngram - 1, -1):
            tail = tokens[L - n :]
            for start in range(L - n - 1, -1, -1):  # the most recent occurrence first, not the tail itself
                if tokens[start : start + n] == tail:
                    return tokens[start + n : start + n + k]
        return []

    def __repr__(self) -> str:
        return f"PromptLookup(max_ngram={self.max_ngram}, min_ngram={self.min_ngram})"


@dataclass
class SpeculativeStats:
    """What one :func:`speculative_generate` call spent and gained.

    Attributes:
        proposed: Draft tokens proposed.
        accepted: Draft tokens the target kept.
        target_calls: Forward calls of the target (the prompt's prefill included).
        draft_calls: Forward calls of the draft model (0 for prompt lookup).
        new_tokens: Tokens generated, ``N``.
    """

    proposed: int = 0
    accepted: int = 0
    target_calls: int = 0
    draft_calls: int = 0
    new_tokens: int = 0

    @property
    def acceptance_rate(self) -> float:
        """``accepted / proposed`` (0 when nothing was proposed)."""
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def target_calls_per_token(self) -> float:
        """``target_calls / new_tokens``: plain decoding spends one call per token."""
        return self.target_calls / self.new_tokens if self.new_tokens else 0.0


def _probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """The sampling distribution of :func:`~attn_core.model.generation.sample_next` (no top-k). Shapes: ``(..., V)``"""
    return torch.softmax(logits.float() / temperature, dim=-1)


def _draw(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    """One token from ``probs`` ``(V,)``."""
    return int(torch.multinomial(probs, 1, generator=generator))


def accept_drafts(
    drafts: list[int],
    target_logits: torch.Tensor,
    draft_probs: torch.Tensor | None,
    temperature: float,
    generator: torch.Generator | None = None,
) -> tuple[int, int]:
    """The accept/reject rule: how many proposals to keep, and the token that follows them.

    Greedy (``temperature = 0``): keep proposals while each is the target's argmax; the
    next token is the target's argmax after them. Sampling: keep proposal ``x_i`` with
    probability ``min(1, p_i(x_i) / q_i(x_i))``; at the first rejection draw from
    ``norm(max(0, p_i - q_i))``; after ``m`` kept, draw the bonus from ``p_m``.

    Args:
        drafts: The ``m`` proposed tokens.
        target_logits: The target's logits at the position before each proposal and
            after the last one.
        draft_probs: The draft's distribution at each proposal; ``None`` for certain
            proposals (prompt lookup: ``q`` one-hot at the proposed token).
        temperature: ``0`` for greedy, else the sampling temperature of ``p`` and ``q``.
        generator: Source of randomness.

    Returns:
        ``(n, token)``: the first ``n`` proposals are kept, then ``token``.

    Shapes:
        target_logits: ``(m + 1, V)``; draft_probs: ``(m, V)``
    """
    if temperature == 0:
        best = target_logits.argmax(dim=-1).tolist()  # (m + 1,)
        n = next((i for i, d in enumerate(drafts) if d != best[i]), len(drafts))
        return n, best[n]
    p = _probs(target_logits, temperature)  # (m + 1, V)
    for i, d in enumerate(drafts):
        q_d = 1.0 if draft_probs is None else float(draft_probs[i, d])
        if float(torch.rand((), generator=generator)) < float(p[i, d]) / q_d:
            continue
        if draft_probs is None:  # q one-hot at d: max(0, p - q) is p without d
            residual = p[i].clone()
            residual[d] = 0.0
        else:
            residual = (p[i] - draft_probs[i].to(p.dtype)).clamp(min=0)
        # p <= q everywhere only when p = q, where a rejection has probability zero but for rounding
        return i, _draw(residual if residual.sum() > 0 else p[i], generator)
    return len(drafts), _draw(p[len(drafts)], generator)


def _caches(model: nn.Module, name: str, max_len: int) -> list:
    """The model's caches for one sequence, refused if a layer's cannot be cut back after a rejection."""
    caches = model.make_caches(1, max_len)
    for i, cache in enumerate(caches):
        if isinstance(cache, QuantizedKVCache):  # a block quantized during a check has lost its originals
            raise ValueError(f"{name}'s layer {i} keeps a QuantizedKVCache: it cannot be cut back into its int8 blocks")
        if cache is not None and not callable(getattr(cache, "truncate", None)):
            raise ValueError(
                f"{name}'s layer {i} keeps a {type(cache).__name__}, which cannot be truncated after rejected "
                f"tokens: speculative decoding needs caches with truncate (KVCache, LatentKVCache)"
            )
    return caches


def _truncate(caches: list, size: int) -> None:
    for cache in caches:
        if cache is not None:
            cache.truncate(size)


def _check_args(target, draft, idx, max_new_tokens, k, temperature, generator) -> None:
    check_instance("target", target, nn.Module)
    for name, model in (("target", target), ("draft", draft)):
        if isinstance(model, nn.Module) and not callable(getattr(model, "make_caches", None)):
            raise TypeError(f"{name} must have make_caches(batch_size, max_len), as a DecoderLM has")
    if not isinstance(draft, (nn.Module, PromptLookup)):
        raise TypeError(f"draft must be a model (nn.Module) or a PromptLookup, got {type(draft).__name__}")
    check_tensor("idx", idx, ("B", "T"), integer=True)
    if idx.shape[0] != 1 or idx.shape[1] == 0:
        raise ValueError(f"idx must have shape (1, T) with T >= 1 (one sequence), got {tuple(idx.shape)}")
    check_int("max_new_tokens", max_new_tokens)
    check_int("k", k)
    check_number("temperature", temperature, low=0.0)
    check_instance("generator", generator, torch.Generator, optional=True)
    vocab = [getattr(getattr(m, "config", None), "vocab_size", None) for m in (target, draft)]
    if None not in vocab and vocab[0] != vocab[1]:
        raise ValueError(f"draft vocabulary V={vocab[1]} differs from the target's V={vocab[0]}")
    for name, model in (("target", target), ("draft", draft)):
        max_len = getattr(getattr(model, "config", None), "max_len", None)
        if max_len is not None and idx.shape[1] + max_new_tokens - 1 > max_len:
            raise ValueError(
                f"prompt length {idx.shape[1]} + max_new_tokens {max_new_tokens} - 1 positions exceed the "
                f"{name}'s max_len={max_len}"
            )


@torch.no_grad()
def speculative_generate(
    target: nn.Module,
    draft: nn.Module | PromptLookup,
    idx: torch.Tensor,
    max_new_tokens: int,
    *,
    k: int,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, SpeculativeStats]:
    """Extend ``idx`` by ``max_new_tokens`` tokens of ``target``, ``k`` proposals of ``draft`` per target call.

    Greedy (``temperature = 0``) gives the tokens of ``generate(target, idx, N,
    temperature=0)`` whatever the draft; sampling gives tokens distributed as the
    target's (the rule of :func:`accept_drafts`). The draft model shares the target's
    vocabulary. The last round proposes fewer than ``k`` so that exactly ``N`` tokens come.

    Each round: the draft proposes ``m <= k`` tokens (a model: ``m`` calls, one token
    each; prompt lookup: none); the target scores the last token and the proposals in
    one call; the kept proposals and one more token are appended, and both models'
    caches are cut back to the tokens kept.

    Args:
        target: The model whose output is wanted: ``make_caches(1, max_len)`` and
            ``forward(idx, caches=...)`` returning logits (a :class:`~attn_core.DecoderLM`).
        draft: A smaller model of the same interface and vocabulary, or a
            :class:`PromptLookup`.
        idx: The prompt, one sequence.
        max_new_tokens: ``N``.
        k: Proposals per round.
        temperature: ``0`` for greedy decoding, else the sampling temperature.
        generator: Source of randomness for sampling.

    Returns:
        The prompt followed by the new tokens, and the :class:`SpeculativeStats`.

    Shapes:
        idx: ``(1, T)``; output: ``(1, T + N)``

    Raises:
        TypeError, ValueError: Bad arguments, naming the value; a batch of more than one
            sequence; a layer whose cache cannot be truncated; a draft of another vocabulary.
    """
    _check_args(target, draft, idx, max_new_tokens, k, temperature, generator)
    models = [m for m in (target, draft) if isinstance(m, nn.Module)]
    modes = [m.training for m in models]
    for m in models:
        m.eval()
    try:
        return _decode(target, draft, idx.long(), max_new_tokens, k, temperature, generator)
    finally:
        for m, mode in zip(models, modes):
            m.train(mode)


def _decode(target, draft, ids, max_new_tokens, k, temperature, generator) -> tuple[torch.Tensor, SpeculativeStats]:
    """The rounds of :func:`speculative_generate`; the caches hold every token but the last (never fed yet)."""
    stats = SpeculativeStats()
    total = ids.shape[1] + max_new_tokens
    t_caches = _caches(target, "target", total - 1)  # the last token is never fed
    lookup = isinstance(draft, PromptLookup)
    d_caches, d_len = (None, 0) if lookup else (_caches(draft, "draft", total - 1), 0)
    if ids.shape[1] > 1:
        target(ids[:, :-1], caches=t_caches)
        stats.target_calls += 1
    while ids.shape[1] < total:
        L = ids.shape[1]
        m = min(k, total - L - 1)  # the round's tokens: m kept at most, and one more
        if lookup:
            drafts, q = draft.propose(ids[0].tolist(), m) if m else [], None
        else:
            drafts, q, d_len = _draft(draft, d_caches, ids, d_len, m, temperature, generator, stats)
        block = torch.cat((ids[:, L - 1 :], ids.new_tensor([drafts]).view(1, -1)), dim=1)  # (1, 1 + m)
        logits = target(block, caches=t_caches)[0]  # (1 + m, V)
        stats.target_calls += 1
        if q is not None and q.shape[-1] != logits.shape[-1]:
            raise ValueError(f"draft vocabulary V={q.shape[-1]} differs from the target's V={logits.shape[-1]}")
        n, token = accept_drafts(drafts, logits, q, temperature, generator)
        stats.proposed, stats.accepted = stats.proposed + len(drafts), stats.accepted + n
        ids = torch.cat((ids, ids.new_tensor([drafts[:n] + [token]]).view(1, -1)), dim=1)  # (1, L + n + 1)
        _truncate(t_caches, ids.shape[1] - 1)  # the rejected proposals' keys and values go
        if not lookup:
            d_len = min(d_len, ids.shape[1] - 1)
            _truncate(d_caches, d_len)
    stats.new_tokens = max_new_tokens
    return ids, stats


def _draft(draft, caches, ids, d_len, m, temperature, generator, stats) -> tuple[list[int], torch.Tensor | None, int]:
    """``m`` proposals of a draft model, its distributions and its cache's new length.

    The draft's cache may lag behind (the bonus token and the last proposal were never fed
    to it): the first call feeds every token it has not seen.

    Shapes:
        ids: ``(1, L)``; returns the probabilities ``(m, V)`` (``None`` when ``m = 0``; greedy: zeros)
    """
    drafts, probs = [], []
    feed = ids[:, d_len:]  # (1, L - d_len)
    for _ in range(m):
        logits = draft(feed, caches=caches)[0, -1]  # (V,)
        stats.draft_calls += 1
        d_len += feed.shape[1]
        if temperature == 0:
            token, q = int(logits.argmax()), torch.zeros_like(logits)
        else:
            q = _probs(logits, temperature)
            token = _draw(q, generator)
        drafts.append(token)
        probs.append(q)
        feed = ids.new_tensor([[token]])
    return drafts, torch.stack(probs) if probs else None, d_len
