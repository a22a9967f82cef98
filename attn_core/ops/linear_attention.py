"""Linear attention: attention as a recurrent network with a matrix state.

Replace softmax's ``exp(q·k)`` by a product of features ``φ(q)·φ(k)`` (Katharopoulos et al.,
2020, arXiv 2006.16236) and causal attention becomes a recurrence over a ``D_k × D_v``
state, the sum of the outer products ``φ(k_s) v_sᵀ`` seen so far:

    S_t = S_{t-1} + φ(k_t) v_tᵀ            o_t = S_tᵀ φ(q_t)   (÷ φ(q_t)·z_t, z_t = Σ φ(k_s))

The state is stored ``(D_k, D_v)``, keys along the rows: Hugging Face's and the fla
library's layout. The delta rule and Gated DeltaNet, which write into the same state, are
in :mod:`attn_core.ops.delta_rule`; the ``check_*`` functions here are the input checks both share.

Every rule comes in three forms of the same computation, tested equal in float64:

* **parallel**: a ``(T, T)`` lower-triangular matrix ``M`` with ``output = M @ V``, the
  layer's "attention matrix" (``*_matrix``): quadratic in ``T``, what the explorer draws;
* **recurrent**: one token at a time, a constant-size state (how a model decodes);
* **chunked**: exact recurrence between chunks, parallel matmuls inside them (how it trains).

Shape legend:
    B      batch size
    H      heads
    T      positions; ``C`` positions of one chunk (the last chunk may be shorter)
    D_k    width of a query/key head (after the feature map); ``D_v`` width of a value head
    S      the state ``(B, H, D_k, D_v)``; ``z`` linear attention's normaliser ``(B, H, D_k)``
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..checks import (
    check_callable,
    check_choice,
    check_instance,
    check_int,
    check_like,
    check_number,
    check_tensor,
)
from .masks import causal_mask

__all__ = [
    "FEATURE_MAPS",
    "get_feature_map",
    "l2_normalize",
    "linear_attention_matrix",
    "linear_attention_parallel",
    "linear_attention_recurrent",
    "linear_attention_chunked",
    "check_qk",
    "check_v",
    "check_like_q",
    "check_state",
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


def check_qk(q: torch.Tensor, k: torch.Tensor) -> None:
    """Check the queries and keys of a linear-attention or delta-rule call: floating, one shape, one dtype.

    Shapes:
        q, k: ``(B, H, T, D_k)``

    Raises:
        TypeError / ValueError: Not floating tensors of that rank, different shapes, dtypes or devices.
    """
    check_tensor("q", q, ("B", "H", "T", "D_k"), floating=True)
    check_tensor("k", k, ("B", "H", "T", "D_k"), floating=True)
    if q.shape != k.shape:
        raise ValueError(f"q and k must have the same shape (B, H, T, D_k), got q {tuple(q.shape)}, k {tuple(k.shape)}")
    check_like_q("k", k, q)


def check_like_q(name: str, t: torch.Tensor, q: torch.Tensor) -> None:
    """Check that ``t`` (called ``name``) has ``q``'s dtype and device: every tensor of one call must.

    Otherwise the three forms would disagree: one promotes a mixed product, another fails inside torch.
    """
    check_like(name, t, q, owner="q", verb="is", fix="give every input q's dtype with .to(q.dtype)")


def check_v(k: torch.Tensor, v: torch.Tensor) -> None:
    """Check the values against the keys: floating, same ``(B, H, T)``, dtype and device.

    Shapes:
        k: ``(B, H, T, D_k)``; v: ``(B, H, T, D_v)``

    Raises:
        TypeError / ValueError: A wrong rank, leading shape, dtype or device (the shapes named).
    """
    check_tensor("v", v, ("B", "H", "T", "D_v"), floating=True)
    check_like_q("v", v, k)
    if v.shape[:3] != k.shape[:3]:
        raise ValueError(f"v must have shape (B, H, T, D_v) = {tuple(k.shape[:3])} + (D_v,), got {tuple(v.shape)}")


def check_state(name: str, state: torch.Tensor, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    """Return ``state`` (called ``name``) if it is a floating tensor of ``shape`` like ``like``; raise otherwise.

    Raises:
        TypeError / ValueError: Not floating, another shape (both named), dtype or device.
    """
    check_tensor(name, state, floating=True)
    if tuple(state.shape) != shape:
        raise ValueError(f"{name} must have shape {shape}, got {tuple(state.shape)}")
    check_like_q(name, state, like)
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
    check_qk(q, k)
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
    check_qk(q, k)
    check_v(k, v)
    return linear_attention_matrix(q, k, feature_map=feature_map, normalize=normalize, eps=eps) @ v


def _linear_state(q, v, initial_state):
    B, H, _, D_k = q.shape
    if initial_state is None:
        return q.new_zeros(B, H, D_k, v.shape[-1]), q.new_zeros(B, H, D_k)
    check_instance("initial_state", initial_state, tuple)
    if len(initial_state) != 2:
        raise ValueError(f"initial_state must be a pair (S, z), got {len(initial_state)} tensors")
    S = check_state("initial_state[0] (S)", initial_state[0], (B, H, D_k, v.shape[-1]), v)
    z = check_state("initial_state[1] (z)", initial_state[1], (B, H, D_k), v)
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
    check_qk(q, k)
    check_v(k, v)
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
    check_qk(q, k)
    check_v(k, v)
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
