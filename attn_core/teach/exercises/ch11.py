"""Checks for the exercises of chapter 11 (the simplified block)."""

from __future__ import annotations

from typing import Callable

import torch

from ...layers.simplified import centring_matrix
from ...ops.attention import attention
from ._common import compare, describe, report

__all__ = [
    "check_shaped_decode_step",
    "check_padded_shaped",
    "check_uniform_stack_prediction",
    "check_half_fixed_diagnosis",
    "half_fixed_matrix",
]


def _reference_shaped(q, k, v, alpha, beta, gamma):
    T = q.shape[-2]
    out_softmax = attention(q, k, v, is_causal=True)  # (B, H, T, D)
    a, b, g = (t.view(-1, 1, 1) for t in (alpha, beta, gamma))  # (H,) -> (H, 1, 1)
    return a * v + b * out_softmax - g * (centring_matrix(T, dtype=v.dtype) @ v)


#: Exercise 11.3's three quantities: (causal?, T, layers, query row, key column).
UNIFORM_STACK_CASES = {
    "full, self": (False, 4, 3, 3, 3),
    "causal, self": (True, 4, 3, 3, 3),
    "causal, first": (True, 4, 3, 1, 0),
}


def uniform_stack(T: int, layers: int, *, causal: bool) -> torch.Tensor:
    """What ``layers`` stacked attention layers with all scores 0 and the identity as values do.

    Measured, not written down: one-hot tokens (the identity) are sent through the attention
    core ``layers`` times with zero queries, so row ``t`` of the result is how much of each
    input token token ``t`` holds at the end.

    Shapes:
        output: ``(T, T)``
    """
    x = torch.eye(T, dtype=torch.float64)[None, None]  # (1, 1, T, T): token t is e_t
    zeros = torch.zeros_like(x)  # queries 0: every score is 0, the softmax uniform
    for _ in range(layers):
        x = attention(zeros, x, x, is_causal=causal)  # (1, 1, T, T)
    return x[0, 0]


def check_uniform_stack_prediction(predicted: dict) -> bool:
    """Exercise 11.3, predict then run: three weights of a stack of uniform attention layers.

    ``predicted`` maps each key of :data:`UNIFORM_STACK_CASES` to a number: for ``T = 4``
    tokens after 3 layers whose scores are all 0 (the values are the inputs, no skip), the
    weight token 3 keeps on its own input with full attention (``"full, self"``) and with a
    causal mask (``"causal, self"``), and the weight token 1 puts on token 0 with a causal
    mask (``"causal, first"``). The check measures them with :func:`uniform_stack`. The
    slips it names: full attention treated like repeated shrinking (one layer already makes
    every token the mean), one layer instead of three, the wrong count of visible tokens,
    and token 1's own share given for its share on token 0.
    """
    name = "11.3 uniform stack"
    if not isinstance(predicted, dict) or set(predicted) != set(UNIFORM_STACK_CASES):
        keys = ", ".join(repr(k) for k in UNIFORM_STACK_CASES)
        return report(name, False, f"give a dict with the keys {keys}, got {describe(predicted)}")
    for key, value in predicted.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return report(name, False, f"{key!r}: give a number, not {describe(value)}")
    slips = {
        "full, self": [
            (1 / 64, "full attention makes every token the mean after one layer: "
                     "what does averaging tokens that are already equal change?"),
            (0.0, "full attention: the mean of all four tokens still holds token 3's input"),
        ],
        "causal, self": [
            (1 / 4, "that is one layer; each of the three keeps only part of what the last kept"),
            (1 / 27, "token 3 may see positions 0 to 3: four tokens, not three"),
        ],
        "causal, first": [
            (1 / 8, "that is token 1's share of *itself*; the rest of its weight is on token 0"),
            (1 / 2, "that is one layer: token 0 never moves, so token 1's share of it grows"),
        ],
    }  # fmt: skip
    for key, (causal, T, layers, row, col) in UNIFORM_STACK_CASES.items():
        measured = uniform_stack(T, layers, causal=causal)[row, col].item()
        got = float(predicted[key])
        if abs(got - measured) <= 1e-6:
            continue
        for wrong, hint in slips[key]:
            if abs(got - wrong) <= 1e-6:
                return report(name, False, f"{key!r}: {hint}")
        return report(name, False, f"{key!r}: {got:g} is not what the stack does (tolerance 1e-6)")
    return report(name, True, "all three match the measured stacks (tolerance 1e-6)")


