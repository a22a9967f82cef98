"""attn_core.config: the frozen DecoderConfig, its presets (with their published counts) and its checks."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from attn_core import DecoderConfig, DecoderLM, MultiHeadLatentAttention, parameter_count
from attn_core.config import Indexer, LayerPattern, LinearLayers, MoE, Positions
from attn_core.layers.mla import default_rope_dim
from attn_core.model.params import parameter_breakdown
from attn_core.modules.mlp import make_mlp, mlp_hidden_dim
from attn_core.positions.rope_scaling import LinearScaling, LongRopeScaling, YarnScaling
from conftest import decoder


# --------------------------------------------------------------------------- the config
def test_config_is_frozen_and_presets():
    c = DecoderConfig.gpt2_like()
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.d_model = 8  # type: ignore[misc]
    assert (c.attention, c.positions.positional, c.mlp, c.norm, c.norm_position, c.tie_weights) == (
        "mha",
        "learned",
        "gelu",
        "layernorm",
        "pre",
        True,
    )
    l = DecoderConfig.llama_like(n_layers=3)
    assert (l.positions.positional, l.mlp, l.norm, l.tie_weights, l.n_layers) == ("rope", "swiglu", "rmsnorm", False, 3)
    assert l.resolved_n_kv_heads < l.n_heads  # GQA
    assert DecoderConfig.gpt2_like(d_model=48, n_heads=4).resolved_d_ff == 192
    assert dataclasses.replace(c, d_model=32).resolved_d_ff == 128  # recomputed, not stale


@pytest.mark.parametrize(
    "overrides,message",
    [
        (dict(d_model=30, n_heads=4), "d_model=30 is not divisible by n_heads=4"),
        (dict(n_kv_heads=3), "n_heads=4 is not divisible by n_kv_heads=3"),
        (dict(positions={"positional": "xpos"}), "positional='xpos'"),
        (
            dict(d_model=27, n_heads=3, positions={"positional": "sinusoidal"}),
            "needs an even d_model (sine/cosine pairs), got d_model=27",
        ),
        (dict(attention="mla", d_latent=8, positions={"positional": "alibi"}), "got attention='mla', block='standard'"),
        (dict(block="sas", positions={"positional": "alibi"}), "got attention='mha', block='sas'"),
        (
            dict(positions={"positional": "alibi"}, pattern={"sliding_window": 4}),
            "positional='alibi' is not supported with sliding_window=4",
        ),
        (
            dict(positions={"positional": "alibi"}, pattern={"kv_share": (0, 0)}),
            "positional='alibi' is not supported with kv_share=(0, 0)",
        ),
        (dict(mlp="relu"), "mlp='relu'"),
        (dict(norm="batchnorm"), "norm='batchnorm'"),
        (dict(norm_position="middle"), "norm_position='middle'"),
        (dict(block="sas", norm_position="sandwich"), "block='sas' is a pre-norm block; got norm_position='sandwich'"),
        (
            dict(scale_embeddings=True, positions={"positional": "sinusoidal"}),
            "scale_embeddings=True with positional='sinusoidal'",
        ),
        (
            dict(positions={"positional": "rope", "sliding_rope_base": 500.0}),
            "sliding_rope_base=500.0 is about the 'sliding' layers' RoPE, but no layer is 'sliding'",
        ),
        (
            dict(pattern={"sliding_window": 4}, positions={"sliding_rope_base": 500.0}),
            "sliding_rope_base=500.0 needs positional='rope'",
        ),
        (
            dict(positions={"positional": "rope", "sliding_rope_base": 1.0}, pattern={"sliding_window": 4}),
            "sliding_rope_base must be a finite number > 1, got sliding_rope_base=1.0",
        ),
        (dict(final_softcap=0.0), "final_softcap must be a finite number > 0, got final_softcap=0.0"),
        (dict(final_softcap=-3.0), "final_softcap=-3.0"),
        (dict(attention="linear"), "attention='linear'"),
        (dict(block="resnet"), "block='resnet'"),
        (dict(vocab_size=0), "vocab_size=0"),
        (dict(dropout=1.5), "dropout=1.5"),
        (dict(attention="mla"), "needs d_latent"),
        (dict(d_latent=8), "d_latent=8 is an MLA size"),
        (dict(head_dim=7, positions={"positional": "rope"}), "needs an even head width, got head_dim=7"),
        (dict(v_head_dim=8), "v_head_dim=8 is an MLA size"),
        (dict(positions={"rope_base": 500.0}), "rope_base=500.0 needs positional='rope'"),
        (
            dict(positions={"rope_layout": "interleaved"}),
            "rope_layout='interleaved' needs positional='rope'",
        ),
        (dict(positions={"rope_layout": "pairs", "positional": "rope"}), "rope_layout='pairs'"),
        (dict(norm_eps=-1.0), "norm_eps=-1.0"),
        (dict(beta_ff=0.5), "beta_ff=0.5 is the simplified blocks' MLP gain"),
        (dict(block="sas", qk_norm=True), "block='sas' does not support qk_norm=True"),
        (dict(block="sas", norm_eps=1e-5), "block='sas' does not support norm_eps=1e-05"),
        (dict(block="sas-p", head_dim=8), "block='sas-p' does not support head_dim=8"),
        (dict(attention="mla", d_latent=8, qk_norm=True), "qk_norm=True is not supported with attention='mla'"),
        (
            dict(attention="mla", d_latent=8, rope_dim=0, positions={"positional": "rope"}),
            "rope_dim=0 with positional='rope'",
        ),
        (dict(block="sas", n_kv_heads=2), "n_kv_heads=2"),
        (dict(block="sas-p", norm_position="post"), "norm_position='post'"),
        (dict(attention="mla", d_latent=8, rope_dim=4), "rope_dim=4 needs positional='rope'"),
        (dict(positions={"positional": "rope", "rope_base": 1.0}), "rope_base=1.0"),
    ],
)
def test_config_errors_name_the_values(overrides, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        DecoderConfig.gpt2_like(**overrides)


def test_config_type_errors():
    with pytest.raises(TypeError, match="n_layers must be an int"):
        DecoderConfig.gpt2_like(n_layers=2.0)
    with pytest.raises(TypeError, match="tie_weights must be a bool"):
        DecoderConfig.gpt2_like(tie_weights=1)
    with pytest.raises(TypeError, match="qk_norm must be a bool"):
        DecoderConfig.llama_like(qk_norm=1)
    with pytest.raises(TypeError, match="scale_embeddings must be a bool"):
        DecoderConfig.llama_like(scale_embeddings=1)


def test_mla_rope_dim_has_one_default():
    """MLA's own default and the config's resolved value agree (d_model=24, n_heads=4: head_dim 6)."""
    c = DecoderConfig.llama_like(d_model=24, n_heads=4, n_kv_heads=None, attention="mla", d_latent=8)
    mla = MultiHeadLatentAttention(24, 4, d_latent=8)
    assert c.resolved_rope_dim == mla.rope_dim == default_rope_dim(6) == 2
    model = decoder(c)
    assert model.blocks[0].attn.rope_dim == c.resolved_rope_dim
    assert parameter_count(c) == sum(p.numel() for p in model.parameters())


def test_mla_in_the_model_uses_the_config_rope_base():
    c = DecoderConfig.llama_like(
        n_kv_heads=None, attention="mla", d_latent=16, positions=Positions(positional="rope", rope_base=500.0)
    )
    assert decoder(c).blocks[0].attn.rope.base == 500.0


def test_mlp_hidden_width_has_one_default():
    for mlp in ("gelu", "swiglu"):
        c = DecoderConfig.gpt2_like(d_model=48, n_heads=4, mlp=mlp)
        assert c.resolved_d_ff == mlp_hidden_dim(mlp, 48) == make_mlp(mlp, 48, None, bias=False).d_ff


# --------------------------------------------------------------------------- real models' shapes
@pytest.mark.parametrize(
    "preset,published",
    [
        ("llama3_8b", 8_030_261_248),  # Meta-Llama-3-8B
        ("qwen3_8b", 8_190_735_360),  # Qwen3-8B ("8.2B"; 6.95B without the embeddings)
        ("qwen3_0_6b", 596_049_920),  # Qwen3-0.6B ("0.6B"; 0.44B without the embedding)
    ],
)
def test_presets_have_the_published_parameter_counts(preset, published):
    config = getattr(DecoderConfig, preset)()
    assert parameter_count(config) == published
    with torch.device("meta"):  # the module itself, without allocating billions of floats
        assert DecoderLM(config).num_parameters() == published


def test_qwen3_non_embedding_counts():
    for preset, non_embedding in (("qwen3_8b", 6_946_075_648), ("qwen3_0_6b", 440_467_456)):
        parts = parameter_breakdown(getattr(DecoderConfig, preset)())
        assert sum(parts.values()) - parts["embedding"] - parts["lm_head"] == non_embedding


def test_deepseek_v3_parts_and_the_published_671b():
    """attn_core has no MoE: the preset's layers are all dense, so its parts are compared, and
    DeepSeek-V3's total is rebuilt from them plus its 58 MoE layers' experts (the test's own sum)."""
    c = DecoderConfig.deepseek_v3()
    parts = parameter_breakdown(c)
    attention_per_layer = parts["attention"] // c.n_layers
    # q_a 7168·1536 + norm 1536 + q_b 1536·128·(128+64) + kv_a 7168·(512+64) + norm 512
    # + kv_b 512·128·(128+128) + o 128·128·7168
    assert attention_per_layer == 187_107_328
    with torch.device("meta"):
        layer = DecoderLM(dataclasses.replace(c, n_layers=1)).blocks[0]
    assert sum(p.numel() for p in layer.attn.parameters()) == attention_per_layer
    dense_layer = sum(p.numel() for p in layer.parameters())
    assert dense_layer == 583_483_392  # attention + SwiGLU 7168·18432·3 + two norms
    d, moe_layers = c.d_model, 58
    experts = 257 * 3 * d * 2048 + 256 * d + 256  # 256 routed + 1 shared expert, router and its bias
    total = parts["embedding"] + parts["lm_head"] + d + 3 * dense_layer + moe_layers * (dense_layer - 3 * d * 18432)
    assert total + moe_layers * experts == 671_026_419_200  # DeepSeek-V3: "671B total parameters"


def test_repr_names_what_differs_from_the_defaults_and_evaluates_back():
    """The required fields and those off their defaults print, parts as their own dataclasses;
    ``eval`` of the repr gives the same config."""
    text = repr(DecoderConfig.llama_like())
    assert text == (
        "DecoderConfig(vocab_size=64, n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, mlp='swiglu', "
        "norm='rmsnorm', tie_weights=False, positions=Positions(positional='rope'))"
    )
    assert "qk_norm=True" in repr(DecoderConfig.llama_like(qk_norm=True))
    scope = {c.__name__: c for c in (DecoderConfig, Positions, LayerPattern, LinearLayers, MoE, Indexer)}
    for config in (
        DecoderConfig.gpt2_like(),
        DecoderConfig.qwen3_8b(),
        DecoderConfig.gpt_oss_20b(),
        DecoderConfig.deepseek_v3_moe(indexer=Indexer(index_n_heads=4, index_head_dim=128, index_topk=16)),
        DecoderConfig.llama_like(pattern=LayerPattern(layer_types=("linear", "full")), linear=LinearLayers(4)),
    ):
        assert eval(repr(config), scope) == config, repr(config)


def test_each_part_checks_itself():
    """A part refuses a bad value when it is made, naming the value, before any config sees it."""
    for make, message in [
        (lambda: Positions("xpos"), "positional='xpos'"),
        (lambda: Positions(rope_base=500.0), "rope_base=500.0 needs positional='rope'"),
        (lambda: Positions("rope", rotary_dim=3), "rotary_dim must be even"),
        (lambda: Positions("rope", rope_full_layers=False, sliding_rope_base=1e4), "leave sliding_rope_base=None"),
        (lambda: LayerPattern(("sliding", "full")), "sliding_window=None: give the window"),
        (lambda: LayerPattern(("chunked",)), "attention_chunk_size=None is the chunk of the 'chunked' layers"),
        (lambda: LayerPattern(("full", "full"), kv_share=(1, 1)), r"kv_share\[0\]=1: a layer reuses an earlier"),
        (lambda: LinearLayers(linear_conv_size=0), "linear_conv_size must be >= 1"),
        (lambda: MoE(4, experts_per_token=5), "experts_per_token=5 must be in 1..n_experts=4"),
        (lambda: MoE(4, router_groups=3), "n_experts=4 is not divisible by router_groups=3"),
        (lambda: MoE(4, router_topk_first=True, router_normalize=True), "leave router_normalize=False"),
        (lambda: MoE(4, shared_expert_gate=True), "shared_expert_gate=True configures the shared experts"),
        (lambda: Indexer(4), "index_n_heads=4 needs index_head_dim"),
    ]:
        with pytest.raises(ValueError, match=message):
            make()
    with pytest.raises(TypeError, match="rope_full_layers must be a bool"):
        Positions("rope", rope_full_layers=1)
    with pytest.raises(TypeError, match="n_experts"):
        MoE()  # type: ignore[call-arg]  # a mixture of experts has a number of experts


def test_cross_part_rules_are_the_configs():
    """What ties a part to the core is checked by the config, once: here MoE's SwiGLU experts."""
    with pytest.raises(ValueError, match="n_experts=4: the experts are SwiGLUs in standard blocks; got mlp='gelu'"):
        DecoderConfig.gpt2_like(moe=MoE(4))
    with pytest.raises(ValueError, match="layer_types must give one entry per layer"):
        DecoderConfig.gpt2_like(pattern=LayerPattern(("full",) * 3))


# --------------------------------------------------------------------------- no field silently dropped
# One base config per block kind, and for every DecoderConfig field a change to it. Changing a
# field must change the model (its parameters' names, shapes or values, its outputs in eval or
# training mode, or its caches), or building it must raise a ValueError: never nothing.
_SMALL = dict(vocab_size=24, d_model=32, n_heads=4, max_len=16)
FIELD_BASES = {
    "mha": DecoderConfig.llama_like(**_SMALL, n_kv_heads=2),
    "mla": DecoderConfig.llama_like(**_SMALL, n_kv_heads=None, attention="mla", d_latent=16),
    "sas": DecoderConfig.llama_like(**_SMALL, n_kv_heads=None, block="sas"),
    "sas-p": DecoderConfig.llama_like(**_SMALL, n_kv_heads=None, block="sas-p"),
    # A sliding and a full layer (window 2 < the probe's 6 tokens): sliding_rope_base acts here.
    "mha-sliding": DecoderConfig.llama_like(
        **_SMALL, n_kv_heads=2, pattern=LayerPattern(layer_types=("sliding", "full"), sliding_window=2)
    ),
    # A Gated DeltaNet layer and a full one (chapter 17): the linear_* sizes act here.
    "hybrid": DecoderConfig.llama_like(**_SMALL, n_kv_heads=2, pattern=LayerPattern(layer_types=("linear", "full"))),
}
FIELD_CHANGES = {
    "vocab_size": dict(vocab_size=20),
    "n_layers": dict(n_layers=3),
    "d_model": dict(d_model=48),
    "n_heads": dict(n_heads=2, n_kv_heads=None),
    "n_kv_heads": dict(n_kv_heads=1),
    "d_ff": dict(d_ff=40),
    "max_len": dict(max_len=20),
    "positional": dict(positions={"positional": "learned"}),
    "mlp": dict(mlp="gelu"),
    "norm": dict(norm="layernorm"),
    "norm_position": dict(norm_position="post"),
    "tie_weights": dict(tie_weights=True),
    "attention": [dict(attention="mla", d_latent=16, n_kv_heads=None), dict(attention="mha", d_latent=None)],
    "d_latent": dict(d_latent=12),
    "d_q_latent": dict(d_q_latent=12),
    "head_dim": dict(head_dim=16),
    "rope_dim": dict(rope_dim=2),
    "block": [dict(block="sas-p"), dict(block="sas")],
    "beta_ff": dict(beta_ff=0.5),
    "dropout": dict(dropout=0.1),
    "bias": dict(bias=True),
    "rope_base": dict(positions={"positional": "rope", "rope_base": 500.0}),
    "norm_eps": dict(norm_eps=1e-2),
    "qk_norm": dict(qk_norm=True),
    "v_head_dim": dict(v_head_dim=12),
    "rope_layout": dict(positions={"positional": "rope", "rope_layout": "interleaved"}),
    "layer_types": [
        dict(pattern={"layer_types": ("sliding", "full"), "sliding_window": 2}),
        dict(pattern={"layer_types": ("full", "sliding")}),
    ],
    "sliding_window": [dict(pattern={"sliding_window": 2}), dict(pattern={"sliding_window": 3})],
    "attention_sinks": dict(attention_sinks=True),
    "kv_share": dict(pattern={"kv_share": (0, 0)}),
    "attention_gate": dict(attention_gate="headwise"),
    "attention_softcap": dict(attention_softcap=1.0),
    "scale_embeddings": dict(scale_embeddings=True),
    "sliding_rope_base": dict(
        positions={"positional": "rope", "sliding_rope_base": 500.0}
    ),  # raises without sliding layers, acts with them
    "final_softcap": dict(final_softcap=0.5),
    # Chapter 17's "linear" layers: each size raises without one, and acts with one.
    "linear_n_heads": dict(linear={"linear_n_heads": 2}),
    "linear_head_dim": dict(linear={"linear_head_dim": 4}),
    "linear_n_value_heads": dict(linear={"linear_n_value_heads": 8}),
    "linear_value_head_dim": dict(linear={"linear_value_head_dim": 4}),
    "linear_conv_size": dict(linear={"linear_conv_size": 2}),
    # Chapter 19's mixture of experts: n_experts builds it (or raises without SwiGLU); each other field
    # raises without n_experts.
    "n_experts": dict(moe={"n_experts": 4}),
    "experts_per_token": dict(moe={"experts_per_token": 1}),
    "n_shared_experts": dict(moe={"n_shared_experts": 1}),
    "moe_d_ff": dict(moe={"moe_d_ff": 8}),
    "router_scoring": dict(moe={"router_scoring": "sigmoid"}),
    "router_topk_first": dict(moe={"router_topk_first": True}),
    "router_normalize": dict(moe={"router_normalize": True}),
    "router_scale": dict(moe={"router_scale": 2.5}),
    "router_groups": dict(moe={"router_groups": 2}),
    "router_topk_groups": dict(moe={"router_topk_groups": 2}),
    "router_bias": dict(moe={"router_bias": True}),
    "capacity_factor": dict(moe={"capacity_factor": 1.0}),
    "expert_swiglu_limit": dict(moe={"expert_swiglu_limit": 0.5}),
    "shared_expert_d_ff": dict(moe={"shared_expert_d_ff": 8}),
    "shared_expert_gate": dict(moe={"shared_expert_gate": True}),
    "first_dense_layers": dict(moe={"first_dense_layers": 1}),
    # Issue 29's options for converting Qwen2, Gemma 2 27B, Granite and Cohere 2.
    "qkv_bias": [dict(qkv_bias=True, bias=False), dict(qkv_bias=True)],
    "attention_scale": dict(attention_scale=0.3),
    "embedding_multiplier": dict(embedding_multiplier=2.0),
    "residual_multiplier": dict(residual_multiplier=0.5),
    "logit_scale": dict(logit_scale=0.5),
    "parallel_block": dict(parallel_block=True),
    "rope_full_layers": [
        dict(
            positions={"positional": "rope", "rope_full_layers": False},
            pattern={"layer_types": ("sliding", "full"), "sliding_window": 2},
        ),
        dict(positions={"positional": "rope", "rope_full_layers": False}),
    ],
    # DeepSeek-V3.2's lightning indexer: acts on the MLA base, raises elsewhere (and each size without heads).
    "index_n_heads": dict(indexer={"index_n_heads": 2, "index_head_dim": 8}),
    "index_head_dim": dict(indexer={"index_head_dim": 8}),
    "index_topk": dict(indexer={"index_topk": 2}),
    "rotary_dim": dict(positions={"positional": "rope", "rotary_dim": 4}),  # of heads of 8 (16 / 2)
    # Issue 28: context extension and NoPE layers (layer 1 is a full-attention layer in every base).
    "rope_scaling": dict(positions={"positional": "rope", "rope_scaling": LinearScaling(factor=2.0)}),
    "rope_layers": dict(positions={"positional": "rope", "rope_layers": (True, False)}),
    # Llama 4: each raises in these bases (no chunked layer, every layer rotates, no QK-norm, no experts);
    # tests/test_llama4_attention.py shows each acting.
    "attention_chunk_size": dict(pattern={"attention_chunk_size": 2}),
    "nope_temperature": dict(positions={"positional": "rope", "nope_temperature": (2.0, 0.5)}),
    "nope_qk_norm": dict(positions={"positional": "rope", "nope_qk_norm": False}),
    "router_weight_inputs": dict(moe={"router_weight_inputs": True}),
    "moe_layer_step": dict(moe={"moe_layer_step": 2}),
}


def _is_part_change(base: DecoderConfig, name: str, value: object) -> bool:
    return isinstance(value, dict) and getattr(base, name) is not None


def _differs(old: object, new: object) -> bool:
    """Whether ``new`` (a value, or a part's fields as a dict) differs from ``old``."""
    if isinstance(new, dict) and old is not None:
        return any(getattr(old, k) != v for k, v in new.items())
    return old != new


def _effect(base: DecoderConfig, changes: dict | list[dict]) -> str | None:
    """How a change shows in the model built from ``base``: 'raises', 'parameters', 'outputs', 'caches' or None.

    ``changes``: one change, or alternatives of which the first that differs from ``base`` is used.
    """
    changes = [changes] if isinstance(changes, dict) else changes
    change = next(c for c in changes if any(_differs(getattr(base, k), v) for k, v in c.items()))
    try:  # a part's fields change the base's part (a MoE or an indexer without its sizes raises)
        parts = {
            k: dataclasses.replace(getattr(base, k), **v) for k, v in change.items() if _is_part_change(base, k, v)
        }
        config = dataclasses.replace(base, **{**change, **parts})
    except (ValueError, TypeError):
        return "raises"
    a, b = decoder(base), decoder(config)  # the same seed
    sa, sb = a.state_dict(), b.state_dict()
    if sa.keys() != sb.keys() or any(sa[k].shape != sb[k].shape or not torch.equal(sa[k], sb[k]) for k in sa):
        return "parameters"
    idx = torch.randint(0, min(base.vocab_size, config.vocab_size), (2, 6), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        if not torch.equal(a.eval()(idx), b.eval()(idx)):
            return "outputs"
        torch.manual_seed(1)
        out_a = a.train()(idx)
        torch.manual_seed(1)
        if not torch.equal(out_a, b.train()(idx)):
            return "outputs"
    if [c.nbytes() for c in a.make_caches(1)] != [c.nbytes() for c in b.make_caches(1)]:
        return "caches"
    return None


def test_every_field_has_a_change_in_the_probe():
    parts = (Positions, LayerPattern, LinearLayers, MoE, Indexer)
    names = {f.name for f in dataclasses.fields(DecoderConfig)} - {"positions", "pattern", "linear", "moe", "indexer"}
    missing = names.union(*({f.name for f in dataclasses.fields(p)} for p in parts)) - set(FIELD_CHANGES)
    assert not missing, f"add a change for {sorted(missing)} to FIELD_CHANGES: every field must reach the model"


@pytest.mark.parametrize("kind", sorted(FIELD_BASES))
@pytest.mark.parametrize("name", sorted(FIELD_CHANGES))
def test_no_field_is_silently_dropped(kind, name):
    assert _effect(FIELD_BASES[kind], FIELD_CHANGES[name]) is not None, (
        f"changing {name} ({FIELD_CHANGES[name]}) leaves the {kind} model unchanged and raises nothing"
    )


def test_fields_reach_the_modules():
    """The values themselves arrive where they act (not just 'something changed')."""
    qwen = decoder(
        DecoderConfig.llama_like(
            **_SMALL, head_dim=16, qk_norm=True, norm_eps=1e-5, positions=Positions(positional="rope", rope_base=500.0)
        )
    )
    attn = qwen.blocks[0].attn
    assert (attn.head_dim, attn.q_proj.out_features, attn.q_norm.eps, attn.rope.base) == (16, 64, 1e-5, 500.0)
    assert qwen.blocks[0].attn_norm.eps == qwen.blocks[1].mlp_norm.eps == qwen.final_norm.eps == 1e-5
    mla = decoder(
        dataclasses.replace(
            FIELD_BASES["mla"],
            v_head_dim=12,
            bias=True,
            dropout=0.1,
            positions=dataclasses.replace(FIELD_BASES["mla"].positions, rope_layout="interleaved"),
        )
    )
    attn = mla.blocks[0].attn
    assert (attn.v_head_dim, attn.out_proj.in_features, attn.dropout, attn.rope.layout) == (12, 48, 0.1, "interleaved")
    assert attn.kv_down.bias is not None
    assert parameter_count(mla.config) == mla.num_parameters()


@pytest.mark.parametrize(
    "overrides",
    [
        dict(head_dim=16, qk_norm=True),
        dict(head_dim=4, bias=True, qk_norm=True),
        dict(n_kv_heads=None, attention="mla", d_latent=16, v_head_dim=12, d_q_latent=8, bias=True),
        dict(n_kv_heads=None, attention="mla", d_latent=16, head_dim=12, rope_dim=4, v_head_dim=6),
    ],
)
def test_parameter_count_equals_formula_new_fields(overrides):
    config = DecoderConfig.llama_like(**_SMALL, **overrides)
    assert DecoderLM(config).num_parameters() == parameter_count(config)


# --------------------------------------------------------------------------- layer pattern (chapter 15)
def test_layer_pattern_fields_reach_each_layer():
    config = DecoderConfig.llama_like(
        n_layers=4,
        attention_sinks=True,
        pattern=LayerPattern(
            layer_types=["sliding", "full", "sliding", "full"], sliding_window=3, kv_share=[0, 1, 0, 1]
        ),
    )
    assert config.pattern.layer_types == ("sliding", "full", "sliding", "full") and config.pattern.kv_share == (
        0,
        1,
        0,
        1,
    )
    model = decoder(config)
    assert [b.attn.window for b in model.blocks] == [3, None, 3, None]
    assert all(b.attn.sinks is not None for b in model.blocks)
    assert model.blocks[2].attn.k_proj is None and model.blocks[2].attn.kv_source is model.blocks[0].attn
    assert parameter_count(config) == model.num_parameters()


@pytest.mark.parametrize(
    "kw,message",
    [
        (dict(pattern={"sliding_window": 0}), "sliding_window must be >= 1"),
        (
            dict(pattern={"layer_types": ("sliding", "full")}),
            "layer_types has 'sliding' layers but sliding_window=None",
        ),
        (
            dict(pattern={"layer_types": ("full", "full"), "sliding_window": 4}),
            "sliding_window=4 but no layer of layer_types",
        ),
        (
            dict(pattern={"layer_types": ("full",)}),
            r"layer_types must give one entry per layer \(2\), got \('full',\)",
        ),
        (dict(pattern={"layer_types": ("full", "local")}), "layer_types"),
        (dict(pattern={"kv_share": (1, 1)}), r"kv_share\[0\]=1: a layer reuses an earlier"),
        (
            dict(pattern={"kv_share": (0, 0), "layer_types": ("full", "sliding"), "sliding_window": 2}),
            "shares keys between a",
        ),
        (dict(attention="mla", d_latent=8, n_kv_heads=None, pattern={"sliding_window": 4}), "need attention='mha'"),
    ],
)
def test_layer_pattern_bad_input(kw, message):
    with pytest.raises(ValueError, match=message):
        DecoderConfig.llama_like(n_layers=2, **kw)


# --------------------------------------------------------------------------- mixture of experts (chapter 19)
MOE_PUBLISHED = {  # preset: exact total, exact active, embedding counted in "active"?, published (billions, as printed)
    "mixtral_8x7b": (46_702_792_704, 12_879_925_248, True, "46.7", "12.9"),  # Mistral AI: 46.7B total, 12.9B active
    "gpt_oss_20b": (20_914_757_184, 3_608_307_264, False, "20.91", "3.61"),  # model card: 20.91B / 3.61B
    "gpt_oss_120b": (116_829_156_672, 5_132_849_472, False, "116.83", "5.13"),  # model card: 116.83B / 5.13B
    "deepseek_v3_moe": (671_026_404_352, 36_625_603_584, False, "671", "37"),  # DeepSeek-V3 report: 671B / 37B
}


def _as_published(n: int, published: str) -> str:
    """``n`` in billions with as many decimals as the published figure has."""
    decimals = len(published.split(".")[1]) if "." in published else 0
    return f"{n / 1e9:.{decimals}f}"


@pytest.mark.parametrize("name", sorted(MOE_PUBLISHED))
def test_moe_presets_count_the_published_parameters(name):
    from attn_core.model.params import active_parameter_count

    total, active, with_embedding, published_total, published_active = MOE_PUBLISHED[name]
    config = getattr(DecoderConfig, name)()
    with torch.device("meta"):  # 671B parameters cost no memory
        assert DecoderLM(config).num_parameters() == parameter_count(config) == total
    assert active_parameter_count(config, count_embedding=with_embedding) == active
    assert _as_published(total, published_total) == published_total
    assert _as_published(active, published_active) == published_active


@pytest.mark.parametrize("name", sorted(MOE_PUBLISHED))
def test_moe_presets_equal_hugging_face_models_on_meta(name):
    transformers = pytest.importorskip("transformers")
    hf_configs = {
        "mixtral_8x7b": lambda: transformers.MixtralForCausalLM(transformers.MixtralConfig(
            vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
            num_attention_heads=32, num_key_value_heads=8, num_local_experts=8, num_experts_per_tok=2)),
        "gpt_oss_20b": lambda: transformers.GptOssForCausalLM(
            transformers.GptOssConfig(num_hidden_layers=24, num_local_experts=32)),
        "gpt_oss_120b": lambda: transformers.GptOssForCausalLM(transformers.GptOssConfig()),  # its default is 120b
        "deepseek_v3_moe": lambda: transformers.DeepseekV3ForCausalLM(transformers.DeepseekV3Config()),
    }  # fmt: skip
    with torch.device("meta"):
        hf = hf_configs[name]()
    assert sum(p.numel() for p in hf.parameters()) == parameter_count(getattr(DecoderConfig, name)())


def test_moe_fields_reach_the_modules():
    from attn_core.modules.moe import MixtureOfExperts

    config = DecoderConfig.llama_like(
        n_layers=3,
        bias=True,
        moe=MoE(
            n_experts=8,
            experts_per_token=3,
            n_shared_experts=2,
            moe_d_ff=12,
            router_scoring="sigmoid",
            router_normalize=True,
            router_scale=2.5,
            router_groups=4,
            router_topk_groups=2,
            router_bias=True,
            capacity_factor=1.5,
            first_dense_layers=1,
        ),
    )
    model = decoder(config)
    assert not isinstance(model.blocks[0].mlp, MixtureOfExperts)
    m = model.blocks[2].mlp
    r = m.router
    assert (m.n_experts, m.k, m.d_ff, m.shared.d_ff, m.capacity_factor) == (8, 3, 12, 24, 1.5)
    assert (r.scoring, r.normalize, r.scale, r.n_groups, r.topk_groups) == ("sigmoid", True, 2.5, 4, 2)
    assert r.proj.bias is not None and m.experts[0].gate_proj.bias is not None
    assert model.num_parameters() == parameter_count(config)
    assert model(torch.randint(0, 64, (2, 5))).shape == (2, 5, 64)
    assert "n_experts=8" in repr(config) and "moe=" not in repr(DecoderConfig.llama_like())


def test_gpt_oss_and_qwen3_next_expert_fields_reach_the_modules():
    from attn_core.modules.mlp import ClampedSwiGLU

    gpt_oss = DecoderConfig.llama_like(
        n_layers=2, bias=True, moe=MoE(n_experts=4, expert_swiglu_limit=7.0, router_bias=True)
    )
    model = decoder(gpt_oss)
    assert all(type(e) is ClampedSwiGLU and e.limit == 7.0 for b in model.blocks for e in b.mlp.experts)
    assert model.num_parameters() == parameter_count(gpt_oss)
    qwen3_next = DecoderConfig.llama_like(
        n_layers=2,
        moe=MoE(
            n_experts=4,
            moe_d_ff=8,
            n_shared_experts=1,
            shared_expert_d_ff=12,
            shared_expert_gate=True,
            first_dense_layers=1,
        ),
    )
    model = decoder(qwen3_next)
    m = model.blocks[1].mlp
    assert (m.shared.d_ff, m.shared_gate.weight.shape) == (12, (1, 64))
    assert model.num_parameters() == parameter_count(qwen3_next)
    olmo = DecoderConfig.llama_like(n_layers=2, n_kv_heads=2, qk_norm="all_heads", norm_position="post_sublayer")
    assert decoder(olmo).num_parameters() == parameter_count(olmo)  # (H + H_kv)·D gains per layer


@pytest.mark.parametrize(
    "kw,message",
    [
        (
            dict(moe={"n_experts": 4, "shared_expert_gate": True}),
            "shared_expert_gate=True configures the shared experts",
        ),
        (dict(moe={"n_experts": 4, "shared_expert_d_ff": 8}), "shared_expert_d_ff=8 configures the shared experts"),
        (dict(moe={"n_experts": 4, "expert_swiglu_limit": 0.0}), "expert_swiglu_limit"),
        (dict(moe={"n_experts": 4, "experts_per_token": 0}), r"experts_per_token must be >= 1"),
        (dict(moe={"n_experts": 4, "experts_per_token": 5}), r"experts_per_token=5 must be in 1..n_experts=4"),
        (dict(mlp="gelu", moe={"n_experts": 4}), "the experts are SwiGLUs"),
        (
            dict(moe={"n_experts": 4, "first_dense_layers": 2}),
            "first_dense_layers=2, moe_layer_step=1 leave no mixture-of-experts layer",
        ),
        (dict(moe={"n_experts": 4, "router_scoring": "relu"}), "scoring"),
        (dict(moe={"n_experts": 4, "router_groups": 3}), "n_experts=4 is not divisible by router_groups=3"),
        (dict(moe={"n_experts": 4, "capacity_factor": 0.0}), "capacity_factor"),
        (dict(moe={"n_experts": 4, "n_shared_experts": -1}), "n_shared_experts"),
    ],
)
def test_moe_bad_fields(kw, message):
    with pytest.raises(ValueError, match=message):
        DecoderConfig.llama_like(**kw)


# --------------------------------------------------------------------------- issue 28: scaled RoPE, NoPE layers
def test_rope_scaling_and_rope_layers_reach_the_layers():
    base = FIELD_BASES["mha"]
    yarn = YarnScaling(factor=4.0, original_max_position=8)
    model = decoder(
        dataclasses.replace(
            base, positions=dataclasses.replace(base.positions, rope_scaling=yarn, rope_layers=(False, True))
        )
    )
    assert model.rope.scaling is yarn
    assert model.blocks[0].attn.rope is None and model.blocks[1].attn.rope is model.rope
    assert [model.config.layer_has_rope(i) for i in range(2)] == [False, True]
    # Only the sliding layers' own base is left unscaled (Gemma 3's local layers).
    sliding = decoder(
        dataclasses.replace(
            FIELD_BASES["mha-sliding"],
            positions=dataclasses.replace(
                FIELD_BASES["mha-sliding"].positions, sliding_rope_base=100.0, rope_scaling=yarn
            ),
        )
    )
    assert sliding.blocks[0].attn.rope.scaling is None and sliding.blocks[1].attn.rope.scaling is yarn
    # rope_full_layers=False and rope_layers both remove RoPE: a layer keeps it only where both allow it.
    both = dataclasses.replace(
        FIELD_BASES["mha-sliding"],
        positions=dataclasses.replace(
            FIELD_BASES["mha-sliding"].positions, rope_full_layers=False, rope_layers=(False, True)
        ),
    )
    assert [both.layer_has_rope(i) for i in range(2)] == [False, False]
    assert [b.attn.rope for b in decoder(both).blocks] == [None, None]
    # Defaults do not print; what differs from them does.
    assert "rope_scaling" not in repr(base) and "rope_layers" not in repr(base)
    assert "rope_layers=(False, True)" in repr(model.config)
    # A list (read back from JSON) is stored as a tuple.
    assert dataclasses.replace(
        base, positions=dataclasses.replace(base.positions, rope_layers=[True, False])
    ).positions.rope_layers == (True, False)


@pytest.mark.parametrize(
    "change,error,message",
    [
        (
            dict(positions={"positional": "rope", "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}),
            TypeError,
            "rope_scaling must be an attn_core.RopeScaling or None, got dict",
        ),
        (
            dict(positions={"rope_scaling": LinearScaling(factor=2.0), "positional": "none", "rope_base": 10000.0}),
            ValueError,
            r"rope_scaling=LinearScaling\(factor=2.0\) needs positional='rope'",
        ),
        (
            dict(
                positions={
                    "positional": "rope",
                    "rope_scaling": LongRopeScaling(
                        short_factor=(1.0,) * 3, long_factor=(2.0,) * 3, original_max_position=8, factor=4.0
                    ),
                }
            ),
            ValueError,
            "short_factor",
        ),
        (
            dict(positions={"positional": "rope", "rope_layers": (True,)}),
            ValueError,
            r"rope_layers must give True \(RoPE\) or False",
        ),
        (dict(positions={"positional": "rope", "rope_layers": (True, 0)}), TypeError, r"rope_layers\[1\]"),
        (
            dict(block="sas", n_kv_heads=None, positions={"positional": "rope", "rope_layers": (True, False)}),
            ValueError,
            r"rope_layers=\(True, False\): options of the standard blocks' multi-head attention",
        ),
        (
            dict(
                attention="mla",
                n_kv_heads=None,
                d_latent=16,
                positions={"positional": "rope", "rope_scaling": LinearScaling(factor=2.0)},
                indexer={"index_n_heads": 2, "index_head_dim": 8},
            ),
            ValueError,
            "the indexer's RoPE is not scaled",
        ),
        (
            dict(
                attention="mla",
                n_kv_heads=None,
                d_latent=16,
                positions={"positional": "rope", "rope_layers": (True, False)},
            ),
            ValueError,
            "need attention='mha' and block='standard', got attention='mla'",
        ),
    ],
)
def test_rope_scaling_and_rope_layers_bad_values(change, error, message):
    with pytest.raises(error, match=message):
        dataclasses.replace(FIELD_BASES["mha"], **change)
