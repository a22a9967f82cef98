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

:class:`GatedDeltaNet` is the layer of Qwen3-Next around the gated delta rule.

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
from torch import nn

from .cache import storage_like
from .checks import check_callable, check_choice, check_instance, check_int, check_number, check_tensor
from .masks import causal_mask
from .norms import RMSNorm
from .shapes import merge_heads, split_heads

__all__ = [
    "FEATURE_MAPS",
    "get_feature_map",
    "l2_normalize",
    "linear_attention_matrix",
    "linear_attention_parallel",
    "linear_attention_recurrent",
    "linear_attention_chunked",
    "delta_rule_matrix",
    "delta_rule_parallel",
    "delta_rule_recurrent",
    "delta_rule_chunked",
    "GatedDeltaNet",
    "GatedDeltaNetCache",
    "copy_gated_deltanet",
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


def _check_v(k: torch.Tensor, v: torch.Tensor) -> None:
    check_tensor("v", v, ("B", "H", "T", "D_v"), floating=True)
    if v.shape[:3] != k.shape[:3]:
        raise ValueError(f"v must have shape (B, H, T, D_v) = {tuple(k.shape[:3])} + (D_v,), got {tuple(v.shape)}")


def _check_gates(k: torch.Tensor, beta: torch.Tensor, g: torch.Tensor | None) -> None:
    for name, gate in (("beta", beta), ("g", g)):
        if gate is None:
            continue
        check_tensor(name, gate, ("B", "H", "T"), floating=True)
        if gate.shape != k.shape[:3]:
            raise ValueError(f"{name} must have shape (B, H, T) = {tuple(k.shape[:3])}, got {tuple(gate.shape)}")


def _check_state(name: str, state: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    check_tensor(name, state, floating=True)
    if tuple(state.shape) != shape:
        raise ValueError(f"{name} must have shape {shape}, got {tuple(state.shape)}")
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
    S = _check_state("initial_state[0] (S)", initial_state[0], (B, H, D_k, v.shape[-1]))
    z = _check_state("initial_state[1] (z)", initial_state[1], (B, H, D_k))
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
    return _check_state("initial_state", initial_state, (B, H, D_k, v.shape[-1]))


def _decays(G: torch.Tensor) -> torch.Tensor:
    """``exp(G_i − G_j)`` for ``j ≤ i``, 0 above the diagonal: the decay from position ``j`` to ``i``.

    The positive differences above the diagonal are masked *before* ``exp`` (they could overflow).

    Shapes:
        G: ``(B, H, C)`` cumulative log-decays; output: ``(B, H, C, C)``
    """
    diff = G[..., :, None] - G[..., None, :]  # (B, H, C, C)
    return diff.masked_fill(~causal_mask(G.shape[-1], device=G.device), float("-inf")).exp()


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
        u = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)  # (B, H, C, D_v)
        outputs.append(G.exp()[..., None] * (qc @ S) + ((qc @ kc.transpose(-1, -2)) * decays) @ u)
        to_end = (G[..., -1:] - G).exp()[..., None]  # (B, H, C, 1): decay from each token to the chunk's end
        S = G[..., -1, None, None].exp() * S + (to_end * kc).transpose(-1, -2) @ u  # (B, H, D_k, D_v)
    return torch.cat(outputs, dim=2), S  # (B, H, T, D_v)


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
    writes = torch.linalg.solve_triangular(system, torch.diag_embed(beta), upper=False, unitriangular=True)
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


# ---------------------------------------------------------------- the Gated DeltaNet layer


class GatedDeltaNetCache:
    """What :class:`GatedDeltaNet` carries between decoding steps: constant size, whatever the length.

    Attributes:
        conv_state: The last ``K - 1`` inputs of the short convolution (zeros at the start:
            the same left padding as a full forward).
        state: The delta rule's state ``S``.
        size: Positions seen so far.

    Like every cache it stores values, not the autograd graph (decode under ``torch.no_grad()``).

    Shapes:
        conv_state: ``(B, C_conv, K - 1)``; state: ``(B, H_v, D_k, D_v)``
    """

    def __init__(
        self,
        batch_size: int,
        conv_channels: int,
        conv_size: int,
        n_heads: int,
        head_dim: int,
        value_head_dim: int,
        *,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> None:
        check_int("batch_size", batch_size)
        self.conv_state = torch.zeros(batch_size, conv_channels, conv_size - 1, dtype=dtype, device=device)
        self.state = torch.zeros(batch_size, n_heads, head_dim, value_head_dim, dtype=dtype, device=device)
        self.size = 0

    def reset(self) -> None:
        """Back to an empty sequence."""
        self.conv_state.zero_()
        self.state.zero_()
        self.size = 0


class GatedDeltaNet(nn.Module):
    """Gated DeltaNet, the linear-attention layer of Qwen3-Next (Yang et al., arXiv 2412.06464).

    From ``x``: queries, keys, values through a causal depthwise convolution of ``conv_size``
    taps and SiLU; ``q``, ``k`` L2-normalised; ``β = sigmoid(x W_β)``; the decay
    ``g = −exp(A_log) · softplus(x W_a + dt_bias)`` (so ``α = exp(g) ∈ (0, 1)``); the gated
    delta rule (chunked); per value head an RMSNorm gated by ``SiLU(x W_z)``; the output
    projection. With ``n_value_heads = r · n_heads`` each query/key head serves ``r``
    consecutive value heads.

    It follows the attention-layer protocol: ``forward(x, *, mask=None, kv_cache=None,
    return_weights=False)`` and ``make_cache(batch_size, max_len)``.

    Args:
        d_model: Width of the input and output.
        n_heads: Query/key heads ``H_k``.
        head_dim: Width ``D_k`` of a query/key head.
        n_value_heads: Value heads ``H_v`` (a multiple of ``n_heads``); default ``n_heads``.
        value_head_dim: Width ``D_v`` of a value head; default ``head_dim``.
        conv_size: Taps ``K`` of the short convolution (``>= 1``; 1 is a per-channel scale).
        chunk_size: Chunk length of the chunked delta rule.
        norm_eps: The output RMSNorm's ``eps``.

    Shapes:
        x, output: ``(B, T, d_model)``; weights: ``(B, H_v, T, T)``
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        head_dim: int,
        *,
        n_value_heads: int | None = None,
        value_head_dim: int | None = None,
        conv_size: int = 4,
        chunk_size: int = 64,
        norm_eps: float = 1e-6,
    ) -> None:
        super().__init__()
        self.d_model, self.n_heads = check_int("d_model", d_model), check_int("n_heads", n_heads)
        self.head_dim = check_int("head_dim", head_dim)
        self.n_value_heads = n_heads if n_value_heads is None else check_int("n_value_heads", n_value_heads)
        self.value_head_dim = head_dim if value_head_dim is None else check_int("value_head_dim", value_head_dim)
        if self.n_value_heads % n_heads:
            raise ValueError(f"n_value_heads={self.n_value_heads} is not a multiple of n_heads={n_heads}")
        self.conv_size, self.chunk_size = check_int("conv_size", conv_size), check_int("chunk_size", chunk_size)
        key_width, value_width = n_heads * head_dim, self.n_value_heads * self.value_head_dim
        self.q_proj = nn.Linear(d_model, key_width, bias=False)
        self.k_proj = nn.Linear(d_model, key_width, bias=False)
        self.v_proj = nn.Linear(d_model, value_width, bias=False)
        self.gate_proj = nn.Linear(d_model, value_width, bias=False)  # z: the output gate
        self.beta_proj = nn.Linear(d_model, self.n_value_heads, bias=False)  # b: the writing strength
        self.decay_proj = nn.Linear(d_model, self.n_value_heads, bias=False)  # a: the decay's time step
        channels = 2 * key_width + value_width
        # Depthwise (groups = channels): each channel mixes only its own last K positions.
        self.conv = nn.Conv1d(channels, channels, conv_size, groups=channels, bias=False)
        # Mamba-2's parametrisation: A ∈ [1, 16] and a time step dt ∈ [1e-3, 0.1] at init,
        # dt_bias = softplus⁻¹(dt) so that softplus(0 + dt_bias) = dt.
        self.A_log = nn.Parameter(torch.empty(self.n_value_heads).uniform_(1.0, 16.0).log())
        dt = torch.empty(self.n_value_heads).uniform_(math.log(1e-3), math.log(0.1)).exp()
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self.norm = RMSNorm(self.value_head_dim, eps=norm_eps)
        self.out_proj = nn.Linear(value_width, d_model, bias=False)

    def make_cache(self, batch_size: int, max_len: int | None = None, *, dtype=None, device=None) -> GatedDeltaNetCache:
        """An empty :class:`GatedDeltaNetCache`; ``max_len`` is accepted for the protocol and unused (constant size)."""
        return GatedDeltaNetCache(
            batch_size, self.conv.in_channels, self.conv_size, self.n_value_heads, self.head_dim,
            self.value_head_dim, **storage_like(self.q_proj.weight, dtype, device),
        )  # fmt: skip

    def forward(
        self,
        x: torch.Tensor,
        *,
        mask: torch.Tensor | None = None,
        kv_cache: GatedDeltaNetCache | None = None,
        return_weights: bool = False,
    ):
        """Run the layer on a sequence, or on the next tokens of one with ``kv_cache``.

        Args:
            x: The input.
            mask: Must be None: the layer is causal by construction and has no mask to combine.
            kv_cache: A cache from :meth:`make_cache`, updated in place; None: start from zeros.
            return_weights: Also return the gated delta rule's matrix (``core = weights @ v``,
                before the norm and gate; see :func:`delta_rule_matrix`). Not with a cache.

        Returns:
            The output, or ``(output, weights)``.

        Shapes:
            x, output: ``(B, T, d_model)``; weights: ``(B, H_v, T, T)``
        """
        check_tensor("x", x, ("B", "T", ("d_model", self.d_model)), floating=True)
        if mask is not None:
            raise ValueError("GatedDeltaNet is causal by construction and takes no mask, got a mask")
        check_instance("kv_cache", kv_cache, GatedDeltaNetCache, optional=True)
        if kv_cache is not None and return_weights:
            raise ValueError("return_weights=True needs a whole sequence from an empty state, got a kv_cache")
        B, T, _ = x.shape
        if kv_cache is not None and kv_cache.conv_state.shape[0] != B:
            raise ValueError(f"kv_cache was made for batch_size={kv_cache.conv_state.shape[0]}, got x with B={B}")

        qkv = torch.cat([self.q_proj(x), self.k_proj(x), self.v_proj(x)], dim=-1).transpose(1, 2)  # (B, C_conv, T)
        history = x.new_zeros(B, qkv.shape[1], self.conv_size - 1) if kv_cache is None else kv_cache.conv_state
        padded = torch.cat([history.to(qkv.dtype), qkv], dim=-1)  # (B, C_conv, K - 1 + T): causal left padding
        mixed = F.silu(F.conv1d(padded, self.conv.weight, groups=self.conv.groups))  # (B, C_conv, T)
        key_width = self.n_heads * self.head_dim
        q, k, v = mixed.transpose(1, 2).split([key_width, key_width, mixed.shape[1] - 2 * key_width], dim=-1)
        r = self.n_value_heads // self.n_heads
        # (B, H_k, T, D_k) -> (B, H_v, T, D_k): value head h reads query/key head h // r
        q, k = (l2_normalize(split_heads(t, self.n_heads)).repeat_interleave(r, dim=1) for t in (q, k))
        v = split_heads(v, self.n_value_heads)  # (B, H_v, T, D_v)
        beta = torch.sigmoid(self.beta_proj(x)).transpose(1, 2)  # (B, H_v, T)
        g = (-self.A_log.exp() * F.softplus(self.decay_proj(x) + self.dt_bias)).transpose(1, 2)  # (B, H_v, T)

        state = None if kv_cache is None else kv_cache.state.to(x.dtype)
        core, state = delta_rule_chunked(q, k, v, beta, g, chunk_size=self.chunk_size, initial_state=state)
        if kv_cache is not None:  # store values, not the graph
            kv_cache.conv_state.copy_(padded[..., padded.shape[-1] - (self.conv_size - 1) :].detach())
            kv_cache.state.copy_(state.detach())
            kv_cache.size += T

        z = split_heads(self.gate_proj(x), self.n_value_heads)  # (B, H_v, T, D_v)
        out = self.out_proj(merge_heads(self.norm(core) * F.silu(z)))  # (B, T, d_model)
        if return_weights:
            return out, delta_rule_matrix(q, k, beta, g)
        return out

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, n_heads={self.n_heads}, head_dim={self.head_dim}, "
            f"n_value_heads={self.n_value_heads}, value_head_dim={self.value_head_dim}, conv_size={self.conv_size}"
        )


def copy_gated_deltanet(ours: GatedDeltaNet, hf: nn.Module) -> GatedDeltaNet:
    """Copy the weights of Hugging Face's ``Qwen3NextGatedDeltaNet`` into ``ours`` (never imports transformers).

    Hugging Face fuses the projections per query/key head: ``in_proj_qkvz`` rows are, for
    each of the ``H_k`` heads, ``[q (D_k), k (D_k), v (r·D_v), z (r·D_v)]``, and
    ``in_proj_ba`` rows ``[b (r), a (r)]``; they are unfused here into our six projections.
    The convolution, ``A_log``, ``dt_bias``, the norm's gain and ``out_proj`` copy as they are.

    Raises:
        TypeError: ``ours`` is not a :class:`GatedDeltaNet`.
        ValueError: The two layers' sizes differ (the message names both).
    """
    check_instance("ours", ours, GatedDeltaNet)
    sizes = {
        "d_model": (ours.d_model, hf.hidden_size), "n_heads": (ours.n_heads, hf.num_k_heads),
        "head_dim": (ours.head_dim, hf.head_k_dim), "n_value_heads": (ours.n_value_heads, hf.num_v_heads),
        "value_head_dim": (ours.value_head_dim, hf.head_v_dim), "conv_size": (ours.conv_size, hf.conv_kernel_size),
    }  # fmt: skip
    for name, (mine, theirs) in sizes.items():
        if mine != theirs:
            raise ValueError(f"{name} differs: ours has {name}={mine}, the Hugging Face layer {theirs}")
    H_k, D_k, D_v = ours.n_heads, ours.head_dim, ours.value_head_dim
    r = ours.n_value_heads // H_k
    with torch.no_grad():
        fused = hf.in_proj_qkvz.weight.reshape(H_k, 2 * D_k + 2 * r * D_v, ours.d_model)  # rows grouped per k-head
        q, k, v, z = fused.split([D_k, D_k, r * D_v, r * D_v], dim=1)
        for proj, w in ((ours.q_proj, q), (ours.k_proj, k), (ours.v_proj, v), (ours.gate_proj, z)):
            proj.weight.copy_(w.reshape(-1, ours.d_model))  # (H·width, d_model), heads in order
        b, a = hf.in_proj_ba.weight.reshape(H_k, 2 * r, ours.d_model).split([r, r], dim=1)
        ours.beta_proj.weight.copy_(b.reshape(-1, ours.d_model))  # (H_v, d_model)
        ours.decay_proj.weight.copy_(a.reshape(-1, ours.d_model))
        ours.conv.weight.copy_(hf.conv1d.weight)  # (C_conv, 1, K), channels [q | k | v] in both
        ours.A_log.copy_(hf.A_log)
        ours.dt_bias.copy_(hf.dt_bias)
        ours.norm.weight.copy_(hf.norm.weight)
        ours.out_proj.weight.copy_(hf.out_proj.weight)
    return ours
