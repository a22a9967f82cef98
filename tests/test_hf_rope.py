"""attn_core.hf.rope: Hugging Face's rope_parameters read (scaling_from_hf), and whole tiny models converted with
rope scaling (issue 28) and with SmolLM3's NoPE layers, float64.

Hugging Face computes RoPE (and RMSNorm) in float32 whatever the model's dtype; the models
here are built and run inside :func:`test_positions_rope_scaling.hf_in_float64`, which lifts those
steps to float64 with the formulas unchanged (the scaled ``inv_freq`` included, which is
computed when the model is built). ``original_max_position_embeddings`` is 8 (dynamic NTK:
``max_position_embeddings`` 8), so that the 9 tokens of ``IDX`` and the 17 of greedy
generation reach past it and the scaled speeds (and dynamic NTK's update) act.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

pytest.importorskip("transformers", minversion="5.0")

from test_hf_convert import IDX, SMALL, assert_greedy_generation_matches  # noqa: E402
from test_parity_hf import EXACT, max_diff, seeded  # noqa: E402
from test_positions_rope_scaling import EXACT as ROPE_EXACT  # noqa: E402
from test_positions_rope_scaling import hf_in_float64, rel_diff  # noqa: E402
from transformers import (  # noqa: E402
    Gemma3TextConfig,
    GptOssConfig,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
    Qwen3NextConfig,
    modeling_rope_utils,
)
from transformers.models.qwen2 import modeling_qwen2  # noqa: E402
from transformers.models.qwen3 import modeling_qwen3  # noqa: E402

from attn_core import DecoderLM, generate  # noqa: E402
from attn_core.hf.configs import config_from_hf  # noqa: E402
from attn_core.hf.convert import from_hf  # noqa: E402
from attn_core.hf.rope import scaling_from_hf  # noqa: E402
from attn_core.positions.rope_scaling import (  # noqa: E402
    DynamicNTKScaling,
    LinearScaling,
    Llama3Scaling,
    LongRopeScaling,
    YarnScaling,
)

NO_SPECIAL_TOKENS = dict(bos_token_id=None, eos_token_id=None, pad_token_id=None)
LLAMA3 = {"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8}  # fmt: skip
YARN = {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0, "original_max_position_embeddings": 8}
LINEAR = {"rope_type": "linear", "rope_theta": 1e4, "factor": 4.0}
DYNAMIC = {"rope_type": "dynamic", "rope_theta": 1e4, "factor": 4.0}


def llama(rope_parameters: dict, seed: int = 3, **kw) -> LlamaForCausalLM:
    base = dict(SMALL, rms_norm_eps=1e-5, rope_parameters=dict(rope_parameters), **NO_SPECIAL_TOKENS)
    return seeded(LlamaForCausalLM(LlamaConfig(**{**base, **kw})), seed=seed)


def qwen3(rope_parameters: dict, seed: int = 3, **kw) -> Qwen3ForCausalLM:
    base = dict(SMALL, head_dim=16, rms_norm_eps=1e-6, rope_parameters=dict(rope_parameters), **NO_SPECIAL_TOKENS)
    return seeded(Qwen3ForCausalLM(Qwen3Config(**{**base, **kw})), seed=seed)


def qwen2(rope_parameters: dict, seed: int = 3, **kw) -> Qwen2ForCausalLM:
    base = dict(SMALL, rms_norm_eps=1e-6, rope_parameters=dict(rope_parameters), **NO_SPECIAL_TOKENS)
    return seeded(Qwen2ForCausalLM(Qwen2Config(**{**base, **kw})), seed=seed)


CASES = {
    "llama-llama3": (lambda seed: llama(LLAMA3, seed), Llama3Scaling),
    "llama-dynamic": (lambda seed: llama(DYNAMIC, seed, max_position_embeddings=8), DynamicNTKScaling),
    "qwen3-yarn": (lambda seed: qwen3(YARN, seed), YarnScaling),
    "qwen3-linear": (lambda seed: qwen3(LINEAR, seed), LinearScaling),
    "qwen2-yarn": (lambda seed: qwen2(YARN, seed), YarnScaling),
}
MODULES = (modeling_qwen2, modeling_qwen3)


@pytest.mark.parametrize("case", sorted(CASES))
def test_scaled_rope_gives_the_same_logits(case):
    make, kind = CASES[case]
    with hf_in_float64(*MODULES):
        hf = make(3)
        ours = from_hf(hf)
        assert (
            isinstance(ours.config.positions.rope_scaling, kind)
            and ours.rope.scaling is ours.config.positions.rope_scaling
        )
        expected = hf(IDX).logits
    diff = max_diff(ours(IDX), expected)
    print(f"{case}: max |logit difference| = {diff:.2e}")
    assert diff < EXACT
    # And the scaling matters: the same weights with plain RoPE give other logits past position 0.
    plain = from_hf(hf)
    plain.rope.scaling = None
    plain.rope._cos = plain.rope._sin = None
    assert max_diff(plain(IDX), expected) > 1e-3


@pytest.mark.parametrize("case", sorted(set(CASES) - {"llama-dynamic"}))
def test_scaled_rope_greedy_generation_with_caches(case):
    """17 positions (5 prompt + 12 generated), past original_max_position_embeddings=8: HF's tokens and logits."""
    with hf_in_float64(*MODULES):
        assert_greedy_generation_matches(CASES[case][0](4))


