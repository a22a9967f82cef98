"""Presets of :class:`~attn_core.config.DecoderConfig`: toy architectures and the shapes of real models.

Each is a class method of the config (``DecoderConfig.llama_like(n_layers=4)``); keyword
overrides replace whole fields, parts included (``positions=Positions(...)``).

* :func:`gpt2_like` and :func:`llama_like`: toy presets.
* :func:`llama3_8b`, :func:`qwen3_8b`, :func:`qwen3_0_6b`, :func:`deepseek_v3`: the shapes
  of real models, whose parameter counts by formula (:mod:`attn_core.model.params`) equal the
  published ones; :func:`mixtral_8x7b`, :func:`gpt_oss_20b`, :func:`gpt_oss_120b` and
  :func:`deepseek_v3_moe` with their mixtures of experts (total and active counts).
"""

from __future__ import annotations

from .parts import LayerPattern, MoE, Positions

__all__ = [
    "deepseek_v3",
    "deepseek_v3_moe",
    "gpt2_like",
    "gpt_oss_120b",
    "gpt_oss_20b",
    "llama3_8b",
    "llama_like",
    "mixtral_8x7b",
    "qwen3_0_6b",
    "qwen3_8b",
]


def gpt2_like(cls, **overrides):
    """GPT-2's architecture at a toy size: MHA, learned positions, GELU, LayerNorm, pre-norm, tied, biases.

    GPT-2 small's shape is ``gpt2_like(vocab_size=50257, n_layers=12, d_model=768,
    n_heads=12, max_len=1024)`` (124,439,808 parameters).
    """
    base = dict(
        vocab_size=64, n_layers=2, d_model=64, n_heads=4, max_len=128, positions=Positions("learned"), mlp="gelu",
        norm="layernorm", norm_position="pre", tie_weights=True, bias=True,
    )  # fmt: skip
    return cls(**{**base, **overrides})


def llama_like(cls, **overrides):
    """LLaMA's architecture at a toy size: GQA, RoPE, SwiGLU, RMSNorm, pre-norm, untied, no biases.

    LLaMA-7B's shape is ``llama_like(vocab_size=32000, n_layers=32, d_model=4096,
    n_heads=32, n_kv_heads=32, d_ff=11008, max_len=2048)`` (6,738,415,616 parameters).
    """
    base = dict(
        vocab_size=64, n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, max_len=128, positions=Positions("rope"),
        mlp="swiglu", norm="rmsnorm", norm_position="pre", tie_weights=False, bias=False,
    )  # fmt: skip
    return cls(**{**base, **overrides})


def llama3_8b(cls, **overrides):
    """Meta-Llama-3-8B: 32 layers, d=4096, GQA 32/8 heads, SwiGLU 14336, θ=500000, ε=1e-5; 8,030,261,248."""
    base = dict(
        vocab_size=128256, n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8, d_ff=14336, max_len=8192,
        positions=Positions("rope", rope_base=500000.0), norm_eps=1e-5,
    )  # fmt: skip
    return llama_like(cls, **{**base, **overrides})


def qwen3_8b(cls, **overrides):
    """Qwen3-8B: 36 layers, d=4096, GQA 32/8 heads of width 128, QK-norm, SwiGLU 12288, untied; 8,190,735,360."""
    base = dict(
        vocab_size=151936, n_layers=36, d_model=4096, n_heads=32, n_kv_heads=8, head_dim=128, d_ff=12288,
        max_len=40960, positions=Positions("rope", rope_base=1000000.0), norm_eps=1e-6, qk_norm=True,
    )  # fmt: skip
    return llama_like(cls, **{**base, **overrides})


def qwen3_0_6b(cls, **overrides):
    """Qwen3-0.6B: 28 layers, d=1024, 16 query heads of width 128 (> d/H = 64), tied; 596,049,920 parameters."""
    base = dict(
        vocab_size=151936, n_layers=28, d_model=1024, n_heads=16, n_kv_heads=8, head_dim=128, d_ff=3072,
        max_len=40960, positions=Positions("rope", rope_base=1000000.0), norm_eps=1e-6, qk_norm=True,
        tie_weights=True,
    )  # fmt: skip
    return llama_like(cls, **{**base, **overrides})


