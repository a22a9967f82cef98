"""attn_core.positions.rope: rotary embedding (layouts, relative property, partial rotation vs Hugging Face)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attn_core import KVCache, MultiHeadAttention
from attn_core.positions.rope import RotaryEmbedding, convert_rope_layout, rope_permutation
from attn_core.positions.rope_scaling import DynamicNTKScaling

F64 = torch.float64


def reference_rope_interleaved(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """RoPE as the paper writes it: pairs (2i, 2i+1) are complex numbers multiplied by e^{i m θ_i}."""
    D = x.shape[-1]
    theta = base ** (-torch.arange(0, D, 2, dtype=F64) / D)  # (D/2,)
    rot = torch.polar(torch.ones(len(positions), D // 2, dtype=F64), positions.to(F64)[:, None] * theta)  # (T, D/2)
    z = torch.view_as_complex(x.to(F64).reshape(*x.shape[:-1], D // 2, 2).contiguous())  # (..., T, D/2)
    return torch.view_as_real(z * rot).flatten(-2)  # (..., T, D)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rope_shape_dtype_and_position_zero_identity(layout):
    torch.manual_seed(0)
    rope = RotaryEmbedding(8, layout=layout)
    x = torch.randn(2, 3, 5, 8)
    y = rope(x)
    assert y.shape == x.shape and y.dtype == x.dtype
    assert torch.equal(y[..., 0, :], x[..., 0, :])  # angle 0: cos=1, sin=0 exactly
    assert not torch.allclose(y[..., 1:, :], x[..., 1:, :])


def test_rope_interleaved_matches_complex_reference():
    torch.manual_seed(0)
    x = torch.randn(2, 7, 16, dtype=F64)
    got = RotaryEmbedding(16, layout="interleaved")(x, offset=5)
    want = reference_rope_interleaved(x, torch.arange(5, 12))
    torch.testing.assert_close(got, want, atol=1e-12, rtol=0)


@settings(max_examples=15, deadline=None)
@given(
    pairs=st.integers(1, 8),
    T=st.integers(1, 6),
    offset=st.integers(0, 50),
    base=st.sampled_from([100.0, 10000.0, 500000.0]),
)
def test_rope_layouts_equal_after_permutation(pairs, T, offset, base):
    D = 2 * pairs
    g = torch.Generator().manual_seed(D * 1000 + T * 10 + offset)
    x = torch.randn(2, T, D, dtype=F64, generator=g)  # interleaved-layout vectors
    perm = rope_permutation(D, src="interleaved", dst="half")
    half = RotaryEmbedding(D, base=base, layout="half")
    inter = RotaryEmbedding(D, base=base, layout="interleaved")
    torch.testing.assert_close(half(x[..., perm], offset), inter(x, offset)[..., perm], atol=1e-12, rtol=0)
    back = rope_permutation(D, src="half", dst="interleaved")
    assert torch.equal(x[..., perm][..., back], x)


def test_rope_permutation_examples_and_conversion():
    assert rope_permutation(6).tolist() == [0, 2, 4, 1, 3, 5]
    assert rope_permutation(6, src="half", dst="interleaved").tolist() == [0, 3, 1, 4, 2, 5]
    assert rope_permutation(4, src="half", dst="half").tolist() == [0, 1, 2, 3]
    x = torch.arange(6.0)
    assert convert_rope_layout(x, src="interleaved", dst="half").tolist() == [0, 2, 4, 1, 3, 5]
    assert torch.equal(
        convert_rope_layout(convert_rope_layout(x, src="interleaved", dst="half"), src="half", dst="interleaved"), x
    )


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rope_relative_property(layout):
    """q·k after rotation depends on the positions m, n only through m - n."""
    torch.manual_seed(1)
    D = 16
    rope = RotaryEmbedding(D, layout=layout)
    q, k = torch.randn(1, D, dtype=F64), torch.randn(1, D, dtype=F64)

    def score(m: int, n: int) -> float:
        return (rope(q, offset=m) * rope(k, offset=n)).sum().item()

    for delta in (0, 1, 5, 37):
        scores = [score(n + delta, n) for n in (0, 3, 100, 2500)]
        assert max(scores) - min(scores) < 1e-9, (delta, scores)
    assert abs(score(5, 0) - score(0, 5)) > 1e-3  # direction matters (not |m - n|)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rope_preserves_norms_and_offset_consistency(layout):
    torch.manual_seed(2)
    rope = RotaryEmbedding(12, layout=layout)
    x = torch.randn(3, 10, 12, dtype=F64)
    full = rope(x)
    torch.testing.assert_close(full.norm(dim=-1), x.norm(dim=-1), atol=1e-12, rtol=0)
    torch.testing.assert_close(rope(x[:, 4:], offset=4), full[:, 4:], atol=1e-12, rtol=0)
    steps = torch.cat([rope(x[:, t : t + 1], offset=t) for t in range(10)], dim=1)
    torch.testing.assert_close(steps, full, atol=1e-12, rtol=0)


def test_rope_cache_extends_past_cached_length():
    torch.manual_seed(3)
    rope = RotaryEmbedding(8, layout="interleaved")
    rope(torch.randn(1, 4, 8))
    first = rope.cached_len
    assert first >= 4
    x = torch.randn(1, 3, 8, dtype=F64)
    y = rope(x, offset=5000)  # far past what is cached
    assert rope.cached_len >= 5003 > first
    torch.testing.assert_close(y, reference_rope_interleaved(x, torch.arange(5000, 5003)), atol=1e-10, rtol=0)
    # A fresh module gives bit-identical results: the cache does not change the values.
    assert torch.equal(RotaryEmbedding(8, layout="interleaved")(x, offset=5000), y)


@pytest.mark.parametrize("scaling", [None, "dynamic"])
def test_rope_reserve_computes_the_tables_ahead_without_changing_a_value(scaling):

    def make():
        s = DynamicNTKScaling(factor=2.0, max_position=16) if scaling else None
        return RotaryEmbedding(8, scaling=s)

    torch.manual_seed(5)
    x = torch.randn(2, 3, 4, 8)
    reserved, grown = make(), make()
    reserved.reserve(100)
    assert reserved.cached_len >= 100
    for offset in (0, 13, 60, 96):  # a dynamic scaling rebuilds its tables past 16 positions, reserved or not
        assert torch.equal(reserved(x, offset=offset), grown(x, offset=offset))
        assert torch.equal(reserved(x.double(), offset=offset), grown(x.double(), offset=offset))
    with pytest.raises(ValueError, match="length must be >= 1, got length=0"):
        reserved.reserve(0)
    with pytest.raises(TypeError, match="length must be an int"):
        reserved.reserve(10.0)


def test_rope_work_tables_follow_the_dtype_and_a_rebuild():
    """The tables cast for the rotation are redone when the input's dtype changes or the float64 tables grow."""
    torch.manual_seed(6)
    rope = RotaryEmbedding(8, layout="interleaved")
    x = torch.randn(1, 2, 5, 8)
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float32):
        for offset in (0, 40, 3):  # 40 grows the tables past the 16 first cached
            y = rope(x.to(dtype), offset=offset)
            expected = reference_rope_interleaved(x.double(), torch.arange(offset, offset + 5))
            tol = 1e-2 if dtype == torch.bfloat16 else 1e-6
            assert y.dtype == dtype
            torch.testing.assert_close(y.double(), expected, atol=tol, rtol=tol)


