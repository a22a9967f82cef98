"""attn_core computes what Hugging Face's LLaMA, Qwen3 and DeepSeek-V3 compute (transformers as pinned).

Tiny Hugging Face modules are built from configs (nothing is downloaded), their random
weights are copied into attn_core (:func:`attn_core.hf.convert.copy_attention`,
:func:`attn_core.hf.convert.from_hf`), and both run in float64. The outputs must agree to
1e-10: what is left is float64 rounding, summed in different orders.

Hugging Face rounds to float32 on purpose in two places, whatever the model's dtype:
``*RMSNorm`` casts its input to float32 (the mean square, for half-precision training),
and ``*RotaryEmbedding`` computes its inverse frequencies and angles in float32. In a
float64 comparison those round trips alone differ by ~1e-7, and would hide any error
below that. The fixture :func:`exact_hf` lifts them: it replaces those two ``forward``
methods with the same formulas without the float32 casts, for the duration of a test.
:func:`test_float32_round_trips_are_the_only_difference` shows what they amount to
without the fixture (below 1e-5, held at that tolerance).
"""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5.0")

from transformers import (  # noqa: E402
    DeepseekV3Config,
    DeepseekV3ForCausalLM,
    DynamicCache,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen3Config,
)
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as hf_deepseek  # noqa: E402
from transformers.models.llama import modeling_llama as hf_llama  # noqa: E402
from transformers.models.mistral import modeling_mistral as hf_mistral  # noqa: E402
from transformers.models.qwen3 import modeling_qwen3 as hf_qwen3  # noqa: E402

from attn_core import (  # noqa: E402
    DecoderConfig,
    MultiHeadAttention,
    MultiHeadLatentAttention,
    RotaryEmbedding,
    TransformerBlock,
    generate,
    parameter_count,
)
from attn_core.hf.convert import copy_attention, from_hf  # noqa: E402

F64 = torch.float64
EXACT = 1e-10  # float64 rounding in another summation order
HF_MODULES = (hf_llama, hf_mistral, hf_qwen3, hf_deepseek)


def _rmsnorm_float64(self, hidden_states):
    """Hugging Face's RMSNorm without its float32 cast (the same formula)."""
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))


def _rope_float64(self, x, position_ids):
    """Hugging Face's plain RoPE tables with the angles in float64 (as attn_core computes them)."""
    assert self.rope_type == "default", self.rope_type
    dim = 2 * self.inv_freq.numel()
    base = self.config.rope_parameters["rope_theta"]
    inv_freq = base ** (-torch.arange(0, dim, 2, dtype=F64) / dim)  # attn_core's RotaryEmbedding.inv_freq
    freqs = position_ids[..., None].to(F64) * inv_freq  # (B, T, D/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (B, T, D): the "half" layout's table
    return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


@pytest.fixture
def exact_hf(monkeypatch):
    """Lift Hugging Face's float32 round trips (RMSNorm input, RoPE tables) for one test."""
    for module in HF_MODULES:
        for name in dir(module):
            if name.endswith("RMSNorm"):
                monkeypatch.setattr(getattr(module, name), "forward", _rmsnorm_float64)
            elif name.endswith("RotaryEmbedding"):
                monkeypatch.setattr(getattr(module, name), "forward", _rope_float64)


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return (a - b).abs().max().item()


def causal_bias(T: int) -> torch.Tensor:
    """The additive causal mask Hugging Face's eager attention takes: ``(1, 1, T, T)``, -inf above the diagonal."""
    return torch.full((T, T), float("-inf"), dtype=F64).triu(1)[None, None]


def x_and_positions(T: int = 7, d: int = 32, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, T, d, generator=g, dtype=F64), torch.arange(T)[None]


def llama_config(**kw) -> LlamaConfig:
    base = dict(
        vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5, attn_implementation="sdpa",
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0}, tie_word_embeddings=False,
        bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )  # fmt: skip
    return LlamaConfig(**{**base, **kw})


def seeded(module: torch.nn.Module, seed: int = 0, std: float = 0.3) -> torch.nn.Module:
    """Random float64 weights everywhere (norm gains too, so that a dropped gain shows)."""
    torch.manual_seed(seed)
    module = module.to(F64)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p) * std + (1.0 if p.dim() == 1 and "norm" in _name_of(module, p) else 0.0))
    return module.eval()


def _name_of(module, param) -> str:
    return next(n for n, p in module.named_parameters() if p is param)


