"""SmolLM3 (``smollm3``): LLaMA's block with NoPE layers.

``rope_layers`` from ``no_rope_layers`` (1: the layer uses RoPE, 0: no positions; every
fourth layer by default), windows per ``layer_types`` only with ``use_sliding_window``.
Llama 4 reads its NoPE layers with :func:`smollm3_fields` too.
"""

from __future__ import annotations

from .base import Family, refuse, windows_by_layer_type

__all__ = ["SMOLLM3", "smollm3_fields"]


def smollm3_fields(hf) -> dict:
    """``rope_layers``: the layers whose ``no_rope_layers[i]`` is 1 rotate, the others have no positions."""
    flags = tuple(bool(v) for v in hf.no_rope_layers)  # 1 = the layer rotates (the name says the opposite)
    if len(flags) < hf.num_hidden_layers:  # Llama 4's may be longer ("at least the same length")
        raise ValueError(
            f"no_rope_layers must give 0 or 1 per layer ({hf.num_hidden_layers}), got {list(hf.no_rope_layers)}"
        )
    flags = flags[: hf.num_hidden_layers]
    return {} if all(flags) else dict(rope_layers=flags)


def _windows(hf) -> dict:
    """Windows per ``layer_types``, read only when ``use_sliding_window`` is set."""
    if getattr(hf, "use_sliding_window", False):
        return windows_by_layer_type(hf)
    if "sliding_attention" in list(getattr(hf, "layer_types", None) or []):
        # Hugging Face builds a sliding mask for these layers, but its layers do not slide
        refuse(hf.model_type, "layer_types with 'sliding_attention' but use_sliding_window=False")
    return {}


SMOLLM3 = Family("smollm3", windows=_windows, fields=smollm3_fields)
