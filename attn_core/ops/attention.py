"""The one scaled dot-product attention core that every module in ``attn_core`` calls.

    attention(Q, K, V) = softmax(Q Kᵀ · scale + bias, masked) V,   scale = 1/√d

:func:`attention` checks its arguments and hands the call to the table of backends
(:mod:`attn_core.ops.backends`), which computes the same function on one of them:

* the **explicit path** (``return_weights=True``, soft-capping) writes every step out, keeps
  the softmax in float32 even for half-precision inputs, and returns the attention weights
  so that they can be plotted;
* the **fast path** (the default) hands the work to PyTorch's fused
  ``torch.nn.functional.scaled_dot_product_attention`` (SDPA), which never materialises
  the weights. A test holds the two paths equal;
* windows and sinks go to a fused kernel on CUDA (Triton's FlashAttention, FlexAttention).

Shape legend:
    ...  any leading batch dimensions, typically ``(B, H)``
    H    query heads; ``H_kv`` key/value heads (``H_kv`` divides ``H``: GQA/MQA)
    T_q  number of queries, ``T_k`` number of keys (= values)
    D    query/key width per head, ``D_v`` value width per head
"""

from __future__ import annotations

import torch

from ..checks import check_bool, check_mask, check_number, check_tensor
from . import backends
from .backends.call import Call, check_window_and_sinks

__all__ = ["attention", "attend", "split_result", "check_qkv"]


def check_qkv(q, k, v, *, mask=None, scale=None, dropout_p=0.0) -> int:
    """Check the arguments of :func:`attention`; return the number of query heads per key/value head.

    Also the check of every other function that takes ``q, k, v`` the way :func:`attention`
    does (e.g. :func:`attn_core.ops.efficient.tiled_attention`), so that they fail alike.

    Raises:
        TypeError, ValueError: As listed in :func:`attention`.
    """
    groups = _common_case_groups(q, k, v, mask, scale, dropout_p)
    if groups is not None:
        return groups
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t, ("...", "T", "D"), floating=True)
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share a dtype, got q={q.dtype}, k={k.dtype}, v={v.dtype}")
    if not (q.dim() == k.dim() == v.dim()):
        raise ValueError(
            f"q, k, v must have the same number of dimensions, got q.shape={tuple(q.shape)}, "
            f"k.shape={tuple(k.shape)}, v.shape={tuple(v.shape)}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must have the same last dimension (D), got q.shape={tuple(q.shape)}, k.shape={tuple(k.shape)}"
        )
    if k.shape[:-1] != v.shape[:-1]:
        raise ValueError(
            f"k and v must agree on all but the last dimension, got k.shape={tuple(k.shape)}, v.shape={tuple(v.shape)}"
        )
    groups = 1
    if q.dim() >= 3 and k.shape[-3] not in (1, q.shape[-3]):
        h, h_kv = q.shape[-3], k.shape[-3]
        if h % h_kv != 0:
            raise ValueError(
                f"the number of query heads must be a multiple of the number of key/value heads, "
                f"got {h} query heads (q.shape={tuple(q.shape)}) and {h_kv} key/value heads (k.shape={tuple(k.shape)})"
            )
        groups = h // h_kv
    try:
        batch = torch.broadcast_shapes(q.shape[:-3], k.shape[:-3]) if q.dim() >= 3 else ()
    except RuntimeError:
        raise ValueError(
            f"q and k batch dimensions do not broadcast: q.shape={tuple(q.shape)}, k.shape={tuple(k.shape)}"
        ) from None
    heads = (q.shape[-3],) if q.dim() >= 3 else ()
    scores_shape = (*batch, *heads, q.shape[-2], k.shape[-2])
    check_mask("mask", mask, scores_shape, context=f" (from q.shape={tuple(q.shape)}, k.shape={tuple(k.shape)})")
    if scale is not None:
        check_number("scale", scale, low=0.0, low_open=True)
    check_number("dropout_p", dropout_p, low=0.0, high=1.0, high_open=True)
    return groups


