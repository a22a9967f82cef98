"""Llama 4's text model (issue 28): what converts already, and the refusal that names the rest.

Its mixture of experts (``Llama4TextMoe``: top-1 by logit, the token scaled by the sigmoid of its
logit *before* the expert, a shared expert beside) is ``MixtureOfExperts(scoring="sigmoid",
n_shared=1, weight_inputs=True)``, held equal to Hugging Face's block in float64 (copied by
:func:`~attn_core.convert.copy_moe`). Its QK-norm (an L2 norm without a gain, after RoPE) equals a
unit-gain per-head RMSNorm before RoPE: a rotation keeps a vector's length. What
:class:`~attn_core.MultiHeadAttention` does not compute (chunked attention, the NoPE layers'
position-dependent temperature) keeps :func:`~attn_core.convert.from_hf` refusing the model.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers", minversion="5.0")
pytest.importorskip("transformers.models.llama4")

from test_parity_hf import EXACT, max_diff, seeded  # noqa: E402
from test_rope_scaling import hf_in_float64  # noqa: E402
from transformers import Llama4TextConfig  # noqa: E402
from transformers.models.llama4 import modeling_llama4 as hf_llama4  # noqa: E402

from attn_core import RMSNorm, RotaryEmbedding  # noqa: E402
from attn_core.convert import config_from_hf, copy_moe  # noqa: E402
from attn_core.moe import MixtureOfExperts  # noqa: E402

F64 = torch.float64


def llama4_config(**kw) -> Llama4TextConfig:
    base = dict(
        hidden_size=16, intermediate_size=12, intermediate_size_mlp=24, num_local_experts=4, num_experts_per_tok=1,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=8, vocab_size=31,
    )  # fmt: skip
    return Llama4TextConfig(**{**base, **kw})


def moe_pair(k: int = 1):
    config = llama4_config(num_experts_per_tok=k)
    with hf_in_float64(hf_llama4):  # the router's sigmoid in float32, lifted
        hf = seeded(hf_llama4.Llama4TextMoe(config), seed=1)
    ours = MixtureOfExperts(16, 4, k, d_ff=12, n_shared=1, scoring="sigmoid", weight_inputs=True).to(F64)
    copy_moe(ours, hf)
    return hf, ours


@pytest.mark.parametrize("k", [1, 2], ids=["top-1", "top-2"])
def test_llama4_moe_equals_hugging_face(k):
    hf, ours = moe_pair(k)
    x = torch.randn(2, 7, 16, dtype=F64, generator=torch.Generator().manual_seed(0))
    with hf_in_float64(hf_llama4):
        expected, _ = hf(x)
    diff = max_diff(ours(x).reshape(-1, 16), expected)
    print(f"Llama 4 MoE (top-{k}): max |difference| = {diff:.2e}")
    assert diff < EXACT
    # Weighting the inputs is not weighting the outputs (a SwiGLU is not linear).
    outputs = MixtureOfExperts(16, 4, k, d_ff=12, n_shared=1, scoring="sigmoid").to(F64)
    outputs.load_state_dict(ours.state_dict())
    assert max_diff(outputs(x).reshape(-1, 16), expected) > 1e-3


def test_weight_inputs_by_hand_and_bad_input():
    torch.manual_seed(0)
    moe = MixtureOfExperts(8, 3, 1, d_ff=6, scoring="sigmoid", weight_inputs=True).double()
    x = torch.randn(5, 8, dtype=F64)
    r = moe.router(x)
    by_hand = torch.stack([moe.experts[int(e)](x[i] * r.weights[i, 0]) for i, e in enumerate(r.experts[:, 0])])
    assert max_diff(moe(x), by_hand) < 1e-14
    torch.autograd.gradcheck(moe, (x[:2].clone().requires_grad_(),))
    with pytest.raises(TypeError, match="weight_inputs"):
        MixtureOfExperts(8, 3, 1, weight_inputs=1)


def test_l2_qk_norm_after_rope_is_a_unit_rmsnorm_before_it():
    """Llama 4 normalises q and k after rotating them; the rotation keeps their length, so the order does not
    matter: attn_core's per-head QK-norm (before RoPE) with gains of 1 computes it."""
    x = torch.randn(2, 4, 9, 8, dtype=F64, generator=torch.Generator().manual_seed(1))  # (B, H, T, D)
    rope = RotaryEmbedding(8, base=5e5, layout="interleaved")  # Llama 4 rotates neighbouring pairs
    with hf_in_float64(hf_llama4):
        expected = hf_llama4.Llama4TextL2Norm(eps=1e-6)(rope(x))
    assert max_diff(rope(RMSNorm(8, eps=1e-6).double()(x)), expected) < 1e-14


def test_from_hf_refuses_llama4_naming_what_attention_lacks():
    with pytest.raises(ValueError, match=r"llama4_text model exactly: .*attend in chunks .*temperature"):
        config_from_hf(llama4_config())
