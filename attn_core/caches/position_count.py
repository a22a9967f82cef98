"""How many positions a cache has taken in, counted on the host and on the device.

A decoding step that CUDA graphs replay (``torch.compile(mode="reduce-overhead")``) cannot
contain a number the host keeps: ``torch.compile`` reads a Python int into the graph, so a
count that grows by one at every step would make every step a new graph. The count that
the computation uses therefore lives on the device, a 0-d integer tensor that each update
advances in place (at a static address, so that a recorded graph finds it again).

The host keeps its own copy for the checks and for anyone who asks (``cache.size``),
without making the device wait. Inside ``torch.compile`` only the device count moves (the
host copy cannot be updated without being read), and the next read of :attr:`host`
copies it back once: one synchronisation, outside the compiled step.
"""

from __future__ import annotations

import torch

from ..checks import check_int

__all__ = ["PositionCount"]


class PositionCount:
    """A number of positions, kept as a host int and as a 0-d tensor on ``device``.

    Args:
        device: Where the device count lives (the cache's).
    """

    def __init__(self, device: torch.device | str | None = None) -> None:
        self._host = 0
        self._host_behind = False  # True after compiled updates: _host lags _device
        self._device = torch.zeros((), dtype=torch.long, device=device)
        torch._dynamo.mark_static_address(self._device)  # updated in place, never reallocated

    @property
    def host(self) -> int:
        """The count as an int (read back from the device once after compiled updates)."""
        if self._host_behind:
            self._host, self._host_behind = int(self._device), False
        return self._host

    @host.setter
    def host(self, value: int) -> None:
        self._host, self._host_behind = check_int("size", value, minimum=0), False
        self._device.fill_(value)

    @property
    def device(self) -> torch.Tensor:
        """The count as a 0-d integer tensor on the device: a copy, which later updates leave alone."""
        return self._device.clone()

    def advance(self, n: int) -> None:
        """Count ``n`` more positions; inside ``torch.compile``, on the device only."""
        if torch.compiler.is_compiling():
            self._host_behind = True  # written, never read: the compiled step holds no count
        else:
            self._host = self.host + n
        self._device.add_(n)
