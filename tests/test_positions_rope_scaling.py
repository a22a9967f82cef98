"""attn_core.positions.rope_scaling and RotaryEmbedding(scaling=...): PI, NTK, dynamic NTK, YaRN, Llama 3.1, LongRoPE.

Reference: Hugging Face's ``ROPE_INIT_FUNCTIONS`` and ``LlamaRotaryEmbedding`` (transformers
5.23) in float64. Those compute in float32 whatever the model's dtype (``dtype=torch.float``,
``.float()``, and a float32 default dtype for tensor arithmetic): :func:`hf_in_float64` lifts
them, the formulas unchanged. Nothing is downloaded: configs are built here.
"""

from __future__ import annotations

import contextlib
import types

import pytest
import torch

from attn_core.hf.rope import scaling_from_hf
from attn_core.positions.rope import RotaryEmbedding
from attn_core.positions.rope_freqs import (
    default_inv_freq,
    dynamic_ntk_inv_freq,
    linear_inv_freq,
    yarn_inv_freq,
    yarn_mscale,
)
from attn_core.positions.rope_scaling import (
    SCALINGS,
    DynamicNTKScaling,
    LinearScaling,
    Llama3Scaling,
    LongRopeScaling,
    NTKScaling,
    RopeScaling,
    YarnScaling,
)
from conftest import F64

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig, modeling_rope_utils  # noqa: E402
from transformers.models.llama import modeling_llama  # noqa: E402

EXACT = 1e-13  # relative: float64 rounding of the same formula written in another order


@contextlib.contextmanager
def hf_in_float64(*modules: types.ModuleType):
    """Run Hugging Face's RoPE code with its float32 steps in float64 (same formulas).

    ``torch.float``/``torch.float32`` in its modules (``modeling_rope_utils``,
    ``modeling_llama`` and ``modules``) become float64 (a proxy ``torch``),
    ``Tensor.float()`` becomes ``.double()`` (LongRoPE's exponents), and the default dtype
    is float64 (dynamic NTK multiplies an int64 ``seq_len`` tensor by a Python float).
    """
    proxy = types.ModuleType("torch_in_float64")
    proxy.__getattr__ = lambda name: getattr(torch, name)
    proxy.float = proxy.float32 = F64
    saved = {m: m.torch for m in (modeling_rope_utils, modeling_llama, *modules)}
    to_float, default = torch.Tensor.float, torch.get_default_dtype()
    try:
        for m in saved:
            m.torch = proxy
        torch.Tensor.float = lambda x, *a, **kw: x.double()
        torch.set_default_dtype(F64)
        yield
    finally:
        for m, t in saved.items():
            m.torch = t
        torch.Tensor.float = to_float
        torch.set_default_dtype(default)


def hf_config(rope_parameters: dict, *, head_dim: int = 16, max_position: int = 256) -> LlamaConfig:
    return LlamaConfig(
        hidden_size=4 * head_dim,
        num_attention_heads=4,
        head_dim=head_dim,
        max_position_embeddings=max_position,
        rope_parameters=dict(rope_parameters),
    )


def hf_frequencies(config: LlamaConfig, seq_len: int | None = None) -> tuple[torch.Tensor, float]:
    kind = config.rope_parameters["rope_type"]
    with hf_in_float64():
        inv_freq, factor = modeling_rope_utils.ROPE_INIT_FUNCTIONS[kind](config, seq_len=seq_len)
    assert inv_freq.dtype == F64
    return inv_freq, float(factor)


def rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return ((a - b).abs() / b.abs()).max().item()


def ours(config: LlamaConfig, **kw) -> RotaryEmbedding:
    """Our RotaryEmbedding for a Hugging Face config, via scaling_from_hf."""
    p = config.rope_parameters
    rotary_dim = int(config.head_dim * p.get("partial_rotary_factor", 1.0))
    scaling = scaling_from_hf(p, max_position_embeddings=config.max_position_embeddings)
    return RotaryEmbedding(config.head_dim, base=p["rope_theta"], rotary_dim=rotary_dim, scaling=scaling, **kw)


