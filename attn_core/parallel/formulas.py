"""What each scheme should cost one rank, by formula: to hold against what :mod:`.cost` measures.

Bytes (one attention call, forward pass; the backward pass in brackets), for a sequence of
``T`` tokens cut into ``W`` shards of ``T_l = T / W``, ``e`` bytes per element:

* **ring** (contiguous or zig-zag: the layout changes the work, not the traffic): the
  key/value shard, ``B · H_kv · T_l · (D + D_v) · e``, is sent and received ``W - 1`` times
  (backward: the key/value shard ``W - 1`` times more, and its gradients ``W`` times, the
  last hop taking them home);
* **Ulysses**: each all-to-all keeps ``1 / W`` of a tensor at home and exchanges the rest:
  ``(W - 1) / W`` of the q, k and v shards (k and v with their key/value heads repeated
  to split, :func:`.ulysses.kv_head_repeats`) and of the output shard (backward: the same
  tensors' gradients, in the opposite direction);
* **all-gather** (Llama 3's context parallelism, :mod:`.allgather`): every rank receives
  the ``W - 1`` other key/value shards and hands its own to ``W - 1`` ranks (backward: each
  rank sends the other ranks its gradients for their shards, the same amount).

Work: the number of query-key scores a rank computes, ``Σ T_q · T_k`` over its blocks
(:func:`ring_scores`), the unit in which zig-zag's balance shows.
"""

from __future__ import annotations

from ..checks import check_bool, check_choice, check_int
from .sharding import chunk_length
from .ulysses import kv_head_repeats

__all__ = ["ring_bytes", "ulysses_bytes", "allgather_bytes", "scheme_bytes", "ring_scores", "SCHEMES"]

# The schemes by name: the two ring layouts send the same bytes.
SCHEMES = ("ring", "ring-zigzag", "ulysses", "allgather")


