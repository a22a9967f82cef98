"""Checks for the exercises of chapter 11 (the simplified block)."""

from __future__ import annotations

from typing import Callable

import torch

from ...layers.simplified import centring_matrix
from ...ops.attention import attention
from ..mistakes import leaky_shaped_attention
from ._common import compare, report

__all__ = [
    "check_causality_test",
    "check_shaped_decode_step",
    "check_padded_shaped",
]


def _reference_shaped(q, k, v, alpha, beta, gamma):
    T = q.shape[-2]
    out_softmax = attention(q, k, v, is_causal=True)  # (B, H, T, D)
    a, b, g = (t.view(-1, 1, 1) for t in (alpha, beta, gamma))  # (H,) -> (H, 1, 1)
    return a * v + b * out_softmax - g * (centring_matrix(T, dtype=v.dtype) @ v)


def _shaped_variant(
    *,
    future_from: int | None,
    causal_c: bool,
    scale_power: float = 0.5,
    after_softmax: bool = False,
    prefix: int = 0,
) -> Callable[..., torch.Tensor]:
    """A written-out shaped attention with the softmax mask and ``C`` chosen (right or wrong).

    ``future_from``: the masked scores are ``triu(future_from)`` (1 is right, 2 lets each
    position see one step ahead, None discards the mask); ``causal_c``: the causal ``C``
    (right) or the uniform one over all positions; ``scale_power``: scores divided by
    ``D ** scale_power`` (any value keeps the result causal); ``after_softmax``: the future
    weights are zeroed after a softmax over every key (not renormalised: the future keys
    still sit in each denominator, so the output leaks through the keys, not the values);
    ``prefix``: the first ``prefix`` positions see each other both ways (a prefix-LM mask).
    """

    def impl(q, k, v, alpha, beta, gamma):
        T = q.shape[-2]
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** scale_power  # (B, H, T, T)
        future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(future_from or 1)  # (T, T)
        future[:prefix, :prefix] = False
        if future_from is not None and not after_softmax:
            scores = scores.masked_fill(future, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        if after_softmax:
            probs = probs.masked_fill(future, 0.0)
        C = centring_matrix(T, causal=causal_c, dtype=q.dtype, device=q.device)  # (T, T)
        eye = torch.eye(T, dtype=q.dtype, device=q.device)
        a, b, g = (t.view(-1, 1, 1) for t in (alpha, beta, gamma))  # (H,) -> (H, 1, 1)
        return (a * eye + b * probs - g * C) @ v  # (B, H, T, D)

    return impl


def _neutral(impl: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """Wrap ``impl`` so that every candidate looks the same from outside (name, code, signature)."""

    def shaped(q, k, v, alpha, beta, gamma):
        return impl(q, k, v, alpha, beta, gamma)

    return shaped


def causality_candidates() -> list[tuple[Callable[..., torch.Tensor], bool, str]]:
    """The functions exercise 11.3's test is run on: ``(fn, leaks, what it is)``, mixed order."""

    def leaky_both(q, k, v, alpha, beta, gamma):
        return leaky_shaped_attention(q, k, v, alpha, beta, gamma)[0]

    cases = [
        (_reference_shaped, False, "is correct shaped attention"),
        (leaky_both, True, "discards the mask and uses the full C (the chapter's leaky version)"),
        (
            _shaped_variant(future_from=1, causal_c=True, scale_power=1.0),
            False,
            "is causal, with another score scale: a causality test must not compare with a reference output",
        ),
        (
            _shaped_variant(future_from=1, causal_c=True, after_softmax=True),
            True,
            "zeroes the future weights after the softmax: the future keys stay in its denominator",
        ),
        (
            _shaped_variant(future_from=1, causal_c=False),
            True,
            "masks the softmax but uses the full C: it leaks through the values",
        ),
        (
            _shaped_variant(future_from=1, causal_c=True, prefix=3),
            True,
            "lets its first 3 positions see each other (a prefix-LM mask): the leak never reaches the last position",
        ),
        (_shaped_variant(future_from=1, causal_c=True), False, "is correct, written out with an explicit matrix"),
    ]
    return [(_neutral(fn), leaks, what) for fn, leaks, what in cases]


def check_causality_test(leaks: Callable[[Callable[..., torch.Tensor]], bool]) -> bool:
    """Exercise 11.3: ``leaks(fn)`` returns True if ``fn(q, k, v, alpha, beta, gamma)`` lets a position see its future.

    It is run on seven implementations that all look alike from outside (the same name,
    code and signature, in a mixed order): four leak (the chapter's leaky version, a
    mask applied after the softmax, a full ``C`` alone, a bidirectional prefix of 3 positions) and three do not
    (the reference, the same written out, and a causal version with another score scale,
    which a test comparing outputs with a reference would wrongly flag). Only a real
    causality test gets all seven right: feed random queries and unequal gains (with
    ``q = 0`` and ``β = γ`` the two bugs of the leaky version cancel), perturb the later
    positions of ``q``, ``k`` *and* ``v`` (the mask applied after the softmax leaks through
    the keys only, the full ``C`` through the values only), perturb more than the last
    position (the prefix's leak never reaches it), and check that no earlier output moves.

    Shapes:
        the inputs ``leaks`` passes to ``fn``: q, k, v ``(B, H, T, D)``; alpha, beta, gamma ``(H,)``
    """
    candidates = causality_candidates()
    for i, (fn, expected, what) in enumerate(candidates, start=1):
        try:
            got = leaks(fn)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report("11.3 causality test", False, f"{type(e).__name__}: {e}")
        if bool(got) != expected:
            return report(
                "11.3 causality test",
                False,
                f"leaks(candidate {i} of {len(candidates)}) returned {got!r}, expected {expected}: "
                f"that candidate {what}",
            )
    return report("11.3 causality test", True, f"right on all {len(candidates)} candidates (4 leak, 3 do not)")


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
    name = "11.2 shaped attention, left-padded"
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
        return report(name, True, "every real position matches its sequence alone (pads 0, 2, 4)")
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
