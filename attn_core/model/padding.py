"""Batches of prompts of different lengths: left padding, its attention mask and per-row positions.

To decode a batch in lock-step, shorter prompts are padded on the **left**, so that every
row's newest token is in the last column. Two things must then follow each row:

* an ``attention_mask`` ``(B, T_k)`` (1 = a token, 0 = padding, Hugging Face's convention)
  hides the padding keys from every query;
* the positions start at each row's first *real* token, ``cumsum(mask) − 1``. Counting them
  from the first column (the classic bug) shifts a padded row's positions by its number of
  pads: absolute encodings (learned, sinusoidal) then give it other embeddings. Relative
  ones (RoPE, ALiBi) depend only on ``q − k``, which a per-row shift leaves unchanged.

Shape legend:
    B     batch size
    T     new tokens of this call; ``T_k = past + T`` every position so far
"""

from __future__ import annotations

import torch

from ..caches.kv import positions_after
from ..checks import check_tensor
from ..positions.positional import LearnedPositionalEmbedding

__all__ = [
    "positions_from_mask",
    "padding_keys_mask",
    "check_attention_mask",
    "check_padding_support",
    "absolute_encodings",
    "check_relative_positions",
]


def check_attention_mask(attention_mask: object, batch_size: int, T_k: int) -> torch.Tensor:
    """Return ``attention_mask`` as a boolean tensor ``(B, T_k)`` after checking it.

    Raises:
        TypeError: Not a tensor, or a floating dtype.
        ValueError: Another shape; on the CPU, a value other than 0 and 1 (on a device the
            values are not read: that would make the host wait).
    """
    check_tensor("attention_mask", attention_mask, ("B", "T_k"))
    if attention_mask.dtype.is_floating_point:
        raise TypeError(
            f"attention_mask must be boolean or integer (1 = token, 0 = padding), got {attention_mask.dtype}"
        )
    if tuple(attention_mask.shape) != (batch_size, T_k):
        raise ValueError(
            f"attention_mask must have shape (B, past + T) = ({batch_size}, {T_k}), got {tuple(attention_mask.shape)}"
        )
    if attention_mask.device.type == "cpu" and attention_mask.dtype != torch.bool and not torch.compiler.is_compiling():
        if bool(((attention_mask != 0) & (attention_mask != 1)).any()):
            raise ValueError(
                f"attention_mask must hold 0 (padding) and 1 (token), got {attention_mask.unique().tolist()}"
            )
    return attention_mask.bool()


def positions_from_mask(attention_mask: torch.Tensor, T: int) -> torch.Tensor:
    """Each row's positions counted from its first real token, for the last ``T`` columns: ``cumsum(mask) − 1``.

    Padding columns get position 0 (any value would do: nothing attends to them).

    Shapes:
        attention_mask: ``(B, T_k)``; output: ``(B, T)`` long
    """
    counts = attention_mask.long().cumsum(dim=-1) - 1  # (B, T_k)
    return counts[:, -T:].clamp(min=0)  # (B, T)


def padding_keys_mask(attention_mask: torch.Tensor, T: int) -> torch.Tensor:
    """The attention mask of ``T`` queries: every query may see the non-padding keys (causality is the layer's).

    Shapes:
        attention_mask: ``(B, T_k)`` boolean; output: ``(B, T, T_k)`` boolean, True = may attend
    """
    B, T_k = attention_mask.shape
    return attention_mask[:, None, :].expand(B, T, T_k)


def check_padding_support(config, static: bool = False) -> None:
    """Padding masks need layers that take a key mask: refuse a :class:`~attn_core.DecoderConfig` without, saying why.

    Raises:
        ValueError: Simplified blocks, ``"linear"`` or sliding layers, DeepSeek Sparse
            Attention, or static caches; every reason named.
    """
    reasons = []
    if config.block != "standard":
        reasons.append(f"block={config.block!r} averages over every key (its causal uniform term), padding included")
    if "linear" in config.resolved_layer_types:
        reasons.append("a 'linear' layer (Gated DeltaNet) runs its recurrence through the padding")
    if "sliding" in config.resolved_layer_types or config.pattern.sliding_window is not None:
        reasons.append("a sliding window's rolling cache takes no mask")
    if config.indexer is not None:
        reasons.append("DeepSeek Sparse Attention's indexer is not tested with padding")
    if "chunked" in config.resolved_layer_types or config.positions.nope_temperature is not None:  # Llama 4
        reasons.append("chunks and the NoPE temperature count positions from the first slot, not each row's")
    if static:
        reasons.append("static caches build their own mask")
    if reasons:
        raise ValueError("attention_mask is not supported for this model: " + "; ".join(reasons))


def absolute_encodings(
    pos_emb: torch.nn.Module, position_ids: torch.Tensor, length: int, x: torch.Tensor
) -> torch.Tensor:
    """Learned or sinusoidal encodings (``pos_emb.encodings``) of per-row positions, all below ``length``.

    Shapes:
        position_ids: ``(B, T)``; x: ``(B, T, d_model)`` (dtype and device); output: ``(B, T, d_model)``

    Raises:
        ValueError: On the CPU, a position outside ``[0, length)``.
    """
    if position_ids.device.type == "cpu" and not torch.compiler.is_compiling():
        lo, hi = int(position_ids.min()), int(position_ids.max())
        if lo < 0 or hi >= length:
            raise ValueError(f"position_ids must be in [0, past + T = {length}), got min={lo}, max={hi}")
    if isinstance(pos_emb, LearnedPositionalEmbedding):
        table = pos_emb.encodings(length)  # (past + T, d_model)
    else:
        table = pos_emb.encodings(length, device=x.device, dtype=x.dtype)  # (past + T, d_model)
    return table.to(x.dtype)[position_ids.to(table.device)]  # (B, T, d_model)


def check_relative_positions(
    position_ids: torch.Tensor, offset: int | torch.Tensor, pad: torch.Tensor | None, positional: str
) -> None:
    """With relative positions (RoPE, ALiBi, none) a row's positions may only be shifted as a whole (CPU check).

    The layers rotate (or bias) with positions ``offset .. offset + T − 1``; scores depend
    on ``q − k`` only, so per-row ``position_ids`` that differ from these by one constant
    per row give the same outputs, and any other ``position_ids`` cannot be honoured.

    Shapes:
        position_ids: ``(B, T)``; pad: ``(B, past + T)`` or None

    Raises:
        ValueError: Positions that are not a whole-row shift (read only on the CPU).
    """
    if position_ids.device.type != "cpu" or torch.compiler.is_compiling():
        return
    T = position_ids.shape[1]
    shift = position_ids - positions_after(offset, T)  # (B, T): the same in every token of a row
    real = torch.ones_like(shift, dtype=torch.bool) if pad is None else pad[:, -T:].cpu()  # (B, T)
    last = shift[:, -1:]  # (B, 1): left padding puts a token in the last column
    if bool(((shift != last) & real).any()):
        raise ValueError(
            f"position_ids must be each row's positions shifted as a whole: positional={positional!r} "
            f"depends only on q - k, so the layers use {offset}..{offset + T - 1}"
        )