def test_dynamic_ntk_greedy_generation_with_caches():
    """Dynamic NTK past max_position_embeddings=8: the speeds change at position 8 while decoding (the keys
    already cached keep their rotation, in both). Our model's max_len is max_position_embeddings (8), which
    caps generate: the converted weights are loaded into the same config with max_len=32."""
    with hf_in_float64(*MODULES):
        hf = CASES["llama-dynamic"][0](4)
        idx = torch.randint(0, 61, (2, 5), generator=torch.Generator().manual_seed(1))
        out = hf.generate(
            idx, max_new_tokens=12, do_sample=False, attention_mask=torch.ones_like(idx), output_logits=True,
            return_dict_in_generate=True,
        )  # fmt: skip
        expected, expected_logits = out.sequences, torch.stack(out.logits, dim=1)  # (B, 12, V): each step's
        converted = from_hf(hf)
        ours = DecoderLM(dataclasses.replace(converted.config, max_len=32)).to(torch.float64).eval()
        ours.load_state_dict(converted.state_dict())
        tokens, logits = generate(ours, idx, 12, temperature=0.0, return_logits=True)
        assert torch.equal(tokens, expected)
        full = hf(tokens[:, :-1]).logits  # one call of 16 positions: the dynamic speeds throughout
    # Each decoding step's logits: generate hands them back in float32, so equal to float32 rounding.
    assert expected_logits.dtype == torch.float32
    assert max_diff(logits[:, -12:].float(), expected_logits) < 1e-6
    assert max_diff(ours(tokens[:, :-1]), full) < EXACT
    # Decoding rotated the first 8 positions' keys with the plain speeds, one call of 16 with the dynamic ones.
    assert max_diff(logits[:, -12:], full[:, 4:]) > 1e-3


def test_scaling_values_are_read_from_rope_parameters():
    c = config_from_hf(llama(LLAMA3).config)
    assert c.positions.rope_scaling == Llama3Scaling(
        factor=8.0, original_max_position=8, low_freq_factor=1.0, high_freq_factor=4.0
    )
    assert c.positions.rope_base == 5e5
    y = config_from_hf(qwen3(YARN).config).positions.rope_scaling
    assert (y.factor, y.original_max_position) == (4.0, 8)
    assert config_from_hf(qwen3({"rope_type": "default", "rope_theta": 1e4}).config).positions.rope_scaling is None
    assert config_from_hf(llama(DYNAMIC, max_position_embeddings=8).config).positions.rope_scaling == DynamicNTKScaling(
        factor=4.0, max_position=8
    )


# --------------------------------------------------------------------------- SmolLM3: NoPE layers
def smollm3(seed: int = 3, rope_parameters: dict | None = None, **kw):
    from transformers import SmolLM3Config, SmolLM3ForCausalLM

    rope = rope_parameters or {"rope_type": "default", "rope_theta": 1e4}
    base = dict(SMALL, num_hidden_layers=4, rms_norm_eps=1e-6, rope_parameters=dict(rope), **NO_SPECIAL_TOKENS)
    return seeded(SmolLM3ForCausalLM(SmolLM3Config(**{**base, **kw})), seed=seed)


def smollm3_modules():
    from transformers.models.smollm3 import modeling_smollm3

    return (*MODULES, modeling_smollm3)