def test_rope_half_precision_matches_float32():
    torch.manual_seed(4)
    rope = RotaryEmbedding(64)
    x = torch.randn(2, 4, 9, 64)
    y16 = rope(x.half(), offset=30000)
    assert y16.dtype == torch.float16
    torch.testing.assert_close(y16.float(), rope(x, offset=30000), atol=1e-2, rtol=1e-2)
    assert rope.half()(x.half(), offset=30000).dtype == torch.float16  # .half() does not touch the cache


def test_rope_inv_freq_and_base():
    rope = RotaryEmbedding(8, base=10000.0)
    torch.testing.assert_close(rope.inv_freq, torch.tensor([1.0, 0.1, 0.01, 0.001], dtype=F64))
    cos, sin = rope.cos_sin(3, offset=1)
    assert cos.shape == sin.shape == (3, 4)
    torch.testing.assert_close(cos[0], torch.cos(rope.inv_freq))


def test_rope_gradcheck():
    rope = RotaryEmbedding(4, layout="interleaved")
    x = torch.randn(1, 3, 4, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: rope(t, offset=2), (x,))


def test_rope_bad_input():
    with pytest.raises(ValueError, match="head_dim=7"):
        RotaryEmbedding(7)
    with pytest.raises(ValueError, match="head_dim=0"):
        RotaryEmbedding(0)
    with pytest.raises(TypeError, match="head_dim"):
        RotaryEmbedding(8.0)
    with pytest.raises(ValueError, match="layout"):
        RotaryEmbedding(8, layout="pairs")
    with pytest.raises(ValueError, match="base=1"):
        RotaryEmbedding(8, base=1)
    rope = RotaryEmbedding(8)
    with pytest.raises(ValueError, match=r"head_dim=8.*\(2, 3, 6\)"):
        rope(torch.randn(2, 3, 6))
    with pytest.raises(ValueError, match="offset=-1"):
        rope(torch.randn(2, 3, 8), offset=-1)
    with pytest.raises(TypeError, match="offset"):
        rope(torch.randn(2, 3, 8), offset=1.5)
    with pytest.raises(TypeError, match="floating"):
        rope(torch.ones(2, 3, 8, dtype=torch.long))
    with pytest.raises(ValueError, match="head_dim=5"):
        rope_permutation(5)


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_mha_with_rope_incremental_decoding_equals_full(n_kv_heads):
    torch.manual_seed(5)
    mha = MultiHeadAttention(32, 4, n_kv_heads=n_kv_heads, causal=True, rope=RotaryEmbedding(8)).double()
    x = torch.randn(2, 9, 32, dtype=F64)
    full = mha(x)
    cache = KVCache(2, n_kv_heads, 8, 16, dtype=F64)
    parts = [mha(x[:, :4], kv_cache=cache)]  # a prefill of 4 tokens, then one at a time
    parts += [mha(x[:, t : t + 1], kv_cache=cache) for t in range(4, 9)]
    torch.testing.assert_close(torch.cat(parts, dim=1), full, atol=1e-12, rtol=0)


