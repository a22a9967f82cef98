"""Sliding windows in a stack of layers: receptive field, per-layer patterns, cache bytes, sinks at inference.

A sliding-window layer (Mistral, Gemma 2/3, gpt-oss) lets each query see itself and the
``window - 1`` positions before it (:func:`attn_core.ops.masks.causal_mask` with ``window=``).
What that means for a *model*:

* :func:`receptive_field` probes a stack: the gradient of the last position's output with
  respect to every input position. One layer reaches ``window - 1`` positions back; ``L``
  layers reach ``L·(window - 1)`` back (:func:`receptive_field_width`).
* :func:`layer_pattern` builds the per-layer pattern of full and sliding layers that a
  :class:`~attn_core.DecoderConfig` takes as ``layer_types`` (Gemma 3's five sliding
  layers per full one; gpt-oss's alternation).
* :func:`kv_cache_bytes` counts a configuration's key/value cache at a context length:
  a sliding layer holds at most ``window`` positions (a :class:`~attn_core.RollingKVCache`),
  a layer that reuses another's keys and values (``kv_share``) holds none.
* :func:`published_attention` gives the attention shapes of Mistral 7B, Gemma 3 27B and
  gpt-oss-20b/120b as configurations, from their published ``config.json`` values.
* :func:`windowed` puts a window (and StreamingLLM's kept first tokens) on a trained
  model's layers for a while, to measure what a sliding cache does to it.

Shape legend:
    B    batch size
    T    positions
    d    model width
    L    layers
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import torch
from torch import nn

from ..checks import check_instance, check_int, check_tensor
from ..config import DecoderConfig, LayerPattern, Positions
from ..layers.multihead import MultiHeadAttention
from ..ops.masks import check_window

__all__ = [
    "receptive_field",
    "receptive_field_width",
    "layer_pattern",
    "kv_cache_bytes",
    "published_attention",
    "windowed",
]


def receptive_field(layers: Sequence[nn.Module], x: torch.Tensor, *, position: int = -1) -> torch.Tensor:
    """How strongly the output at ``position`` depends on each input position, through ``layers``.

    Runs ``x`` through the layers in order (each called as ``layer(x)``), backpropagates
    the sum of the output at ``position`` and returns the norm of the gradient at every
    input position. A zero means "cannot see": exactly zero beyond the receptive field.

    Args:
        layers: Modules applied in order, each ``(B, T, d) -> (B, T, d)``.
        x: The input sequence (one example, or a batch whose gradients are summed).
        position: The output position to probe (negative counts from the end).

    Returns:
        The gradient norm per input position.

    Shapes:
        x: ``(B, T, d)``; output: ``(T,)``

    Raises:
        TypeError: ``layers`` is not a sequence of modules, ``x`` not a floating tensor.
        ValueError: ``position`` outside ``[-T, T)``.
    """
    if isinstance(layers, nn.Module):
        layers = [layers]
    if not isinstance(layers, Sequence) or not layers:
        raise TypeError(f"layers must be a non-empty sequence of modules, got {type(layers).__name__}")
    for i, layer in enumerate(layers):
        check_instance(f"layers[{i}]", layer, nn.Module)
    check_tensor("x", x, ("B", "T", "d"), floating=True)
    T = x.shape[1]
    if isinstance(position, bool) or not isinstance(position, int) or not -T <= position < T:
        raise ValueError(f"position must be an int in [-{T}, {T}), got position={position!r}")
    x = x.detach().clone().requires_grad_(True)
    h = x
    for layer in layers:
        h = layer(h)  # (B, T, d)
    (grad,) = torch.autograd.grad(h[:, position].sum(), x)  # (B, T, d)
    return grad.norm(dim=-1).sum(0)  # (T,)


def receptive_field_width(n_layers: int, window: int) -> int:
    """Positions the last output of ``n_layers`` stacked windowed layers can depend on: ``L·(window - 1) + 1``.

    Each layer moves information at most ``window - 1`` positions forward; a stack adds
    the hops. The ``+ 1`` is the position itself.
    """
    return check_int("n_layers", n_layers) * (check_window(window) - 1) + 1


def layer_pattern(n_layers: int, full_every: int, *, other: str = "sliding") -> tuple[str, ...]:
    """``other`` layers with every ``full_every``-th one ``"full"``: a ``layer_types`` for :class:`DecoderConfig`.

    Layer ``i`` is full when ``(i + 1) % full_every == 0``, the rule of Hugging Face's
    Gemma 3 (``full_every=6``: five sliding layers, then one full), gpt-oss
    (``full_every=2``: sliding, full, sliding, ...) and Qwen3-Next (``full_every=4``,
    ``other="linear"``: three Gated DeltaNet layers, then one full attention layer).
    ``full_every=1`` makes every layer full.

    Args:
        n_layers: Number of layers.
        full_every: Period of the full-attention layers.
        other: The type of the other layers: ``"sliding"`` or ``"linear"``.

    Example:
        >>> layer_pattern(4, 2)
        ('sliding', 'full', 'sliding', 'full')
        >>> layer_pattern(4, 4, other="linear")
        ('linear', 'linear', 'linear', 'full')
    """
    n_layers, full_every = check_int("n_layers", n_layers), check_int("full_every", full_every)
    if other not in ("sliding", "linear"):
        raise ValueError(f"other must be 'sliding' or 'linear', got {other!r}")
    return tuple("full" if (i + 1) % full_every == 0 else other for i in range(n_layers))


def kv_cache_bytes(config: DecoderConfig, context: int, *, batch_size: int = 1, bytes_per_element: int = 2) -> int:
    """Bytes of the key/value cache of ``DecoderLM(config)`` holding ``context`` positions.

    Per layer that computes its own keys and values: ``2 · B · H_kv · D · n`` elements,
    with ``n = context`` for a full layer and ``n = min(context, sliding_window)`` for a
    sliding one (its rolling cache forgets older positions). A layer that reuses another
    layer's keys and values (``config.pattern.kv_share``) stores nothing. A ``"linear"`` (Gated
    DeltaNet) layer stores its :class:`~attn_core.caches.recurrent.GatedDeltaNetCache` whatever the context:
    ``B · (C_conv · (K - 1) + H_v · D_k · D_v)`` elements, the convolution's last ``K - 1``
    inputs and the delta rule's state.

    Args:
        config: The model's configuration (``attention="mha"``).
        context: Positions held (prompt and generated tokens).
        batch_size: ``B``.
        bytes_per_element: 2 for bfloat16/float16 (the usual serving precision), 4 for float32.

    Raises:
        TypeError, ValueError: A bad argument, naming the value; an MLA configuration.
    """
    check_instance("config", config, DecoderConfig)
    context, batch_size = check_int("context", context), check_int("batch_size", batch_size)
    bytes_per_element = check_int("bytes_per_element", bytes_per_element)
    if config.attention != "mha":
        raise ValueError(f"kv_cache_bytes counts key/value heads; got attention={config.attention!r}")
    per_position = 2 * batch_size * config.resolved_n_kv_heads * config.resolved_head_dim * bytes_per_element
    total = 0
    for i in range(config.n_layers):
        if config.pattern.kv_share is not None and config.pattern.kv_share[i] != i:
            continue  # reads another layer's cache
        if config.resolved_layer_types[i] == "linear":  # a constant-size state, not one entry per position
            total += batch_size * _linear_state_elements(config) * bytes_per_element
            continue
        window = config.layer(i).window
        total += per_position * (context if window is None else min(context, window))
    return total


def _linear_state_elements(config: DecoderConfig) -> int:
    """Elements of one ``"linear"`` layer's cache per sequence: convolution history and state."""
    h_k, d_k, h_v, d_v = config.resolved_linear_sizes
    conv_channels = 2 * h_k * d_k + h_v * d_v  # q, k and v go through the short convolution
    return conv_channels * (config.linear.linear_conv_size - 1) + h_v * d_k * d_v


