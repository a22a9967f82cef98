"""Copying Hugging Face weights into attn_core modules of the same shapes.

The module-level copies :func:`~attn_core.hf.convert.from_hf` uses for every layer:
:func:`copy_weights` (a linear layer, embedding or tensor), :func:`copy_norm` (with Gemma's
``1 + weight`` gains), :func:`copy_mlp` (SwiGLU, GeGLU, Phi-3's fused ``gate_up_proj``),
:func:`copy_moe` (router, experts and shared experts of Mixtral, Qwen3-MoE, DeepSeek-V3,
Qwen3-Next, gpt-oss and Llama 4), :func:`copy_gated_deltanet` (Qwen3-Next's linear layers)
and :func:`copy_indexer` (DeepSeek-V3.2's lightning indexer). Each checks the shapes it
copies and names what differs.

Shape legend:
    d        ``d_model``; ``E`` experts, ``f`` an expert's hidden width
"""

from __future__ import annotations

import torch
from torch import nn

from ..checks import check_instance
from ..layers.gated_deltanet import GatedDeltaNet
from ..layers.indexer import LightningIndexer
from ..modules.moe import MixtureOfExperts
from .families import experts_family, family_of

__all__ = ["copy_gated_deltanet", "copy_indexer", "copy_mlp", "copy_moe", "copy_norm", "copy_weights"]


@torch.no_grad()
def copy_weights(
    dst: nn.Linear | nn.Module, src: nn.Module | torch.Tensor, *, bias: torch.Tensor | None = None
) -> None:
    """Copy a weight (and bias; zeros where the source has none) into ``dst``, checking shapes."""
    weight = src if isinstance(src, torch.Tensor) else src.weight
    if dst.weight.shape != weight.shape:
        raise ValueError(f"shape mismatch: {tuple(weight.shape)} into {tuple(dst.weight.shape)}")
    dst.weight.copy_(weight)
    if getattr(dst, "bias", None) is not None:
        src_bias = bias if bias is not None else getattr(src, "bias", None)
        if src_bias is None:
            dst.bias.zero_()
        else:
            dst.bias.copy_(src_bias)


@torch.no_grad()
def copy_norm(dst: nn.Module, src: nn.Module, offset: float) -> None:
    """Copy a norm's gain: its stored weight, plus ``offset`` (1 for Gemma's ``(1 + weight)`` RMSNorms)."""
    copy_weights(dst, src.weight + offset if offset else src.weight)


def copy_mlp(ours: nn.Module, hf_mlp: nn.Module) -> None:
    """A gated MLP: ``gate_proj``, ``up_proj``, ``down_proj`` (a family's other layout seen as these: its
    ``mlp_view``, e.g. Phi-3's fused ``gate_up_proj`` split)."""
    hf_mlp = family_of(hf_mlp).mlp_view(hf_mlp)
    for name in ("gate_proj", "up_proj", "down_proj"):
        copy_weights(getattr(ours, name), getattr(hf_mlp, name))


@torch.no_grad()
def copy_moe(ours: MixtureOfExperts, hf: nn.Module) -> MixtureOfExperts:
    """Copy a Hugging Face sparse-MoE block into :class:`~attn_core.MixtureOfExperts` (Mixtral, Qwen3-MoE,
    DeepSeek-V3, gpt-oss, Qwen3-Next, Llama 4).

    The router is ``gate.weight`` ``(E, d)`` (gpt-oss's and Llama 4's: ``router``, with a bias
    in gpt-oss); DeepSeek-V3's ``gate.e_score_correction_bias`` becomes the ``selection_bias``,
    its ``shared_experts`` the ``shared`` SwiGLU; Qwen3-Next's and Llama 4's one ``shared_expert``
    too, and Qwen3-Next's ``shared_expert_gate`` ``(1, d)`` the ``shared_gate``. The experts are
    read in the layout of their family (:func:`~attn_core.hf.families.experts_family`): the
    stacked or listed layouts of :func:`~attn_core.hf.families.base.stacked_or_listed_expert`,
    gpt-oss's interleaved one (:func:`~attn_core.hf.families.gpt_oss.gpt_oss_expert`) or Llama 4's
    transposed one (:func:`~attn_core.hf.families.llama4.llama4_expert`, into a
    ``MixtureOfExperts(scoring="sigmoid", n_shared=1, weight_inputs=True)``).

    Raises:
        ValueError: A shape that does not match (another number of experts, widths), or
            shared experts (or their gate) on one side only.
    """
    router = getattr(hf, "router", None) if getattr(hf, "gate", None) is None else hf.gate  # gpt-oss, Llama 4: router
    copy_weights(ours.router.proj, router)
    correction = getattr(router, "e_score_correction_bias", None)
    if correction is not None:
        ours.router.selection_bias.copy_(correction)
    experts = hf.experts
    family = experts_family(experts)  # gpt-oss's and Llama 4's own layouts; the others are LLaMA's
    if family.experts_weigh_inputs != ours.weight_inputs:  # Llama 4 scales each token before its expert
        weighs = family.experts_weigh_inputs
        raise ValueError(
            f"{type(experts).__name__} {'weights its inputs' if weighs else 'weights its outputs'}: build the "
            f"MixtureOfExperts with weight_inputs={weighs}"
        )
    for e, expert in enumerate(ours.experts):
        gate, up, down, bias = family.expert(experts, e)
        copy_weights(expert.gate_proj, gate, bias=bias.get("gate"))
        copy_weights(expert.up_proj, up, bias=bias.get("up"))
        copy_weights(expert.down_proj, down, bias=bias.get("down"))
    shared = getattr(hf, "shared_experts", None)  # DeepSeek's
    shared = getattr(hf, "shared_expert", None) if shared is None else shared  # Qwen3-Next's
    if (shared is None) != (ours.shared is None):
        raise ValueError(f"shared experts: Hugging Face has {shared is not None}, ours {ours.shared is not None}")
    if shared is not None:
        for name in ("gate_proj", "up_proj", "down_proj"):
            copy_weights(getattr(ours.shared, name), getattr(shared, name))
    gate = getattr(hf, "shared_expert_gate", None)
    if (gate is None) != (ours.shared_gate is None):
        raise ValueError(
            f"shared expert gate: Hugging Face has {gate is not None}, ours {ours.shared_gate is not None}"
        )
    if gate is not None:
        copy_weights(ours.shared_gate, gate)
    return ours


