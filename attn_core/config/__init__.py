"""The decoder's configuration: :class:`DecoderConfig`, its parts and its presets.

* :mod:`~attn_core.config.core`: :class:`DecoderConfig`, the core sizes and choices, with
  the rules that tie its parts together.
* :mod:`~attn_core.config.parts`: :class:`Positions`, :class:`LayerPattern`,
  :class:`LinearLayers`, :class:`MoE` and :class:`Indexer`, each checking itself
  (:data:`PARTS`: each by its field name).
* :mod:`~attn_core.config.spec`: :class:`LayerSpec`, what one layer is.
* :mod:`~attn_core.config.presets`: toy and real-model presets (``DecoderConfig.llama_like``).
"""

from .core import DecoderConfig
from .parts import PARTS, Indexer, LayerPattern, LinearLayers, MoE, Positions
from .spec import LayerSpec

__all__ = ["PARTS", "DecoderConfig", "Indexer", "LayerPattern", "LayerSpec", "LinearLayers", "MoE", "Positions"]