def published_attention() -> dict[str, DecoderConfig]:
    """The attention shapes of four published models, as configurations (values from their ``config.json``).

    Only the fields that set the key/value cache are the published ones in full detail
    (layers, key/value heads, head width, window, pattern); the feed-forward side of
    gpt-oss (a mixture of experts) and Gemma 3's extra norms are not modelled, so do not
    read parameter counts from these.

    * Mistral 7B v0.1: 32 layers, 32 query / 8 key-value heads of 128, every layer a
      sliding window of 4096.
    * Gemma 3 27B: 62 layers, 32 query / 16 key-value heads of 128, window 1024, five
      sliding layers per full one.
    * gpt-oss-20b / gpt-oss-120b: 24 / 36 layers, 64 query / 8 key-value heads of 64,
      window 128, sliding and full layers alternating, a learned sink per head.
    """
    llama = dict(positions=Positions("rope"), mlp="swiglu", norm="rmsnorm", tie_weights=False, max_len=131072)
    gpt_oss = dict(vocab_size=201088, d_model=2880, n_heads=64, n_kv_heads=8, head_dim=64, d_ff=2880)
    return {
        "Mistral 7B": DecoderConfig(
            vocab_size=32000,
            n_layers=32,
            d_model=4096,
            n_heads=32,
            n_kv_heads=8,
            d_ff=14336,
            pattern=LayerPattern(sliding_window=4096),
            **{**llama, "max_len": 32768},
        ),  # fmt: skip
        "Gemma 3 27B": DecoderConfig(
            vocab_size=262208,
            n_layers=62,
            d_model=5376,
            n_heads=32,
            n_kv_heads=16,
            head_dim=128,
            d_ff=21504,
            pattern=LayerPattern(layer_pattern(62, 6), sliding_window=1024),
            qk_norm=True,
            **llama,
        ),  # fmt: skip
        "gpt-oss-20b": DecoderConfig(
            n_layers=24,
            pattern=LayerPattern(layer_pattern(24, 2), sliding_window=128),
            attention_sinks=True,
            bias=True,
            **gpt_oss,
            **llama,
        ),  # fmt: skip
        "gpt-oss-120b": DecoderConfig(
            n_layers=36,
            pattern=LayerPattern(layer_pattern(36, 2), sliding_window=128),
            attention_sinks=True,
            bias=True,
            **gpt_oss,
            **llama,
        ),  # fmt: skip
    }


