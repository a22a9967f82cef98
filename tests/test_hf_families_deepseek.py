"""DeepSeek-V3's YaRN in multi-head latent attention (issue 28): ``MultiHeadLatentAttention(rope_scaling=)``.

DeepSeek scales its decoupled RoPE with YaRN (speeds, and the cos/sin tables times
``mscale(factor, mscale) / mscale(factor, mscale_all_dim)``) and multiplies the softmax
scale of *every* score by ``mscale(factor, mscale_all_dim)²`` (Hugging Face's
``yarn_apply_mscale``; :func:`~attn_core.positions.rope_scaling.deepseek_softmax_factor`). Hugging Face's
DeepseekV3Attention, copied by :func:`~attn_core.hf.convert.copy_attention`, is the reference in
float64 (its float32 RoPE steps lifted by :func:`test_rope_scaling.hf_in_float64`).
Whole tiny DeepSeek-V3 models (dense and MoE layers) convert with :func:`~attn_core.hf.convert.from_hf`:
logits and greedy generation with caches equal Hugging Face's.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers", minversion="5.0")

from test_hf_convert import IDX, assert_greedy_generation_matches  # noqa: E402
from test_parity_hf import EXACT, causal_bias, deepseek_config, max_diff, seeded, x_and_positions  # noqa: E402
from test_positions_rope_scaling import hf_in_float64  # noqa: E402
from transformers import DeepseekV3ForCausalLM, DynamicCache  # noqa: E402
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as hf_deepseek  # noqa: E402

from attn_core import MultiHeadLatentAttention  # noqa: E402
from attn_core.hf.configs import config_from_hf  # noqa: E402
from attn_core.hf.convert import copy_attention, from_hf  # noqa: E402
from attn_core.hf.rope import scaling_from_hf  # noqa: E402
from attn_core.positions.rope_freqs import yarn_mscale  # noqa: E402
from attn_core.positions.rope_scaling import (  # noqa: E402
    LinearScaling,
    YarnScaling,
    deepseek_softmax_factor,  # noqa: E402
)

F64 = torch.float64
#: DeepSeek-V3's own values (factor 40, mscale = mscale_all_dim = 1), its original length shrunk to 8.
DEEPSEEK_YARN = {"rope_type": "yarn", "rope_theta": 5e4, "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                 "beta_fast": 32.0, "beta_slow": 1.0, "original_max_position_embeddings": 8}  # fmt: skip
#: mscale ≠ mscale_all_dim: the cos/sin tables carry a temperature of their own too.
UNEQUAL = {**DEEPSEEK_YARN, "factor": 4.0, "mscale": 0.707, "mscale_all_dim": 1.3}
CASES = {"deepseek-v3": DEEPSEEK_YARN, "unequal-mscales": UNEQUAL}


def pair(params: dict, **kw):
    length = int(params["factor"] * params["original_max_position_embeddings"])  # YaRN's own, no warning
    config = deepseek_config(rope_parameters=dict(params), max_position_embeddings=length, **kw)
    hf = seeded(hf_deepseek.DeepseekV3Attention(config, layer_idx=0))
    scaling = scaling_from_hf(config.rope_parameters, max_position_embeddings=config.max_position_embeddings)
    ours = MultiHeadLatentAttention(
        32, 4, d_latent=16, d_q_latent=config.q_lora_rank, head_dim=8, rope_dim=4, v_head_dim=6, rope_base=5e4,
        rope_layout="interleaved" if config.rope_interleave else "half", rope_scaling=scaling,
    ).to(F64)  # fmt: skip
    copy_attention(ours, hf)
    return config, hf, ours


@pytest.mark.parametrize("absorbed", [False, True], ids=["ordinary", "absorbed"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_mla_with_deepseek_yarn_equals_hugging_face(case, absorbed):
    with hf_in_float64(hf_deepseek):
        config, hf, ours = pair(CASES[case])
        x, pos = x_and_positions(T=12)
        cos_sin = hf_deepseek.DeepseekV3RotaryEmbedding(config)(x, pos)
        expected, _ = hf(x, position_embeddings=cos_sin, attention_mask=causal_bias(12))
    assert abs(hf.scaling - ours.scale) < 1e-15 * ours.scale
    diff = max_diff(ours(x, absorbed=absorbed), expected)
    print(f"{case} absorbed={absorbed}: max |difference| = {diff:.2e}")
    assert diff < EXACT
    # Both halves of DeepSeek's YaRN matter: the softmax factor, and the scaled speeds and tables.
    factor = deepseek_softmax_factor(ours.rope_scaling)
    assert factor == pytest.approx(yarn_mscale(CASES[case]["factor"], CASES[case]["mscale_all_dim"]) ** 2)
    plain = MultiHeadLatentAttention(
        32, 4, d_latent=16, d_q_latent=12, head_dim=8, rope_dim=4, v_head_dim=6, rope_base=5e4,
        rope_layout="interleaved",
    ).to(F64)  # fmt: skip
    plain.load_state_dict(ours.state_dict())
    assert max_diff(plain(x), expected) > 1e-3


@pytest.mark.parametrize("absorbed", [False, True], ids=["ordinary", "absorbed"])
def test_mla_with_deepseek_yarn_decodes_from_its_cache(absorbed):
    """A prompt of 4, then one token at a time past the original length 8: ours from a LatentKVCache."""
    with hf_in_float64(hf_deepseek):
        config, hf, ours = pair(DEEPSEEK_YARN)
        x, pos = x_and_positions(T=12)
        rotary = hf_deepseek.DeepseekV3RotaryEmbedding(config)
        hf_cache, our_cache = DynamicCache(config=config), ours.make_cache(2, 12)
        for start in (0, *range(4, 12)):
            stop = 4 if start == 0 else start + 1
            chunk = x[:, start:stop]
            mask = causal_bias(stop - start) if stop - start > 1 else None
            expected, _ = hf(
                chunk, position_embeddings=rotary(chunk, pos[:, start:stop]), attention_mask=mask,
                past_key_values=hf_cache,
            )  # fmt: skip
            assert max_diff(ours(chunk, kv_cache=our_cache, absorbed=absorbed), expected) < EXACT
    assert our_cache.size == 12


def test_softmax_factor_only_for_yarn_with_mscale_all_dim():
    assert deepseek_softmax_factor(None) == 1.0
    assert deepseek_softmax_factor(LinearScaling(factor=4.0)) == 1.0
    assert deepseek_softmax_factor(YarnScaling(factor=4.0, original_max_position=8)) == 1.0  # Qwen3's, gpt-oss's
    assert deepseek_softmax_factor(YarnScaling(4.0, 8, mscale=1.0, mscale_all_dim=1.0)) == yarn_mscale(4.0) ** 2
    assert deepseek_softmax_factor(YarnScaling(1.0, 8, mscale=1.0, mscale_all_dim=1.0)) == 1.0  # factor <= 1


def test_mla_rope_scaling_bad_input():
    with pytest.raises(TypeError, match="rope_scaling must be"):
        MultiHeadLatentAttention(32, 4, d_latent=16, rope_scaling={"rope_type": "yarn"})
    with pytest.raises(ValueError, match="rope_dim=0 rotates nothing"):
        MultiHeadLatentAttention(32, 4, d_latent=16, rope_dim=0, rope_scaling=LinearScaling(factor=2.0))


# --------------------------------------------------------------------------- whole models
def tiny_deepseek(seed: int = 3, params: dict = DEEPSEEK_YARN, **kw) -> DeepseekV3ForCausalLM:
    length = int(params["factor"] * params["original_max_position_embeddings"])
    config = deepseek_config(rope_parameters=dict(params), max_position_embeddings=length, **kw)
    return seeded(DeepseekV3ForCausalLM(config), seed=seed)


MODELS = {
    "dense": {},
    "moe-unequal-mscales": dict(params=UNEQUAL, first_k_dense_replace=1, n_routed_experts=4, num_experts_per_tok=2,
                                moe_intermediate_size=8, n_group=1, topk_group=1, experts_implementation="eager"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(MODELS))
def test_deepseek_v3_with_yarn_gives_the_same_logits(case):
    with hf_in_float64(hf_deepseek):
        hf = tiny_deepseek(**MODELS[case])
        ours = from_hf(hf)
        expected = hf(IDX).logits
    assert isinstance(ours.config.positions.rope_scaling, YarnScaling)
    assert all(b.attn.rope.scaling is ours.config.positions.rope_scaling for b in ours.blocks)
    diff = max_diff(ours(IDX), expected)
    print(f"deepseek-v3 {case}: max |logit difference| = {diff:.2e}")
    assert diff < EXACT


@pytest.mark.parametrize("case", sorted(MODELS))
def test_deepseek_v3_with_yarn_greedy_generation_with_caches(case):
    with hf_in_float64(hf_deepseek):
        assert_greedy_generation_matches(tiny_deepseek(seed=4, **MODELS[case]))


def test_deepseek_refusals_left():
    linear = {"rope_type": "linear", "rope_theta": 5e4, "factor": 4.0, "mscale_all_dim": 1.0}
    with pytest.raises(ValueError, match="rope scaling 'linear' with mscale_all_dim"):
        config_from_hf(deepseek_config(rope_parameters=linear))
