"""Pictures and explorers of attention maps: the one toolkit every chapter uses (``viz.…``).

A namespace that gathers the two modules:

* :mod:`attn_core.teach.plots` (static pictures): :func:`heatmap`, :func:`attention_grid`;
* :mod:`attn_core.teach.explorers`: :func:`explorer`, kernel-free (it responds in the static
  book) or with Python callbacks (it needs a kernel).
"""

from .explorers import MAX_EMBED_BYTES, AttentionExplorer, explorer
from .kernel_explorer import KernelExplorer
from .plots import attention_grid, heatmap

__all__ = ["heatmap", "attention_grid", "explorer", "AttentionExplorer", "KernelExplorer", "MAX_EMBED_BYTES"]
