"""The look-alike causal attentions that exercise 2.2's test is run on (private to :mod:`.ch02`)."""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from ...ops.attention import attention

__all__ = ["alignment_candidates"]


def _causal_candidate(
    shift: int | None,
    *,
    top_left: bool = False,
    square_only: bool = False,
    scale=None,
    later_leak: bool = False,
    skip_first: bool = False,
):
    """A causal attention ``attend(q, k, v)`` whose mask is chosen (right or wrong).

    ``shift``: query ``i`` sees key ``j`` when ``j <= i + shift``, with ``i`` counted from
    the top-left corner (``top_left``) or as the last ``T_q`` of ``T_k`` positions
    (bottom-right); ``None`` = no mask. ``square_only``: the mask is applied only when
    ``T_q == T_k`` (code that skips it for a decoding step). ``scale``: another score
    scale than ``1/sqrt(D)``, which changes the weights but not which keys are seen.
    ``later_leak``: every query but the first also sees the key just after it (right in
    row 0, wrong below). ``skip_first``: key 0 is never seen (with ``shift=1``, query
    ``i`` sees keys ``1..i+1``: the right number of keys, the wrong ones).
    """

    def impl(q, k, v):
        T_q, T_k = q.shape[-2], k.shape[-2]
        mask = None
        if shift is not None and not (square_only and T_q != T_k):
            offset = 0 if top_left else T_k - T_q
            q_pos = torch.arange(T_q, device=q.device) + offset  # (T_q,)
            k_pos = torch.arange(T_k, device=q.device)  # (T_k,)
            mask = k_pos[None, :] <= q_pos[:, None] + shift  # (T_q, T_k)
            if later_leak:  # rows 1.. also see their next key
                mask = mask | ((k_pos[None, :] == q_pos[:, None] + 1) & (q_pos[:, None] > offset))
            if skip_first:
                mask = mask & (k_pos[None, :] >= 1)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)

    return impl


def _alike(impl: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """Wrap ``impl`` so that every candidate looks the same from outside (name, code, signature)."""

    def attend(q, k, v):
        return impl(q, k, v)

    return attend


def alignment_candidates() -> list[tuple[Callable[..., torch.Tensor], str, str]]:
    """The functions exercise 2.2's test is run on: ``(attend, alignment, what it is)``, mixed order."""

    def sdpa_is_causal(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def attn_core_is_causal(q, k, v):
        return attention(q, k, v, is_causal=True)

    cases = [
        (_causal_candidate(0, scale=1.0), "bottom-right", "is bottom-right with another score scale"),
        (sdpa_is_causal, "top-left", "is PyTorch's is_causal=True"),
        (_causal_candidate(1), "neither", "lets each query see one key of its future"),
        (attn_core_is_causal, "bottom-right", "is attn_core's is_causal=True"),
        (_causal_candidate(None), "neither", "has no mask at all"),
        (
            _causal_candidate(0, top_left=True, later_leak=True),
            "neither",
            "is top-left in query 0, but every later query sees one key of its future",
        ),
        (_causal_candidate(0, top_left=True, scale=0.1), "top-left", "is top-left with another score scale"),
        (_causal_candidate(0, square_only=True), "neither", "applies its mask only when T_q == T_k"),
        (
            _causal_candidate(1, top_left=True, skip_first=True),
            "neither",
            "lets query i see keys 1..i+1: the top-left counts, but shifted by one key",
        ),
    ]
    return [(_alike(fn), expected, what) for fn, expected, what in cases]
