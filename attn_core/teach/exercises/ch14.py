"""Checks for the exercises of chapter 14 (the attention variants compared)."""

from __future__ import annotations

from typing import Callable

import torch

from ...caches.size import kv_cache_elements_per_token
from ...config import DecoderConfig, LayerPattern, LinearLayers
from ...layers.mla import MultiHeadLatentAttention
from ...layers.multihead import MultiHeadAttention
from ...model.decoder import DecoderLM
from ._common import report

__all__ = [
    "check_kv_bytes_per_token",
    "check_attention_parameters",
    "check_equivalent_groups",
    "check_stack_cache_bytes",
    "stack_cache_configs",
]


def _measured_bytes_per_token(config: DecoderConfig) -> int:
    """Bytes per token of ``DecoderLM(config)``'s caches (all layers), from the allocated tensors."""
    with torch.device("meta"):  # shapes without memory: any size is free to build
        model = DecoderLM(config)
    return sum(c.nbytes() for c in model.make_caches(1, config.max_len)) // config.max_len


def check_kv_bytes_per_token(fn: Callable[[DecoderConfig], int]) -> bool:
    """Exercise 14.1: ``fn(config)`` returns the float32 KV-cache bytes one token takes in
    ``DecoderLM(config)``, all layers, for MHA, GQA, MQA (``attention="mha"``) and MLA
    (``attention="mla"``: the latent ``d_latent`` plus the RoPE key ``resolved_rope_dim``).

    The reference builds the model and reads the size of the caches it allocates.
    """
    base = dict(vocab_size=32, n_layers=3, d_model=48, n_heads=6, max_len=16)
    configs = [
        DecoderConfig.llama_like(**base, n_kv_heads=6),
        DecoderConfig.llama_like(**base, n_kv_heads=3),
        DecoderConfig.llama_like(**base, n_kv_heads=1),
        DecoderConfig.llama_like(**base, n_kv_heads=None, attention="mla", d_latent=20, rope_dim=4),
        DecoderConfig.llama_like(**base, n_kv_heads=None, attention="mla", d_latent=24, head_dim=12),
    ]
    for cfg in configs:
        want = _measured_bytes_per_token(cfg)
        try:
            got = fn(cfg)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report("14.1 KV bytes per token", False, f"{type(e).__name__}: {e}")
        if got != want:
            kind = cfg.attention if cfg.attention == "mla" else f"mha with n_kv_heads={cfg.resolved_n_kv_heads}"
            return report("14.1 KV bytes per token", False, f"{kind}: got {got!r}, measured {want}")
    return report("14.1 KV bytes per token", True, "MHA, GQA, MQA and two MLA configurations match")


def check_attention_parameters(fn: Callable[[int, int, int], int]) -> bool:
    """Exercise 14.2: ``fn(d_model, n_heads, n_kv_heads)`` returns the parameters of one
    :class:`~attn_core.MultiHeadAttention` without biases (MHA, GQA or MQA)."""
    for d, H, kv in ((64, 4, 4), (64, 4, 2), (64, 4, 1), (96, 12, 3), (4096, 32, 8)):
        with torch.device("meta"):
            want = sum(p.numel() for p in MultiHeadAttention(d, H, n_kv_heads=kv).parameters())
        try:
            got = fn(d, H, kv)
        except Exception as e:
            return report("14.2 attention parameters", False, f"{type(e).__name__}: {e}")
        if got != want:
            return report(
                "14.2 attention parameters",
                False,
                f"d_model={d}, n_heads={H}, n_kv_heads={kv}: got {got!r}, counted {want}",
            )
    return report("14.2 attention parameters", True, "5 layers, from MHA to MQA, match")