@contextlib.contextmanager
def windowed(model: nn.Module, window: int | None, *, sink_tokens: int = 0) -> Iterator[nn.Module]:
    """Give every causal :class:`~attn_core.MultiHeadAttention` of ``model`` a window for the ``with`` block.

    Measures what a sliding-window cache does to a model trained without one, as
    StreamingLLM does (Xiao et al. 2023): with ``sink_tokens=0`` a query sees only the
    last ``window`` positions; with ``sink_tokens=n`` it also keeps the first ``n``. The
    layers' own settings come back afterwards, even after an error.

    Args:
        model: Any module containing causal multi-head attention layers.
        window: The window to impose (None: full attention).
        sink_tokens: First positions kept visible (needs a window).

    Raises:
        ValueError: A bad window or ``sink_tokens``, or a model with no causal attention layer.
    """
    check_instance("model", model, nn.Module)
    window = check_window(window)
    sink_tokens = check_int("sink_tokens", sink_tokens, minimum=0)
    if sink_tokens and window is None:
        raise ValueError(f"sink_tokens={sink_tokens} keeps the first tokens inside a window: pass a window")
    layers = [m for m in model.modules() if isinstance(m, MultiHeadAttention) and m.causal]
    if not layers:
        raise ValueError(f"{type(model).__name__} has no causal MultiHeadAttention layer to window")
    saved = [(m.window, m.sink_tokens) for m in layers]
    try:
        for m in layers:
            m.window, m.sink_tokens = window, sink_tokens
        yield model
    finally:
        for m, (w, s) in zip(layers, saved):
            m.window, m.sink_tokens = w, s
