"""attn_core.convert: Hugging Face LLaMA / Mistral / Qwen3 / DeepSeek-V3 objects into DecoderLM, or a clear refusal.

Random-initialised models built from configs; nothing is downloaded. The exact (float64,
1e-10) comparisons use :func:`test_parity_hf.exact_hf`, which lifts Hugging Face's
deliberate float32 round trips (see that module).
"""

from __future__ import annotations

import sys
import types

import pytest
import torch

pytest.importorskip("transformers", minversion="5.0")

from test_parity_hf import EXACT, deepseek_config, exact_hf, llama_config, max_diff, seeded  # noqa: E402, F401
from transformers import (  # noqa: E402
    DeepseekV3ForCausalLM,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from attn_core import DecoderLM, parameter_count  # noqa: E402
from attn_core.convert import (  # noqa: E402
    NOT_CONVERTED,
    SUPPORTED_MODEL_TYPES,
    config_from_hf,
    from_hf,
    transformers_names,
)

IDX = torch.randint(0, 61, (2, 9), generator=torch.Generator().manual_seed(0))
SMALL = dict(
    vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=64, attn_implementation="sdpa",
)  # fmt: skip


def qwen3(**kw):
    base = dict(SMALL, head_dim=16, rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    return Qwen3ForCausalLM(Qwen3Config(**{**base, **kw}))


MODELS = {
    "llama-tied-bias": lambda: LlamaForCausalLM(llama_config(tie_word_embeddings=True, attention_bias=True)),
    "llama-mha-head_dim": lambda: LlamaForCausalLM(llama_config(num_key_value_heads=4, head_dim=4)),
    "mistral": lambda: MistralForCausalLM(MistralConfig(**SMALL, sliding_window=None)),
    "mistral-window": lambda: MistralForCausalLM(MistralConfig(**SMALL, sliding_window=4)),  # shorter than IDX
    "qwen3-window": lambda: qwen3(use_sliding_window=True, sliding_window=3, max_window_layers=1),
    "qwen3": lambda: qwen3(),
    "qwen3-tied-bias": lambda: qwen3(tie_word_embeddings=True, attention_bias=True),
    "deepseek-v3": lambda: DeepseekV3ForCausalLM(deepseek_config()),
    "deepseek-v3-half-bias": lambda: DeepseekV3ForCausalLM(
        deepseek_config(q_lora_rank=None, rope_interleave=False, attention_bias=True)
    ),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_from_hf_gives_the_same_logits(exact_hf, name):  # noqa: F811
    hf = seeded(MODELS[name](), seed=3)
    ours = from_hf(hf)
    assert isinstance(ours, DecoderLM) and not ours.training
    assert next(ours.parameters()).dtype == torch.float64
    assert max_diff(ours(IDX), hf(IDX).logits) < EXACT


def test_from_hf_counts():
    """Every weight is copied: the converted model has HF's parameter count (HF's missing biases are zeros)."""
    for name in ("qwen3", "deepseek-v3", "mistral"):
        hf = MODELS[name]()
        ours = from_hf(hf)
        assert ours.num_parameters() == sum(p.numel() for p in hf.parameters()) == parameter_count(ours.config)


def test_from_hf_float32_model_stays_float32():
    hf = LlamaForCausalLM(llama_config()).eval()
    ours = from_hf(hf)
    assert next(ours.parameters()).dtype == torch.float32
    with torch.no_grad():
        assert max_diff(ours(IDX), hf(IDX).logits) < 1e-4  # float32 rounding


def test_sliding_windows_are_converted():
    mistral = config_from_hf(MODELS["mistral-window"]().config)
    assert mistral.resolved_layer_types == ("sliding", "sliding") and mistral.sliding_window == 4
    qwen = config_from_hf(MODELS["qwen3-window"]().config)
    assert qwen.layer_types == ("full", "sliding") and qwen.sliding_window == 3


def test_config_from_hf_fields():
    c = config_from_hf(qwen3().config)
    assert (c.head_dim, c.qk_norm, c.norm_eps, c.rope_base, c.n_kv_heads) == (16, True, 1e-6, 1e6, 2)
    d = config_from_hf(deepseek_config())
    assert (d.attention, d.d_latent, d.d_q_latent, d.head_dim, d.rope_dim, d.v_head_dim, d.rope_layout) == (
        "mla", 16, 12, 8, 4, 6, "interleaved",
    )  # fmt: skip


# --------------------------------------------------------------------------- refusals
@pytest.mark.parametrize(
    "make,message",
    [
        (lambda: llama_config(rope_parameters={"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0}),
         "rope scaling 'linear' is not implemented"),
        (lambda: llama_config(
            max_position_embeddings=16384,
            rope_parameters={"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
         "rope scaling 'llama3' is not implemented"),
        (lambda: deepseek_config(rope_parameters={"rope_type": "yarn", "rope_theta": 1e4, "factor": 40.0,
                                                  "original_max_position_embeddings": 64}),
         "rope scaling 'yarn'"),
        (lambda: deepseek_config(first_k_dense_replace=1, n_routed_experts=4, num_experts_per_tok=2),
         "layers 1..1 are mixture-of-experts layers"),
        (lambda: llama_config(hidden_act="gelu"), "hidden_act='gelu'"),
        (lambda: llama_config(attention_dropout=0.1), "attention_dropout=0.1"),
    ],
)  # fmt: skip
def test_refuses_what_it_cannot_compute_exactly(make, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        config_from_hf(make())


def test_refuses_other_model_types_and_non_models():
    with pytest.raises(ValueError, match="model_type='gpt2' is not supported"):
        config_from_hf(types.SimpleNamespace(model_type="gpt2"))
    with pytest.raises(TypeError, match="got dict"):
        from_hf({"config": None})
    assert set(SUPPORTED_MODEL_TYPES) == {"llama", "mistral", "qwen3", "deepseek_v3"}


@pytest.mark.parametrize(
    "config_name,message",
    [
        ("GptOssConfig", r"mixture of experts \(num_local_experts=128, top-4 routing\)"),
        ("Qwen3NextConfig", "mostly Gated DeltaNet"),
        ("Gemma2Config", "soft-capped final logits"),
        ("Gemma3TextConfig", "a RoPE base of its own in the sliding layers"),
        ("Qwen3MoeConfig", "mixture of experts"),
        ("MixtralConfig", "mixture of experts"),
        ("Olmo2Config", "QK-norm spans all heads"),
    ],
)
def test_refuses_the_models_of_part_v_saying_what_they_add(config_name, message):
    """The models chapters 15-16 discuss are refused with the reason, not as an unknown model type."""
    hf_config = getattr(__import__("transformers"), config_name)()
    assert hf_config.model_type in NOT_CONVERTED
    with pytest.raises(ValueError, match=f"cannot convert this {hf_config.model_type} model exactly: .*{message}"):
        config_from_hf(hf_config)


def test_attn_core_does_not_import_transformers():
    """attn_core (and its convert module) load without transformers: convert reads the object it is given."""
    code = (
        "import sys; sys.modules['transformers'] = None\n"  # any import of transformers now fails
        "import attn_core, attn_core.convert\n"
        "assert 'transformers' not in {m.split('.')[0] for m in sys.modules if sys.modules[m] is not None}\n"
    )
    import subprocess

    subprocess.run([sys.executable, "-c", code], check=True)


def test_transformers_names_finds_or_says_why(capsys):
    config_cls, model_cls = transformers_names("LlamaConfig", "LlamaForCausalLM")
    assert model_cls is LlamaForCausalLM
    assert transformers_names("NoSuchModelForCausalLM") is None
    assert "has no NoSuchModelForCausalLM" in capsys.readouterr().out
    assert transformers_names("x", module="transformers_not_installed_anywhere") is None
    assert "cannot be imported" in capsys.readouterr().out
