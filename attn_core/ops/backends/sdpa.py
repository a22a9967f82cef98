"""The fast path: PyTorch's fused ``scaled_dot_product_attention`` (SDPA), with attn_core's conventions.

SDPA picks a fused kernel for the device (FlashAttention-2, memory-efficient, cuDNN; a flash
kernel on the CPU) and never materialises the weights. Around it, what ``attn_core`` means by
a call that SDPA alone would compute differently:

* causality aligned bottom-right: SDPA's own ``is_causal`` is top-left, which agrees only
  when ``T_q == T_k``; otherwise a mask is built (:func:`attn_core.ops.masks.combine_masks`);
* a query whose keys are all masked gets a zero output, never NaN;
* grouped-query attention through ``enable_gqa`` (PyTorch >= 2.5), else repeated heads;
* a sliding window as a dense mask: every score is still computed, which is why the fused
  kernels come before this row for windows (:mod:`attn_core.ops.backends`).

Shape legend:
    ...  any leading batch dimensions, typically ``(B, H)``
    H    query heads; ``H_kv`` key/value heads (``H_kv`` divides ``H``), ``G = H // H_kv``
    T_q  number of queries, ``T_k`` number of keys (= values)
    D    query/key width per head, ``D_v`` value width per head
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..masks import combine_masks
from .call import Call

__all__ = ["sdpa_attention", "run"]

# ``enable_gqa`` arrived in PyTorch 2.5; attn_core supports torch>=2.2, so older
# versions fall back to materialising the repeated key/value heads.
_SDPA_HAS_GQA = torch.torch_version.TorchVersion(torch.__version__) >= (2, 5)


def sdpa_attention(q, k, v, mask, is_causal, scale, dropout_p, groups, T_q, T_k, window=None):
    """One SDPA call, a mask built only when SDPA's own ``is_causal`` cannot serve.

    Arguments as :func:`attn_core.ops.attention.attention`, checked; ``scale`` may be None
    (SDPA's default, 1/√D), ``groups`` is the query heads per key/value head, ``T_q, T_k``
    the lengths (read once by the caller: each read of a shape costs host time).

    Shapes:
        q: ``(..., H, T_q, D)``; k: ``(..., H_kv, T_k, D)``; v: ``(..., H_kv, T_k, D_v)``
        output: ``(..., H, T_q, D_v)``
    """
    sdpa_kwargs = {}
    if groups > 1:
        if _SDPA_HAS_GQA and q.dim() == 4:
            sdpa_kwargs["enable_gqa"] = True
        else:  # older PyTorch: repeat each key/value head for its G query heads
            k = k.repeat_interleave(groups, dim=-3)  # (..., H, T_k, D)
            v = v.repeat_interleave(groups, dim=-3)  # (..., H, T_k, D_v)
    if mask is None and window is None and (not is_causal or T_q == T_k):
        # SDPA's own is_causal is top-left aligned, which agrees with ours only when T_q == T_k.
        return F.scaled_dot_product_attention(
            q, k, v, dropout_p=dropout_p, is_causal=is_causal, scale=scale, **sdpa_kwargs
        )
    allowed, bias = combine_masks(mask, is_causal, T_q, T_k, q.device, window)
    fully_masked = None
    if allowed is not None:
        fully_masked = ~allowed.any(dim=-1, keepdim=True)  # (..., T_q, 1)
        # Let fully masked rows attend everywhere (finite, NaN-free, also in the
        # backward pass) and zero their output afterwards.
        allowed = allowed | fully_masked
    if bias is None:
        attn_mask = allowed
    elif allowed is None:
        attn_mask = bias.to(q.dtype)
    else:
        attn_mask = bias.to(q.dtype).masked_fill(~allowed, float("-inf"))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, scale=scale, **sdpa_kwargs)
    if fully_masked is not None:
        out = out.masked_fill(fully_masked, 0.0)
    return out


def run(call: Call) -> torch.Tensor:
    """The table's entry: :func:`sdpa_attention` on ``call`` (with SDPA's own default scale when none was given).

    Shapes:
        as :func:`sdpa_attention`
    """
    c = call
    return sdpa_attention(c.q, c.k, c.v, c.mask, c.is_causal, c.scale, c.dropout_p, c.groups, c.T_q, c.T_k, c.window)
