"""Linear attention, the delta rule and Gated DeltaNet: attention as a recurrent network with a matrix state.

Replace softmax's ``exp(q·k)`` by a product of features ``φ(q)·φ(k)`` (Katharopoulos et al.,
2020, arXiv 2006.16236) and causal attention becomes a recurrence over a ``D_k × D_v``
state, the sum of the outer products ``φ(k_s) v_sᵀ`` seen so far:

    S_t = S_{t-1} + φ(k_t) v_tᵀ            o_t = S_tᵀ φ(q_t)   (÷ φ(q_t)·z_t, z_t = Σ φ(k_s))

The delta rule (DeltaNet; Yang et al., 2024, arXiv 2406.06484) writes only the part of
``v_t`` that the state does not already recall for ``k_t``, with a strength ``β_t``; Gated
DeltaNet (Yang et al., 2024, arXiv 2412.06464) first lets the state decay by
``α_t = exp(g_t) ∈ (0, 1]``:

    S_t = α_t (I − β_t k_t k_tᵀ) S_{t-1} + β_t k_t v_tᵀ          o_t = S_tᵀ q_t / √D_k

The state is stored ``(D_k, D_v)``, keys along the rows: Hugging Face's and the fla
library's layout, the transpose of the papers' ``S (I − β k kᵀ) + β v kᵀ``.

Every rule comes in three forms of the same computation, tested equal in float64:

* **parallel**: a ``(T, T)`` lower-triangular matrix ``M`` with ``output = M @ V``, the
  layer's "attention matrix" (``*_matrix``): quadratic in ``T``, what the explorer draws;
* **recurrent**: one token at a time, a constant-size state (how a model decodes);
* **chunked**: exact recurrence between chunks, parallel matmuls inside them (how it trains;
  for the delta rule the chunk's updates are folded by the WY/UT transform, a triangular solve).

The layer of Qwen3-Next around the gated delta rule is :class:`attn_core.gated_deltanet.GatedDeltaNet`.

Shape legend:
    B      batch size
    H      heads (``H_k`` query/key heads and ``H_v`` value heads in :class:`GatedDeltaNet`)
    T      positions; ``C`` positions of one chunk (the last chunk may be shorter)
    D_k    width of a query/key head (after the feature map); ``D_v`` width of a value head
    S      the state ``(B, H, D_k, D_v)``; ``z`` linear attention's normaliser ``(B, H, D_k)``
    K      the short convolution's kernel size; ``C_conv`` its channels ``2·H_k·D_k + H_v·D_v``
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from .checks import check_callable, check_choice, check_instance, check_int, check_like, check_number, check_tensor
from .masks import causal_mask

__all__ = [
    "FEATURE_MAPS",
    "get_feature_map",
    "l2_normalize",
    "linear_attention_matrix",
    "linear_attention_parallel",
    "linear_attention_recurrent",
    "linear_attention_chunked",
    "delta_rule_matrix",
    "solve_unit_lower",
    "delta_rule_parallel",
    "delta_rule_recurrent",
    "delta_rule_chunked",
]

#: The named feature maps φ: ``"elu+1"`` (Katharopoulos et al.: positive, so the
#: normaliser never vanishes), ``"relu"``, ``"identity"`` (plain "attention without softmax").
FEATURE_MAPS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "elu+1": lambda x: F.elu(x) + 1.0,
    "relu": F.relu,
    "identity": lambda x: x,
}


def get_feature_map(name: str | Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
    """The function ``φ`` named ``name`` (a key of :data:`FEATURE_MAPS`), or ``name`` itself if callable.

    Raises:
        ValueError: An unknown name.
        TypeError: Neither a string nor callable.
    """
    if isinstance(name, str):
        return FEATURE_MAPS[check_choice("feature_map", name, tuple(FEATURE_MAPS))]
    return check_callable("feature_map", name)


def l2_normalize(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``x / sqrt(|x|² + eps)`` along the last axis (the fla / Hugging Face formula, ``eps`` inside the root).

    Shapes:
        x: ``(..., D)``; output: ``(..., D)``
    """
    check_tensor("x", x, floating=True)
    check_number("eps", eps, low=0.0)
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