@pytest.mark.parametrize(
    "kw",
    [dict(), dict(no_rope_layers=[0, 1, 0, 1]), dict(rope_parameters=YARN), dict(tie_word_embeddings=False)],
    ids=["every-4th", "alternate", "yarn", "untied"],
)
def test_smollm3_gives_the_same_logits(kw):
    pytest.importorskip("transformers.models.smollm3")
    with hf_in_float64(*smollm3_modules()):
        hf = smollm3(**kw)
        ours = from_hf(hf)
        expected = hf(IDX).logits
    flags = tuple(bool(v) for v in hf.config.no_rope_layers)
    assert ours.config.positions.rope_layers == flags and not all(flags)
    assert [b.attn.rope is not None for b in ours.blocks] == list(flags)
    diff = max_diff(ours(IDX), expected)
    print(f"smollm3 {kw}: max |logit difference| = {diff:.2e}")
    assert diff < EXACT
    # The NoPE layers matter: RoPE in every layer gives other logits.
    every = (
        DecoderLM(
            dataclasses.replace(ours.config, positions=dataclasses.replace(ours.config.positions, rope_layers=None))
        )
        .to(torch.float64)
        .eval()
    )
    every.load_state_dict(ours.state_dict())
    assert max_diff(every(IDX), expected) > 1e-3


@pytest.mark.parametrize("kw", [dict(), dict(rope_parameters=YARN)], ids=["plain", "yarn"])
def test_smollm3_greedy_generation_with_caches(kw):
    pytest.importorskip("transformers.models.smollm3")
    with hf_in_float64(*smollm3_modules()):
        assert_greedy_generation_matches(smollm3(seed=4, **kw))


def test_smollm3_sliding_nope_layers():
    """use_sliding_window: SmolLM3's config makes its NoPE layers the sliding ones (window 3 < 9 tokens)."""
    pytest.importorskip("transformers.models.smollm3")
    with hf_in_float64(*smollm3_modules()):
        hf = smollm3(use_sliding_window=True, sliding_window=3)
        ours = from_hf(hf)
        expected = hf(IDX).logits
    c = ours.config
    assert (c.pattern.layer_types, c.pattern.sliding_window) == (("full", "full", "full", "sliding"), 3)
    assert max_diff(ours(IDX), expected) < EXACT
    bad = smollm3().config
    bad.layer_types = ["full_attention"] * 3 + ["sliding_attention"]
    with pytest.raises(ValueError, match="'sliding_attention' but use_sliding_window=False"):
        config_from_hf(bad)