def copy_gated_deltanet(ours: GatedDeltaNet, hf: nn.Module) -> GatedDeltaNet:
    """Copy the weights of Hugging Face's ``Qwen3NextGatedDeltaNet`` into ``ours`` (never imports transformers).

    Hugging Face fuses the projections per query/key head: ``in_proj_qkvz`` rows are, for
    each of the ``H_k`` heads, ``[q (D_k), k (D_k), v (r·D_v), z (r·D_v)]``, and
    ``in_proj_ba`` rows ``[b (r), a (r)]``; they are unfused here into our six projections.
    The convolution, ``A_log``, ``dt_bias``, the norm's gain and ``out_proj`` copy as they are.

    Raises:
        TypeError: ``ours`` is not a :class:`GatedDeltaNet`.
        ValueError: The two layers' sizes differ (the message names both).
    """
    check_instance("ours", ours, GatedDeltaNet)
    sizes = {
        "d_model": (ours.d_model, hf.hidden_size), "n_heads": (ours.n_heads, hf.num_k_heads),
        "head_dim": (ours.head_dim, hf.head_k_dim), "n_value_heads": (ours.n_value_heads, hf.num_v_heads),
        "value_head_dim": (ours.value_head_dim, hf.head_v_dim), "conv_size": (ours.conv_size, hf.conv_kernel_size),
    }  # fmt: skip
    for name, (mine, theirs) in sizes.items():
        if mine != theirs:
            raise ValueError(f"{name} differs: ours has {name}={mine}, the Hugging Face layer {theirs}")
    H_k, D_k, D_v = ours.n_heads, ours.head_dim, ours.value_head_dim
    r = ours.n_value_heads // H_k
    with torch.no_grad():
        fused = hf.in_proj_qkvz.weight.reshape(H_k, 2 * D_k + 2 * r * D_v, ours.d_model)  # rows grouped per k-head
        q, k, v, z = fused.split([D_k, D_k, r * D_v, r * D_v], dim=1)
        for proj, w in ((ours.q_proj, q), (ours.k_proj, k), (ours.v_proj, v), (ours.gate_proj, z)):
            proj.weight.copy_(w.reshape(-1, ours.d_model))  # (H·width, d_model), heads in order
        b, a = hf.in_proj_ba.weight.reshape(H_k, 2 * r, ours.d_model).split([r, r], dim=1)
        ours.beta_proj.weight.copy_(b.reshape(-1, ours.d_model))  # (H_v, d_model)
        ours.decay_proj.weight.copy_(a.reshape(-1, ours.d_model))
        ours.conv.weight.copy_(hf.conv1d.weight)  # (C_conv, 1, K), channels [q | k | v] in both
        ours.A_log.copy_(hf.A_log)
        ours.dt_bias.copy_(hf.dt_bias)
        ours.norm.weight.copy_(hf.norm.weight)
        ours.out_proj.weight.copy_(hf.out_proj.weight)
    return ours


def copy_indexer(ours: LightningIndexer, hf: nn.Module) -> LightningIndexer:
    """Copy Hugging Face's ``DeepseekV32Indexer`` into a :class:`~attn_core.LightningIndexer` of the same sizes.

    Names: ``wq_b`` -> ``q_proj``, ``wk`` -> ``k_proj``, ``k_norm`` (a LayerNorm with bias) ->
    ``k_norm``, ``weights_proj`` -> ``weights_proj``.

    Raises:
        TypeError: ``ours`` is not a :class:`~attn_core.LightningIndexer`.
        ValueError: A shape that differs (another head count or width).
    """
    check_instance("ours", ours, LightningIndexer)
    copy_weights(ours.q_proj, hf.wq_b)
    copy_weights(ours.k_proj, hf.wk)
    copy_weights(ours.k_norm, hf.k_norm)
    copy_weights(ours.weights_proj, hf.weights_proj)
    return ours
