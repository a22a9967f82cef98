"""The decoder's configuration: :class:`DecoderConfig`, its parts and its presets (floor 3).

* :mod:`~attn_core.config.core`: :class:`DecoderConfig`, the core sizes and choices, with
  the rules that tie its parts together.
* :mod:`~attn_core.config.parts`: :class:`Positions`, :class:`LayerPattern`,
  :class:`LinearLayers`, :class:`MoE` and :class:`Indexer`, each checking itself
  (:data:`PARTS`: each by its field name).
* :mod:`~attn_core.config.spec`: :class:`LayerSpec`, what one layer is.
* :mod:`~attn_core.config.presets`: toy and real-model presets (``DecoderConfig.llama_like``).

May import :mod:`attn_core.checks` and the floors below it (the option names and checks of
:mod:`attn_core.ops`, :mod:`attn_core.positions`, :mod:`attn_core.modules` and
:mod:`attn_core.layers`); never :mod:`attn_core.model`, :mod:`attn_core.hf` or
:mod:`attn_core.teach`, which build on a config.
"""

from .core import DecoderConfig
from .parts import PARTS, Indexer, LayerPattern, LinearLayers, MoE, Positions
from .spec import LayerSpec

__all__ = ["PARTS", "DecoderConfig", "Indexer", "LayerPattern", "LayerSpec", "LinearLayers", "MoE", "Positions"]
