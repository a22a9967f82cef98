"""gpt-oss (``gpt_oss``): learned sinks, biases everywhere, clamped experts with a router bias.

``attention_sinks``, ``bias``; windows per ``layer_types``; YaRN as any LLaMA scaling. Its
experts (``GptOssExperts``) are SwiGLU experts clamped at ``swiglu_limit`` with ``alpha`` 1.702,
routed by top-k logits then softmax with a router bias, and stored transposed with biases, gate
and up *interleaved*: ``gate_up_proj`` ``(E, d, 2f)`` whose even columns are the gate's and odd
ones the up projection's, ``gate_up_proj_bias`` ``(E, 2f)`` likewise, ``down_proj`` ``(E, f, d)``,
``down_proj_bias`` ``(E, d)``.
"""

from __future__ import annotations

from .base import Family, refuse, windows_by_layer_type

__all__ = ["GPT_OSS", "gpt_oss_expert", "gpt_oss_fields", "gpt_oss_moe", "owns_gpt_oss_experts"]


def gpt_oss_fields(hf) -> dict:
    """Learned sinks in every layer, biases everywhere."""
    return dict(attention_sinks=True, bias=True)


def gpt_oss_moe(hf) -> dict:
    """Clamped SwiGLU experts with biases, top-k logits then softmax, a router bias."""
    if hf.swiglu_alpha != 1.702:
        refuse(hf.model_type, f"swiglu_alpha={hf.swiglu_alpha} (DecoderConfig's clamped experts have alpha 1.702)")
    return dict(
        n_experts=hf.num_local_experts, experts_per_token=hf.num_experts_per_tok, moe_d_ff=hf.intermediate_size,
        router_topk_first=True, router_bias=True, expert_swiglu_limit=float(hf.swiglu_limit),
    )  # fmt: skip


def owns_gpt_oss_experts(experts) -> bool:
    """gpt-oss's experts are the ones with a bias on their stacked gate/up projection."""
    return getattr(experts, "gate_up_proj_bias", None) is not None


def gpt_oss_expert(experts, e: int) -> tuple:
    """Expert ``e``'s gate, up, down weights ``(f, d)``, ``(f, d)``, ``(d, f)`` and their biases (``x @ W + b``)."""
    w, b = experts.gate_up_proj[e], experts.gate_up_proj_bias[e]  # (d, 2f), (2f,)
    bias = dict(gate=b[0::2], up=b[1::2], down=experts.down_proj_bias[e])
    return w[:, 0::2].t(), w[:, 1::2].t(), experts.down_proj[e].t(), bias


GPT_OSS = Family(
    "gpt_oss", windows=windows_by_layer_type, fields=gpt_oss_fields, moe=gpt_oss_moe,
    owns_experts=owns_gpt_oss_experts, expert=gpt_oss_expert,
)  # fmt: skip