def check_shaped_decode_step(fn: Callable[..., torch.Tensor]) -> bool:
    """Exercise 11.1 (revised chapter): ``fn(q, k, v, alpha, beta, gamma)`` is one decoding step
    of shaped attention: the output of the newest position, whose query is ``q``, over a cache
    ``k, v`` that already holds the newest position last.

    The newest row of ``A = αI + β softmax(QKᵀ/√D + M) − γC`` sees every cached position:
    ``α·v_last + β·softmax(q kᵀ/√D) v − γ·mean(v)``. The slips it names: a causal flag on a
    single query (PyTorch's ``is_causal`` aligns the mask top-left, so the one query sees only
    the first key), the identity taken at the first position, and ``C``'s row of the first
    position (its value alone) instead of the running mean.

    Shapes:
        q: ``(B, H, 1, D)``; k, v: ``(B, H, T, D)``; alpha, beta, gamma: ``(H,)``;
        fn's output: ``(B, H, 1, D)``
    """
    name = "11.1 shaped decoding step"
    g = torch.Generator().manual_seed(111)
    B, H, T, D = 2, 3, 6, 4
    q_all, k, v = (torch.randn(B, H, T, D, generator=g, dtype=torch.float64) for _ in range(3))
    alpha, beta, gamma = (1 + 0.3 * torch.randn(H, generator=g, dtype=torch.float64) for _ in range(3))
    q = q_all[:, :, -1:, :]  # (B, H, 1, D): the newest query
    # the full sequence's last row is the reference (the chapter's shaped attention, all T)
    want = _reference_shaped(q_all, k, v, alpha, beta, gamma)[:, :, -1:, :]  # (B, H, 1, D)
    try:
        got = fn(q.clone(), k.clone(), v.clone(), alpha.clone(), beta.clone(), gamma.clone())
    except Exception as e:  # a learner's bug should print, not stop the notebook
        return report(name, False, f"{type(e).__name__}: {e}")
    a, b, c = (t.view(-1, 1, 1) for t in (alpha, beta, gamma))  # (H,) -> (H, 1, 1)
    soft = torch.softmax(q @ k.transpose(-2, -1) / D**0.5, dim=-1) @ v  # (B, H, 1, D)
    slips = [
        (a * v[..., -1:, :] + b * v[..., :1, :] - c * v.mean(-2, keepdim=True),
         "the softmax saw only the first key: is_causal=True with one query masks top-left; "
         "the newest query may see every cached key, so pass no mask"),
        (a * v[..., :1, :] + b * soft - c * v.mean(-2, keepdim=True),
         "the identity term is the newest position's own value (the last one), not the first"),
        (a * v[..., -1:, :] + b * soft - c * v[..., :1, :],
         "C's newest row averages all T cached values, not the first value alone"),
        (a * v[..., -1:, :] + b * soft - c * v[..., :-1, :].mean(-2, keepdim=True),
         "C's newest row includes the newest position itself (1/(i+1) on 0..i)"),
    ]  # fmt: skip
    if isinstance(got, torch.Tensor) and got.shape == want.shape:
        for wrong, hint in slips:
            if torch.allclose(got.double(), wrong, atol=1e-8):
                return report(name, False, hint)
    return compare(name, got, want, atol=1e-8)


def padded_variant(q, k, v, alpha, beta, gamma, valid, *, mask_softmax: bool, mask_c: bool):
    """Shaped attention over a left-padded batch, with the padding kept out of the softmax
    and/or out of ``C`` (both: right; the others: the slips the check names).

    Shapes:
        q, k, v: ``(B, H, T, D)``; gains: ``(H,)``; valid: ``(B, T)`` bool; returns ``(B, H, T, D)``
    """
    T = q.shape[-2]
    causal = torch.ones(T, T, dtype=torch.bool).tril()  # (T, T)
    keys = valid[:, None, None, :]  # (B, 1, 1, T): the keys that are real tokens
    allowed = causal & keys if mask_softmax else causal.expand(q.shape[0], 1, T, T)
    allowed = allowed | torch.eye(T, dtype=torch.bool)  # padded rows: no empty softmax
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5  # (B, H, T, T)
    probs = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    seen = (causal & keys if mask_c else causal.expand(q.shape[0], 1, T, T)).to(v.dtype)
    C = seen / seen.sum(-1, keepdim=True).clamp_min(1)  # (B, 1, T, T)
    a, b, g = (t.view(-1, 1, 1) for t in (alpha, beta, gamma))  # (H,) -> (H, 1, 1)
    return (a * torch.eye(T, dtype=v.dtype) + b * probs - g * C) @ v