# --------------------------------------------------------------------------- LLaMA
@pytest.mark.parametrize(
    "n_kv_heads,bias", [(4, False), (2, False), (1, False), (2, True)], ids=["MHA", "GQA", "MQA", "GQA-bias"]
)
def test_llama_attention(exact_hf, n_kv_heads, bias):
    config = llama_config(num_key_value_heads=n_kv_heads, attention_bias=bias)
    hf = seeded(hf_llama.LlamaAttention(config, layer_idx=0))
    x, pos = x_and_positions()
    cos_sin = hf_llama.LlamaRotaryEmbedding(config)(x, pos)
    expected, _ = hf(x, position_embeddings=cos_sin, attention_mask=causal_bias(7))
    rope = RotaryEmbedding(8, base=500000.0)
    ours = MultiHeadAttention(32, 4, n_kv_heads=n_kv_heads, causal=True, bias=bias, rope=rope).to(F64)
    copy_attention(ours, hf)
    assert max_diff(ours(x), expected) < EXACT


def test_llama_decoder_layer(exact_hf):
    config = llama_config()
    hf = seeded(hf_llama.LlamaDecoderLayer(config, layer_idx=0))
    x, pos = x_and_positions()
    cos_sin = hf_llama.LlamaRotaryEmbedding(config)(x, pos)
    expected = hf(x, attention_mask=causal_bias(7), position_embeddings=cos_sin)
    ours = TransformerBlock(
        32, 4, n_kv_heads=2, d_ff=48, mlp="swiglu", norm="rmsnorm", norm_eps=1e-5,
        rope=RotaryEmbedding(8, base=500000.0),
    ).to(F64)  # fmt: skip
    copy_attention(ours.attn, hf.self_attn)
    with torch.no_grad():
        ours.attn_norm.weight.copy_(hf.input_layernorm.weight)
        ours.mlp_norm.weight.copy_(hf.post_attention_layernorm.weight)
        for name in ("gate_proj", "up_proj", "down_proj"):
            getattr(ours.mlp, name).weight.copy_(getattr(hf.mlp, name).weight)
    assert max_diff(ours(x), expected) < EXACT


@pytest.fixture
def tiny_llama():
    return seeded(LlamaForCausalLM(llama_config()), seed=1)


def test_llama_for_causal_lm_logits(exact_hf, tiny_llama):
    idx = torch.randint(0, 61, (2, 9), generator=torch.Generator().manual_seed(0))
    ours = from_hf(tiny_llama)
    assert ours.config.norm_eps == 1e-5 and ours.config.positions.rope_base == 500000.0
    assert max_diff(ours(idx), tiny_llama(idx).logits) < EXACT


def test_llama_greedy_generation_with_kv_cache(exact_hf, tiny_llama):
    """The same tokens as ``generate(do_sample=False)``; our cached logits equal HF's full-sequence ones."""
    idx = torch.randint(0, 61, (2, 5), generator=torch.Generator().manual_seed(1))
    expected = tiny_llama.generate(idx, max_new_tokens=12, do_sample=False, attention_mask=torch.ones_like(idx))
    ours = from_hf(tiny_llama)
    tokens, logits = generate(ours, idx, 12, temperature=0.0, return_logits=True)
    assert torch.equal(tokens, expected)
    assert max_diff(logits, tiny_llama(tokens[:, :-1]).logits) < EXACT


def test_float32_round_trips_are_the_only_difference(tiny_llama):
    """Without :func:`exact_hf`: HF's float32 RoPE tables and RMSNorm cast leave ~1e-7, never more than 1e-5."""
    idx = torch.randint(0, 61, (2, 9), generator=torch.Generator().manual_seed(0))
    diff = max_diff(from_hf(tiny_llama)(idx), tiny_llama(idx).logits)
    assert EXACT < diff < 1e-5


# --------------------------------------------------------------------------- Qwen3
def test_qwen3_attention_qk_norm_and_decoupled_head_dim(exact_hf):
    config = Qwen3Config(
        hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6,
        attention_bias=True, attn_implementation="sdpa", rope_parameters={"rope_type": "default", "rope_theta": 1e6},
    )  # fmt: skip
    hf = seeded(hf_qwen3.Qwen3Attention(config, layer_idx=0))
    x, pos = x_and_positions()
    cos_sin = hf_qwen3.Qwen3RotaryEmbedding(config)(x, pos)
    expected, _ = hf(x, position_embeddings=cos_sin, attention_mask=causal_bias(7))
    ours = MultiHeadAttention(
        32, 4, n_kv_heads=2, head_dim=16, qk_norm=True, norm_eps=1e-6, causal=True, bias=True,
        rope=RotaryEmbedding(16, base=1e6),
    ).to(F64)  # fmt: skip
    copy_attention(ours, hf)
    assert ours.q_proj.out_features == 64 != 32  # 4 heads of 16 in a 32-wide model
    assert max_diff(ours(x), expected) < EXACT
    ours.q_norm = ours.k_norm = None  # the QK-norm is what makes the difference
    assert max_diff(ours(x), expected) > 1e-3


