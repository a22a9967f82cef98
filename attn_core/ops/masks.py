"""Boolean attention masks built from positions.

Convention (the same as PyTorch's ``scaled_dot_product_attention``): a mask is a
boolean tensor where ``True`` means *may attend* and ``False`` means *blocked*.

Masks are built on demand from ``torch.arange`` for the lengths at hand. There is no
buffer sized by a "maximum context length": such a buffer silently breaks on inputs
longer than the maximum, and wastes memory on short ones.

Shape legend:
    B    batch size
    T    sequence length (when queries and keys have the same length)
    T_q  number of queries
    T_k  number of keys (= values)
"""

from __future__ import annotations

import torch

from ..checks import check_int, check_tensor

__all__ = ["causal_mask", "padding_mask", "position_mask", "check_window", "combine_masks"]


def check_window(window: object, name: str = "window") -> int | None:
    """``window`` as an int ``>= 1``, or None (no window).

    A window of ``w`` lets a query see itself and the ``w - 1`` keys before it (the
    convention of Mistral, Gemma and gpt-oss: ``q - w < k <= q``).

    Raises:
        TypeError: Not an int (or None).
        ValueError: ``window <= 0``, naming the value.
    """
    if window is None:
        return None
    if isinstance(window, bool) or not isinstance(window, int):
        raise TypeError(f"{name} must be an int or None, got {name}={window!r}")
    if window <= 0:
        raise ValueError(
            f"{name} must be >= 1 (a query sees itself and {name} - 1 keys before it), got {name}={window}"
        )
    return window


def position_mask(
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    *,
    window: int | None = None,
    sink_tokens: int = 0,
    chunk: int | None = None,
) -> torch.Tensor:
    """Causal (optionally windowed or chunked) mask from absolute positions: the one rule every mask here uses.

    Key ``j`` is visible to query ``i`` when ``k_pos[j] <= q_pos[i]`` and, with a window
    ``w``, ``q_pos[i] - k_pos[j] < w``; the first ``sink_tokens`` positions stay visible
    whatever the window (StreamingLLM's attention sinks, Xiao et al. 2023). With a chunk
    size ``c`` (Llama 4's chunked attention), only keys of the query's own chunk:
    ``k_pos[j] // c == q_pos[i] // c`` (the first query of a chunk sees itself alone, unlike
    a window of ``c``). Negative key positions (empty slots of a rolling cache) are never visible.

    Args:
        q_pos: Absolute position of each query.
        k_pos: Absolute position of each key (any order: a ring buffer's slots).
        window: Keys per query, itself included; None = no window.
        sink_tokens: Leading positions that every later query may see.
        chunk: Positions per chunk (``0..c-1``, ``c..2c-1``, ...); None = no chunks. Not with ``window``.

    Shapes:
        q_pos: ``(T_q,)``; k_pos: ``(T_k,)``; output: ``(T_q, T_k)``

    Raises:
        TypeError: A position tensor that is not an integer tensor (a list, floats).
        ValueError: A position tensor that is not 1-D; a bad ``window``, ``sink_tokens`` or ``chunk``,
            or both a window and a chunk.
    """
    # 1-D integer tensors: a list would fail at the indexing below, a 2-D tensor would broadcast silently.
    check_tensor("q_pos", q_pos, ("T_q",), integer=True)
    check_tensor("k_pos", k_pos, ("T_k",), integer=True)
    window = check_window(window)
    sink_tokens = check_int("sink_tokens", sink_tokens, minimum=0)
    chunk = None if chunk is None else check_int("chunk", chunk)
    if chunk is not None and window is not None:
        raise ValueError(f"pass a window or a chunk, not both: got window={window}, chunk={chunk}")
    q, k = q_pos[:, None], k_pos[None, :]  # (T_q, 1), (1, T_k)
    allowed = (k <= q) & (k >= 0)  # (T_q, T_k)
    if window is not None:
        allowed = allowed & ((q - k < window) | (k < sink_tokens))
    if chunk is not None:  # floor division: only the query's own chunk (k >= 0 here, so no negative chunk)
        allowed = allowed & (torch.div(k, chunk, rounding_mode="floor") == torch.div(q, chunk, rounding_mode="floor"))
    return allowed


