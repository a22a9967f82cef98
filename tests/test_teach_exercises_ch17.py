"""attn_core.teach.exercises.ch17: the right and wrong answers of exercises 17.1-17.3 (ANSWERS, held to
the standard by tests/test_teach_exercises_standard.py)."""

from __future__ import annotations

import torch

from attn_core.teach.exercises.ch17 import check_delta_rule_step, check_linear_attention_step, check_state_bytes


def _linear_step(S, z, fq, fk, v):
    S = S + torch.outer(fk, v)
    z = z + fk
    return S.T @ fq / (fq @ z), S, z


def _linear_step_no_normaliser(S, z, fq, fk, v):
    S = S + torch.outer(fk, v)
    return S.T @ fq, S, z + fk


def _linear_step_read_before_write(S, z, fq, fk, v):  # reads the state without the current token
    o = S.T @ fq / (fq @ z + 1.0)
    return o, S + torch.outer(fk, v), z + fk


def _delta_step(S, q, k, v, beta, alpha):
    S = alpha * S
    S = S + beta * torch.outer(k, v - S.T @ k)
    return S.T @ q, S


def _delta_step_decay_after(S, q, k, v, beta, alpha):  # corrects against the undecayed state
    S = S + beta * torch.outer(k, v - S.T @ k)
    return (alpha * S).T @ q, alpha * S


def _delta_step_no_gate(S, q, k, v, beta, alpha):  # DeltaNet: forgets the decay
    S = S + beta * torch.outer(k, v - S.T @ k)
    return S.T @ q, S


def _delta_step_transposed(S, q, k, v, beta, alpha):  # reads S q instead of Sᵀ q (square state only)
    S = alpha * S
    S = S + beta * torch.outer(k, v - S.T @ k)
    return S @ q if S.shape[0] == S.shape[1] else S.T @ q.flip(0), S


def _state_bytes(batch_size, d_model, n_heads, head_dim, n_value_heads, value_head_dim, conv_size, bytes_per_element):
    conv = (2 * n_heads * head_dim + n_value_heads * value_head_dim) * (conv_size - 1)
    return batch_size * (conv + n_value_heads * head_dim * value_head_dim) * bytes_per_element


def _state_only(batch_size, d_model, n_heads, head_dim, n_value_heads, value_head_dim, conv_size, bytes_per_element):
    return batch_size * n_value_heads * head_dim * value_head_dim * bytes_per_element


def _key_heads(batch_size, d_model, n_heads, head_dim, n_value_heads, value_head_dim, conv_size, bytes_per_element):
    conv = (2 * n_heads * head_dim + n_value_heads * value_head_dim) * (conv_size - 1)
    return batch_size * (conv + n_heads * head_dim * value_head_dim) * bytes_per_element


def _full_conv(batch_size, d_model, n_heads, head_dim, n_value_heads, value_head_dim, conv_size, bytes_per_element):
    conv = (2 * n_heads * head_dim + n_value_heads * value_head_dim) * conv_size
    return batch_size * (conv + n_value_heads * head_dim * value_head_dim) * bytes_per_element


ANSWERS = {
    check_linear_attention_step: (
        [_linear_step],
        [
            (_linear_step_no_normaliser, "outputs"),
            (_linear_step_read_before_write, "outputs"),
            (lambda S, z, fq, fk, v: (S.T @ fq, S), "return a tuple of 3"),  # the normaliser not returned
        ],
    ),
    check_delta_rule_step: (
        [_delta_step],
        [
            (_delta_step_decay_after, "outputs"),
            (_delta_step_no_gate, "outputs"),
            (_delta_step_transposed, "outputs"),
        ],
    ),
    check_state_bytes: (
        [_state_bytes],
        [
            (_state_only, "measured"),
            (_key_heads, "measured"),
            (_full_conv, "measured"),
        ],
    ),
}
