"""Checks for the exercises of chapter 10 (the transformer block)."""

from __future__ import annotations

import functools
from typing import Callable

import torch

from ...config import DecoderConfig
from ...model.decoder import DecoderLM
from ._common import report

__all__ = ["check_parameter_shares", "check_causality_test", "check_attention_crossover"]

# The released shapes of exercise 10.1, by preset name.
_SHARE_PRESETS = ("qwen3_0_6b", "llama3_8b")
_SHARE_PARTS = ("embedding", "mlp")
_SHARE_TOLERANCE = 0.05  # a prediction, not a count: to the nearest 5 points


@functools.cache
def _parameter_sizes(preset: str) -> dict[str, int]:
    """The parameters of ``DecoderConfig.<preset>()``'s model by part, counted from the module.

    Built on the ``meta`` device (shapes only, no memory). A tied matrix is one
    ``Parameter`` and is counted once (``named_parameters`` skips the duplicate).
    """
    with torch.device("meta"):
        model = DecoderLM(getattr(DecoderConfig, preset)())
    sizes = {"embedding": 0, "mlp": 0, "blocks": 0, "all": 0, "vocab_matrix": 0}
    for name, p in model.named_parameters():
        sizes["all"] += p.numel()
        if name.startswith(("tok_emb.", "lm_head.")):
            sizes["embedding"] += p.numel()
            sizes["vocab_matrix"] = p.numel()
        elif name.startswith("blocks."):
            sizes["blocks"] += p.numel()
            if ".mlp." in name:
                sizes["mlp"] += p.numel()
    return sizes


def _share_mistakes(preset: str, part: str) -> dict[str, float]:
    """The shares the typical mistakes give, each named in the exercise's terms."""
    s = _parameter_sizes(preset)
    tied = s["embedding"] == s["vocab_matrix"]
    if part == "embedding":
        other = s["embedding"] + s["vocab_matrix"] if tied else s["vocab_matrix"]
        why = "a tied matrix is one Parameter, counted once" if tied else "an untied model has two V × d matrices"
        return {why: other / s["all"]}
    return {
        "that is a share of the blocks; the question asks for a share of the whole model": s["mlp"] / s["blocks"],
        "the MLP is not exactly ⅔ of every model: its width and the attention's vary": 2 / 3,
    }


def check_parameter_shares(predicted: dict) -> bool:
    """Exercise 10.1, the prediction: the embedding and MLP shares of two released shapes.

    ``predicted`` maps each of ``"qwen3_0_6b"`` and ``"llama3_8b"`` (the presets of
    :class:`~attn_core.config.DecoderConfig`) to a dict with the keys ``"embedding"``
    (the token embedding and the output layer, a tied matrix once) and ``"mlp"`` (every
    block's MLP), each a fraction of all the model's parameters. The check builds each
    model on the ``meta`` device and counts its parameters; a prediction passes within
    0.05 (five percentage points: an estimate from the config's fields, made before
    counting, is enough; the slips it names are further off).
    """
    name = "10.1 parameter shares"
    if not isinstance(predicted, dict) or set(predicted) != set(_SHARE_PRESETS):
        return report(name, False, f"give a dict keyed {'/'.join(map(repr, _SHARE_PRESETS))}, not {predicted!r}")
    for preset in _SHARE_PRESETS:
        parts = predicted[preset]
        if not isinstance(parts, dict) or set(parts) != set(_SHARE_PARTS):
            return report(name, False, f"{preset}: a dict with the keys {list(_SHARE_PARTS)}, not {parts!r}")
        for part in _SHARE_PARTS:
            try:
                got = float(parts[part])
            except (TypeError, ValueError):
                return report(name, False, f"{preset} {part}: a number, not {parts[part]!r}")
            sizes = _parameter_sizes(preset)
            want = sizes[part] / sizes["all"]
            if abs(got - want) <= _SHARE_TOLERANCE:
                continue
            for why, wrong in _share_mistakes(preset, part).items():
                if abs(got - wrong) <= _SHARE_TOLERANCE:
                    return report(name, False, f"{preset} {part} = {got:.3f}: {why}")
            side = "too high" if got > want else "too low"
            return report(name, False, f"{preset} {part} = {got:.3f} is {side} (tolerance ±{_SHARE_TOLERANCE})")
    return report(name, True, f"{len(_SHARE_PRESETS)} models, both shares within ±{_SHARE_TOLERANCE}")


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
        # query 5 sees key 7, and query 0 nothing later: a probe that changes the later
        # tokens but compares query 0's logits only misses it
        "query 5 sees key 7": (
            _MaskedLM(lambda T: _ones(T).tril() | (torch.arange(T)[:, None] == 5) & (torch.arange(T) == 7)),
            False,
        ),
        # sliding window of 3: causal, though it sees fewer keys
        "causal window": (_MaskedLM(lambda T: _ones(T).tril() & _ones(T).triu(-2)), True),
    }


