"""Parity with Hugging Face (float64, copied weights): Qwen3-Next's gated delta rule and its Gated DeltaNet layer.

Hugging Face's PyTorch paths (``torch_recurrent_gated_delta_rule``, ``torch_chunk_gated_delta_rule``,
``causal_conv1d_fn`` / ``causal_conv1d_update``) are what runs on a CPU without the fla and
causal-conv1d packages; the tests skip if either is installed (a fused kernel would run instead).
Those paths cast to float32 internally (a downcast for float64 inputs), so each test keeps
float64 in float64 (see :func:`_keep_float64`); then the outputs agree to 1e-12 (measured:
about 2e-15). Nothing is downloaded: a tiny config, random weights.
"""

from __future__ import annotations

import importlib.util
import types

import pytest
import torch

from attn_core import GatedDeltaNet
from attn_core.hf.weights import copy_gated_deltanet
from attn_core.ops import delta_rule as dr
from attn_core.ops import linear_attention as la
from conftest import F64, randn

transformers = pytest.importorskip("transformers")
from transformers.cache_utils import DynamicCache  # noqa: E402
from transformers.models.qwen3_next import modeling_qwen3_next  # noqa: E402

if any(importlib.util.find_spec(name) is not None for name in ("fla", "causal_conv1d")):
    pytest.skip("fla / causal_conv1d installed: Hugging Face would run its fused kernels", allow_module_level=True)

B, H, T, D_K, D_V = 2, 3, 13, 5, 4
TOL = {"rtol": 0, "atol": 1e-12}


@pytest.fixture(autouse=True)
def _keep_float64(monkeypatch):
    """Make Hugging Face's float32 casts no-ops for float64 tensors.

    Its delta-rule functions and gated norm call ``x.to(torch.float32)`` (an upcast meant for
    half precision): the module's ``torch`` is swapped for a view of torch whose ``float32``
    is ``float64``. The layer's decay is ``A_log.float()``: ``Tensor.float`` keeps float64.
    """
    proxy = types.ModuleType("torch_keeping_float64")
    proxy.__getattr__ = lambda name: getattr(torch, name)
    proxy.float32 = F64
    monkeypatch.setattr(modeling_qwen3_next, "torch", proxy)
    to_float = torch.Tensor.float
    monkeypatch.setattr(torch.Tensor, "float", lambda x, *a, **kw: x if x.dtype == F64 else to_float(x, *a, **kw))


def _inputs(seed: int = 0):
    """Raw (not normalised) q, k; values; β ∈ (0, 1); log-decays g ∈ (-1, 0). Ours are ``(B, H, T, ·)``."""
    q, k, v = randn(B, H, T, D_K, seed=seed), randn(B, H, T, D_K, seed=seed + 1), randn(B, H, T, D_V, seed=seed + 2)
    gen = torch.Generator().manual_seed(seed + 3)
    return q, k, v, torch.rand(B, H, T, generator=gen, dtype=F64), -torch.rand(B, H, T, generator=gen, dtype=F64)


def _hf_layout(*xs: torch.Tensor) -> list[torch.Tensor]:
    """Ours ``(B, H, T, ·)`` to Hugging Face's ``(B, T, H, ·)``."""
    return [x.transpose(1, 2) for x in xs]


@pytest.mark.parametrize("form, chunk_size", [("recurrent", None), ("chunked", 4), ("chunked", 64)])
def test_gated_delta_rule_matches_hugging_face(form, chunk_size):
    q, k, v, beta, g = _inputs()
    S0 = randn(B, H, D_K, D_V, seed=7)
    hf_kw = {"initial_state": S0, "output_final_state": True, "use_qk_l2norm_in_kernel": True}
    if form == "recurrent":
        hf_out, hf_S = modeling_qwen3_next.torch_recurrent_gated_delta_rule(*_hf_layout(q, k, v, g, beta), **hf_kw)
        out, S = dr.delta_rule_recurrent(la.l2_normalize(q), la.l2_normalize(k), v, beta, g, initial_state=S0)
    else:
        hf_out, hf_S = modeling_qwen3_next.torch_chunk_gated_delta_rule(
            *_hf_layout(q, k, v, g, beta), chunk_size=chunk_size, **hf_kw
        )
        out, S = dr.delta_rule_chunked(
            la.l2_normalize(q), la.l2_normalize(k), v, beta, g, chunk_size=chunk_size, initial_state=S0
        )
    assert hf_out.dtype == F64
    torch.testing.assert_close(out, hf_out.transpose(1, 2), **TOL)
    torch.testing.assert_close(S, hf_S, **TOL)


def _pair(seed: int = 0):
    """A tiny ``Qwen3NextGatedDeltaNet`` (2 key heads serving 4 value heads) and ours with its weights."""
    config = modeling_qwen3_next.Qwen3NextConfig(
        hidden_size=32,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=8,
        linear_value_head_dim=6,
        linear_conv_kernel_dim=4,
        num_hidden_layers=1,
        layer_types=["linear_attention"],
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        vocab_size=16,
    )
    torch.manual_seed(seed)
    hf = modeling_qwen3_next.Qwen3NextGatedDeltaNet(config, layer_idx=0).to(F64).eval()
    with torch.no_grad():  # random weights everywhere (the init leaves the norm gain at ones)
        for p in hf.parameters():
            p.copy_(0.3 * torch.randn_like(p))
        hf.A_log.copy_(torch.rand(4, dtype=F64).log())  # decays α = exp(-A·softplus(·)) not all ≈ 0
    ours = GatedDeltaNet(
        32, 2, 8, n_value_heads=4, value_head_dim=6, conv_size=4, chunk_size=5, norm_eps=config.rms_norm_eps
    ).to(F64)
    return config, hf, copy_gated_deltanet(ours, hf)


def test_gated_deltanet_matches_hugging_face():
    _, hf, ours = _pair()
    x = randn(2, 11, 32, seed=5)
    with torch.no_grad():
        want = hf(x)
        assert want.dtype == F64 and want.abs().max() > 0.1  # not a vanishing output
        torch.testing.assert_close(ours(x), want, **TOL)


def test_gated_deltanet_decoding_matches_hugging_face():
    """A prefill of 6 tokens then 5 single-token steps, each side with its own cache."""
    config, hf, ours = _pair(seed=1)
    x = randn(2, 11, 32, seed=6)
    with torch.no_grad():
        hf_cache, cache = DynamicCache(config=config), ours.make_cache(2, 11)
        steps = [(0, 6)] + [(t, t + 1) for t in range(6, 11)]
        want = torch.cat([hf(x[:, a:b], cache_params=hf_cache) for a, b in steps], dim=1)
        got = torch.cat([ours(x[:, a:b], kv_cache=cache) for a, b in steps], dim=1)
        torch.testing.assert_close(got, want, **TOL)
        torch.testing.assert_close(want, hf(x), **TOL)  # and both equal the full forward
        torch.testing.assert_close(cache.state, hf_cache.get_recurrent_state(0, state_idx=0), **TOL)
