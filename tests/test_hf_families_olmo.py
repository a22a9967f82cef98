"""attn_core.hf.convert with OLMo 2 and OLMo 3 (issue 28): whole tiny models, float64, and their two mechanisms.

OLMo's block is ``x + norm(f(x))`` (``norm_position="post_sublayer"``) and its QK-norm spans
all heads (``qk_norm="all_heads"``, :class:`~attn_core.modules.norms.HeadsRMSNorm`); OLMo 3 adds sliding
windows per ``layer_types`` and YaRN in its full layers only. Hugging Face's float32 steps
(RMSNorm input, RoPE tables) are lifted to float64 by :func:`test_rope_scaling.hf_in_float64`.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

pytest.importorskip("transformers", minversion="5.0")

from test_hf_convert import IDX, SMALL, assert_greedy_generation_matches  # noqa: E402
from test_parity_hf import EXACT, causal_bias, max_diff, seeded, x_and_positions  # noqa: E402
from test_positions_rope_scaling import hf_in_float64  # noqa: E402
from transformers import Olmo2Config, Olmo2ForCausalLM, Olmo3Config, Olmo3ForCausalLM  # noqa: E402
from transformers.models.olmo2 import modeling_olmo2  # noqa: E402
from transformers.models.olmo3 import modeling_olmo3  # noqa: E402

from attn_core import DecoderConfig, DecoderLM, MultiHeadAttention, RotaryEmbedding  # noqa: E402
from attn_core.hf.configs import config_from_hf  # noqa: E402
from attn_core.hf.convert import copy_attention, from_hf  # noqa: E402
from attn_core.hf.families import NOT_CONVERTED  # noqa: E402
from attn_core.model.blocks import SandwichBlock  # noqa: E402
from attn_core.modules.norms import HeadsRMSNorm, RMSNorm  # noqa: E402
from attn_core.positions.rope_scaling import YarnScaling  # noqa: E402

F64 = torch.float64
NO_SPECIAL_TOKENS = dict(bos_token_id=None, eos_token_id=None, pad_token_id=None)
MODULES = (modeling_olmo2, modeling_olmo3)
YARN = {"rope_type": "yarn", "rope_theta": 5e5, "factor": 4.0, "original_max_position_embeddings": 8}


def olmo2(seed: int = 3, **kw) -> Olmo2ForCausalLM:
    base = dict(SMALL, rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 5e5})
    return seeded(Olmo2ForCausalLM(Olmo2Config(**{**base, **NO_SPECIAL_TOKENS, **kw})), seed=seed)


def olmo3(seed: int = 3, **kw) -> Olmo3ForCausalLM:
    """Three sliding layers (window 3 < the 9 tokens of IDX) and a full one, as OLMo 3's every fourth."""
    base = dict(SMALL, num_hidden_layers=4, rms_norm_eps=1e-6, sliding_window=3)
    return seeded(Olmo3ForCausalLM(Olmo3Config(**{**base, **NO_SPECIAL_TOKENS, **kw})), seed=seed)


def olmo3_yarn(seed: int = 3) -> Olmo3ForCausalLM:
    """YaRN in the full layer (OLMo 3's ``rope_scaling`` goes there), plain RoPE in the sliding ones."""
    rope = {"full_attention": dict(YARN), "sliding_attention": {"rope_type": "default", "rope_theta": 5e5}}
    return olmo3(seed, rope_parameters=rope, max_position_embeddings=32)  # 32 = 4 · 8: YaRN's own length