def check_padded_shaped(fn: Callable[..., torch.Tensor]) -> bool:
    """Exercise 11.2 (revised chapter): ``fn(q, k, v, alpha, beta, gamma, valid)`` is causal shaped
    attention over a **left-padded** batch: at every real position the output must equal what
    the sequence gets alone, without its padding.

    ``valid[b, t]`` is False for the padding at the start of sequence ``b``. Outputs at padded
    positions are not checked. The slips it names: the padding left in ``C`` (the running mean
    counts the padded values; this is what :class:`attn_core.ShapedAttention` does with a
    padding ``mask``, which by design reaches the softmax only), the padding left in the
    softmax, and both.

    Shapes:
        q, k, v: ``(B, H, T, D)``; alpha, beta, gamma: ``(H,)``; valid: ``(B, T)`` bool;
        fn's output: ``(B, H, T, D)``
    """
    name = "11.2 left padding"
    g = torch.Generator().manual_seed(112)
    B, H, T, D = 3, 2, 7, 4
    q, k, v = (torch.randn(B, H, T, D, generator=g, dtype=torch.float64) for _ in range(3))
    gains = tuple(1 + 0.3 * torch.randn(H, generator=g, dtype=torch.float64) for _ in range(3))
    pads = (0, 2, 4)
    valid = torch.arange(T)[None, :] >= torch.tensor(pads)[:, None]  # (B, T)
    try:
        got = fn(q.clone(), k.clone(), v.clone(), *(t.clone() for t in gains), valid.clone())
    except Exception as e:  # a learner's bug should print, not stop the notebook
        return report(name, False, f"{type(e).__name__}: {e}")
    if not (isinstance(got, torch.Tensor) and got.shape == q.shape):
        shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
        return report(name, False, f"got {shape}, want {tuple(q.shape)}")
    # the reference: each sequence alone, without its padding (real rows only)
    want = [
        _reference_shaped(q[b : b + 1, :, p:], k[b : b + 1, :, p:], v[b : b + 1, :, p:], *gains)[0]
        for b, p in enumerate(pads)
    ]  # B tensors (H, T - p, D)

    def same(out: torch.Tensor, ref: list[torch.Tensor]) -> bool:  # on the real rows
        out = out.double()
        return all(torch.allclose(out[b, :, p:], ref[b], atol=1e-8) for b, p in enumerate(pads))

    if same(got, want):
        return report(name, True, "each real position equals its sequence alone (pads 0, 2, 4)")
    slips = [
        (dict(mask_softmax=True, mask_c=False),
         "the padding is still in C: row i must average the *real* positions up to i "
         "(divide by their number, not by i + 1)"),
        (dict(mask_softmax=False, mask_c=True), "the softmax still sees the padded keys: mask them"),
        (dict(mask_softmax=False, mask_c=False), "the padding is ignored: it reaches both the softmax and C"),
    ]  # fmt: skip
    for flags, hint in slips:
        wrong = padded_variant(q, k, v, *gains, valid, **flags)  # (B, H, T, D)
        if same(got, [wrong[b, :, p:] for b, p in enumerate(pads)]):
            return report(name, False, hint)
    b = next(b for b, p in enumerate(pads) if not torch.allclose(got.double()[b, :, p:], want[b], atol=1e-8))
    return compare(f"{name} (sequence {b}, pad {pads[b]})", got[b, :, pads[b] :], want[b], atol=1e-8)


def _one_mistake(q, k, v, alpha, beta, gamma, *, masked: bool, causal_c: bool):
    """Shaped attention with the softmax masked or not and ``C`` causal or full (both right:
    the chapter's version; masked with the full ``C``: exercise 11.4's half-fixed version).

    Shapes:
        q, k, v: ``(B, H, T, D)``; gains: ``(H,)``; returns ``(B, H, T, D)``
    """
    T = q.shape[-2]
    soft = attention(q, k, v, is_causal=masked)  # (B, H, T, D)
    mean = centring_matrix(T, dtype=v.dtype) @ v if causal_c else v.mean(-2, keepdim=True)
    a, b, g = (t.view(-1, 1, 1) for t in (alpha, beta, gamma))  # (H,) -> (H, 1, 1)
    return a * v + b * soft - g * mean