# --------------------------------------------------------------------------- DeepSeek-V3
def deepseek_config(**kw) -> DeepseekV3Config:
    base = dict(
        vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, q_lora_rank=12, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4,
        v_head_dim=6, first_k_dense_replace=2, max_position_embeddings=64, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 50000.0}, attn_implementation="sdpa",
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )  # fmt: skip
    return DeepseekV3Config(**{**base, **kw})


def deepseek_pair(config: DeepseekV3Config):
    hf = seeded(hf_deepseek.DeepseekV3Attention(config, layer_idx=0))
    ours = MultiHeadLatentAttention(
        32, 4, d_latent=16, d_q_latent=config.q_lora_rank, head_dim=8, rope_dim=4, v_head_dim=6,
        rope_base=50000.0, rope_layout="interleaved" if config.rope_interleave else "half",
    ).to(F64)  # fmt: skip
    copy_attention(ours, hf)
    return hf, ours


@pytest.mark.parametrize("absorbed", [False, True], ids=["ordinary", "absorbed"])
@pytest.mark.parametrize("q_lora_rank", [12, None], ids=["q-LoRA", "no-q-LoRA"])
@pytest.mark.parametrize("interleave", [True, False], ids=["interleaved", "half"])
def test_deepseek_v3_attention(exact_hf, q_lora_rank, absorbed, interleave):
    config = deepseek_config(q_lora_rank=q_lora_rank, rope_interleave=interleave)
    hf, ours = deepseek_pair(config)
    x, pos = x_and_positions()
    cos_sin = hf_deepseek.DeepseekV3RotaryEmbedding(config)(x, pos)
    expected, _ = hf(x, position_embeddings=cos_sin, attention_mask=causal_bias(7))
    assert max_diff(ours(x, absorbed=absorbed), expected) < EXACT


@pytest.mark.parametrize("absorbed", [False, True], ids=["ordinary", "absorbed"])
def test_deepseek_v3_latent_cache_decoding(exact_hf, absorbed):
    """A prompt of 4, then one token at a time: ours from a LatentKVCache, HF from its DynamicCache."""
    config = deepseek_config()
    hf, ours = deepseek_pair(config)
    x, pos = x_and_positions(T=8)
    rotary = hf_deepseek.DeepseekV3RotaryEmbedding(config)
    hf_cache, our_cache = DynamicCache(config=config), ours.make_cache(2, 8)
    for start, stop in ((0, 4), (4, 5), (5, 6), (6, 7), (7, 8)):
        chunk = x[:, start:stop]
        mask = causal_bias(stop - start) if stop - start > 1 else None
        expected, _ = hf(
            chunk, position_embeddings=rotary(chunk, pos[:, start:stop]), attention_mask=mask, past_key_values=hf_cache
        )
        got = ours(chunk, kv_cache=our_cache, absorbed=absorbed)
        assert max_diff(got, expected) < EXACT
    assert our_cache.size == 8


def test_deepseek_v3_for_causal_lm_logits_non_default_rope_theta(exact_hf):
    hf = seeded(DeepseekV3ForCausalLM(deepseek_config()), seed=2)  # dense layers only: first_k_dense_replace = 2
    idx = torch.randint(0, 61, (2, 9), generator=torch.Generator().manual_seed(0))
    ours = from_hf(hf)
    assert ours.config.positions.rope_base == 50000.0 and ours.config.positions.rope_layout == "interleaved"
    assert max_diff(ours(idx), hf(idx).logits) < EXACT
    tokens = generate(ours, idx[:, :4], 6, temperature=0.0)
    assert torch.equal(tokens, hf.generate(idx[:, :4], max_new_tokens=6, do_sample=False))


# --------------------------------------------------------------------------- parameter counts
@pytest.mark.parametrize(
    "preset,hf_config",
    [
        ("llama3_8b", lambda: LlamaConfig(
            vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
            num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False)),
        ("qwen3_0_6b", lambda: Qwen3Config(
            vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
            num_attention_heads=16, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True)),
    ],
)  # fmt: skip
def test_presets_count_what_hugging_face_builds(preset, hf_config):
    """The presets' counts equal those of the Hugging Face models of the same shape (on the meta device)."""
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf_config())
    assert parameter_count(getattr(DecoderConfig, preset)()) == sum(p.numel() for p in model.parameters())
