"""Dropout that costs nothing when it does nothing.

``torch.nn.Dropout`` returns its input unchanged in eval mode (and with ``p = 0``), but only
after the whole module call: hooks, ``forward``, ``F.dropout``, the dispatcher. A decoding
step calls dropout three times per layer (the two residual branches and the MLP's output),
where each call is pure host work; at batch 1 on a GPU that host work is what a step waits
for (the book counts it). :class:`Dropout` returns the input at once in those cases.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["Dropout"]


class Dropout(nn.Dropout):
    """``torch.nn.Dropout`` whose call returns ``x`` itself at once when it would drop nothing.

    The same module otherwise: the same repr, state and training behaviour. When it would
    drop nothing (eval mode, or ``p = 0``), ``torch.nn.Dropout`` also returns ``x`` itself;
    this skips ``nn.Module.__call__`` to do so, and with it any hooks registered on the module.

    Args:
        p: Probability of zeroing an element in training mode.

    Shapes:
        x: any; output: the same
    """

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        return super().__call__(x)
