"""The constant-size decoding state of a recurrent (linear-attention) layer.

:class:`GatedDeltaNetCache` is what :class:`~attn_core.layers.gated_deltanet.GatedDeltaNet`
carries between decoding steps: the short convolution's last ``K - 1`` inputs and the
``D_k × D_v`` state of the delta rule per value head. Its size does not grow with the sequence.

Shape legend:
    B      batch size
    H_v    value heads
    D_k    width of a key head; ``D_v`` width of a value head
    K      the short convolution's kernel size; ``C_conv`` its channels
"""

from __future__ import annotations

import torch

from ..checks import check_int
from .position_count import PositionCount

__all__ = ["GatedDeltaNetCache"]


class GatedDeltaNetCache:
    """What :class:`GatedDeltaNet` carries between decoding steps: constant size, whatever the length.

    Attributes:
        conv_state: The last ``K - 1`` inputs of the short convolution (zeros at the start:
            the same left padding as a full forward).
        state: The delta rule's state ``S``.
        size: Positions seen so far (settable).

    Like every cache it stores values, not the autograd graph (decode under ``torch.no_grad()``).

    Shapes:
        conv_state: ``(B, C_conv, K - 1)``; state: ``(B, H_v, D_k, D_v)``
    """

    def __init__(
        self,
        batch_size: int,
        conv_channels: int,
        conv_size: int,
        n_heads: int,
        head_dim: int,
        value_head_dim: int,
        *,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> None:
        check_int("batch_size", batch_size)
        self.conv_state = torch.zeros(batch_size, conv_channels, conv_size - 1, dtype=dtype, device=device)
        self.state = torch.zeros(batch_size, n_heads, head_dim, value_head_dim, dtype=dtype, device=device)
        # Counted on the device too: a compiled step that advanced a Python int would be
        # compiled anew at every step (attn_core.caches.position_count).
        self._count = PositionCount(device)
        sizes = (batch_size, conv_channels, conv_size, n_heads, head_dim, value_head_dim)
        names = ("batch_size", "conv_channels", "conv_size", "n_heads", "head_dim", "value_head_dim")
        self.made_for = dict(zip(names, sizes))  # what GatedDeltaNet compares with its own sizes

    def reset(self) -> None:
        """Back to an empty sequence."""
        self.conv_state.zero_()
        self.state.zero_()
        self.size = 0

    @property
    def size(self) -> int:
        """Positions seen so far (read back from the device after compiled steps)."""
        return self._count.host

    @size.setter
    def size(self, value: int) -> None:
        self._count.host = value

    def advance(self, n: int) -> None:
        """Count ``n`` more positions (the device count only, inside ``torch.compile``)."""
        self._count.advance(n)

    def nbytes(self) -> int:
        """Bytes allocated: the convolution history and the state, whatever the sequence length."""
        return sum(t.numel() * t.element_size() for t in (self.conv_state, self.state))