CASES = {
    "olmo2": lambda seed: olmo2(seed),
    "olmo2-mha-tied-bias": lambda seed: olmo2(seed, num_key_value_heads=4, tie_word_embeddings=True,
                                              attention_bias=True),
    "olmo3": lambda seed: olmo3(seed),
    "olmo3-yarn": olmo3_yarn,
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_olmo_gives_the_same_logits(case):
    with hf_in_float64(*MODULES):
        hf = CASES[case](3)
        ours = from_hf(hf)
        expected = hf(IDX).logits
    c = ours.config
    assert (c.norm_position, c.qk_norm) == ("post_sublayer", "all_heads")
    diff = max_diff(ours(IDX), expected)
    print(f"{case}: max |logit difference| = {diff:.2e}")
    assert diff < EXACT
    # The span of the QK-norm matters: per-head norms (the gain's first D values) give other logits.
    per_head = DecoderLM(dataclasses.replace(c, qk_norm=True)).to(F64).eval()
    state = {k: (v[: c.resolved_head_dim] if k.endswith(("q_norm.weight", "k_norm.weight")) else v)
             for k, v in ours.state_dict().items()}  # fmt: skip
    per_head.load_state_dict(state)
    assert max_diff(per_head(IDX), expected) > 1e-3


def test_olmo3_reads_windows_and_yarn_per_layer_type():
    c = config_from_hf(olmo3_yarn().config)
    assert c.pattern.layer_types == ("sliding", "sliding", "sliding", "full") and c.pattern.sliding_window == 3
    assert isinstance(c.positions.rope_scaling, YarnScaling) and (
        c.positions.rope_scaling.factor,
        c.positions.rope_base,
    ) == (4.0, 5e5)
    assert c.positions.sliding_rope_base == 5e5  # the sliding layers' own, unscaled RoPE
    ours = DecoderLM(c)
    assert ours.blocks[3].attn.rope.scaling is c.positions.rope_scaling and ours.blocks[0].attn.rope.scaling is None
    assert [b.attn.window for b in ours.blocks] == [3, 3, 3, None]


@pytest.mark.parametrize("case", sorted(CASES))
def test_olmo_greedy_generation_with_caches(case):
    """17 positions: past the window (rolling caches) and past YaRN's original length 8."""
    with hf_in_float64(*MODULES):
        assert_greedy_generation_matches(CASES[case](4))


def test_olmo3_refuses_scaling_in_its_sliding_layers():
    cfg = olmo3().config
    cfg.rope_parameters = {"full_attention": {"rope_type": "default", "rope_theta": 5e5},
                           "sliding_attention": dict(YARN)}  # fmt: skip
    with pytest.raises(ValueError, match="olmo3 model exactly: rope scaling 'yarn' in the sliding_attention layers"):
        config_from_hf(cfg)
    assert "olmo2" not in NOT_CONVERTED


# --------------------------------------------------------------------------- the mechanisms
def test_heads_rmsnorm_is_olmo2s_norm_of_the_whole_projection():
    torch.manual_seed(0)
    H, D = 3, 4
    hf = modeling_olmo2.Olmo2RMSNorm(H * D, eps=1e-6).to(F64)
    with torch.no_grad():
        hf.weight.copy_(torch.randn(H * D, dtype=F64))
    ours = HeadsRMSNorm(H, D, eps=1e-6).to(F64)
    with torch.no_grad():
        ours.weight.copy_(hf.weight)
    flat = torch.randn(2, 5, H * D, dtype=F64)  # (B, T, H·D): the projection's output
    split = flat.view(2, 5, H, D).transpose(1, 2)  # (B, H, T, D)
    with hf_in_float64(modeling_olmo2):  # its float32 cast lifted
        expected = hf(flat).view(2, 5, H, D).transpose(1, 2)
    assert max_diff(ours(split), expected) < 1e-14
    # Not a per-head norm: scaling one head changes the others' output.
    louder = split.clone()
    louder[:, 0] *= 10
    assert max_diff(ours(louder)[:, 1:], ours(split)[:, 1:]) > 1e-2
    per_head = RMSNorm(D)(split)
    assert max_diff(per_head, ours(split) / ours.weight.view(H, 1, D)) > 1e-2
    torch.autograd.gradcheck(ours, (split[:1, :, :2].clone().requires_grad_(),))


@pytest.mark.parametrize("n_kv_heads", [4, 2], ids=["MHA", "GQA"])
def test_olmo2_attention_layer_and_decoder_layer(n_kv_heads):
    """copy_attention into MultiHeadAttention(qk_norm="all_heads"), and the post-sub-layer block, one layer each."""
    config = Olmo2Config(**dict(SMALL, num_key_value_heads=n_kv_heads, rms_norm_eps=1e-6,
                                rope_parameters={"rope_type": "default", "rope_theta": 5e5}))  # fmt: skip
    x, pos = x_and_positions(T=7)
    with hf_in_float64(modeling_olmo2):
        layer = seeded(modeling_olmo2.Olmo2DecoderLayer(config, layer_idx=0))
        cos_sin = modeling_olmo2.Olmo2RotaryEmbedding(config)(x, pos)
        expected_attn, _ = layer.self_attn(x, position_embeddings=cos_sin, attention_mask=causal_bias(7))
        expected = layer(x, position_embeddings=cos_sin, attention_mask=causal_bias(7))
    ours = SandwichBlock(
        32, 4, n_kv_heads=n_kv_heads, d_ff=48, mlp="swiglu", norm="rmsnorm", norm_position="post_sublayer",
        norm_eps=1e-6, qk_norm="all_heads", rope=RotaryEmbedding(8, base=5e5), causal=True,
    ).to(F64)  # fmt: skip
    copy_attention(ours.attn, layer.self_attn)
    for name in ("gate_proj", "up_proj", "down_proj"):
        getattr(ours.mlp, name).weight.data.copy_(getattr(layer.mlp, name).weight)
    ours.attn_post_norm.weight.data.copy_(layer.post_attention_layernorm.weight)
    ours.mlp_post_norm.weight.data.copy_(layer.post_feedforward_layernorm.weight)
    assert max_diff(ours.attn(x), expected_attn) < EXACT
    assert max_diff(ours(x), expected) < EXACT
    # A per-head QK-norm layer cannot take these gains: copy_attention names the shapes.
    with pytest.raises(ValueError, match="shape mismatch"):
        copy_attention(MultiHeadAttention(32, 4, n_kv_heads=n_kv_heads, qk_norm=True, causal=True).to(F64),
                       layer.self_attn)  # fmt: skip


def test_heads_rmsnorm_bad_input():
    norm = HeadsRMSNorm(2, 4)
    with pytest.raises(ValueError, match="n_heads"):
        norm(torch.randn(1, 3, 5, 4))
    with pytest.raises(ValueError, match="head_dim"):
        norm(torch.randn(1, 2, 5, 3))
    with pytest.raises(ValueError, match="n_heads"):
        HeadsRMSNorm(0, 4)


@pytest.mark.parametrize(
    "bad,error", [(1, TypeError), (0, TypeError), (None, TypeError), ("all", ValueError), ("per_head", ValueError)]
)
def test_qk_norm_values_are_checked(bad, error):
    with pytest.raises(error, match=f"qk_norm must be .* got qk_norm={bad!r}"):
        MultiHeadAttention(8, 2, qk_norm=bad)
    with pytest.raises(error, match=f"got qk_norm={bad!r}"):
        DecoderConfig.llama_like(vocab_size=11, qk_norm=bad)


def test_all_heads_qk_norm_in_attention_sizes():
    attn = MultiHeadAttention(16, 4, n_kv_heads=2, qk_norm="all_heads", causal=True)
    assert isinstance(attn.q_norm, HeadsRMSNorm) and attn.q_norm.weight.shape == (16,)
    assert attn.k_norm.weight.shape == (8,)  # H_kv·D
    assert attn(torch.randn(2, 5, 16)).shape == (2, 5, 16)


def test_post_sublayer_block_is_x_plus_norm_of_f_x():
    torch.manual_seed(0)
    block = SandwichBlock(16, 4, mlp="swiglu", norm="rmsnorm", norm_position="post_sublayer").double()
    assert isinstance(block, SandwichBlock)
    assert isinstance(block.attn_norm, torch.nn.Identity) and isinstance(block.mlp_norm, torch.nn.Identity)
    with torch.no_grad():
        for norm in (block.attn_post_norm, block.mlp_post_norm):
            norm.weight.copy_(torch.rand(16, dtype=F64) + 0.5)
    x = torch.randn(2, 5, 16, dtype=F64)
    h = x + block.attn_post_norm(block.attn(x))
    expected = h + block.mlp_post_norm(block.mlp(h))
    assert max_diff(block(x), expected) < 1e-14
    assert not any(k.startswith(("attn_norm", "mlp_norm")) for k in block.state_dict())
    with pytest.raises(ValueError, match="norm_position='sandwich' or 'post_sublayer', got norm_position='pre'"):
        SandwichBlock(16, 4, norm_position="pre")
    with pytest.raises(ValueError, match="norm_position"):
        DecoderConfig.llama_like(vocab_size=11, norm_position="post_sub")
