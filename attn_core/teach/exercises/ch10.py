"""Checks for the exercises of chapter 10 (the transformer block)."""

from __future__ import annotations

from typing import Callable

import torch

from ...config import DecoderConfig, Positions
from ...model.params import parameter_count
from ._common import report

__all__ = ["check_parameter_formula"]


def check_parameter_formula(fn: Callable[[DecoderConfig], int]) -> bool:
    """Exercise 10.3: ``fn(config)`` counts the parameters of ``DecoderLM(config)`` for standard MHA/GQA blocks.

    Covers tied and untied heads, learned and rotary positions, GELU and SwiGLU,
    LayerNorm and RMSNorm, biases, grouped key/value heads and post-norm (an embedding norm instead of a final one).
    """
    configs = [
        DecoderConfig.gpt2_like(),
        DecoderConfig.llama_like(),
        DecoderConfig.gpt2_like(vocab_size=50257, n_layers=12, d_model=768, n_heads=12, max_len=1024),
        DecoderConfig.llama_like(n_layers=3, d_model=96, n_heads=6, n_kv_heads=3, d_ff=200, tie_weights=True),
        DecoderConfig.gpt2_like(norm_position="post", bias=False, positions=Positions(positional="rope")),
    ]
    for c in configs:
        try:
            got = fn(c)
        except Exception as e:
            return report("10.3 parameter count", False, f"{type(e).__name__}: {e}")
        if got != parameter_count(c):
            return report("10.3 parameter count", False, f"got {got!r}, expected {parameter_count(c):,} for {c}")
    return report("10.3 parameter count", True, f"{len(configs)} configurations, GPT-2 small = 124,439,808")


# ---- issue 25: exercises that need a derivation or a test design ----

__all__ += ["check_uniform_previous_score", "check_causality_test"]


def _uniform_previous_score(T: int) -> float:
    # Query t (t = 1 .. T-1) spreads 1/(t+1) over its t+1 keys; the score averages the
    # weight on key t-1 over those T-1 queries.
    return sum(1.0 / (t + 1) for t in range(1, T)) / (T - 1)


def check_uniform_previous_score(fn: Callable[[int], float]) -> bool:
    """Exercise 10.1: ``fn(T)`` is the previous-token score of a head that attends evenly.

    A causal head at random initialisation spreads its weight about evenly over the
    keys it may see. :func:`attn_core.teach.heads.previous_token_score` averages
    ``w[t, t-1]`` over the queries ``t = 1 .. T-1``; the right answer is
    ``(1/(T-1)) * sum_{t=1}^{T-1} 1/(t+1)`` (0.124 at ``T = 23``, the random-init row of
    the chapter's table).
    """
    name = "10.1 previous-token score of an even head"
    cases = (2, 3, 5, 23, 64, 128)
    for T in cases:
        try:
            got = float(fn(T))
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        want = _uniform_previous_score(T)
        if not abs(got - want) <= 1e-9:
            hint = ""
            if abs(got - 1 / T) <= 1e-9:
                hint = " (1/T is the weight of the last query only)"
            elif abs(got - sum(1.0 / t for t in range(1, T)) / (T - 1)) <= 1e-9:
                hint = " (query t sees t + 1 keys: itself too)"
            return report(name, False, f"fn({T}) = {got:.6f}, expected {want:.6f}{hint}")
    return report(name, True, f"{len(cases)} lengths, fn(23) = {_uniform_previous_score(23):.3f}")


class _MaskedLM(torch.nn.Module):
    """A one-layer toy language model whose attention obeys a given boolean mask.

    ``allowed(T)`` returns the ``(T, T)`` mask (True = may attend). Every position's
    logits depend on the tokens it may attend to, so a mask that lets query ``t`` see a
    later key makes ``t``'s logits move when that key's token changes.

    Shapes:
        idx: ``(B, T)`` token ids; output: ``(B, T, V)`` logits
    """

    def __init__(self, allowed: Callable[[int], torch.Tensor], vocab_size: int = 16) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(7)
        self.allowed = allowed
        self.emb = torch.nn.Parameter(torch.randn(vocab_size, 8, generator=g, dtype=torch.float64))
        self.out = torch.nn.Parameter(torch.randn(8, vocab_size, generator=g, dtype=torch.float64))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        from ...ops.attention import attention

        x = self.emb[idx]  # (B, T, 8)
        T = idx.shape[1]
        y = attention(x[:, None], x[:, None], x[:, None], mask=self.allowed(T))[:, 0]  # (B, T, 8)
        return (x + y) @ self.out  # (B, T, V)


def _ones(T: int) -> torch.Tensor:
    return torch.ones(T, T, dtype=torch.bool)


def _causal_models() -> dict[str, tuple[torch.nn.Module, bool]]:
    # name -> (model, is it causal?)
    return {
        "causal": (_MaskedLM(lambda T: _ones(T).tril()), True),
        # a prefix LM (chapter 4): the first 4 tokens see each other; no query sees the last
        # key through it, so a probe that changes only the last token misses it
        "prefix LM": (
            _MaskedLM(lambda T: _ones(T).tril() | (torch.arange(T)[:, None] < 4) & (torch.arange(T) < 4)),
            False,
        ),
        # query t also sees t + 2 (but not t + 1): a probe that changes only t + 1 misses it
        "sees t + 2": (_MaskedLM(lambda T: _ones(T).tril() | _ones(T).tril(2).triu(2)), False),
        # the first query sees the last key: a probe that changes only one position
        # after t, or looks only at the last positions, misses it
        "first sees last": (
            _MaskedLM(lambda T: _ones(T).tril() | (torch.arange(T)[:, None] == 0) & (torch.arange(T) == T - 1)),
            False,
        ),
        # sliding window of 3: causal, though it sees fewer keys
        "causal window": (_MaskedLM(lambda T: _ones(T).tril() & _ones(T).triu(-2)), True),
    }


def check_causality_test(fn: Callable[..., bool]) -> bool:
    """Exercise 10.2: ``fn(model, T, vocab_size)`` says whether a language model is causal.

    ``model(idx)`` maps ``(B, T)`` token ids to ``(B, T, V)`` logits. ``fn`` must return
    True exactly when no position's logits depend on a later token. The check runs it
    on five toy models: a causal one, a prefix LM (its first 4 tokens see each other: no
    query sees the last key through it), one whose query ``t`` sees ``t + 2`` but not
    ``t + 1``, one whose first query sees the last key, and a causal sliding window
    (causal, though it does not see every earlier key).
    """
    name = "10.2 causality test"
    wrong = []
    for label, (model, causal) in _causal_models().items():
        try:
            with torch.no_grad():
                got = fn(model, 10, 16)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        if not isinstance(got, bool):
            return report(name, False, f"fn must return a bool, got {type(got).__name__}")
        if got != causal:
            wrong.append(f"{label!r}: said {'causal' if got else 'not causal'}")
    if wrong:
        return report(name, False, "; ".join(wrong))
    return report(name, True, "5 models, 2 causal and 3 with a leak, each told apart")
