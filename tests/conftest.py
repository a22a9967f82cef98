"""Factories shared by the unit tests: seeded tensors, layers and models.

Import them by name (``from conftest import qkv``): pytest puts this folder on the path.
"""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn

from attn_core import DecoderConfig, DecoderLM, ShapedAttention
from attn_core.config import Positions

F64 = torch.float64

#: Small decoders of every kind (the tests of config, model and generation share them).
PRESETS = {
    "gpt2_like": DecoderConfig.gpt2_like(d_model=32, n_heads=4, vocab_size=24, max_len=16),
    "gpt2_post": DecoderConfig.gpt2_like(d_model=32, n_heads=4, vocab_size=24, max_len=16, norm_position="post"),
    "llama_like": DecoderConfig.llama_like(d_model=32, n_heads=4, vocab_size=24, max_len=16),
    "mqa_nopos": DecoderConfig.llama_like(
        d_model=32, n_heads=4, n_kv_heads=1, vocab_size=24, positions=Positions(positional="none")
    ),
    "mla": DecoderConfig.llama_like(
        d_model=32, n_heads=4, n_kv_heads=None, vocab_size=24, attention="mla", d_latent=16, d_q_latent=12
    ),
    "mla_learned": DecoderConfig.gpt2_like(
        d_model=32, n_heads=4, vocab_size=24, attention="mla", d_latent=16, bias=False
    ),
    "sas": DecoderConfig.gpt2_like(d_model=32, n_heads=4, vocab_size=24, max_len=16, block="sas", norm="rmsnorm"),
    "sas-p": DecoderConfig.gpt2_like(d_model=32, n_heads=4, vocab_size=24, max_len=16, block="sas-p"),
    "sas_rope": DecoderConfig.llama_like(d_model=32, n_heads=4, n_kv_heads=None, vocab_size=24, block="sas-p"),
}


def randn(*shape: int, seed: int = 1, dtype: torch.dtype = F64) -> torch.Tensor:
    """A seeded standard-normal tensor (float64 by default: tests compare to 1e-12)."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def qkv(
    B: int = 2,
    H: int = 3,
    T_q: int = 10,
    D: int = 8,
    *,
    T_k: int | None = None,
    H_kv: int | None = None,
    D_v: int | None = None,
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Seeded queries ``(B, H, T_q, D)``, keys ``(B, H_kv, T_k, D)`` and values ``(B, H_kv, T_k, D_v)``."""
    g = torch.Generator().manual_seed(seed)
    T_k = T_q if T_k is None else T_k
    H_kv = H if H_kv is None else H_kv
    D_v = D if D_v is None else D_v
    q = torch.randn(B, H, T_q, D, generator=g, dtype=dtype)
    k = torch.randn(B, H_kv, T_k, D, generator=g, dtype=dtype)
    v = torch.randn(B, H_kv, T_k, D_v, generator=g, dtype=dtype)
    return q, k, v


def randomise_shaped_queries(module: nn.Module, std: float = 0.5, seed: int = 0, *, gains: bool = False) -> None:
    """Move every shaped attention's W_Q (and optionally its gains) off the identity initialisation.

    At initialisation (W_Q = 0, β = γ) shaped attention is the identity, which hides most
    bugs, causality ones included: a test must move away from it.
    """
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, ShapedAttention):
                m.q_proj.weight.copy_(torch.randn(m.q_proj.weight.shape, generator=g) * std)
                if gains:
                    for gain in (m.alpha, m.beta, m.gamma):
                        gain.add_(torch.randn(gain.shape, generator=g) * 0.2)


def decoder(config: DecoderConfig, seed: int = 0) -> DecoderLM:
    """A seeded ``DecoderLM(config)`` whose simplified blocks (if any) attend by content."""
    torch.manual_seed(seed)
    model = DecoderLM(config)
    randomise_shaped_queries(model, seed=seed)
    return model


def peaked_decoder(config: DecoderConfig) -> DecoderLM:
    """A seeded float64 ``DecoderLM(config)`` in eval mode whose logits are far from uniform.

    Its output layer is scaled by 30, so greedy tokens are never near ties and a test that
    compares two ways of decoding token for token cannot flip on rounding.
    """
    torch.manual_seed(0)
    model = DecoderLM(config).to(F64).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(30.0)
    return model


def require_smollm2_gguf():
    """The path of SmolLM2's GGUF file; skip the test when it is not fetched (fail under CI)."""
    from attn_core.hf import smollm2

    path = smollm2.gguf_path()
    if not path.is_file():
        why = f"{path} not fetched (run `{smollm2.FETCH_COMMAND}`)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"under CI nothing is skipped: {why}")
        pytest.skip(why)
    return path


def leaks(fn, x: torch.Tensor) -> bool:
    """Whether ``fn``'s output at some position ``<= t`` changes when the inputs after ``t`` change.

    ``fn`` maps a sequence ``(..., T, d)`` (positions on dim -2) to outputs with
    positions on dim -2. The future is redrawn, not shifted: a constant shift of every
    feature is invisible behind a LayerNorm, so a test that only shifted would pass a
    non-causal layer with a norm in front.
    """
    out = fn(x)
    generator = torch.Generator().manual_seed(0)
    for t in range(x.shape[-2] - 1):
        x2 = x.clone()
        future = x2[..., t + 1 :, :]
        future.copy_(torch.randn(future.shape, generator=generator, dtype=x.dtype))
        if not torch.allclose(out[..., : t + 1, :], fn(x2)[..., : t + 1, :], atol=1e-10):
            return True
    return False