def _check_qk(q: torch.Tensor, k: torch.Tensor) -> None:
    check_tensor("q", q, ("B", "H", "T", "D_k"), floating=True)
    check_tensor("k", k, ("B", "H", "T", "D_k"), floating=True)
    if q.shape != k.shape:
        raise ValueError(f"q and k must have the same shape (B, H, T, D_k), got q {tuple(q.shape)}, k {tuple(k.shape)}")
    _like_q("k", k, q)


def _like_q(name: str, t: torch.Tensor, q: torch.Tensor) -> None:
    """Every tensor of one call must have ``q``'s dtype and device.

    Otherwise the three forms would disagree: one promotes a mixed product, another fails inside torch.
    """
    check_like(name, t, q, owner="q", verb="is", fix="give every input q's dtype with .to(q.dtype)")


def _check_v(k: torch.Tensor, v: torch.Tensor) -> None:
    check_tensor("v", v, ("B", "H", "T", "D_v"), floating=True)
    _like_q("v", v, k)
    if v.shape[:3] != k.shape[:3]:
        raise ValueError(f"v must have shape (B, H, T, D_v) = {tuple(k.shape[:3])} + (D_v,), got {tuple(v.shape)}")


def _check_gates(k: torch.Tensor, beta: torch.Tensor, g: torch.Tensor | None) -> None:
    for name, gate in (("beta", beta), ("g", g)):
        if gate is None:
            continue
        check_tensor(name, gate, ("B", "H", "T"), floating=True)
        if gate.shape != k.shape[:3]:
            raise ValueError(f"{name} must have shape (B, H, T) = {tuple(k.shape[:3])}, got {tuple(gate.shape)}")
        _like_q(name, gate, k)