def _common_case_groups(q, k, v, mask, scale, dropout_p) -> int | None:
    """The groups of the common call, ``(B, H, T, D)`` tensors of one floating dtype and no options; else None.

    A decoding step calls :func:`attention` once per layer per token: the general checks
    (shape patterns, broadcasting, the mask) cost more than a small step's attention on a
    GPU. This answers the one case every layer makes in a few comparisons; anything else,
    well-formed or not, goes through the full checks and their messages.
    """
    if type(q) is not torch.Tensor or type(k) is not torch.Tensor or type(v) is not torch.Tensor:
        return None
    if mask is not None or scale is not None or type(dropout_p) is not float or dropout_p != 0.0:
        return None
    # Each attribute read of a tensor crosses into C++: read every shape and dtype once.
    q_shape, k_shape, v_shape = q.shape, k.shape, v.shape
    if len(q_shape) != 4 or len(k_shape) != 4 or len(v_shape) != 4:
        return None
    dtype = q.dtype
    if not (dtype.is_floating_point and k.dtype == dtype and v.dtype == dtype):
        return None
    B, H, _, D = q_shape
    B_k, H_kv, T_k, D_k = k_shape
    if D != D_k or B != B_k or v_shape[0] != B_k or v_shape[1] != H_kv or v_shape[2] != T_k or H % H_kv:
        return None
    return 1 if H_kv in (1, H) else H // H_kv


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
    return_weights: bool = False,
    softcap: float | None = None,
    window: int | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention.

    Args:
        q: Queries.
        k: Keys. With a head axis, ``k`` may have fewer heads than ``q`` (grouped-query
            attention): query head ``h`` then uses key/value head ``h // (H // H_kv)``,
            the same order as ``repeat_interleave`` and PyTorch's ``enable_gqa``.
        v: Values, one per key.
        mask: Boolean (``True`` = may attend) or floating (added to the scores, e.g.
            ALiBi), broadcastable to the scores' shape ``(..., H, T_q, T_k)``.
        is_causal: Block attention to future keys. Aligned bottom-right, so it stays
            correct when ``T_q < T_k``. Combined with ``mask`` if both are given.
        scale: Multiplies the scores; defaults to ``1/√D``.
        dropout_p: Probability of zeroing an attention weight (pass 0.0 in eval mode).
        return_weights: Use the explicit path and also return the attention weights.
        softcap: Attention-logit soft-capping (Gemma 2): the scaled scores become
            ``softcap · tanh(scores / softcap)``, bounded in ``(-softcap, softcap)``,
            before the mask and bias. SDPA cannot cap its scores, so a cap always takes
            the explicit path. ``None``: no cap.
        window: Sliding window (needs ``is_causal``): each query sees itself and the
            ``window - 1`` keys before it (Mistral, Gemma, gpt-oss). SDPA gets it as a
            mask; on CUDA, the Triton FlashAttention kernel or FlexAttention, which skip the
            blocks outside the window (:mod:`attn_core.ops.backends`).
        sinks: One learned logit per query head that joins every softmax denominator
            and takes its share of the mass without a value (gpt-oss's attention sinks):
            ``w_j = exp(s_j) / (exp(sink_h) + Σ_k exp(s_k))``, so the weights sum to less
            than 1. SDPA has no such term: sinks take the explicit path, or on CUDA
            the Triton FlashAttention kernel, or FlexAttention's output renormalised with its
            log-sum-exp (:mod:`attn_core.ops.backends`).

    Returns:
        The output, or ``(output, weights)`` if ``return_weights``. The weights are the
        softmax probabilities *before* dropout. A query whose keys are all masked gets
        zero weights and a zero output, never NaN, on both paths and in the gradients,
        whatever the mask's form: ``False`` in a boolean mask, ``-inf`` or
        ``torch.finfo(dtype).min`` in a float one (both read as "blocked").

    Shapes:
        q: ``(..., H, T_q, D)``
        k: ``(..., H_kv, T_k, D)``
        v: ``(..., H_kv, T_k, D_v)``
        mask: broadcastable to ``(..., H, T_q, T_k)``
        sinks: ``(H,)``
        output: ``(..., H, T_q, D_v)``
        weights: ``(..., H, T_q, T_k)``

    Raises:
        TypeError: Non-tensor inputs, non-floating or mismatched dtypes, a mask that is
            neither boolean nor floating, a non-bool ``is_causal`` or ``return_weights``.
        ValueError: Mismatched ranks or widths, head counts that do not divide, a mask
            that does not broadcast, a bad ``scale`` or ``dropout_p``, a ``softcap`` <= 0,
            a ``window`` <= 0 or without ``is_causal``, ``sinks`` not of shape ``(H,)``.
    """
    groups = check_qkv(q, k, v, mask=mask, scale=scale, dropout_p=dropout_p)
    # SDPA refuses a non-bool is_causal; the explicit path would take 1 or "no" as true. The
    # type is tested here and check_bool called only to raise: every layer calls attention()
    # at every decoding step, and each call is host time that a GPU waits for.
    if type(is_causal) is not bool:
        check_bool("is_causal", is_causal)
    if type(return_weights) is not bool:
        check_bool("return_weights", return_weights)
    if softcap is not None:
        softcap = check_number("softcap", softcap, low=0.0, low_open=True)
    if window is not None or sinks is not None:
        window = check_window_and_sinks(window, sinks, is_causal=is_causal, q=q)
    T_q, T_k = q.shape[-2], k.shape[-2]
    if is_causal and T_q == 1 and (window is None or T_k <= window):
        # A single query (a decoding step) is the last position: it may see every key, so
        # there is no mask to build, combine and apply in every layer at every step
        # (unless a window hides the oldest keys).
        is_causal, window = False, None
    call = Call(q, k, v, mask, is_causal, scale, dropout_p, window, sinks, softcap, return_weights, groups, T_q, T_k)
    return backends.run(call)  # the backend that computes it: the table's first row that takes the call


def split_result(
    result: torch.Tensor | tuple[torch.Tensor, torch.Tensor], return_weights: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(output, weights)`` from what an attention call returned: the weights are ``None`` unless asked for.

    :func:`attention` and every attention module return the output alone, or
    ``(output, weights)`` when called with ``return_weights=True``; code that passes the
    flag through (a block around its attention layer) unpacks the result here, once.
    """
    return result if return_weights else (result, None)


def attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, return_weights: bool = False, **kwargs
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`attention` with one return shape, ``(output, weights or None)``: what the layers call.

    Shapes:
        as :func:`attention`; weights ``None`` unless ``return_weights``
    """
    return split_result(attention(q, k, v, return_weights=return_weights, **kwargs), return_weights)