def causal_mask(
    T_q: int,
    T_k: int | None = None,
    *,
    window: int | None = None,
    sink_tokens: int = 0,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Causal mask: query ``i`` may attend to key ``j`` only if ``j`` is not in its future.

    When ``T_q < T_k`` (decoding with a cache: the queries are the *last* ``T_q``
    positions of a sequence of ``T_k``), the mask is aligned *bottom-right*: query ``i``
    sits at absolute position ``T_k - T_q + i``. PyTorch's ``is_causal=True`` aligns it
    top-left instead, which is wrong for this case (a decoding step's query would see only
    the first key).

    Args:
        T_q: Number of queries.
        T_k: Number of keys; defaults to ``T_q``. Must be ``>= T_q``.
        window: Sliding window: each query sees itself and the ``window - 1``
            keys before it; None = every earlier key. Bottom-right aligned like causality.
        sink_tokens: With a window, the first ``sink_tokens`` positions stay visible.
        device: Where to build the mask.

    Returns:
        A boolean tensor, ``True`` where attention is allowed.

    Shapes:
        output: ``(T_q, T_k)``

    Raises:
        TypeError: If a length is not an int.
        ValueError: If a length is < 1, ``T_k < T_q``, or ``window <= 0``.

    Example:
        >>> causal_mask(2, 4).int()
        tensor([[1, 1, 1, 0],
                [1, 1, 1, 1]], dtype=torch.int32)
    """
    T_q = check_int("T_q", T_q)
    T_k = T_q if T_k is None else check_int("T_k", T_k)
    if T_k < T_q:
        raise ValueError(
            f"causal_mask needs T_k >= T_q (queries are the last T_q of T_k positions), got T_q={T_q}, T_k={T_k}"
        )
    # Absolute positions: queries are the last T_q of the T_k positions.
    q_pos = torch.arange(T_k - T_q, T_k, device=device)  # (T_q,)
    k_pos = torch.arange(T_k, device=device)  # (T_k,)
    return position_mask(q_pos, k_pos, window=window, sink_tokens=sink_tokens)  # (T_q, T_k)


def padding_mask(lengths: torch.Tensor | list[int], T: int) -> torch.Tensor:
    """Key padding mask for a batch of sequences of different lengths.

    Sequence ``b`` holds ``lengths[b]`` real tokens followed by padding. Keys at
    padded positions must not be attended to.

    Args:
        lengths: Number of real tokens in each sequence, each in ``[0, T]``.
        T: Padded length (the number of keys).

    Returns:
        A boolean tensor, ``True`` for real tokens. The middle axis of size 1 lets it
        broadcast over queries: it combines directly with ``(B, T_q, T_k)`` scores and
        with :class:`~attn_core.MultiHeadAttention` (which adds the head axis).

    Shapes:
        lengths: ``(B,)``
        output: ``(B, 1, T)``

    Raises:
        TypeError: If ``lengths`` is not a list of ints or an integer tensor.
        ValueError: If ``lengths`` is not 1-D, or a length is negative or larger than ``T``.
    """
    T = check_int("T", T)
    if isinstance(lengths, (list, tuple)):
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in lengths):
            raise TypeError(f"lengths must be ints, got {lengths!r}")
        lengths = torch.tensor(lengths, dtype=torch.long)
    check_tensor("lengths", lengths, ("B",), integer=True)
    if lengths.numel() and (int(lengths.min()) < 0 or int(lengths.max()) > T):
        raise ValueError(f"every length must be in [0, T={T}], got lengths={lengths.tolist()}")
    positions = torch.arange(T, device=lengths.device)  # (T,)
    return (positions[None, :] < lengths[:, None])[:, None, :]  # (B, 1, T)


def combine_masks(mask, is_causal, T_q, T_k, device, window=None):
    """Split ``mask`` into a boolean ``allowed`` part and a finite float ``bias`` part, adding causality (and a window).

    Shapes:
        mask: broadcastable to ``(..., T_q, T_k)``; allowed, bias: as ``mask`` (or ``(T_q, T_k)``), or None
    """
    allowed = bias = None
    if mask is not None:
        if mask.dtype == torch.bool:
            allowed = mask
        else:
            # An additive mask blocks a key with -inf, or with finfo(dtype).min (Hugging Face's
            # convention). Read both as "blocked", so that a query whose keys are all blocked
            # gets zeros as with a boolean mask, not NaN (-inf: softmax of -inf everywhere)
            # nor the mean of the values (finfo.min: every score equally low).
            blocked = mask <= torch.finfo(mask.dtype).min  # (..., T_q, T_k); a tensor op, no sync
            allowed, bias = ~blocked, mask.masked_fill(blocked, 0.0)
    if is_causal:
        # Bottom-right aligned, so it is also right for T_q < T_k (decoding with a cache).
        causal = causal_mask(T_q, T_k, window=window, device=device)  # (T_q, T_k)
        allowed = causal if allowed is None else allowed & causal
    return allowed, bias
