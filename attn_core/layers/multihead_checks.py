"""The rules of :class:`~attn_core.MultiHeadAttention`: which options and which calls it accepts.

Every check raises a TypeError or ValueError that names the values it got, before any
weight is built (options) or any projection runs (calls).

Shape legend:
    B        batch size
    T        sequence length; ``T_q`` queries, ``T_k`` keys
    d_model  model width; ``d_context`` width of the sequence cross-attention reads
"""

from __future__ import annotations

from torch import nn

from ..caches.kv import KVCache, RollingKVCache
from ..checks import (
    check_bool,
    check_choice,
    check_instance,
    check_int,
    check_made_for,
    check_number,
    check_tensor,
)
from ..modules.norms import check_qk_norm
from ..ops.masks import check_window
from ..positions.positional import check_temperature
from ..positions.rope import check_rope
from .context_kv import check_context_kv
from .gating import GATE_KINDS

__all__ = ["check_mha_options", "check_mha_call", "check_rolling"]


def check_mha_options(
    d_model, n_heads, *, n_kv_heads, causal, bias, dropout, rope, d_context, head_dim, qk_norm, gate, softcap,
    window, sinks, sink_tokens, qkv_bias, scale, chunk, temperature,
) -> dict:  # fmt: skip
    """The options of :class:`~attn_core.MultiHeadAttention`, checked and with their defaults filled in.

    Returns the attributes the layer keeps, in the order it sets them (``rope``, a
    submodule, before the projections).

    Raises:
        TypeError / ValueError: an option of the wrong type or value, or two that do not go
            together, naming the values.
    """
    check_int("d_model", d_model)
    check_int("n_heads", n_heads)
    n_kv_heads = check_int("n_kv_heads", n_heads if n_kv_heads is None else n_kv_heads)
    d_context = check_int("d_context", d_model if d_context is None else d_context)
    if head_dim is None and d_model % n_heads != 0:
        raise ValueError(
            f"d_model={d_model} is not divisible by n_heads={n_heads}; pass head_dim= to choose the head width"
        )
    if n_heads % n_kv_heads != 0:
        raise ValueError(f"n_heads={n_heads} is not divisible by n_kv_heads={n_kv_heads}")
    head_dim = d_model // n_heads if head_dim is None else check_int("head_dim", head_dim)
    check_bool("causal", causal)
    check_bool("bias", bias)
    if check_bool("qkv_bias", qkv_bias) and bias:
        raise ValueError("qkv_bias=True adds biases to q/k/v only; bias=True already gives every projection one")
    options = dict(d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv_heads, head_dim=head_dim, d_context=d_context)
    options.update(
        causal=causal,
        qkv_bias=qkv_bias,
        scale=None if scale is None else check_number("scale", scale, low=0.0, low_open=True),
        dropout=check_number("dropout", dropout, low=0.0, high=1.0, high_open=True),
        rope=check_rope(rope, head_dim),
    )
    check_qk_norm(qk_norm)
    options.update(
        gate=None if gate is None else check_choice("gate", gate, GATE_KINDS),
        softcap=None if softcap is None else check_number("softcap", softcap, low=0.0, low_open=True),
        window=check_window(window),
        sink_tokens=check_int("sink_tokens", sink_tokens, minimum=0),
        chunk=None if chunk is None else check_int("chunk", chunk),
        temperature=check_temperature(temperature),
    )
    # Sliding window, StreamingLLM's kept first tokens, gpt-oss's sink logits, Llama 4's chunks.
    if options["chunk"] is not None and options["window"] is not None:
        raise ValueError(f"pass window or chunk, not both: got window={window}, chunk={chunk}")
    check_bool("sinks", sinks)
    for name, value, on in (
        ("window", window, options["window"] is not None),
        ("chunk", chunk, options["chunk"] is not None),
        ("sinks", sinks, sinks),
        ("sink_tokens", sink_tokens, sink_tokens > 0),
    ):
        if on and not causal:
            raise ValueError(f"{name}={value!r} is for causal self-attention, got causal={causal}")
    if options["sink_tokens"] and options["window"] is None:
        raise ValueError(f"sink_tokens={sink_tokens} keeps the first tokens inside a window: pass window= too")
    return options


def check_mha_call(layer: nn.Module, x, context, mask, kv_cache, context_kv) -> None:
    """The inputs of ``layer.forward``: shapes, and a cache or context ``layer`` can use together.

    Raises:
        TypeError / ValueError: a tensor of the wrong shape or dtype, a cache made for another
            layer or batch, a cache or context this layer cannot take, or two that exclude each other.

    Shapes:
        x: ``(B, T_q, d_model)``; context: ``(B, T_k, d_context)``
    """
    check_tensor("x", x, ("B", "T", ("d_model", layer.d_model)), like=layer.q_proj.weight)
    check_instance("kv_cache", kv_cache, (KVCache, RollingKVCache), optional=True)
    if isinstance(kv_cache, RollingKVCache):
        check_rolling(layer, kv_cache, mask)
    if kv_cache is not None:
        check_made_for(
            "kv_cache",
            kv_cache.made_for,
            {"batch_size": x.shape[0], "n_kv_heads": layer.n_kv_heads, "head_dim": layer.head_dim},
            fix="make it with this layer's make_cache(batch_size, max_len)",
        )
    if context is not None:
        check_tensor("context", context, ("B", "T", ("d_context", layer.d_context)), like=layer.q_proj.weight)
        if context.shape[0] != x.shape[0]:
            raise ValueError(f"x and context must have the same batch size, got {x.shape[0]} and {context.shape[0]}")
        if layer.causal:
            raise ValueError("causal=True is for self-attention; cross-attention (context given) is not causal")
        if kv_cache is not None:
            raise ValueError(
                "kv_cache is for self-attention; cross-attention keys can be computed once instead: "
                "context_kv=layer.cache_context(context)"
            )
        if context_kv is not None:
            raise ValueError("pass context or context_kv (its keys and values, projected once), not both")
    elif context_kv is not None:
        check_context_kv(layer, context_kv, x, kv_cache)
    elif layer.d_context != layer.d_model:
        raise ValueError(f"this module expects a context of width d_context={layer.d_context}; pass context=")


def check_rolling(layer: nn.Module, cache: RollingKVCache, mask) -> None:
    """A rolling cache must hold ``layer``'s whole window (and its kept first tokens), and takes no mask.

    Raises:
        ValueError: ``layer`` has no window, the cache is too small, or a ``mask`` is given.
    """
    if layer.window is None:
        raise ValueError("a RollingKVCache drops old keys: it is for a layer with a window, this one has window=None")
    if cache.window < layer.window or cache.sink_tokens < layer.sink_tokens:
        raise ValueError(
            f"the rolling cache is too small for this layer: cache window={cache.window}, "
            f"sink_tokens={cache.sink_tokens}; the layer needs window={layer.window}, sink_tokens={layer.sink_tokens}"
        )
    if mask is not None:
        raise ValueError("mask= cannot be combined with a RollingKVCache (its keys are ring slots, not positions)")