# Parameter sets per kind: (rope_parameters, head_dim, max_position_embeddings).
CASES = {
    "linear": [
        ({"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}, 16, 256),
        ({"rope_type": "linear", "rope_theta": 500000.0, "factor": 8.0}, 64, 1024),
        ({"rope_type": "linear", "rope_theta": 10000.0, "factor": 3.0, "partial_rotary_factor": 0.5}, 16, 256),
    ],
    "dynamic": [
        ({"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}, 16, 64),
        ({"rope_type": "dynamic", "rope_theta": 1000000.0, "factor": 4.0}, 64, 128),
        ({"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 3.0, "partial_rotary_factor": 0.25}, 32, 64),
    ],
    "yarn": [
        ({"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 64}, 16, 256),
        (  # gpt-oss: 32x from 4096, no truncation of the ramp
            {
                "rope_type": "yarn",
                "rope_theta": 150000.0,
                "factor": 32.0,
                "original_max_position_embeddings": 4096,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "truncate": False,
            },
            64,
            131072,
        ),
        (  # Qwen3 style, partial rotation, other betas
            {
                "rope_type": "yarn",
                "rope_theta": 1000000.0,
                "factor": 4.0,
                "original_max_position_embeddings": 32768,
                "beta_fast": 16.0,
                "beta_slow": 2.0,
                "partial_rotary_factor": 0.5,
            },
            128,
            131072,
        ),
        (  # DeepSeek style: mscale / mscale_all_dim
            {
                "rope_type": "yarn",
                "rope_theta": 10000.0,
                "factor": 40.0,
                "original_max_position_embeddings": 4096,
                "mscale": 0.707,
                "mscale_all_dim": 1.0,
            },
            64,
            163840,
        ),
        (  # explicit attention factor; factor from the context ratio
            {
                "rope_type": "yarn",
                "rope_theta": 10000.0,
                "factor": None,
                "original_max_position_embeddings": 128,
                "attention_factor": 1.3,
            },
            32,
            1024,
        ),
    ],
    "llama3": [
        (  # Llama 3.1 itself
            {
                "rope_type": "llama3",
                "rope_theta": 500000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
            128,
            131072,
        ),
        (
            {
                "rope_type": "llama3",
                "rope_theta": 10000.0,
                "factor": 4.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
            16,
            256,
        ),
        (  # Llama 4 Scout: low = high, a step with no band in between
            {
                "rope_type": "llama3",
                "rope_theta": 500000.0,
                "factor": 16.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 1.0,
                "original_max_position_embeddings": 8192,
            },
            128,
            131072,
        ),
        (  # Llama 3.2 style factor 32, and a partial head to exercise R in the exponent
            {
                "rope_type": "llama3",
                "rope_theta": 500000.0,
                "factor": 32.0,
                "low_freq_factor": 0.5,
                "high_freq_factor": 2.0,
                "original_max_position_embeddings": 512,
                "partial_rotary_factor": 0.5,
            },
            64,
            16384,
        ),
    ],
    "longrope": [
        (
            {
                "rope_type": "longrope",
                "rope_theta": 10000.0,
                "short_factor": [1.0, 1.1, 1.3, 1.6],
                "long_factor": [1.0, 2.0, 5.0, 11.0],
                "original_max_position_embeddings": 32,
            },
            8,
            128,
        ),
        (
            {
                "rope_type": "longrope",
                "rope_theta": 10000.0,
                "short_factor": [1.0, 1.05, 1.2, 1.4, 1.5, 1.9, 2.0, 2.5],
                "long_factor": [1.2, 1.6, 3.0, 4.5, 9.0, 16.0, 30.0, 41.0],
                "original_max_position_embeddings": 64,
                "factor": 8.0,
                "attention_factor": 1.1,
            },
            16,
            512,
        ),
    ],
}
ALL_CASES = [(kind, i) for kind, cases in CASES.items() for i in range(len(cases))]


def seq_lens(kind: str, max_position: int, original: int | None) -> list[int | None]:
    if kind == "dynamic":
        return [None, max_position // 2, max_position, 2 * max_position, 5 * max_position + 3]
    if kind == "longrope":
        return [None, original, original + 1, 3 * original]
    return [None]


# ---------------------------------------------------------------- against Hugging Face


@pytest.mark.parametrize("kind,i", ALL_CASES)
def test_frequencies_match_hugging_face(kind, i):
    """scaling_from_hf(config.rope_parameters).frequencies == ROPE_INIT_FUNCTIONS[kind](config), float64."""
    params, D, max_pos = CASES[kind][i]
    config = hf_config(params, head_dim=D, max_position=max_pos)
    scaling = scaling_from_hf(config.rope_parameters, max_position_embeddings=max_pos)
    assert scaling.kind == kind and type(scaling) is SCALINGS[kind]
    R = int(D * params.get("partial_rotary_factor", 1.0))
    for seq_len in seq_lens(kind, max_pos, config.rope_parameters.get("original_max_position_embeddings")):
        want, want_factor = hf_frequencies(config, seq_len)
        got, got_factor = scaling.frequencies(params["rope_theta"], R, seq_len)
        assert got.dtype == F64 and got.shape == (R // 2,)
        assert rel_diff(got, want) < EXACT, (seq_len, rel_diff(got, want))
        assert got_factor == pytest.approx(want_factor, rel=1e-15, abs=0)
    # The scaling changes something (a test with factor 1 everywhere would prove little).
    assert not torch.allclose(
        scaling.frequencies(params["rope_theta"], R, 10**6)[0], default_inv_freq(params["rope_theta"], R)
    )


@pytest.mark.parametrize("kind,i", ALL_CASES)
def test_rotation_matches_hugging_face_llama_rotary(kind, i):
    """RotaryEmbedding(scaling=...) == HF's LlamaRotaryEmbedding + apply_rotary_pos_emb, call after call.

    The calls reach lengths below and above the trained length, then short again, so dynamic
    NTK's growth and reset, and LongRoPE's switch between its factor sets, are exercised.
    """
    params, D, max_pos = CASES[kind][i]
    config = hf_config(params, head_dim=D, max_position=max_pos)
    original = config.rope_parameters.get("original_max_position_embeddings", max_pos)
    R = int(D * params.get("partial_rotary_factor", 1.0))
    rope = ours(config)
    with hf_in_float64():
        hf_rope = modeling_llama.LlamaRotaryEmbedding(config)
    # Short, then across the trained length, then far past it, then short again.
    calls = [(0, 5), (original - 3, 6), (max(original, max_pos) + 3, 4), (2 * max_pos, 1), (0, 3)]
    g = torch.Generator().manual_seed(i)
    worst = 0.0
    for offset, T in calls:
        x = torch.randn(2, 3, T, D, dtype=F64, generator=g)
        positions = torch.arange(offset, offset + T)[None]  # (1, T)
        with hf_in_float64():
            cos, sin = hf_rope(x, positions)  # (1, T, R)
            want = torch.cat(
                modeling_llama.apply_rotary_pos_emb(x[..., :R], x[..., :R], cos, sin)[:1] + (x[..., R:],), -1
            )
        got = rope(x, offset=offset)
        worst = max(worst, (got - want).abs().max().item())
        assert rope.attention_factor == pytest.approx(hf_rope.attention_scaling, rel=1e-15)
        torch.testing.assert_close(rope.inv_freq, hf_rope.inv_freq, rtol=EXACT, atol=0)
    # Angles up to ~2.6e5 rad (gpt-oss case) carry ~1e-11 of float64 rounding.
    assert worst < 1e-9, worst


def test_hugging_face_float32_is_the_only_difference():
    """Without the lift, HF's float32 speeds differ from ours by float32 rounding, not more."""
    params, D, max_pos = CASES["yarn"][1]
    config = hf_config(params, head_dim=D, max_position=max_pos)
    want, _ = modeling_rope_utils.ROPE_INIT_FUNCTIONS["yarn"](config)
    assert want.dtype == torch.float32
    got, _ = scaling_from_hf(config.rope_parameters, max_position_embeddings=max_pos).frequencies(150000.0, D)
    assert 1e-9 < rel_diff(got, want.double()) < 1e-6


# ---------------------------------------------------------------- hand computations


def test_linear_divides_positions_by_factor_exactly():
    """PI: position 4m with factor 4 is plain RoPE's position m, bit for bit (powers of two divide exactly)."""
    x = torch.randn(2, 1, 16, dtype=F64, generator=torch.Generator().manual_seed(1))
    plain, pi = RotaryEmbedding(16), RotaryEmbedding(16, scaling=LinearScaling(4.0))
    for m in (0, 1, 7, 1000):
        assert torch.equal(pi(x, offset=4 * m), plain(x, offset=m))
    assert torch.equal(linear_inv_freq(10000.0, 16, 3.0)[0], default_inv_freq(10000.0, 16) / 3.0)
    # Factor 1 is plain RoPE, bit for bit.
    assert torch.equal(RotaryEmbedding(16, scaling=LinearScaling(1.0))(x, offset=9), plain(x, offset=9))


def test_yarn_temperature_scales_cos_sin_and_logits_by_its_square():
    """Position 0 is multiplied by the attention factor on the rotated part only; q·k by its square."""
    scaling = YarnScaling(factor=16.0, original_max_position=64)
    a = yarn_mscale(16.0)
    rope = RotaryEmbedding(16, rotary_dim=8, scaling=scaling)
    plain = RotaryEmbedding(16, rotary_dim=8, scaling=YarnScaling(16.0, 64, attention_factor=1.0))
    assert rope.attention_factor == a and plain.attention_factor == 1.0
    x = torch.randn(1, 1, 16, dtype=F64, generator=torch.Generator().manual_seed(2))
    y = rope(x)
    torch.testing.assert_close(y[..., :8], a * x[..., :8], rtol=1e-15, atol=0)
    assert torch.equal(y[..., 8:], x[..., 8:])
    q, k = torch.randn(2, 1, 8, dtype=F64), torch.randn(2, 1, 8, dtype=F64)
    big = RotaryEmbedding(8, scaling=scaling)
    small = RotaryEmbedding(8, scaling=YarnScaling(16.0, 64, attention_factor=1.0))
    s_big = (big(q, offset=300) * big(k, offset=100)).sum()
    s_small = (small(q, offset=300) * small(k, offset=100)).sum()
    assert s_big.item() == pytest.approx(a**2 * s_small.item(), rel=1e-12)


# ---------------------------------------------------------------- properties in RotaryEmbedding


STATIC = [
    LinearScaling(4.0),
    NTKScaling(4.0),
    YarnScaling(8.0, 64),
    YarnScaling(8.0, 64, truncate=False, beta_fast=16.0, beta_slow=2.0),
    Llama3Scaling(8.0, 64),
    LongRopeScaling([1.0, 1.5, 2.0, 3.0], [2.0, 3.0, 5.0, 9.0], 1024, factor=4.0),  # static below 1024
]


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("scaling", STATIC, ids=lambda s: s.kind)
def test_static_scalings_keep_the_relative_position_property(scaling, layout):
    D = 12 if scaling.kind != "longrope" else 8
    rope = RotaryEmbedding(D, rotary_dim=8, layout=layout, scaling=scaling)
    g = torch.Generator().manual_seed(3)
    q, k = torch.randn(1, D, dtype=F64, generator=g), torch.randn(1, D, dtype=F64, generator=g)

    def score(m: int, n: int) -> float:
        return (rope(q, offset=m) * rope(k, offset=n)).sum().item()

    for delta in (0, 1, 9, 50):
        scores = [score(n + delta, n) for n in (0, 5, 30)]
        assert max(scores) - min(scores) < 1e-9, (delta, scores)
    assert abs(score(9, 0) - score(0, 9)) > 1e-3


def test_dynamic_ntk_state_grows_and_resets_like_hugging_face():
    scaling = DynamicNTKScaling(2.0, 32)
    rope = RotaryEmbedding(8, scaling=scaling)
    plain = default_inv_freq(10000.0, 8)
    x = torch.randn(1, 1, 8, dtype=F64)
    rope(x, offset=10)
    assert torch.equal(rope.inv_freq, plain)
    rope(x, offset=99)  # reaches 100 > 32: rescaled for 100
    assert torch.equal(rope.inv_freq, dynamic_ntk_inv_freq(10000.0, 8, 2.0, 32, 100)[0])
    rope(x, offset=49)  # 50: between 32 and 100, kept
    assert torch.equal(rope.inv_freq, dynamic_ntk_inv_freq(10000.0, 8, 2.0, 32, 100)[0])
    rope(x, offset=5)  # 6 < 32 after a longer call: reset
    assert torch.equal(rope.inv_freq, plain)
    assert scaling.frequency_length(10, None) == 32 and scaling.frequency_length(40, 32) == 40
    # Within max_position the tables equal plain RoPE's.
    y = torch.randn(2, 3, 20, 8, dtype=F64)
    assert torch.equal(RotaryEmbedding(8, scaling=scaling)(y), RotaryEmbedding(8)(y))


def test_scaled_rope_decoding_equals_full_for_static_kinds():
    rope = RotaryEmbedding(16, scaling=YarnScaling(4.0, 32))
    x = torch.randn(2, 3, 40, 16, dtype=F64)
    full = rope(x)
    steps = torch.cat([rope(x[:, :, t : t + 1], offset=t) for t in range(40)], dim=2)
    torch.testing.assert_close(steps, full, atol=1e-13, rtol=0)
    y32 = rope(x.float(), offset=7)
    assert y32.dtype == torch.float32
    torch.testing.assert_close(y32.double(), rope(x, offset=7), atol=1e-5, rtol=0)


def test_scaled_rope_gradcheck():
    rope = RotaryEmbedding(6, rotary_dim=4, scaling=YarnScaling(4.0, 8, beta_fast=4.0))
    x = torch.randn(1, 3, 6, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: rope(t, offset=5), (x,))


def test_scalings_are_frozen_hashable_values():
    a, b = YarnScaling(4.0, 64), YarnScaling(4.0, 64)
    assert a == b and hash(a) == hash(b) and a != YarnScaling(4.0, 64, truncate=False)
    with pytest.raises(AttributeError):
        a.factor = 2.0
    lr = LongRopeScaling([1, 2], [3, 4], 16)
    assert lr.short_factor == (1.0, 2.0) and hash(lr) == hash(LongRopeScaling((1.0, 2.0), (3.0, 4.0), 16))
    assert set(SCALINGS) == {"linear", "ntk", "dynamic", "yarn", "llama3", "longrope"}
    assert "YarnScaling(factor=4.0" in repr(RotaryEmbedding(8, scaling=a))


# ---------------------------------------------------------------- bad parameters


def test_bad_parameters_raise_value_errors_naming_them():
    with pytest.raises(ValueError, match="factor=0.5"):
        LinearScaling(0.5)
    with pytest.raises(ValueError, match="factor=0.9"):
        YarnScaling(0.9, 64)
    with pytest.raises(ValueError, match="factor=0"):
        DynamicNTKScaling(0.0, 64)
    with pytest.raises(ValueError, match="beta_fast=1, beta_slow=1"):
        YarnScaling(4.0, 64, beta_fast=1.0, beta_slow=1.0)
    with pytest.raises(ValueError, match="beta_fast=2, beta_slow=8"):
        YarnScaling(4.0, 64, beta_fast=2.0, beta_slow=8.0)
    with pytest.raises(ValueError, match="beta_slow=0"):
        yarn_inv_freq(10000.0, 8, 4.0, 64, beta_slow=0.0)
    with pytest.raises(ValueError, match="original_max_position=0"):
        Llama3Scaling(8.0, 0)
    with pytest.raises(ValueError, match="high_freq_factor=1, low_freq_factor=2"):
        Llama3Scaling(8.0, 64, low_freq_factor=2.0, high_freq_factor=1.0)
    with pytest.raises(ValueError, match="attention_factor=-1"):
        YarnScaling(4.0, 64, attention_factor=-1.0)
    with pytest.raises(ValueError, match="max_position=0"):
        DynamicNTKScaling(2.0, 0)
    with pytest.raises(ValueError, match="short_factor=0"):
        LongRopeScaling([1.0, 0.0], [1.0, 2.0], 16)
    with pytest.raises(ValueError, match="original_max_position=1"):
        LongRopeScaling([1.0], [2.0], 1, factor=2.0)
    with pytest.raises(ValueError, match="short_factor and long_factor need the same length"):
        LongRopeScaling([1.0], [1.0, 2.0], 16)
    with pytest.raises(TypeError, match="truncate"):
        YarnScaling(4.0, 64, truncate=1)
    # Parameters that depend on the rotated width fail when the RotaryEmbedding is made.
    with pytest.raises(ValueError, match=r"dim//2=4, got len\(short_factor\)=2"):
        RotaryEmbedding(8, scaling=LongRopeScaling([1.0, 1.0], [1.0, 2.0], 16))
    with pytest.raises(ValueError, match="dim=2"):
        RotaryEmbedding(8, rotary_dim=2, scaling=NTKScaling(2.0))
    with pytest.raises(TypeError, match="scaling must be an .*RopeScaling or None, got dict"):
        RotaryEmbedding(8, scaling={"rope_type": "yarn", "factor": 4.0})
    with pytest.raises(NotImplementedError):
        RopeScaling().frequencies(10000.0, 8)


# ---------------------------------------------------------------- in an attention layer


ATTENTION_CASES = {  # long enough (T = 12) to reach past each method's trained length
    "linear": {"rope_type": "linear", "factor": 3.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4, "beta_fast": 8.0},
    "llama3": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8,
    },
    "longrope": {
        "rope_type": "longrope",
        "short_factor": [1.0, 1.2, 1.5, 2.0],
        "long_factor": [1.0, 3.0, 6.0, 12.0],
        "original_max_position_embeddings": 8,
        "factor": 4.0,
    },
}


def _llama_attention_pair(kind: str, seed: int = 0):
    from attn_core import MultiHeadAttention
    from attn_core.hf.convert import copy_attention

    config = LlamaConfig(
        hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8,
        attn_implementation="sdpa",
        rope_parameters={"rope_theta": 10000.0, **ATTENTION_CASES[kind]},
    )
    hf = modeling_llama.LlamaAttention(config, layer_idx=0).to(F64).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in hf.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=F64) * 0.3)
    with hf_in_float64():
        hf_rope = modeling_llama.LlamaRotaryEmbedding(config)
    mha = MultiHeadAttention(32, 4, n_kv_heads=2, causal=True, rope=ours(config)).to(F64)
    copy_attention(mha, hf)
    return config, hf, hf_rope, mha


def _causal_bias(T: int) -> torch.Tensor:
    return torch.full((T, T), float("-inf"), dtype=F64).triu(1)[None, None]  # (1, 1, T, T)


@pytest.mark.parametrize("kind", list(ATTENTION_CASES))
def test_attention_with_scaled_rope_matches_hugging_face_llama_attention(kind):
    """MultiHeadAttention(rope=RotaryEmbedding(scaling=...)) == HF's LlamaAttention with rope_parameters, float64."""
    config, hf, hf_rope, mha = _llama_attention_pair(kind)
    x = torch.randn(2, 12, 32, dtype=F64, generator=torch.Generator().manual_seed(1))
    with hf_in_float64():
        cos_sin = hf_rope(x, torch.arange(12)[None])
    want, _ = hf(x, position_embeddings=cos_sin, attention_mask=_causal_bias(12))
    assert (mha(x) - want).abs().max().item() < 1e-12
    # Plain RoPE would differ: the scaling is what is being matched.
    plain = RotaryEmbedding(8, base=10000.0)
    mha.rope = plain
    assert (mha(x) - want).abs().max().item() > 1e-3


@pytest.mark.parametrize("kind", ["yarn", "dynamic", "longrope"])
def test_cached_decoding_with_scaled_rope_matches_hugging_face(kind):
    """A prompt of 5, then one token at a time past the trained length: ours from a KVCache, HF from a DynamicCache.

    For dynamic NTK and LongRoPE the speeds change as the sequence grows, so the cached keys
    keep the speeds of their own step, in Hugging Face as here.
    """
    from transformers.cache_utils import DynamicCache

    from attn_core import KVCache

    config, hf, hf_rope, mha = _llama_attention_pair(kind, seed=2)
    x = torch.randn(2, 14, 32, dtype=F64, generator=torch.Generator().manual_seed(3))
    hf_cache, our_cache = DynamicCache(config=config), KVCache(2, 2, 8, 14, dtype=F64)
    worst = 0.0
    for start, stop in [(0, 5)] + [(t, t + 1) for t in range(5, 14)]:
        chunk = x[:, start:stop]
        with hf_in_float64():
            cos_sin = hf_rope(chunk, torch.arange(start, stop)[None])
        mask = _causal_bias(stop - start) if stop - start > 1 else None
        want, _ = hf(chunk, position_embeddings=cos_sin, attention_mask=mask, past_key_values=hf_cache)
        worst = max(worst, (mha(chunk, kv_cache=our_cache) - want).abs().max().item())
    assert worst < 1e-12, worst


def test_attention_with_partial_rotation_and_yarn_matches_hugging_face_qwen3_next():
    """Qwen3-Next's attention (a quarter of each head rotated, QK-norm, output gate) with YaRN, float64."""
    from transformers.models.qwen3_next import modeling_qwen3_next

    from attn_core import MultiHeadAttention
    from attn_core.hf.convert import copy_attention

    D = 16
    config = modeling_qwen3_next.Qwen3NextConfig(
        hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=D,
        num_hidden_layers=4,
        max_position_embeddings=64,
        attn_implementation="sdpa",
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.25,
            "factor": 4.0,
            "original_max_position_embeddings": 16,
            "beta_fast": 4.0,
        },
    )
    hf = modeling_qwen3_next.Qwen3NextAttention(config, layer_idx=3).to(F64).eval()
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for p in hf.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=F64) * 0.3)
    for norm in (hf.q_norm, hf.k_norm):
        # Its RMSNorm computes in float32 (an upcast for half precision); its formula in float64.
        norm.forward = lambda x, norm=norm: norm._norm(x) * (1.0 + norm.weight)
    mha = MultiHeadAttention(
        32, 4, n_kv_heads=2, head_dim=D, causal=True, qk_norm=True, norm_eps=config.rms_norm_eps, gate="elementwise",
        rope=ours(config),
    ).to(F64)  # fmt: skip
    assert mha.rope.rotary_dim == 4 and mha.rope.attention_factor == yarn_mscale(4.0)
    copy_attention(mha, hf)
    x = torch.randn(2, 40, 32, dtype=F64, generator=torch.Generator().manual_seed(5))
    with hf_in_float64(modeling_qwen3_next):
        cos_sin = modeling_qwen3_next.Qwen3NextRotaryEmbedding(config)(x, torch.arange(40)[None])
    assert cos_sin[0].shape == (1, 40, 4)
    want, _ = hf(x, position_embeddings=cos_sin, attention_mask=_causal_bias(40))
    assert (mha(x) - want).abs().max().item() < 1e-12
    # Without the scaling, or rotating the whole head, the layer computes something else.
    for wrong in (RotaryEmbedding(D, rotary_dim=4), RotaryEmbedding(D, scaling=mha.rope.scaling)):
        mha.rope = wrong
        assert (mha(x) - want).abs().max().item() > 1e-3


def test_docstring_examples():
    import doctest

    from attn_core.positions import rope_freqs, rope_scaling

    # scaling_from_hf's examples moved with it to attn_core.hf.rope: tests/test_hf_rope.py runs those 3.
    results = [doctest.testmod(rope_freqs), doctest.testmod(rope_scaling)]
    assert sum(r.failed for r in results) == 0 and sum(r.attempted for r in results) >= 1