def mixtral_8x7b(cls, **overrides):
    """Mixtral-8x7B: 32 layers, d=4096, GQA 32/8, 8 SwiGLU experts of width 14336, top-2; 46,702,792,704.

    Its router keeps the top-2 logits and softmaxes over them (``router_topk_first``);
    12,879,925,248 parameters are active per token (embedding included): "12.9B".
    """
    base = dict(
        vocab_size=32000, n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8, d_ff=14336, max_len=32768,
        positions=Positions("rope", rope_base=1000000.0), norm_eps=1e-5,
        moe=MoE(n_experts=8, experts_per_token=2, router_topk_first=True),
    )  # fmt: skip
    return llama_like(cls, **{**base, **overrides})


def gpt_oss_20b(cls, **overrides):
    """gpt-oss-20b's shapes: 24 layers, d=2880, GQA 64/8 heads of 64, sinks, windows of 128 on alternate layers,
    biases, 32 experts of width 2880, top-4 with a router bias; 20,914,757,184 parameters.

    Not gpt-oss itself: its experts' SwiGLU is clamped (``expert_swiglu_limit=7``) and its RoPE is
    YaRN-scaled (``rope_scaling=YarnScaling(factor=32.0, original_max_position=4096, truncate=False)``);
    the parameters (and so the counts) are the same. Active per token without the embedding:
    3,608,307,264 ("3.61B").
    """
    base = dict(
        vocab_size=201088, n_layers=24, d_model=2880, n_heads=64, n_kv_heads=8, head_dim=64, d_ff=2880,
        max_len=131072, positions=Positions("rope", rope_base=150000.0), norm_eps=1e-5, bias=True,
        attention_sinks=True, pattern=LayerPattern(("sliding", "full") * 12, sliding_window=128),
        moe=MoE(n_experts=32, experts_per_token=4, router_topk_first=True, router_bias=True),
    )  # fmt: skip
    return llama_like(cls, **{**base, **overrides})


def gpt_oss_120b(cls, **overrides):
    """gpt-oss-120b's shapes: as :func:`gpt_oss_20b` with 36 layers and 128 experts; 116,829,156,672 parameters.

    Active per token without the embedding: 5,132,849,472 ("5.13B").
    """
    base = dict(
        n_layers=36, pattern=LayerPattern(("sliding", "full") * 18, sliding_window=128),
        moe=MoE(n_experts=128, experts_per_token=4, router_topk_first=True, router_bias=True),
    )  # fmt: skip
    return gpt_oss_20b(cls, **{**base, **overrides})


def deepseek_v3(cls, **overrides):
    """DeepSeek-V3's attention and dense layers: MLA with 128 heads, every layer dense (no MoE).

    DeepSeek-V3 has 61 layers; the first 3 have a dense SwiGLU MLP (width 18432), the other
    58 a mixture of experts (:func:`deepseek_v3_moe`). This preset makes *every* layer dense,
    so its total is not DeepSeek-V3's; what equals the published shapes is each part: the
    attention of a layer (187,107,328 parameters: q-LoRA 1536, KV latent 512, content/RoPE/value
    widths 128/64/128), a dense layer (583,483,392) and the embeddings.
    """
    base = dict(
        vocab_size=129280, n_layers=61, d_model=7168, n_heads=128, d_ff=18432, max_len=4096, attention="mla",
        d_latent=512, d_q_latent=1536, head_dim=128, rope_dim=64, v_head_dim=128, norm_eps=1e-6,
        positions=Positions("rope", rope_layout="interleaved"),
    )  # fmt: skip
    return llama_like(cls, **{"n_kv_heads": None, **base, **overrides})


def deepseek_v3_moe(cls, **overrides):
    """DeepSeek-V3 with its mixture of experts: :func:`deepseek_v3` whose layers 3..60 route each token to
    8 of 256 experts of width 2048 (sigmoid scores, 8 groups of which 4 may be used, weights renormalised
    and scaled by 2.5) plus 1 shared expert; 671,026,404,352 parameters ("671B"), 36,625,603,584 active
    per token without the embedding ("37B"). The multi-token-prediction module (14B) is not counted.
    """
    moe = MoE(
        n_experts=256, experts_per_token=8, n_shared_experts=1, moe_d_ff=2048, router_scoring="sigmoid",
        router_normalize=True, router_scale=2.5, router_groups=8, router_topk_groups=4, first_dense_layers=3,
    )  # fmt: skip
    return deepseek_v3(cls, **{"moe": moe, **overrides})
