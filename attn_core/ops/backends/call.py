"""What every backend of :func:`attn_core.ops.attention.attention` receives: one call's arguments, read once.

:func:`~attn_core.ops.attention.attention` checks its arguments, then hands them to the table
of backends (:mod:`attn_core.ops.backends`) as one :class:`Call`. Each backend reads what it
needs from it, and the table chooses the backend by :attr:`Call.needs`: the options the call
asks for that not every backend computes (:data:`NEEDS`).

Also here, :func:`check_window_and_sinks`: the checks of the two options that ``attention()``
and the fused kernels' own entries (:func:`attn_core.ops.backends.flash.flash_attention`) share,
so that both fail alike.

Shape legend:
    ...  any leading batch dimensions, typically ``(B, H)``
    H    query heads; ``H_kv`` key/value heads (``H_kv`` divides ``H``: GQA/MQA)
    T_q  number of queries, ``T_k`` number of keys (= values)
    D    query/key width per head, ``D_v`` value width per head
"""

from __future__ import annotations

import math

import torch

from ...checks import check_tensor
from ..masks import check_window

__all__ = ["NEEDS", "Call", "need_names", "check_window_and_sinks"]

#: The options a call may need that not every backend computes; bit ``i`` of :attr:`Call.needs` is ``NEEDS[i]``.
#: (Causality is not one: every backend computes it.)
NEEDS = ("mask", "dropout", "window", "sinks", "softcap", "weights")


class Call:
    """The arguments of one attention call, checked, as every backend reads them.

    Built once per :func:`~attn_core.ops.attention.attention` call, in every layer at every
    decoding step, where the host's microseconds before a launch are time a GPU waits: plain
    attributes, set once, read without a call; ``attention()`` passes its arguments by
    position (a call with keywords costs more) and the lengths it has read already.

    Args:
        q, k, v: Queries, keys, values.
        mask: Boolean (``True`` = may attend) or additive mask, or None.
        is_causal: Bottom-right causal masking.
        scale: As given to ``attention()``: None for the default ``1/√D``, which is SDPA's
            own default too (SDPA takes it as given, so that the common call reaches SDPA
            exactly as a direct call would; the other backends read :attr:`softmax_scale`).
        dropout_p: Probability of dropping an attention weight.
        window: Sliding window (with ``is_causal``), or None.
        sinks: One logit per query head in every softmax denominator, or None.
        softcap: Attention-logit soft-capping, or None.
        weights: Return the attention weights too.
        groups: Query heads per key/value head, as :func:`~attn_core.ops.attention.check_qkv`
            counts them (1 when a single key/value head is broadcast).
        T_q, T_k: The number of queries and of keys, if the caller has read them (else read here).

    Attributes:
        softmax_scale: The number that multiplies the scores: ``scale``, or ``1/√D``.
        needs: The options asked for, as bits of :data:`NEEDS` (:func:`need_names` reads them).

    Shapes:
        q: ``(..., H, T_q, D)``; k: ``(..., H_kv, T_k, D)``; v: ``(..., H_kv, T_k, D_v)``
        mask: broadcastable to ``(..., H, T_q, T_k)``; sinks: ``(H,)``
    """

    __slots__ = (
        "q", "k", "v", "mask", "is_causal", "scale", "dropout_p",
        "window", "sinks", "softcap", "weights", "groups", "T_q", "T_k", "needs",
    )  # fmt: skip

    def __init__(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        scale: float | None = None,
        dropout_p: float = 0.0,
        window: int | None = None,
        sinks: torch.Tensor | None = None,
        softcap: float | None = None,
        weights: bool = False,
        groups: int = 1,
        T_q: int | None = None,
        T_k: int | None = None,
    ) -> None:
        self.q = q
        self.k = k
        self.v = v
        self.mask = mask
        self.is_causal = is_causal
        self.scale = None if scale is None else float(scale)
        self.dropout_p = dropout_p
        self.window = window
        self.sinks = sinks
        self.softcap = softcap
        self.weights = weights
        self.groups = groups
        self.T_q = q.shape[-2] if T_q is None else T_q
        self.T_k = k.shape[-2] if T_k is None else T_k
        # An int, not a set: the table indexes its plans with it. One test per option, in
        # the order of NEEDS: the common call asks for none and pays six comparisons.
        needs = 0
        if mask is not None:
            needs |= 1
        if dropout_p != 0.0:
            needs |= 2
        if window is not None:
            needs |= 4
        if sinks is not None:
            needs |= 8
        if softcap is not None:
            needs |= 16
        if weights:
            needs |= 32
        self.needs = needs

    @property
    def softmax_scale(self) -> float:
        # Computed when a backend asks, not per call: SDPA, the common call's backend, never does.
        return 1.0 / math.sqrt(self.q.shape[-1]) if self.scale is None else self.scale


def need_names(needs: int) -> frozenset[str]:
    """The names in :data:`NEEDS` of the bits set in ``needs`` (:attr:`Call.needs`)."""
    return frozenset(name for i, name in enumerate(NEEDS) if needs >> i & 1)


def check_window_and_sinks(window: object, sinks: object, *, is_causal: bool, q: torch.Tensor) -> int | None:
    """Check a sliding window (it needs ``is_causal``) and sinks (one floating logit per query head); return ``window``.

    Args:
        window: The window, or None.
        sinks: The sinks, or None.
        is_causal: Whether the call is causal (a checked bool).
        q: The queries, whose heads the sinks must match (one head if ``q`` has fewer than 3 axes).

    Raises:
        TypeError: A window that is not an int; sinks that are not a floating tensor.
        ValueError: A window ``<= 0`` or without ``is_causal``; sinks not of shape ``(H,)``.

    Shapes:
        q: ``(..., H, T_q, D)``; sinks: ``(H,)``
    """
    window = check_window(window)
    if window is not None and not is_causal:
        raise ValueError(f"window={window} is a causal sliding window: pass is_causal=True with it")
    if sinks is not None:
        check_tensor("sinks", sinks, ("H",), floating=True)
        heads = q.shape[-3] if q.dim() >= 3 else 1
        if sinks.shape[0] != heads:
            raise ValueError(
                f"sinks needs one logit per query head: got sinks.shape={tuple(sinks.shape)} for {heads} heads"
            )
    return window