def _check_state(name: str, state: torch.Tensor, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    check_tensor(name, state, floating=True)
    if tuple(state.shape) != shape:
        raise ValueError(f"{name} must have shape {shape}, got {tuple(state.shape)}")
    _like_q(name, state, like)
    return state


# ---------------------------------------------------------------- linear attention


def linear_attention_matrix(
    q: torch.Tensor,
    k: torch.Tensor,
    *,
    feature_map: str | Callable = "elu+1",
    normalize: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """The causal linear-attention matrix: ``output = matrix @ v`` (the parallel form).

    ``M[t, s] = φ(q_t)·φ(k_s)`` for ``s ≤ t`` and 0 above the diagonal; with ``normalize``,
    each row is divided by its sum plus ``eps`` (Katharopoulos et al.'s normaliser).

    Args:
        q, k: Queries and keys (the feature map is applied here).
        feature_map: A name in :data:`FEATURE_MAPS` or a function ``φ``.
        normalize: Divide each row by ``φ(q_t)·Σ_{s≤t} φ(k_s) + eps``.
        eps: Keeps the division finite.

    Shapes:
        q, k: ``(B, H, T, D_k)``; output: ``(B, H, T, T)``
    """
    _check_qk(q, k)
    phi = get_feature_map(feature_map)
    scores = phi(q) @ phi(k).transpose(-1, -2)  # (B, H, T, T)
    # Zero (not -inf): there is no softmax, the future simply contributes nothing.
    scores = scores.masked_fill(~causal_mask(q.shape[2], device=q.device), 0.0)
    if normalize:
        scores = scores / (scores.sum(dim=-1, keepdim=True) + eps)
    return scores


def linear_attention_parallel(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    feature_map: str | Callable = "elu+1",
    normalize: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Causal linear attention in its quadratic form: ``linear_attention_matrix(q, k) @ v``.

    Shapes:
        q, k: ``(B, H, T, D_k)``; v: ``(B, H, T, D_v)``; output: ``(B, H, T, D_v)``
    """
    _check_qk(q, k)
    _check_v(k, v)
    return linear_attention_matrix(q, k, feature_map=feature_map, normalize=normalize, eps=eps) @ v


def _linear_state(q, v, initial_state):
    B, H, _, D_k = q.shape
    if initial_state is None:
        return q.new_zeros(B, H, D_k, v.shape[-1]), q.new_zeros(B, H, D_k)
    check_instance("initial_state", initial_state, tuple)
    if len(initial_state) != 2:
        raise ValueError(f"initial_state must be a pair (S, z), got {len(initial_state)} tensors")
    S = _check_state("initial_state[0] (S)", initial_state[0], (B, H, D_k, v.shape[-1]), v)
    z = _check_state("initial_state[1] (z)", initial_state[1], (B, H, D_k), v)
    return S, z


def linear_attention_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    feature_map: str | Callable = "elu+1",
    normalize: bool = True,
    eps: float = 1e-6,
    initial_state: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """Causal linear attention as a recurrent network, one token at a time.

    ``S_t = S_{t-1} + φ(k_t) v_tᵀ``, ``z_t = z_{t-1} + φ(k_t)``, ``o_t = S_tᵀ φ(q_t)``
    (divided by ``φ(q_t)·z_t + eps`` with ``normalize``).

    Args:
        q, k, v: Queries, keys, values.
        feature_map, normalize, eps: As in :func:`linear_attention_matrix`.
        initial_state: ``(S, z)`` returned by an earlier call (continue a sequence), or None (zeros).

    Returns:
        ``(output, (S, z))``: the final state, to continue decoding from.

    Shapes:
        q, k: ``(B, H, T, D_k)``; v, output: ``(B, H, T, D_v)``; S: ``(B, H, D_k, D_v)``; z: ``(B, H, D_k)``
    """
    _check_qk(q, k)
    _check_v(k, v)
    S, z = _linear_state(q, v, initial_state)
    phi = get_feature_map(feature_map)
    fq, fk = phi(q), phi(k)  # (B, H, T, D_k)
    outputs = []
    for t in range(q.shape[2]):
        S = S + fk[:, :, t, :, None] * v[:, :, t, None, :]  # (B, H, D_k, D_v): add one outer product
        z = z + fk[:, :, t]  # (B, H, D_k)
        o = (fq[:, :, t, None, :] @ S).squeeze(-2)  # (B, H, D_v)
        if normalize:
            o = o / ((fq[:, :, t] * z).sum(dim=-1, keepdim=True) + eps)
        outputs.append(o)
    return torch.stack(outputs, dim=2), (S, z)  # (B, H, T, D_v)


def linear_attention_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    chunk_size: int = 64,
    feature_map: str | Callable = "elu+1",
    normalize: bool = True,
    eps: float = 1e-6,
    initial_state: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """Causal linear attention by chunks: the state carries the past, a masked matmul covers the chunk.

    For a chunk ``c`` starting from state ``S``: ``O_c = φ(Q_c) S + (φ(Q_c) φ(K_c)ᵀ ⊙ causal) V_c``,
    then ``S ← S + φ(K_c)ᵀ V_c``. ``T`` need not be a multiple of ``chunk_size``.

    Args:
        chunk_size: Positions per chunk (``>= 1``); 1 is the recurrent form, ``>= T`` the parallel one.
        Others: as in :func:`linear_attention_recurrent`.

    Returns:
        ``(output, (S, z))``, equal to :func:`linear_attention_recurrent`'s.

    Shapes:
        q, k: ``(B, H, T, D_k)``; v, output: ``(B, H, T, D_v)``; S: ``(B, H, D_k, D_v)``; z: ``(B, H, D_k)``
    """
    _check_qk(q, k)
    _check_v(k, v)
    check_int("chunk_size", chunk_size)
    S, z = _linear_state(q, v, initial_state)
    phi = get_feature_map(feature_map)
    fq, fk = phi(q), phi(k)  # (B, H, T, D_k)
    outputs = []
    for start in range(0, q.shape[2], chunk_size):
        qc, kc, vc = (x[:, :, start : start + chunk_size] for x in (fq, fk, v))  # (B, H, C, ·)
        intra = (qc @ kc.transpose(-1, -2)).masked_fill(~causal_mask(qc.shape[2], device=q.device), 0.0)  # (B, H, C, C)
        o = qc @ S + intra @ vc  # (B, H, C, D_v): the past through the state, the chunk directly
        if normalize:
            o = o / ((qc @ z[..., None]) + intra.sum(dim=-1, keepdim=True) + eps)  # (B, H, C, 1) denominators
        outputs.append(o)
        S = S + kc.transpose(-1, -2) @ vc  # (B, H, D_k, D_v)
        z = z + kc.sum(dim=2)  # (B, H, D_k)
    return torch.cat(outputs, dim=2), (S, z)  # (B, H, T, D_v)


# ---------------------------------------------------------------- the (gated) delta rule


def _delta_setup(q, k, beta, g, scale):
    _check_qk(q, k)
    _check_gates(k, beta, g)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else check_number("scale", scale)
    return q * scale


def _delta_state(k, v, initial_state):
    B, H, _, D_k = k.shape
    if initial_state is None:
        return k.new_zeros(B, H, D_k, v.shape[-1])
    return _check_state("initial_state", initial_state, (B, H, D_k, v.shape[-1]), k)


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
    _check_v(k, v)
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
    _check_v(k, v)
    check_int("chunk_size", chunk_size)
    S = _delta_state(k, v, initial_state)
    # Half-precision inputs are computed in float32 (the state, the decays, the solve) and
    # the results cast back, as production kernels do: a bf16 state drifts over long inputs.
    out_dtype, work = v.dtype, torch.promote_types(v.dtype, torch.float32)
    q, k, v, beta, S = (t.to(work) for t in (q, k, v, beta, S))
    g = None if g is None else g.to(work)
    outputs = []
    for start in range(0, q.shape[2], chunk_size):
        qc, kc, vc = (x[:, :, start : start + chunk_size] for x in (q, k, v))  # (B, H, C, ·)
        bc = beta[:, :, start : start + chunk_size]  # (B, H, C)
        G = torch.zeros_like(bc) if g is None else g[:, :, start : start + chunk_size].cumsum(dim=-1)  # (B, H, C)
        decays = _decays(G)  # (B, H, C, C)
        C = qc.shape[2]
        strictly_lower = torch.ones(C, C, dtype=torch.bool, device=q.device).tril(-1)
        system = (bc[..., :, None] * (kc @ kc.transpose(-1, -2)) * decays).masked_fill(~strictly_lower, 0.0)
        system = system + torch.eye(C, dtype=q.dtype, device=q.device)  # (B, H, C, C), unit lower triangular
        rhs = bc[..., None] * (vc - G.exp()[..., None] * (kc @ S))  # (B, H, C, D_v)
        u = solve_unit_lower(system, rhs)  # (B, H, C, D_v)
        outputs.append(G.exp()[..., None] * (qc @ S) + ((qc @ kc.transpose(-1, -2)) * decays) @ u)
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
    T = q.shape[2]
    decays = _decays(torch.zeros_like(beta) if g is None else g.cumsum(dim=-1))  # (B, H, T, T)
    strictly_lower = torch.ones(T, T, dtype=torch.bool, device=q.device).tril(-1)
    system = (beta[..., :, None] * (k @ k.transpose(-1, -2)) * decays).masked_fill(~strictly_lower, 0.0)
    system = system + torch.eye(T, dtype=q.dtype, device=q.device)  # (B, H, T, T)
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
    _check_qk(q, k)
    _check_v(k, v)
    return delta_rule_matrix(q, k, beta, g, scale=scale) @ v