#: Exercise 11.4's half-fixed version: the mask applied by the core, the full ``C`` kept.
HALF_FIXED = dict(masked=True, causal_c=False)


def half_fixed_matrix(T: int = 6) -> torch.Tensor:
    """The matrix ``A`` of the half-fixed shaped attention at initialisation, measured.

    Zero queries, ``α = β = γ = 1`` and one-hot values (the identity), so the output *is*
    ``A``: row ``i`` holds the weight query ``i`` gives each key.

    Shapes:
        output: ``(T, T)``
    """
    g = torch.Generator().manual_seed(114)
    k = torch.randn(1, 1, T, T, generator=g, dtype=torch.float64)
    v = torch.eye(T, dtype=torch.float64)[None, None]  # (1, 1, T, T): token t is e_t
    ones = torch.ones(1, dtype=torch.float64)
    return _one_mistake(torch.zeros_like(k), k, v, ones, ones, ones, **HALF_FIXED)[0, 0]


def check_half_fixed_diagnosis(predicted: dict) -> bool:
    """Exercise 11.4, find the bug: predict what a half-fixed shaped attention does at initialisation.

    ``predicted`` has three keys: ``"leaks at init"`` (does the causality test catch the
    half-fixed version at initialisation, ``True`` or ``False``), ``"mistake left"``
    (``"mask"`` or ``"C"``: which of the leaky version's two mistakes it keeps) and
    ``"A[0, 5] at init"`` (the weight query 0 gives key 5 in its matrix ``A`` for ``T = 6``,
    ``α = β = γ = 1``). The check measures ``A`` with :func:`half_fixed_matrix`. The slips
    it names: "no leak" (the two-mistake version's answer), the wrong mistake, a weight of
    0, the wrong sign and the wrong count of values averaged.
    """
    name = "11.4 half-fixed shaped"
    keys = ("leaks at init", "mistake left", "A[0, 5] at init")
    if not isinstance(predicted, dict) or set(predicted) != set(keys):
        wanted = ", ".join(repr(k) for k in keys)
        return report(name, False, f"give a dict with the keys {wanted}, got {describe(predicted)}")
    A = half_fixed_matrix(6)  # (6, 6)
    leaks = bool(A.triu(1).abs().max() > 1e-9)
    if not isinstance(predicted["leaks at init"], bool):
        return report(name, False, f"'leaks at init': give True or False, not {describe(predicted['leaks at init'])}")
    if predicted["leaks at init"] is not leaks:
        return report(
            name,
            False,
            "'leaks at init': one mistake alone has nothing to cancel against: compare "
            "the masked softmax at q = 0 with the term subtracted",
        )
    if predicted["mistake left"] not in ("mask", "C"):
        return report(name, False, f"'mistake left': give 'mask' or 'C', not {describe(predicted['mistake left'])}")
    if predicted["mistake left"] != "C":
        return report(
            name,
            False,
            "'mistake left': is_causal=True lets the core apply the mask; look at the term that is subtracted",
        )
    weight = predicted["A[0, 5] at init"]
    if isinstance(weight, bool) or not isinstance(weight, (int, float)):
        return report(name, False, f"'A[0, 5] at init': give a number, not {describe(weight)}")
    measured = A[0, 5].item()
    slips = [
        (0.0, "query 0 sees only key 0 in the softmax, but not in the subtracted term"),
        (-measured, "the sign: that term is subtracted"),
        (-1 / 5, "how many values does the subtracted mean average? all T = 6 of them"),
    ]
    if abs(weight - measured) <= 1e-6:
        return report(name, True, f"A[0, 5] = {measured:.4f} at initialisation: the future leaks")
    for wrong, hint in slips:
        if abs(weight - wrong) <= 1e-6:
            return report(name, False, f"'A[0, 5] at init': {hint}")
    return report(name, False, f"'A[0, 5] at init': {weight:g} is not what the matrix holds (tolerance 1e-6)")