def _shard_elements(B: int, heads: int, T: int, W: int, width: int) -> int:
    """Elements of one rank's shard of a ``(B, heads, T, width)`` tensor."""
    return B * heads * (T // W) * width


def _check(B, H, H_kv, T, D, D_v, W, element_size) -> int:
    for name, value in (
        ("B", B),
        ("H", H),
        ("H_kv", H_kv),
        ("T", T),
        ("D", D),
        ("W", W),
        ("element_size", element_size),
    ):
        check_int(name, value)
    D_v = D if D_v is None else check_int("D_v", D_v)
    if T % W:
        raise ValueError(f"T={T} is not divisible by W={W}")
    return D_v


def ring_bytes(
    *, B: int, H_kv: int, T: int, D: int, W: int, element_size: int, D_v: int | None = None, backward: bool = False
) -> int:
    """Bytes one rank sends (and, as many, receives) in :func:`ring_attention <.ring.ring_attention>`.

    Returns:
        ``(W - 1) · B · H_kv · T_l · (D + D_v) · e``; with ``backward``, the backward pass's
        ``(W - 1) · B · H_kv · T_l · (D + D_v) · e + W · B · H_kv · T_l · (D + D_v) · e_g``
        instead: the key/value blocks go round again in the inputs' dtype, their gradients
        travel in the ring's accumulation dtype, ``e_g = max(e, 4)`` (half-precision inputs
        accumulate in float32), so with float32 and float64 it is ``(2W - 1)`` blocks.

    Raises:
        TypeError, ValueError: Non-int or non-positive sizes; ``T`` not divisible by ``W``.
    """
    D_v = _check(B, H_kv, H_kv, T, D, D_v, W, element_size)
    elements = _shard_elements(B, H_kv, T, W, D + D_v)
    sent = (W - 1) * elements * element_size
    if backward:
        # dK, dV are accumulated (and sent) in float32 at least: see ring.py's ``work`` dtype.
        sent += W * elements * max(element_size, 4)
    return sent


def ulysses_bytes(
    *, B: int, H: int, H_kv: int, T: int, D: int, W: int, element_size: int, D_v: int | None = None
) -> int:
    """Bytes one rank sends (and, as many, receives) in :func:`ulysses_attention <.ulysses.ulysses_attention>`.

    The backward pass moves the same amount (the gradients of the same tensors).

    Returns:
        ``(W - 1) / W · B · T_l · (H·D + H_kv'·(D + D_v) + H·D_v) · e``, with ``H_kv'`` the
        key/value heads after repeating (``H_kv · kv_head_repeats(H_kv, W)``).

    Raises:
        TypeError, ValueError: As :func:`ring_bytes`.
    """
    D_v = _check(B, H, H_kv, T, D, D_v, W, element_size)
    if H % W:
        raise ValueError(f"Ulysses splits the heads: H={H} is not divisible by W={W}")
    kv_heads = H_kv * kv_head_repeats(H_kv, W)
    per_row = H * D + kv_heads * (D + D_v) + H * D_v  # q, k, v in; the output back
    # Every term of per_row splits evenly over the W ranks (H and H_kv' are multiples of W).
    return (W - 1) * B * (T // W) * (per_row // W) * element_size


def allgather_bytes(*, B: int, H_kv: int, T: int, D: int, W: int, element_size: int, D_v: int | None = None) -> int:
    """Bytes one rank receives (and, logically, sends) in :func:`allgather_attention <.allgather.allgather_attention>`.

    The backward pass moves the same amount (each shard's gradients, summed on its owner).

    Returns:
        ``(W - 1) · B · H_kv · T_l · (D + D_v) · e``: the same as the ring's forward pass,
        received all at once instead of one block per step (the whole ``K, V`` resident).

    Raises:
        TypeError, ValueError: As :func:`ring_bytes`.
    """
    D_v = _check(B, H_kv, H_kv, T, D, D_v, W, element_size)
    return (W - 1) * _shard_elements(B, H_kv, T, W, D + D_v) * element_size


def scheme_bytes(
    scheme: str,
    *,
    B: int,
    H: int,
    H_kv: int,
    T: int,
    D: int,
    W: int,
    element_size: int,
    D_v: int | None = None,
    backward: bool = False,
) -> int:
    """Bytes one rank sends (and receives) in one call of ``scheme``, forward or backward, by name.

    Args:
        scheme: One of :data:`SCHEMES` (``"ring"``, ``"ring-zigzag"``, ``"ulysses"``, ``"allgather"``).
        B, H, H_kv, T, D, W: Batch, query heads, key/value heads, sequence length, head width, ranks.
        element_size: Bytes per element (4 for float32).
        D_v: Value width per head; default ``D``.
        backward: The backward pass's bytes instead of the forward pass's.

    Raises:
        ValueError: An unknown scheme, or sizes the scheme's formula refuses.
    """
    check_choice("scheme", scheme, SCHEMES)
    check_bool("backward", backward)
    sizes = dict(B=B, H_kv=H_kv, T=T, D=D, W=W, element_size=element_size, D_v=D_v)
    if scheme.startswith("ring"):
        return ring_bytes(**sizes, backward=backward)
    if scheme == "ulysses":
        return ulysses_bytes(**sizes, H=H)
    return allgather_bytes(**sizes)


def ring_scores(T: int, W: int, *, layout: str = "contiguous", is_causal: bool = False) -> list[int]:
    """Query-key scores each rank computes in the ring's forward pass (per batch row and head), by rank.

    A block of keys wholly in a query chunk's future is skipped; the diagonal block is
    computed whole (half of it masked). Without a mask every rank computes ``T_l · T``.
    Causal and contiguous: rank ``r`` computes its ``r`` earlier chunks and its diagonal,
    ``(r + 1) · T_l²``: rank ``W - 1`` does ``W`` times the work of rank 0. Zig-zag, with
    chunks of ``c = T / 2W``: chunk ``r`` meets ``r + 1`` key chunks and chunk ``2W - 1 - r``
    meets ``2W - r``, so every rank computes ``(2W + 1) · c²``.

    Returns:
        One count per rank.

    Raises:
        ValueError: ``T`` not divisible by the layout's number of chunks; an unknown layout.
    """
    check_bool("is_causal", is_causal)
    c = chunk_length(T, W, layout)  # T_l (contiguous) or T / 2W (zig-zag)
    if not is_causal:
        return [(T // W) * T] * W
    if layout == "contiguous":
        return [(r + 1) * c * c for r in range(W)]
    return [(2 * W + 1) * c * c for _ in range(W)]
