"""The delta rule and Gated DeltaNet: a linear-attention state that corrects what it recalls.

The delta rule (DeltaNet; Yang et al., 2024, arXiv 2406.06484) writes only the part of
``v_t`` that the state does not already recall for ``k_t``, with a strength ``β_t``; Gated
DeltaNet (Yang et al., 2024, arXiv 2412.06464) first lets the state decay by
``α_t = exp(g_t) ∈ (0, 1]``:

    S_t = α_t (I − β_t k_t k_tᵀ) S_{t-1} + β_t k_t v_tᵀ          o_t = S_tᵀ q_t / √D_k

The state is stored ``(D_k, D_v)``, keys along the rows: Hugging Face's and the fla
library's layout, the transpose of the papers' ``S (I − β k kᵀ) + β v kᵀ``. Plain linear
attention, whose state this is, is :mod:`attn_core.ops.linear_attention`.

The rule comes in three forms of the same computation, tested equal in float64:

* **parallel**: a ``(T, T)`` lower-triangular matrix ``M`` with ``output = M @ V``
  (:func:`delta_rule_matrix`, :func:`delta_rule_parallel`): quadratic in ``T``;
* **recurrent**: one token at a time, a constant-size state (how a model decodes);
* **chunked**: exact recurrence between chunks, parallel matmuls inside them (how it trains):
  the chunk's updates are folded by the WY/UT transform, a triangular solve
  (:func:`solve_unit_lower`).

The layer of Qwen3-Next around the gated delta rule is :class:`attn_core.layers.gated_deltanet.GatedDeltaNet`.

Shape legend:
    B      batch size
    H      heads
    T      positions; ``C`` positions of one chunk (the last chunk may be shorter)
    D_k    width of a query/key head; ``D_v`` width of a value head
    S      the state ``(B, H, D_k, D_v)``
"""

from __future__ import annotations

import math

import torch

from ..checks import check_int, check_number, check_tensor
from .linear_attention import check_like_q, check_qk, check_state, check_v
from .masks import causal_mask

__all__ = [
    "delta_rule_matrix",
    "solve_unit_lower",
    "delta_rule_parallel",
    "delta_rule_recurrent",
    "delta_rule_chunked",
]


def _check_gates(k: torch.Tensor, beta: torch.Tensor, g: torch.Tensor | None) -> None:
    for name, gate in (("beta", beta), ("g", g)):
        if gate is None:
            continue
        check_tensor(name, gate, ("B", "H", "T"), floating=True)
        if gate.shape != k.shape[:3]:
            raise ValueError(f"{name} must have shape (B, H, T) = {tuple(k.shape[:3])}, got {tuple(gate.shape)}")
        check_like_q(name, gate, k)


def _delta_setup(q, k, beta, g, scale):
    check_qk(q, k)
    _check_gates(k, beta, g)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else check_number("scale", scale)
    return q * scale


def _delta_state(k, v, initial_state):
    B, H, _, D_k = k.shape
    if initial_state is None:
        return k.new_zeros(B, H, D_k, v.shape[-1])
    return check_state("initial_state", initial_state, (B, H, D_k, v.shape[-1]), k)


def _decays(G: torch.Tensor) -> torch.Tensor:
    """``exp(G_i − G_j)`` for ``j ≤ i``, 0 above the diagonal: the decay from position ``j`` to ``i``.

    The positive differences above the diagonal are masked *before* ``exp`` (they could overflow).

    Shapes:
        G: ``(B, H, C)`` cumulative log-decays; output: ``(B, H, C, C)``
    """
    diff = G[..., :, None] - G[..., None, :]  # (B, H, C, C)
    return diff.masked_fill(~causal_mask(G.shape[-1], device=G.device), float("-inf")).exp()