def check_causality_test(fn: Callable[..., bool]) -> bool:
    """Exercise 10.2: ``fn(model, T, vocab_size)`` says whether a language model is causal.

    ``model(idx)`` maps ``(B, T)`` token ids to ``(B, T, V)`` logits. ``fn`` must return
    True exactly when no position's logits depend on a later token. The check runs it
    on six toy models: a causal one, a prefix LM (its first 4 tokens see each other: no
    query sees the last key through it), one whose query ``t`` sees ``t + 2`` but not
    ``t + 1``, one whose first query sees the last key, one whose query 5 sees key 7
    (query 0 sees nothing later), and a causal sliding window (causal, though it does
    not see every earlier key).
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
    models = _causal_models()
    leaky = sum(not causal for _, causal in models.values())
    return report(
        name, True, f"{len(models)} models, {len(models) - leaky} causal and {leaky} with a leak, each told apart"
    )


# Exercise 10.3: the configurations, by the name a verdict gives them.
_CROSSOVER_CASES = {
    "GPT-2 small": lambda: DecoderConfig.gpt2_like(
        vocab_size=50257, n_layers=12, d_model=768, n_heads=12, max_len=1024
    ),
    "Qwen3-0.6B": DecoderConfig.qwen3_0_6b,
    "Llama 3 8B": DecoderConfig.llama3_8b,
    "a small untied GQA model": lambda: DecoderConfig.llama_like(vocab_size=4096, n_layers=2, d_model=64, n_heads=4),
}
_CROSSOVER_T = 64  # the length the FLOPs are counted at: both parts scale exactly with it
_CROSSOVER_TOLERANCE = 0.01


@functools.cache
def _forward_flops(case: str) -> tuple[int, int]:
    """One sequence's forward FLOPs at ``_CROSSOVER_T`` tokens: (matrix multiplies by weights, the rest).

    Counted by ``torch.utils.flop_counter`` on the ``meta`` device (shapes only). The
    weights' products are the ``mm``/``addmm`` calls of the linear layers; everything
    else counted is attention's two products, ``QKᵀ`` and ``PV``.
    """
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        model = DecoderLM(_CROSSOVER_CASES[case]())
        idx = torch.zeros(1, _CROSSOVER_T, dtype=torch.long)
        counter = FlopCounterMode(display=False)
        with counter, torch.no_grad():
            model(idx)
    counts = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    weights = counts.get("aten.mm", 0) + counts.get("aten.addmm", 0)
    return weights, counter.get_total_flops() - weights


def _crossover_mistakes(case: str) -> dict[str, float]:
    """The crossover lengths the typical mistakes give, each named in the exercise's terms."""
    c = _CROSSOVER_CASES[case]()
    weights, products = _forward_flops(case)
    T_star = _CROSSOVER_T * weights / products
    matmul = weights / (2 * _CROSSOVER_T)  # the weights used in matrix multiplies, per token
    attn_width = c.n_layers * c.n_heads * c.resolved_head_dim
    vd = c.vocab_size * c.d_model
    lookup = (0 if c.tie_weights else vd) + (c.max_len * c.d_model if c.positions.positional == "learned" else 0)
    mistakes = {}
    if c.n_heads * c.resolved_head_dim != c.d_model:  # first: the causal half gives 2x too
        mistakes["queries and keys are n_heads × head_dim wide here, not d_model"] = (
            T_star * attn_width / (c.n_layers * c.d_model)
        )
    mistakes["the causal half only; the kernel computes all T × T scores"] = 2 * T_star
    mistakes["the output layer left out; it multiplies every token's vector"] = T_star * (matmul - vd) / matmul
    if lookup:
        mistakes["an embedding lookup (token or position) is a copy, not a multiply"] = (
            T_star * (matmul + lookup) / matmul
        )
    return mistakes


def check_attention_crossover(fn: Callable[[DecoderConfig], float]) -> bool:
    """Exercise 10.3: ``fn(config)`` is the length ``T`` at which attention's products cost what the weights cost.

    At ``T`` tokens a forward pass spends FLOPs in the matrix multiplies by the weights
    (every linear layer, the output layer included) and in attention's two products
    (``QKᵀ`` and the weights times ``V``). ``fn(config)`` must return the ``T`` at which
    the two are equal. The check counts both with ``torch.utils.flop_counter`` on the
    ``meta`` device for GPT-2 small (tied, learned positions, biases), Qwen3-0.6B
    (heads wider than ``d_model / n_heads``, grouped keys and values, tied), Llama 3 8B
    (untied, grouped) and a small untied model with a large vocabulary, and passes an
    answer within 1%.
    """
    name = "10.3 crossover length"
    for case in _CROSSOVER_CASES:
        try:
            got = float(fn(_CROSSOVER_CASES[case]()))
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        weights, products = _forward_flops(case)
        want = _CROSSOVER_T * weights / products
        if abs(got / want - 1) <= _CROSSOVER_TOLERANCE:
            continue
        for why, wrong in _crossover_mistakes(case).items():
            if abs(got / wrong - 1) <= _CROSSOVER_TOLERANCE:
                return report(name, False, f"{case}: {why}")
        return report(
            name,
            False,
            f"{case}: fn = {got:,.0f} is off by {got / want - 1:+.0%} (tolerance ±{_CROSSOVER_TOLERANCE:.0%})",
        )
    return report(
        name,
        True,
        f"{len(_CROSSOVER_CASES)} models, within ±{_CROSSOVER_TOLERANCE:.0%} of PyTorch's FLOP count",
    )
