"""attn_core.teach.exercises.ch11: the right and wrong answers of exercises 11.1-11.3 (ANSWERS, held to
the standard by tests/test_teach_exercises_standard.py): 11.3's check accepts a real causality test
and refuses the answers that pass without testing causality (a name test, a constant, a comparison
with a reference output, inputs at which the leaky version hides)."""

from __future__ import annotations

import torch

from attn_core import attention
from attn_core.layers.simplified import centring_matrix
from attn_core.teach.exercises.ch11 import (
    causality_candidates,
    check_causality_test,
    check_padded_shaped,
    check_shaped_decode_step,
    padded_variant,
)


def _inputs(zero_queries=False, equal_gains=False):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 6, 4, generator=g, dtype=torch.float64) for _ in range(3))  # (B, H, T, D)
    gains = tuple(1 + 0.3 * torch.randn(2, generator=g, dtype=torch.float64) for _ in range(3))
    if zero_queries:
        q = torch.zeros_like(q)
    if equal_gains:
        gains = (torch.ones(2, dtype=torch.float64),) * 3
    return q, k, v, gains


def _leaks(fn, *, which=(0, 1, 2), last_only=False, **kwargs):
    """A genuine causality test: perturb every position after t, compare outputs up to t.

    ``which`` (of q, k, v) to perturb and ``last_only`` (perturb the last position only, for
    every t) make the wrong tests, each blind to one of the leaks.
    """
    q, k, v, gains = _inputs(**kwargs)
    out = fn(q, k, v, *gains)
    for t in range(q.shape[-2] - 1):
        moved = [x.clone() for x in (q, k, v)]
        for i in which:
            moved[i][..., -1 if last_only else t + 1 :, :] += 1.0
        if not torch.allclose(out[..., : t + 1, :], fn(*moved, *gains)[..., : t + 1, :], atol=1e-10):
            return True
    return False


def _reference(q, k, v, alpha, beta, gamma):
    a, b, g = (t.view(-1, 1, 1) for t in (alpha, beta, gamma))
    return a * v + b * attention(q, k, v, is_causal=True) - g * (centring_matrix(q.shape[-2], dtype=v.dtype) @ v)


def _differs_from_reference(fn):
    """Not a causality test: flags anything whose output differs from the reference."""
    q, k, v, gains = _inputs()
    return not torch.allclose(fn(q, k, v, *gains), _reference(q, k, v, *gains), atol=1e-8)


def test_candidates_look_alike_from_outside():
    candidates = [fn for fn, _, _ in causality_candidates()]
    assert len({fn.__name__ for fn in candidates}) == 1
    assert len({fn.__qualname__ for fn in candidates}) == 1
    assert len({fn.__code__ for fn in candidates}) == 1
    kinds = [leaks for _, leaks, _ in causality_candidates()]
    assert kinds.count(True) == 4 and kinds.count(False) == 3


def test_the_candidates_are_what_they_claim():
    for fn, leaks, what in causality_candidates():
        assert _leaks(fn) == leaks, what


# exercise 11.1 of the revised chapter: one decoding step of shaped attention ----------
def _decode_right(q, k, v, alpha, beta, gamma):
    a, b, c = (t.view(-1, 1, 1) for t in (alpha, beta, gamma))  # (H, 1, 1)
    soft = torch.nn.functional.scaled_dot_product_attention(q, k, v)  # no mask: sees all
    return a * v[..., -1:, :] + b * soft - c * v.mean(-2, keepdim=True)


def _decode_top_left(q, k, v, alpha, beta, gamma):
    a, b, c = (t.view(-1, 1, 1) for t in (alpha, beta, gamma))
    soft = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    return a * v[..., -1:, :] + b * soft - c * v.mean(-2, keepdim=True)


def _full_last_row(q, k, v, alpha, beta, gamma):
    # the newest query placed last among dummy queries: causal shaped attention over all T
    T = k.shape[-2]
    q_all = torch.cat([torch.zeros_like(k[..., :-1, :]), q], dim=-2)  # (B, H, T, D)
    soft = attention(q_all, k, v, is_causal=True)
    a, b, c = (t.view(-1, 1, 1) for t in (alpha, beta, gamma))
    out = a * v + b * soft - c * (centring_matrix(T, dtype=v.dtype) @ v)
    return out[..., -1:, :]


