"""Measuring what gating, QK-norm and soft-capping fix: large attention logits, sinks, large activations.

Three symptoms of trained transformers that gated attention, QK-norm and soft-capping address:

* **attention-logit growth** (Dehghani et al. 2023, arXiv 2302.05442; Wortsman et al.
  2023, arXiv 2309.14322): the largest pre-softmax score grows during training until the
  softmax saturates to one-hot and training becomes unstable. :func:`attention_logits`
  returns the scores a :class:`~attn_core.MultiHeadAttention` feeds its softmax,
  :func:`max_attention_logit` the largest over a model.
* **attention sinks** (Xiao et al. 2023, arXiv 2309.17453): heads that have nothing to
  do park their weight on the first token. :func:`first_token_mass` measures it.
* **large activations** (Sun et al. 2024, arXiv 2402.17762): a few coordinates of the
  residual stream become far larger than the rest, tied to the sinks.
  :func:`max_activation` returns the largest ``|x|`` in the residual stream.

Shape legend:
    B    batch size
    H    query heads, ``H_kv`` key/value heads
    T    positions
    D    width of one head
"""

from __future__ import annotations

import math

import torch

from ..checks import check_instance, check_int, check_tensor
from ..layers.multihead import MultiHeadAttention
from ..model.decoder import DecoderLM
from ..ops.masks import causal_mask
from ..ops.shapes import split_heads

__all__ = ["attention_logits", "max_attention_logit", "first_token_mass", "max_activation"]


@torch.no_grad()
def attention_logits(attn: MultiHeadAttention, x: torch.Tensor) -> torch.Tensor:
    """The scores a self-attention layer's softmax sees: after QK-norm, RoPE, scale and soft-cap.

    Computed from the layer's own projections, norms and RoPE (a test holds
    ``softmax(attention_logits(attn, x))`` equal to the weights the layer returns).
    Masked positions (the future, for a causal layer) are ``-inf``.

    Args:
        attn: A self-attention :class:`~attn_core.MultiHeadAttention`.
        x: Its input sequence (no cache: positions start at 0).

    Shapes:
        x: ``(B, T, d_model)``
        output: ``(B, H, T, T)``

    Raises:
        TypeError: ``attn`` is not a MultiHeadAttention, or ``x`` is not a floating tensor.
        ValueError: ``x`` has the wrong width, or ``attn`` is a cross-attention layer.
    """
    check_instance("attn", attn, MultiHeadAttention)
    check_tensor("x", x, ("B", "T", ("d_model", attn.d_model)), floating=True)
    if attn.d_context != attn.d_model:
        raise ValueError(f"attention_logits is for self-attention, not a layer with d_context={attn.d_context}")
    q = split_heads(attn.q_proj(x), attn.n_heads)  # (B, T, H·D) -> (B, H, T, D)
    k = split_heads(attn.k_proj(x), attn.n_kv_heads)  # (B, T, H_kv·D) -> (B, H_kv, T, D)
    if attn.q_norm is not None:
        q, k = attn.q_norm(q), attn.k_norm(k)
    if attn.rope is not None:
        q, k = attn.rope(q), attn.rope(k)
    k = k.repeat_interleave(attn.n_heads // attn.n_kv_heads, dim=1)  # (B, H, T, D): query head h reads h // G
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(attn.head_dim)  # (B, H, T, T)
    if attn.softcap is not None:
        scores = attn.softcap * torch.tanh(scores / attn.softcap)
    if attn.causal:
        T = x.shape[1]
        scores = scores.masked_fill(~causal_mask(T, T, window=getattr(attn, "window", None)), float("-inf"))
    return scores


def _attention_inputs(model: DecoderLM, idx: torch.Tensor) -> list[tuple[MultiHeadAttention, torch.Tensor]]:
    """Every MultiHeadAttention of ``model`` with the input it received on ``idx``."""
    seen, hooks = [], []
    for m in model.modules():
        if isinstance(m, MultiHeadAttention):
            hooks.append(m.register_forward_hook(lambda mod, args, out: seen.append((mod, args[0]))))
    try:
        with torch.no_grad():
            model(idx)
    finally:
        for h in hooks:
            h.remove()
    return seen


def max_attention_logit(model: DecoderLM, idx: torch.Tensor) -> float:
    """The largest attention score (in absolute value, unmasked positions) of any head of any layer.

    Shapes:
        idx: ``(B, T)`` token ids

    Raises:
        TypeError: ``model`` is not a DecoderLM; ``idx`` is not an integer tensor.
        ValueError: ``model`` has no :class:`~attn_core.MultiHeadAttention` layer.
    """
    check_instance("model", model, DecoderLM)
    check_tensor("idx", idx, ("B", "T"), integer=True)
    found = _attention_inputs(model, idx)
    if not found:
        raise ValueError("model has no MultiHeadAttention layer to measure (MLA or simplified blocks?)")
    best = 0.0
    for attn, x in found:
        s = attention_logits(attn, x)
        best = max(best, s[torch.isfinite(s)].abs().max().item())
    return best


def first_token_mass(weights: torch.Tensor, *, min_query: int = 4) -> torch.Tensor:
    """Mean attention weight on position 0 over the queries ``t >= min_query``, per head.

    The first queries have few keys to choose from (query 0 sees only position 0), so
    they are left out. A head without a sink puts about ``1/(t+1)`` there; a sink head
    puts most of its weight there.

    Shapes:
        weights: ``(..., T, T)``; output: ``(...)``

    Raises:
        TypeError: ``weights`` is not a floating tensor.
        ValueError: Not square, or ``min_query`` not in ``[0, T)``.
    """
    check_tensor("weights", weights, ("...", "T_q", "T_k"), floating=True)
    T = weights.shape[-1]
    if weights.shape[-2] != T:
        raise ValueError(f"weights must be square (T, T), got shape {tuple(weights.shape)}")
    check_int("min_query", min_query, minimum=0)
    if min_query >= T:
        raise ValueError(f"min_query must be < T={T}, got min_query={min_query}")
    return weights[..., min_query:, 0].mean(-1)


def max_activation(model: DecoderLM, idx: torch.Tensor) -> float:
    """The largest ``|x|`` of the residual stream after any block (Sun et al.'s "massive activations").

    Shapes:
        idx: ``(B, T)`` token ids

    Raises:
        TypeError: ``model`` is not a DecoderLM; ``idx`` is not an integer tensor.
    """
    check_instance("model", model, DecoderLM)
    check_tensor("idx", idx, ("B", "T"), integer=True)
    outs, hooks = [], []
    for block in model.blocks:
        hooks.append(block.register_forward_hook(lambda mod, args, out: outs.append(out.abs().max().item())))
    try:
        with torch.no_grad():
            model(idx)
    finally:
        for h in hooks:
            h.remove()
    return max(outs)
