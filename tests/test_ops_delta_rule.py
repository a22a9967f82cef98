"""Tests for attn_core.ops.delta_rule: the (gated) delta rule's three forms agree, its state semantics.

The parallel matrix, recurrent and chunked forms are one computation: they agree in float64
to 1e-10 for lengths that are and are not multiples of the chunk size. Parity with Hugging
Face is in ``tests/test_parity_hf_linear.py``.
"""

from __future__ import annotations

import pytest
import torch
from test_ops_linear_attention import D_K, D_V, TOL, B, H, _delta_inputs  # the same shapes and inputs

from attn_core.ops import delta_rule as dr
from conftest import F64, randn


@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("T, chunk_size", [(1, 4), (7, 3), (8, 4), (13, 4), (13, 1), (13, 64), (20, 7)])
def test_delta_rule_three_forms_agree(gated, T, chunk_size):
    q, k, v, beta, g = _delta_inputs(T, gated=gated)
    recurrent, S_r = dr.delta_rule_recurrent(q, k, v, beta, g)
    chunked, S_c = dr.delta_rule_chunked(q, k, v, beta, g, chunk_size=chunk_size)
    parallel = dr.delta_rule_parallel(q, k, v, beta, g)
    torch.testing.assert_close(chunked, recurrent, **TOL)
    torch.testing.assert_close(parallel, recurrent, **TOL)
    torch.testing.assert_close(S_c, S_r, **TOL)


@pytest.mark.parametrize("gated", [False, True])
def test_delta_rule_matrix_is_recurrence_on_one_hot_values(gated):
    T = 9
    q, k, _, beta, g = _delta_inputs(T, gated=gated)
    one_hot = torch.eye(T, dtype=F64).expand(B, H, T, T)  # value s is the s-th unit vector
    want, _ = dr.delta_rule_recurrent(q, k, one_hot, beta, g)  # row t: the weight of each value in o_t
    m = dr.delta_rule_matrix(q, k, beta, g)
    torch.testing.assert_close(m, want, **TOL)
    assert (m.triu(1) == 0).all()


@pytest.mark.parametrize("form", ["recurrent", "chunked"])
def test_delta_rule_continues_from_state(form):
    q, k, v, beta, g = _delta_inputs(11)
    run = getattr(dr, f"delta_rule_{form}")
    kw = {"chunk_size": 4} if form == "chunked" else {}
    full, S = run(q, k, v, beta, g, **kw)
    first, S1 = run(q[:, :, :6], k[:, :, :6], v[:, :, :6], beta[:, :, :6], g[:, :, :6], **kw)
    second, S2 = run(q[:, :, 6:], k[:, :, 6:], v[:, :, 6:], beta[:, :, 6:], g[:, :, 6:], initial_state=S1, **kw)
    torch.testing.assert_close(torch.cat([first, second], dim=2), full, **TOL)
    torch.testing.assert_close(S2, S, **TOL)


@pytest.mark.parametrize("form", ["recurrent", "chunked"])
def test_delta_rule_beta_zero_leaves_state_unchanged(form):
    q, k, v, _, _ = _delta_inputs(7)
    S0 = randn(B, H, D_K, D_V, seed=9)
    run = getattr(dr, f"delta_rule_{form}")
    out, S = run(q, k, v, torch.zeros(B, H, 7, dtype=F64), initial_state=S0)
    torch.testing.assert_close(S, S0, rtol=0, atol=1e-14)
    torch.testing.assert_close(out, q @ S0 / D_K**0.5, rtol=0, atol=1e-14)  # the output only reads S0


def test_delta_rule_beta_one_overwrites_what_the_key_recalls():
    # Linear attention adds v to whatever k already recalled; the delta rule with β = 1 and |k| = 1
    # replaces it: afterwards the state recalls exactly v for k.
    q, k, v, _, _ = _delta_inputs(1)
    k = k / k.norm(dim=-1, keepdim=True)  # exactly unit length (l2_normalize's eps shortens it by ~1e-6)
    S0 = randn(B, H, D_K, D_V, seed=9)
    _, S = dr.delta_rule_recurrent(q, k, v, torch.ones(B, H, 1, dtype=F64), initial_state=S0)
    recalled = (k[:, :, 0, None, :] @ S).squeeze(-2)  # (B, H, D_V)
    torch.testing.assert_close(recalled, v[:, :, 0], rtol=0, atol=1e-12)


def test_delta_rule_decay_forgets():
    q, k, v, beta, _ = _delta_inputs(5)
    S0 = randn(B, H, D_K, D_V, seed=9)
    g = torch.full((B, H, 5), -0.5, dtype=F64)
    _, S = dr.delta_rule_recurrent(q, k, v, torch.zeros_like(beta), g, initial_state=S0)
    torch.testing.assert_close(S, S0 * torch.exp(torch.tensor(-2.5, dtype=F64)), rtol=0, atol=1e-14)


def test_solve_unit_lower_reads_only_the_strict_lower_triangle():
    # The chunked form hands the solve diag(β) K Kᵀ ⊙ Γ, diagonal included: it must act as the
    # unit lower-triangular matrix with that strict lower part, in the solve and its gradient.
    system = randn(B, H, 6, 6, seed=11).requires_grad_()
    rhs = randn(B, H, 6, 2, seed=12)
    x = dr.solve_unit_lower(system, rhs)
    unit = system.detach().tril(-1) + torch.eye(6, dtype=F64)
    torch.testing.assert_close(x, torch.linalg.solve(unit, rhs), rtol=0, atol=1e-12)
    x.sum().backward()
    assert (system.grad.triu() == 0).all()  # the diagonal and above are never read
    assert (system.grad.tril(-1) != 0).any()


@pytest.mark.parametrize("chunk_size", [4, 64])
def test_delta_rule_chunked_from_no_state_is_from_a_zero_state(chunk_size):
    # No initial_state skips the first chunk's S₀ terms (exact zeros): the same numbers as a
    # zero state passed in, which runs them.
    q, k, v, beta, g = _delta_inputs(11, gated=True)
    zeros = torch.zeros(B, H, D_K, D_V, dtype=F64)
    out, S = dr.delta_rule_chunked(q, k, v, beta, g, chunk_size=chunk_size)
    out0, S0 = dr.delta_rule_chunked(q, k, v, beta, g, chunk_size=chunk_size, initial_state=zeros)
    torch.testing.assert_close(out, out0, rtol=0, atol=0)
    torch.testing.assert_close(S, S0, rtol=0, atol=0)
