"""attn_core.teach.exercises.ch11: the right and wrong answers of exercises 11.1-11.4 (ANSWERS, held to
the standard by tests/test_teach_exercises_standard.py); 11.3's measurement (the uniform stack) equals
the powers of the uniform matrices it stands for."""

from __future__ import annotations

import torch

from attn_core import attention
from attn_core.layers.simplified import centring_matrix
from attn_core.teach.exercises.ch11 import (
    check_half_fixed_diagnosis,
    check_padded_shaped,
    check_shaped_decode_step,
    check_uniform_stack_prediction,
    half_fixed_matrix,
    padded_variant,
    uniform_stack,
)


# exercise 11.3: the weights of a stack of uniform attention layers --------------------
def test_uniform_stack_is_the_power_of_the_uniform_matrix():
    C = centring_matrix(5, dtype=torch.float64)  # causal uniform attention, one layer
    assert torch.allclose(uniform_stack(5, 3, causal=True), torch.linalg.matrix_power(C, 3))
    full = torch.full((5, 5), 1 / 5, dtype=torch.float64)  # U·U = U: one layer is the limit
    assert torch.allclose(uniform_stack(5, 3, causal=False), full)


_RIGHT_PREDICTION = {"full, self": 1 / 4, "causal, self": (1 / 4) ** 3, "causal, first": 1 - (1 / 2) ** 3}


def _predict(**changes):
    return _RIGHT_PREDICTION | changes


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


# exercise 11.4: the half-fixed shaped attention (mask applied, full C kept) ------------
def test_half_fixed_matrix_is_identity_plus_causal_minus_full_uniform():
    T = 6
    C = centring_matrix(T, dtype=torch.float64)
    full = torch.full((T, T), 1 / T, dtype=torch.float64)
    assert torch.allclose(half_fixed_matrix(T), torch.eye(T, dtype=torch.float64) + C - full)


_RIGHT_DIAGNOSIS = {"leaks at init": True, "mistake left": "C", "A[0, 5] at init": -1 / 6}


def _diagnose(**changes):
    return _RIGHT_DIAGNOSIS | changes


ANSWERS = {
    check_half_fixed_diagnosis: (
        [_RIGHT_DIAGNOSIS, _diagnose(**{"A[0, 5] at init": -0.1666667})],
        [
            (_diagnose(**{"leaks at init": False}), "nothing to cancel against"),
            (_diagnose(**{"leaks at init": "yes"}), "give True or False"),
            (_diagnose(**{"mistake left": "mask"}), "the term that is subtracted"),
            (_diagnose(**{"mistake left": "softmax"}), "give 'mask' or 'C'"),
            (_diagnose(**{"A[0, 5] at init": 0}), "not in the subtracted term"),
            (_diagnose(**{"A[0, 5] at init": 1 / 6}), "the sign"),
            (_diagnose(**{"A[0, 5] at init": -1 / 5}), "all T = 6"),
            (_diagnose(**{"A[0, 5] at init": -0.2}), "all T = 6"),
            (_diagnose(**{"A[0, 5] at init": -0.3}), "not what the matrix holds"),
            (_diagnose(**{"A[0, 5] at init": "-1/6"}), "give a number"),
            ({"leaks at init": True}, "give a dict with the keys"),
        ],
    ),
    check_uniform_stack_prediction: (
        [_RIGHT_PREDICTION, {"causal, first": 0.875, "causal, self": 0.015625, "full, self": 0.25}],
        [
            (_predict(**{"full, self": (1 / 4) ** 3}), "already equal"),
            (_predict(**{"full, self": 0}), "still holds token 3"),
            (_predict(**{"causal, self": 1 / 4}), "that is one layer"),
            (_predict(**{"causal, self": (1 / 3) ** 3}), "four tokens, not three"),
            (_predict(**{"causal, first": 1 / 8}), "share of *itself*"),
            (_predict(**{"causal, first": 1 / 2}), "token 0 never moves"),
            (_predict(**{"causal, first": 0.9}), "not what the stack does"),
            ({"full, self": 0.25}, "give a dict with the keys"),
            (_predict(**{"causal, self": "1/64"}), "give a number"),
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
