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

from .checks import check_tensor

__all__ = ["positions_from_mask", "padding_keys_mask", "check_attention_mask"]


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
