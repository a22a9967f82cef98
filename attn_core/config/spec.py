"""What one layer of a :class:`~attn_core.config.DecoderConfig` is: :class:`LayerSpec`.

The config answers once, per layer, every question a layer's builder asks (its type,
window, chunk, RoPE, QK-norm, query temperature, key/value source, MoE or dense MLP),
so that :func:`~attn_core.model.build.make_layer` reads one object instead of re-deriving the
per-layer rules from the config's fields.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LayerSpec"]


@dataclass(frozen=True)
class LayerSpec:
    """The settings of one layer, resolved from a config (``config.layer(i)``).

    Attributes:
        index: The layer's index ``i``.
        kind: ``"full"``, ``"sliding"``, ``"linear"`` or ``"chunked"``.
        window: The attention window (sliding layers), else None.
        chunk: The attention chunk (chunked layers), else None.
        rope: ``"rope"`` (the model's RoPE), ``"sliding_rope"`` (the sliding layers' own base)
            or None (no rotation in this layer).
        qk_norm: The layer's QK-norm: False, True or ``"all_heads"``.
        temperature: The query temperature ``(floor_scale, attn_scale)`` of a layer without
            RoPE (Llama 4), else None.
        kv_source: The earlier layer whose keys and values this one reuses, else None.
        moe: Whether the MLP is a mixture of experts.
    """

    index: int
    kind: str
    window: int | None
    chunk: int | None
    rope: str | None
    qk_norm: bool | str
    temperature: tuple[float, float] | None
    kv_source: int | None
    moe: bool