def check_equivalent_groups(fn: Callable[[int, int, int], float]) -> bool:
    """Exercise 14.3: ``fn(d_latent, rope_dim, head_dim)`` returns the number of GQA key/value
    groups whose cache is as large as MLA's (DeepSeek-V2: 2.25 for ``512, 64, 128``).

    The reference divides the measured cache of an MLA layer by that of an MQA layer
    (one key/value head) of the same head width.
    """
    for d_c, d_r, d_h, H in ((512, 64, 128, 4), (32, 8, 16, 4), (20, 4, 6, 2)):
        with torch.random.fork_rng(devices=[]):
            mla = MultiHeadLatentAttention(H * d_h, H, d_latent=d_c, rope_dim=d_r)
            mqa = MultiHeadAttention(H * d_h, H, n_kv_heads=1)
        want = kv_cache_elements_per_token(mla) / kv_cache_elements_per_token(mqa)
        try:
            got = fn(d_c, d_r, d_h)
        except Exception as e:
            return report("14.3 equivalent groups", False, f"{type(e).__name__}: {e}")
        if not isinstance(got, (int, float)) or abs(got - want) > 1e-9:
            return report(
                "14.3 equivalent groups",
                False,
                f"d_latent={d_c}, rope_dim={d_r}, head_dim={d_h}: got {got!r}, measured {want}",
            )
    return report("14.3 equivalent groups", True, "DeepSeek-V2's 2.25 and two small layers match")


def _measured_stack_bytes(config: DecoderConfig, context: int) -> int:
    """Bytes of ``DecoderLM(config)``'s caches (all layers) for one sequence of ``context`` tokens."""
    with torch.device("meta"):  # shapes without memory: any size is free to build
        model = DecoderLM(config)
    return sum(c.nbytes() for c in model.make_caches(1, context))


def stack_cache_configs() -> list[DecoderConfig]:
    """The layer stacks exercise 14.4 is checked on: full, sliding and linear layers mixed."""
    base = dict(vocab_size=32, d_model=48, n_heads=6, max_len=4096)
    llama = DecoderConfig.llama_like
    return [
        llama(**base, n_layers=2, n_kv_heads=2),
        llama(**base, n_layers=4, n_kv_heads=3, pattern=LayerPattern(("linear", "linear", "linear", "full"))),
        llama(**base, n_layers=3, n_kv_heads=1, pattern=LayerPattern(("sliding", "sliding", "full"), sliding_window=5)),
        llama(
            **base,
            n_layers=2,
            n_kv_heads=2,
            pattern=LayerPattern(("linear", "full")),
            linear=LinearLayers(
                linear_n_heads=2,
                linear_head_dim=12,
                linear_n_value_heads=4,
                linear_value_head_dim=6,
                linear_conv_size=3,
            ),
        ),
    ]


def check_stack_cache_bytes(fn: Callable[[DecoderConfig, int], int]) -> bool:
    """Exercise 14.4: ``fn(config, context)`` returns the float32 bytes of all layers' caches of
    ``DecoderLM(config)`` for one sequence of ``context`` tokens, for stacks that mix
    ``"full"`` attention layers (keys and values of every token), ``"sliding"`` layers (a
    rolling cache of the last ``sliding_window`` tokens at most) and ``"linear"`` Gated
    DeltaNet layers (a state of fixed size: the short convolution's last ``K - 1`` inputs
    and one ``D_k x D_v`` matrix per value head).

    The reference builds the model and reads the size of the caches it allocates, at a
    short context (shorter than the window) and at a long one.
    """
    name = "14.4 cache of a mixed stack"
    for cfg in stack_cache_configs():
        for context in (3, 1024):
            want = _measured_stack_bytes(cfg, context)
            try:
                got = fn(cfg, context)
            except Exception as e:  # a learner's bug should print, not stop the notebook
                return report(name, False, f"{type(e).__name__}: {e}")
            if got != want:
                return report(
                    name,
                    False,
                    f"layer_types={cfg.resolved_layer_types}, context={context}: got {got!r}, measured {want}",
                )
    return report(name, True, "4 stacks of full, sliding and linear layers, at 3 and 1,024 tokens, match")