def solve_unit_lower(system: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
    """Solve the unit lower-triangular system ``system @ x = rhs`` in at least float32; ``x`` in ``rhs``'s dtype.

    PyTorch has no half-precision triangular solve (``"triangular_solve" not implemented
    for 'BFloat16'``), and a substitution in 8 bits of mantissa would lose the corrections
    anyway: production kernels (flash-linear-attention's chunked delta rule) build and
    solve this system in float32 whatever the inputs' dtype, as here.

    Only the strict lower triangle of ``system`` is read: its diagonal is taken to be 1 and
    the part above it is ignored, in the solve and in its gradient (zero there), so a
    caller may pass a lower-triangular matrix without masking its diagonal first.

    Shapes:
        system: ``(..., C, C)``; rhs: ``(..., C, N)``; output: ``(..., C, N)``
    """
    work = torch.promote_types(rhs.dtype, torch.float32)
    x = torch.linalg.solve_triangular(system.to(work), rhs.to(work), upper=False, unitriangular=True)
    return x.to(rhs.dtype)


def delta_rule_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor | None = None,
    *,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The (gated) delta rule, one token at a time.

    At each step the state decays by ``α_t = exp(g_t)`` (no decay when ``g`` is None:
    DeltaNet), recalls ``Sᵀ k_t`` for the key, and moves that recall a fraction ``β_t`` of
    the way towards ``v_t``; the output reads the updated state with the scaled query::

        S ← α_t S;   S ← S + β_t k_t (v_t − Sᵀ k_t)ᵀ;   o_t = Sᵀ q_t · scale

    The rule is stable when ``|k_t| = 1`` and ``β_t ∈ [0, 2]`` (then ``I − β k kᵀ`` does not
    expand); :class:`GatedDeltaNet` L2-normalises ``q`` and ``k`` and takes ``β = sigmoid(·)``.

    Args:
        q, k, v: Queries, keys, values (used as given: normalise them first, see :func:`l2_normalize`).
        beta: Writing strength of every token.
        g: Log of the decay of every token (``<= 0``), or None for no decay.
        scale: Multiplies the queries; ``None``: ``1/sqrt(D_k)`` (as Hugging Face and fla do).
        initial_state: ``S`` returned by an earlier call, or None (zeros).

    Returns:
        ``(output, S)``: the final state, to continue decoding from.

    Shapes:
        q, k: ``(B, H, T, D_k)``; v, output: ``(B, H, T, D_v)``; beta, g: ``(B, H, T)``;
        S: ``(B, H, D_k, D_v)``
    """
    q = _delta_setup(q, k, beta, g, scale)
    check_v(k, v)
    S = _delta_state(k, v, initial_state)
    outputs = []
    for t in range(q.shape[2]):
        if g is not None:
            S = S * g[:, :, t, None, None].exp()  # (B, H, D_k, D_v): forget first
        k_t = k[:, :, t]  # (B, H, D_k)
        recalled = (k_t[..., None, :] @ S).squeeze(-2)  # (B, H, D_v): what the state holds for this key
        correction = beta[:, :, t, None] * (v[:, :, t] - recalled)  # (B, H, D_v)
        S = S + k_t[..., :, None] * correction[..., None, :]  # (B, H, D_k, D_v)
        outputs.append((q[:, :, t, None, :] @ S).squeeze(-2))  # (B, H, D_v)
    return torch.stack(outputs, dim=2), S  # (B, H, T, D_v)


def delta_rule_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor | None = None,
    *,
    chunk_size: int = 64,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The (gated) delta rule by chunks, with the WY/UT transform inside each chunk.

    Within a chunk (``G`` the cumulative log-decay from its start, ``Γ_ij = exp(G_i − G_j)``
    for ``j ≤ i``), every token writes ``k_i u_iᵀ`` where the "pseudo-values" ``u`` solve the
    unit lower-triangular system (each ``u_i`` corrects what the earlier writes already recall)::

        (I + strict_lower(diag(β) K Kᵀ ⊙ Γ)) U = diag(β) (V − diag(e^G) K S₀)
        O = diag(e^G) Q S₀ + (Q Kᵀ ⊙ Γ) U
        S = e^{G_last} S₀ + (diag(e^{G_last − G}) K)ᵀ U

    Args:
        chunk_size: Positions per chunk (``>= 1``); ``T`` need not be a multiple of it.
        Others: as in :func:`delta_rule_recurrent`.

    Returns:
        ``(output, S)``, equal to :func:`delta_rule_recurrent`'s.

    Shapes:
        q, k: ``(B, H, T, D_k)``; v, output: ``(B, H, T, D_v)``; beta, g: ``(B, H, T)``;
        S: ``(B, H, D_k, D_v)``
    """
    q = _delta_setup(q, k, beta, g, scale)
    check_v(k, v)
    check_int("chunk_size", chunk_size)
    S = _delta_state(k, v, initial_state)
    # Half-precision inputs are computed in float32 (the state, the decays, the solve) and
    # the results cast back, as production kernels do: a bf16 state drifts over long inputs.
    out_dtype, work = v.dtype, torch.promote_types(v.dtype, torch.float32)
    q, k, v, beta, S = (t.to(work) for t in (q, k, v, beta, S))
    g = None if g is None else g.to(work)
    # An empty start (no initial_state) has S₀ = 0: the first chunk skips the S₀ terms, which
    # are exact zeros (the same numbers, fewer operations to run and differentiate).
    empty = initial_state is None
    outputs = []
    for start in range(0, q.shape[2], chunk_size):
        qc, kc, vc = (x[:, :, start : start + chunk_size] for x in (q, k, v))  # (B, H, C, ·)
        bc = beta[:, :, start : start + chunk_size]  # (B, H, C)
        G = torch.zeros_like(bc) if g is None else g[:, :, start : start + chunk_size].cumsum(dim=-1)  # (B, H, C)
        decays = _decays(G)  # (B, H, C, C)
        # diag(β) K Kᵀ ⊙ Γ is lower triangular (Γ is 0 above the diagonal); the unit solve
        # reads only its strict lower part, which is strict_lower(...) of the system above.
        system = bc[..., :, None] * (kc @ kc.transpose(-1, -2)) * decays  # (B, H, C, C)
        rhs = bc[..., None] * (vc if empty else vc - G.exp()[..., None] * (kc @ S))  # (B, H, C, D_v)
        u = solve_unit_lower(system, rhs)  # (B, H, C, D_v)
        out = ((qc @ kc.transpose(-1, -2)) * decays) @ u  # (B, H, C, D_v)
        outputs.append(out if empty else G.exp()[..., None] * (qc @ S) + out)
        empty = False
        to_end = (G[..., -1:] - G).exp()[..., None]  # (B, H, C, 1): decay from each token to the chunk's end
        S = G[..., -1, None, None].exp() * S + (to_end * kc).transpose(-1, -2) @ u  # (B, H, D_k, D_v)
    return torch.cat(outputs, dim=2).to(out_dtype), S.to(out_dtype)  # (B, H, T, D_v)


def delta_rule_matrix(
    q: torch.Tensor,
    k: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor | None = None,
    *,
    scale: float | None = None,
) -> torch.Tensor:
    """The (gated) delta rule's "attention matrix": ``output = matrix @ v`` from an empty state.

    The output is linear in the values (``q``, ``k``, ``β``, ``g`` fixed), so such a matrix
    exists: it is the chunked form with one chunk, ``(Q Kᵀ ⊙ Γ) (I + strict_lower(diag(β) K Kᵀ ⊙ Γ))⁻¹ diag(β)``.
    Its row ``t`` says how much of each earlier value token ``t`` reads back; running
    :func:`delta_rule_recurrent` on one-hot values gives the same matrix.

    Shapes:
        q, k: ``(B, H, T, D_k)``; beta, g: ``(B, H, T)``; output: ``(B, H, T, T)``
    """
    q = _delta_setup(q, k, beta, g, scale)
    decays = _decays(torch.zeros_like(beta) if g is None else g.cumsum(dim=-1))  # (B, H, T, T)
    # lower triangular; the unit solve reads its strict lower part (delta_rule_chunked)
    system = beta[..., :, None] * (k @ k.transpose(-1, -2)) * decays  # (B, H, T, T)
    writes = solve_unit_lower(system, torch.diag_embed(beta))  # (B, H, T, T)
    return ((q @ k.transpose(-1, -2)) * decays) @ writes  # (B, H, T, T)


def delta_rule_parallel(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor | None = None,
    *,
    scale: float | None = None,
) -> torch.Tensor:
    """The (gated) delta rule in its quadratic form: ``delta_rule_matrix(q, k, beta, g) @ v``.

    Shapes:
        q, k: ``(B, H, T, D_k)``; v, output: ``(B, H, T, D_v)``; beta, g: ``(B, H, T)``
    """
    check_qk(q, k)
    check_v(k, v)
    return delta_rule_matrix(q, k, beta, g, scale=scale) @ v
