"""Every DecoderLM variant runs in float32, bfloat16 and float16: forward and cached greedy decoding.

Each variant is built once in float32, then cast (``model.to(dtype)``); its half-precision
logits must be finite and close to the float32 model's on the same tokens. The generated
tokens are compared through the logits (the float32 model re-reads the half model's tokens),
not token by token: a near tie in a small random model may flip an argmax legitimately.
"""

from __future__ import annotations

import pytest
import torch

from attn_core import DecoderConfig
from attn_core.config import Indexer, LayerPattern, MoE, Positions
from attn_core.model.generation import generate
from attn_core.ops.delta_rule import delta_rule_chunked, delta_rule_recurrent, solve_unit_lower
from conftest import PRESETS, decoder

_SMALL = dict(vocab_size=24, d_model=32, n_heads=4, max_len=32)

#: Every kind of model the tests build (the presets, and the Part V options on top).
VARIANTS = {
    **{name: PRESETS[name] for name in ("gpt2_like", "llama_like", "mla", "sas", "sas-p")},
    "alibi": DecoderConfig.llama_like(**_SMALL, positions=Positions(positional="alibi")),
    "sinusoidal_post": DecoderConfig.gpt2_like(
        **_SMALL, norm_position="post", positions=Positions(positional="sinusoidal")
    ),
    "sliding_sinks_gate_qknorm": DecoderConfig.llama_like(
        **_SMALL,
        n_kv_heads=2,
        attention_sinks=True,
        attention_gate="elementwise",
        qk_norm=True,
        pattern=LayerPattern(layer_types=("sliding", "full"), sliding_window=4),
    ),
    "softcap_sandwich": DecoderConfig.llama_like(
        **_SMALL, n_kv_heads=2, norm_position="sandwich", attention_softcap=20.0, final_softcap=30.0
    ),
    "moe": DecoderConfig.llama_like(**_SMALL, n_kv_heads=2, moe=MoE(n_experts=4, experts_per_token=2, moe_d_ff=16)),
    "dsa": DecoderConfig.llama_like(
        **_SMALL,
        n_kv_heads=None,
        attention="mla",
        d_latent=16,
        d_q_latent=12,
        indexer=Indexer(index_n_heads=2, index_head_dim=8, index_topk=4),
    ),
    "hybrid": DecoderConfig.llama_like(**_SMALL, n_kv_heads=2, pattern=LayerPattern(layer_types=("linear", "full"))),
    "kv_share": DecoderConfig.llama_like(**_SMALL, n_kv_heads=2, pattern=LayerPattern(kv_share=(0, 0))),
}

#: Largest |half − float32| logit difference allowed, relative to the float32 logits' largest
#: magnitude. bfloat16 keeps 8 bits of mantissa (2⁻⁸ ≈ 4e-3 per rounding), float16 11 bits
#: (2⁻¹¹ ≈ 5e-4); two layers of rounding in weights, activations and sums measured up to
#: about 10× the unit here, so the bounds leave a further factor of 2-5.
TOLERANCE = {torch.bfloat16: 1e-1, torch.float16: 2e-2, torch.float32: 1e-5}

DEVICES = [
    "cpu",
    pytest.param(
        "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
    ),
]


def _relative_error(logits: torch.Tensor, reference: torch.Tensor) -> float:
    return float((logits.double() - reference.double()).abs().max() / reference.double().abs().max())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variant_runs_in_dtype(name, dtype, device):
    reference = decoder(VARIANTS[name]).eval().to(device)
    # Larger logits than at initialisation (std 0.02), so that the comparison is not of noise.
    with torch.no_grad():
        reference.lm_head.weight.mul_(20.0)
    model = decoder(VARIANTS[name]).eval().to(device)
    model.load_state_dict(reference.state_dict())
    model.to(dtype)
    V = reference.config.vocab_size
    # DSA's top-k selection is discrete: rounding may legitimately pick another key among
    # near-equal index scores, and the logits then differ by far more than rounding. Its
    # comparison is held where the selection cannot differ (queries with at most index_topk
    # keys, all selected); the other positions are held finite.
    topk = None if reference.config.indexer is None else reference.config.indexer.index_topk
    compared = slice(None) if topk is None else slice(0, topk)
    idx = torch.randint(0, V, (2, 7), generator=torch.Generator().manual_seed(3)).to(device)
    with torch.no_grad():
        logits = model(idx)
        assert logits.dtype == dtype and bool(torch.isfinite(logits).all())
        assert _relative_error(logits[:, compared], reference(idx)[:, compared]) <= TOLERANCE[dtype]
        tokens, gen_logits = generate(model, idx, 6, temperature=0.0, return_logits=True)
        assert gen_logits.dtype == dtype and bool(torch.isfinite(gen_logits).all())
        # The float32 model on the half model's own tokens: the cached steps agree with it.
        expected = reference(tokens[:, :-1])
        assert _relative_error(gen_logits[:, compared], expected[:, compared]) <= TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_chunked_delta_rule_in_half_precision_matches_float64(dtype):
    g = torch.Generator().manual_seed(0)
    B, H, T, D = 1, 2, 20, 8
    q, k, v = (torch.randn(B, H, T, D, generator=g, dtype=torch.float64) for _ in range(3))
    k = torch.nn.functional.normalize(k, dim=-1)
    beta = torch.rand(B, H, T, generator=g, dtype=torch.float64)
    decay = -torch.rand(B, H, T, generator=g, dtype=torch.float64) * 0.2
    out64, S64 = delta_rule_recurrent(q, k, v, beta, decay)
    out, S = delta_rule_chunked(*(t.to(dtype) for t in (q, k, v, beta, decay)), chunk_size=8)
    assert out.dtype == S.dtype == dtype
    # Rounding the inputs and the outputs to the dtype only: float32 inside keeps the error
    # at a few units of the dtype's last place (a bf16 state would drift far beyond).
    unit = torch.finfo(dtype).eps
    assert float((out.double() - out64).abs().max() / out64.abs().max()) < 8 * unit
    assert float((S.double() - S64).abs().max() / S64.abs().max()) < 8 * unit


def test_solve_unit_lower_works_in_half_precision_and_float64():
    g = torch.Generator().manual_seed(1)
    L = torch.randn(3, 5, 5, generator=g, dtype=torch.float64).tril(-1) * 0.3 + torch.eye(5, dtype=torch.float64)
    rhs = torch.randn(3, 5, 2, generator=g, dtype=torch.float64)
    x = solve_unit_lower(L, rhs)
    assert x.dtype == torch.float64 and torch.allclose(L @ x, rhs, atol=1e-12)
    x16 = solve_unit_lower(L.to(torch.bfloat16), rhs.to(torch.bfloat16))
    assert x16.dtype == torch.bfloat16 and torch.allclose(x16.double(), x, atol=0.05)