def test_mha_with_rope_is_not_permutation_equivariant_but_without_is():
    torch.manual_seed(6)
    x = torch.randn(1, 6, 16)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    plain = MultiHeadAttention(16, 2)
    torch.testing.assert_close(plain(x[:, perm]), plain(x)[:, perm], atol=1e-6, rtol=0)
    roped = MultiHeadAttention(16, 2, rope=RotaryEmbedding(8))
    roped.load_state_dict(plain.state_dict())
    assert (roped(x[:, perm]) - roped(x)[:, perm]).abs().max() > 1e-3


def _hf_modules_in_float64(monkeypatch, *modules) -> None:
    """Lift Hugging Face's float32 RoPE tables: each module's ``torch.float`` / ``torch.float32`` is float64.

    Its rotary modules compute ``inv_freq`` with ``dtype=torch.float`` (float32 whatever the
    model's dtype) and round the angles there; the formulas are the same in float64.
    """
    import types

    proxy = types.ModuleType("torch_in_float64")
    proxy.__getattr__ = lambda name: getattr(torch, name)
    proxy.float = proxy.float32 = F64
    for module in modules:
        monkeypatch.setattr(module, "torch", proxy)


def _hf_partial_rope(family: str, monkeypatch, factor: float, D: int, base: float, x, positions):
    """Hugging Face's rotary module and ``apply_rotary_pos_emb`` of ``family`` on ``x`` (B, H, T, D), float64."""
    transformers = pytest.importorskip("transformers")
    import importlib

    module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    from transformers import modeling_rope_utils

    _hf_modules_in_float64(monkeypatch, module, modeling_rope_utils)
    config_cls, rotary_cls = {
        "gpt_neox": ("GPTNeoXConfig", "GPTNeoXRotaryEmbedding"),
        "qwen3_next": ("Qwen3NextConfig", "Qwen3NextRotaryEmbedding"),
        "glm4_moe": ("Glm4MoeConfig", "Glm4MoeRotaryEmbedding"),
        "glm": ("GlmConfig", "GlmRotaryEmbedding"),
    }[family]
    config = getattr(transformers, config_cls)(
        hidden_size=4 * D,
        num_attention_heads=4,
        head_dim=D,
        rope_parameters={"rope_type": "default", "rope_theta": base, "partial_rotary_factor": factor},
    )
    config.head_dim = D  # GPT-NeoX has no head_dim argument: its rotary module reads the attribute
    cos, sin = getattr(module, rotary_cls)(config)(x, positions[None])  # (1, T, R) each
    assert cos.dtype == F64 and cos.shape[-1] == int(D * factor)
    return module.apply_rotary_pos_emb(x, x, cos, sin)[0]


