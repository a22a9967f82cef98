"""Encoder-decoder tasks: a source sequence for the encoder, a shifted target for the decoder.

:func:`reverse_seq2seq` gives a :class:`Seq2SeqBatch` ``(src, tgt_in, tgt_out)``: the
encoder reads ``x``, the decoder reads ``SEP`` then the answer shifted right and must write
``reversed(x)``. Its ideal cross-attention is the anti-diagonal :func:`reverse_alignment`.
The decoder-only tasks, the separator :data:`~attn_core.teach.tasks.SEP` and the data tokens are
in :mod:`attn_core.teach.tasks`.

Shape legend:
    B    batch size
    n    data tokens per example (source and target alike)
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..checks import check_int
from .tasks import SEP, data_tokens

__all__ = [
    "Seq2SeqBatch",
    "reverse_seq2seq",
    "reverse_alignment",
]


class Seq2SeqBatch(NamedTuple):
    """An encoder-decoder batch: the decoder reads ``tgt_in`` (``SEP`` then the answer shifted right).

    Shapes:
        src: ``(B, n)``; tgt_in: ``(B, n)``; tgt_out: ``(B, n)``
    """

    src: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor


def reverse_seq2seq(
    batch_size: int, *, n: int = 8, vocab_size: int = 16, generator: torch.Generator | None = None
) -> Seq2SeqBatch:
    """Reversal as an encoder-decoder task: the encoder reads ``x``, the decoder writes ``reversed(x)``.

    Output step ``i`` must copy source position ``n - 1 - i``, so a trained
    cross-attention should look like :func:`reverse_alignment`.

    Shapes:
        src, tgt_in, tgt_out: ``(B, n)``
    """
    x = data_tokens(batch_size, n, vocab_size, generator)
    y = x.flip(1)
    start = torch.full((batch_size, 1), SEP, dtype=torch.long)
    return Seq2SeqBatch(src=x, tgt_in=torch.cat((start, y[:, :-1]), dim=1), tgt_out=y)


def reverse_alignment(n: int) -> torch.Tensor:
    """The ideal cross-attention of :func:`reverse_seq2seq`: output ``i`` attends to source ``n - 1 - i``.

    Shapes:
        output: ``(n, n)``, float, one 1 per row (the anti-diagonal)
    """
    check_int("n", n, minimum=1)
    return torch.eye(n).flip(1)