# exercise 11.2 of the revised chapter: shaped attention over a left-padded batch -------
def _padded(mask_softmax=True, mask_c=True):
    def fn(q, k, v, alpha, beta, gamma, valid):
        return padded_variant(q, k, v, alpha, beta, gamma, valid, mask_softmax=mask_softmax, mask_c=mask_c)

    return fn


def _padded_by_loop(q, k, v, alpha, beta, gamma, valid):
    """An independent right answer: each sequence alone, written into a zero tensor."""
    out = torch.zeros_like(v)
    a, b, c = (t.view(-1, 1, 1) for t in (alpha, beta, gamma))
    for i in range(q.shape[0]):
        p = int((~valid[i]).sum())
        qi, ki, vi = (x[i, :, p:] for x in (q, k, v))  # (H, T - p, D)
        soft = torch.nn.functional.scaled_dot_product_attention(qi, ki, vi, is_causal=True)
        mean = vi.cumsum(-2) / torch.arange(1, vi.shape[-2] + 1, dtype=vi.dtype)[:, None]
        out[i, :, p:] = a * vi + b * soft - c * mean
    return out


def test_padded_shaped_library_module_is_the_c_slip(capsys):
    """ShapedAttention applies a padding mask to the softmax only (documented): the check
    must name that slip for it, so the chapter's remark about the library stays true."""

    def via_core(q, k, v, alpha, beta, gamma, valid):
        T = q.shape[-2]
        mask = valid[:, None, None, :] & torch.ones(T, T, dtype=torch.bool).tril()
        mask = mask | torch.eye(T, dtype=torch.bool)  # no empty rows
        soft = attention(q, k, v, mask=mask)  # the padding out of the softmax only
        a, b, c = (t.view(-1, 1, 1) for t in (alpha, beta, gamma))
        return a * v + b * soft - c * (centring_matrix(T, dtype=v.dtype) @ v)

    assert not check_padded_shaped(via_core)
    assert "still in C" in capsys.readouterr().out


ANSWERS = {
    check_causality_test: (
        [_leaks],
        [
            (lambda fn: fn.__name__ == "leaky", "expected True"),  # the name loophole
            (lambda fn: True, "expected False"),
            (lambda fn: False, "expected True"),
            (_differs_from_reference, "another score scale"),
            # the inputs at which the leaky version hides (q = 0, β = γ): some leaks go unseen
            (lambda fn: _leaks(fn, zero_queries=True, equal_gains=True), "expected True"),
            (lambda fn: _leaks(fn, which=(2,)), "the future keys stay in its denominator"),  # values only
            (lambda fn: _leaks(fn, which=(0, 1)), "leaks through the values"),  # queries and keys only
            (lambda fn: _leaks(fn, last_only=True), "never reaches the last position"),
        ],
    ),
    check_shaped_decode_step: (
        [_decode_right, _full_last_row],  # the chapter's full shaped attention, last row: also right
        [
            (_decode_top_left, "top-left"),
            (
                lambda q, k, v, a, b, c: (
                    _decode_right(q, k, v, a, b, c) + (a.view(-1, 1, 1) * (v[..., :1, :] - v[..., -1:, :]))
                ),
                "the last one",
            ),
            (
                lambda q, k, v, a, b, c: (
                    _decode_right(q, k, v, a, b, c) + c.view(-1, 1, 1) * (v.mean(-2, keepdim=True) - v[..., :1, :])
                ),
                "not the first value alone",
            ),
            (
                lambda q, k, v, a, b, c: (
                    _decode_right(q, k, v, a, b, c)
                    + c.view(-1, 1, 1) * (v.mean(-2, keepdim=True) - v[..., :-1, :].mean(-2, keepdim=True))
                ),
                "includes the newest position",
            ),
            (lambda q, k, v, a, b, c: _decode_right(q, k, v, a, b, c) * 1.01, "11.1"),
            (lambda q, k, v, a, b, c: v, "11.1"),
        ],
    ),
    check_padded_shaped: (
        [_padded(), _padded_by_loop],
        [
            (_padded(mask_c=False), "still in C"),
            (_padded(mask_softmax=False), "softmax still sees"),
            (_padded(mask_softmax=False, mask_c=False), "ignored"),
            (lambda q, k, v, a, b, c, valid: _padded_by_loop(q, k, v, a, b, c, valid) * 1.01, "sequence"),
            (lambda q, k, v, a, b, c, valid: v[..., :3, :], "want"),
        ],
    ),
}