@pytest.mark.parametrize("family", ["gpt_neox", "qwen3_next", "glm4_moe"])
@pytest.mark.parametrize("factor", [0.25, 0.5, 0.75])
def test_partial_rope_half_matches_hugging_face(family, factor, monkeypatch):
    """rotary_dim = D·partial_rotary_factor reproduces Hugging Face's partial rotation (float64)."""
    D, base = 16, 500.0
    x = torch.randn(2, 3, 9, D, dtype=F64, generator=torch.Generator().manual_seed(11))
    positions = torch.arange(40, 49)
    want = _hf_partial_rope(family, monkeypatch, factor, D, base, x, positions)
    got = RotaryEmbedding(D, base=base, rotary_dim=int(D * factor))(x, offset=40)
    assert (got - want).abs().max().item() < 1e-12
    assert torch.equal(got[..., int(D * factor) :], x[..., int(D * factor) :])


def test_partial_rope_interleaved_matches_hugging_face_glm(monkeypatch):
    """GLM rotates the first half of each head in the interleaved layout: pairs (2i, 2i+1) there."""
    D, base = 16, 10000.0
    x = torch.randn(2, 3, 9, D, dtype=F64, generator=torch.Generator().manual_seed(12))
    positions = torch.arange(100, 109)
    want = _hf_partial_rope("glm", monkeypatch, 0.5, D, base, x, positions)
    got = RotaryEmbedding(D, base=base, layout="interleaved", rotary_dim=8)(x, offset=100)
    assert (got - want).abs().max().item() < 1e-12
    # The wrong layout rotates other pairs: far from Hugging Face's GLM.
    wrong = RotaryEmbedding(D, base=base, layout="half", rotary_dim=8)(x, offset=100)
    assert (wrong - want).abs().max().item() > 0.1


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_partial_rope_is_full_rope_of_width_r_on_the_head_start(layout):
    """The first R dims get RoPE of width R (speeds base^(-2i/R), pairs within them); the rest pass through."""
    D, R = 12, 4
    x = torch.randn(2, 7, D, dtype=F64, generator=torch.Generator().manual_seed(13))
    partial = RotaryEmbedding(D, rotary_dim=R, layout=layout)
    y = partial(x, offset=3)
    assert torch.equal(y[..., :R], RotaryEmbedding(R, layout=layout)(x[..., :R], offset=3))
    assert torch.equal(y[..., R:], x[..., R:])
    torch.testing.assert_close(partial.inv_freq, 10000.0 ** (-torch.arange(0, R, 2, dtype=F64) / R), atol=0, rtol=0)
    cos, sin = partial.cos_sin(5)
    assert cos.shape == sin.shape == (5, R // 2)
    y16 = partial(x.half(), offset=3)  # half precision: the tail is copied bit for bit
    assert y16.dtype == torch.float16 and torch.equal(y16[..., R:], x.half()[..., R:])
    assert "rotary_dim=4" in repr(partial) and "rotary_dim" not in repr(RotaryEmbedding(D))


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_partial_rope_default_is_full_rotation_bit_for_bit(layout):
    x = torch.randn(2, 3, 5, 8, generator=torch.Generator().manual_seed(14))
    full = RotaryEmbedding(8, layout=layout)
    assert full.rotary_dim == 8
    assert torch.equal(RotaryEmbedding(8, layout=layout, rotary_dim=8)(x, offset=7), full(x, offset=7))


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_partial_rope_relative_property_and_content_channel(layout):
    """Rotated part: q·k depends on m - n only; unrotated part: q·k does not depend on positions at all."""
    D, R = 16, 6
    rope = RotaryEmbedding(D, rotary_dim=R, layout=layout)
    g = torch.Generator().manual_seed(15)
    q, k = torch.randn(1, D, dtype=F64, generator=g), torch.randn(1, D, dtype=F64, generator=g)

    def scores(m: int, n: int) -> tuple[float, float]:
        a, b = rope(q, offset=m), rope(k, offset=n)
        return (a[..., :R] * b[..., :R]).sum().item(), (a[..., R:] * b[..., R:]).sum().item()

    content = (q[..., R:] * k[..., R:]).sum().item()
    for delta in (0, 1, 5, 37):
        rotated = [scores(n + delta, n)[0] for n in (0, 3, 100, 2500)]
        assert max(rotated) - min(rotated) < 1e-9, (delta, rotated)
        assert all(scores(n + delta, n)[1] == content for n in (0, 3, 100))
    assert abs(scores(5, 0)[0] - scores(0, 5)[0]) > 1e-3  # the rotated part still sees the direction


def test_partial_rope_gradcheck():
    rope = RotaryEmbedding(6, rotary_dim=2, layout="interleaved")
    x = torch.randn(1, 3, 6, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: rope(t, offset=2), (x,))


def test_partial_rope_bad_input():
    for bad in (5, 0, -2, 18):
        with pytest.raises(ValueError, match=f"rotary_dim={bad}"):
            RotaryEmbedding(16, rotary_dim=bad)
    with pytest.raises(TypeError, match="rotary_dim"):
        RotaryEmbedding(16, rotary_dim=8.0)
    with pytest.raises(ValueError, match=r"head_dim=16.*\(2, 3, 8\)"):
        RotaryEmbedding(16, rotary_dim=8)(torch.randn(2, 3, 8))  # x is the whole head, not the rotated part


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16], ids=str)
def test_rope_tensor_offset_equals_int_offset_bit_for_bit(layout, dtype):
    """A static cache's device-side offset gathers the rows that an int offset slices."""
    rope = RotaryEmbedding(8, layout=layout, rotary_dim=6)
    rope.reserve(32)
    x = torch.randn(2, 3, 4, 8, generator=torch.Generator().manual_seed(0)).to(dtype)
    for offset in (0, 5, 28):
        by_int = rope(x, offset=offset)
        by_tensor = rope(x, offset=torch.tensor(offset))
        assert torch.equal(by_tensor, by_int), offset


def test_rope_tensor_offset_bad_input():
    rope = RotaryEmbedding(8)
    x = torch.zeros(1, 2, 8)
    with pytest.raises(ValueError, match="tensor offset needs rotary tables reserved beforehand"):
        rope(x, offset=torch.tensor(3))  # nothing reserved: the host cannot size the tables
    rope.reserve(16)
    with pytest.raises(TypeError, match="offset"):
        rope(x, offset=torch.tensor(3.0))
    with pytest.raises(ValueError, match="offset"):
        rope(x, offset=torch.tensor([3, 4]))
    dynamic = RotaryEmbedding(8, scaling=DynamicNTKScaling(2.0, 8))
    dynamic.reserve(16)
    assert dynamic.length_dependent and not rope.length_dependent
    with pytest.raises(ValueError, match="do not depend on the length"):
        dynamic(x, offset=torch.tensor(3))