# --------------------------------------------------------------------------- Gemma 3: scaled global layers
GEMMA3_LINEAR = {"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                 "full_attention": {"rope_type": "linear", "rope_theta": 1e6, "factor": 8.0}}  # fmt: skip


def gemma3_modules():
    from transformers.models.gemma3 import modeling_gemma3

    return (*MODULES, modeling_gemma3)


def test_gemma3_linear_scaling_in_the_full_layers():
    """Gemma 3 4B-27B: linear ×8 in the global layers, plain RoPE (base 1e4) in the sliding ones."""
    from test_hf_convert import tiny_gemma3

    with hf_in_float64(*gemma3_modules()):
        hf = tiny_gemma3(rope_parameters=GEMMA3_LINEAR)
        ours = from_hf(hf)
        expected = hf(IDX).logits
    c = ours.config
    assert c.positions.rope_scaling == LinearScaling(factor=8.0) and (
        c.positions.rope_base,
        c.positions.sliding_rope_base,
    ) == (1e6, 1e4)
    assert [b.attn.rope.scaling for b in ours.blocks] == [None, LinearScaling(factor=8.0), None]
    diff = max_diff(ours(IDX), expected)
    print(f"gemma3 linear x8: max |logit difference| = {diff:.2e}")
    assert diff < EXACT
    with hf_in_float64(*gemma3_modules()):
        assert_greedy_generation_matches(tiny_gemma3(seed=4, rope_parameters=GEMMA3_LINEAR))
    sliding_scaled = {"sliding_attention": {"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0},
                      "full_attention": {"rope_type": "default", "rope_theta": 1e6}}  # fmt: skip
    with pytest.raises(ValueError, match="rope scaling 'linear' in the sliding_attention layers is not implemented"):
        config_from_hf(tiny_gemma3(rope_parameters=sliding_scaled).config)


# --------------------------------------------------------------------------- Phi-3: LongRoPE
LONGROPE = {"rope_type": "longrope", "rope_theta": 1e4, "short_factor": [1.0, 1.5, 2.0, 3.0],
            "long_factor": [2.0, 3.0, 5.0, 8.0], "original_max_position_embeddings": 8}  # fmt: skip


def phi3_longrope(seed: int = 3):
    from transformers import Phi3Config, Phi3ForCausalLM

    base = dict(SMALL, max_position_embeddings=32, original_max_position_embeddings=8, rms_norm_eps=1e-5)
    config = Phi3Config(**base, rope_parameters=dict(LONGROPE), **NO_SPECIAL_TOKENS)
    return seeded(Phi3ForCausalLM(config), seed=seed)


def test_phi3_longrope_short_and_long_factors():
    """Phi-3's LongRoPE: the short factors up to 8 positions (5 tokens), the long ones past them (9 tokens)."""
    from transformers.models.phi3 import modeling_phi3

    with hf_in_float64(*MODULES, modeling_phi3):
        hf = phi3_longrope()
        ours = from_hf(hf)
        long, short = hf(IDX).logits, hf(IDX[:, :5]).logits
    assert (
        isinstance(ours.config.positions.rope_scaling, LongRopeScaling)
        and ours.config.positions.rope_scaling.factor == 4.0
    )
    diffs = max_diff(ours(IDX), long), max_diff(ours(IDX[:, :5]), short)
    print(f"phi3 longrope: max |logit difference| = {diffs[0]:.2e} (long), {diffs[1]:.2e} (short)")
    assert max(diffs) < EXACT
    # Not checked: greedy generation past 8 positions. Phi3ForCausalLM.prepare_inputs_for_generation drops
    # its cache when the sequence crosses original_max_position_embeddings and re-runs the prompt, so every key
    # is re-rotated with the long factors; attn_core's generate keeps the keys cached with the short ones.


# ---------------------------------------------------------------- scaling_from_hf: one rope_parameters dict read


def test_scaling_from_hf_plain_and_4x_keys():
    assert scaling_from_hf({"rope_type": "default", "rope_theta": 1e4}, max_position_embeddings=8) is None
    assert scaling_from_hf({"type": "linear", "factor": 2.0}, max_position_embeddings=8) == LinearScaling(2.0)


def test_scaling_from_hf_bad_dicts():
    with pytest.raises(ValueError, match="rope_type='foo'"):
        scaling_from_hf({"rope_type": "foo", "factor": 2.0}, max_position_embeddings=64)
    with pytest.raises(ValueError, match="rope_type='proportional'"):
        scaling_from_hf({"rope_type": "proportional", "rope_theta": 1e4}, max_position_embeddings=64)
    with pytest.raises(ValueError, match="rope_type='ntk'"):  # ours, not a Hugging Face rope_type
        scaling_from_hf({"rope_type": "ntk", "factor": 2.0}, max_position_embeddings=64)
    with pytest.raises(ValueError, match="need 'original_max_position_embeddings'"):
        scaling_from_hf({"rope_type": "yarn", "factor": 4.0}, max_position_embeddings=64)
    with pytest.raises(ValueError, match="need 'factor'"):
        scaling_from_hf({"rope_type": "linear"}, max_position_embeddings=64)
    with pytest.raises(ValueError, match="need 'low_freq_factor'"):
        scaling_from_hf(
            {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8, "high_freq_factor": 4.0},
            max_position_embeddings=64,
        )
    with pytest.raises(ValueError, match="factor=0.5"):  # YaRN's factor from a context ratio below 1
        scaling_from_hf({"rope_type": "yarn", "original_max_position_embeddings": 128}, max_position_embeddings=64)
    with pytest.raises(ValueError, match="max_position_embeddings=0"):
        scaling_from_hf({"rope_type": "linear", "factor": 2.0}, max_position_embeddings=0)


def test_production_configs_read_by_scaling_from_hf():
    """gpt-oss's default config (YaRN ×32 from 4096, no truncation): HF's speeds, float64."""
    config = GptOssConfig()
    scaling = scaling_from_hf(config.rope_parameters, max_position_embeddings=config.max_position_embeddings)
    assert scaling == YarnScaling(32.0, 4096, truncate=False)
    with hf_in_float64():
        want, factor = modeling_rope_utils.ROPE_INIT_FUNCTIONS["yarn"](config)
    got, got_factor = scaling.frequencies(config.rope_parameters["rope_theta"], config.head_dim)
    assert rel_diff(got, want) < ROPE_EXACT and got_factor == pytest.approx(factor, rel=1e-15)
    # Plain configs give no scaling; nested (per-layer-type) ones must be read per layer type.
    qwen3_next = Qwen3NextConfig()
    assert scaling_from_hf(qwen3_next.rope_parameters, max_position_embeddings=32768) is None
    gemma3 = Gemma3TextConfig()
    with pytest.raises(ValueError, match=r"nested by layer type \(\['full_attention', 'sliding_attention'\]\)"):
        scaling_from_hf(gemma3.rope_parameters, max_position_embeddings=gemma3.max_position_embeddings)
    assert scaling_from_hf(gemma3.rope_parameters["full_attention"], max_position_embeddings=8) is None


def test_docstring_examples():
    import doctest

    from attn_core.hf import rope

    result = doctest.testmod(rope)
    assert result.failed == 0 and result.attempted >= 3
