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
from .families import unfused_mlp

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
    """A gated MLP: ``gate_proj``, ``up_proj``, ``down_proj`` (Phi-3's fused ``gate_up_proj`` seen split)."""
    hf_mlp = unfused_mlp(hf_mlp)
    for name in ("gate_proj", "up_proj", "down_proj"):
        copy_weights(getattr(ours, name), getattr(hf_mlp, name))


@torch.no_grad()
def copy_moe(ours: MixtureOfExperts, hf: nn.Module) -> MixtureOfExperts:
    """Copy a Hugging Face sparse-MoE block into :class:`~attn_core.MixtureOfExperts` (Mixtral, Qwen3-MoE,
    DeepSeek-V3, gpt-oss, Qwen3-Next).

    Transformers 5 stacks the experts: ``experts.gate_up_proj`` ``(E, 2f, d)`` (the gate's
    rows first) and ``experts.down_proj`` ``(E, d, f)``; 4.x has a list of experts with
    ``gate_proj/up_proj/down_proj`` (Qwen3-MoE, DeepSeek) or ``w1/w3/w2`` (Mixtral). The
    router is ``gate.weight`` ``(E, d)``; DeepSeek-V3's ``gate.e_score_correction_bias``
    becomes the ``selection_bias``, its ``shared_experts`` the ``shared`` SwiGLU.

    gpt-oss (``GptOssMLP``): the router is ``router`` (weight and bias), and its experts are
    stored transposed with biases, gate and up *interleaved*: ``gate_up_proj`` ``(E, d, 2f)``
    whose even columns are the gate's and odd ones the up projection's,
    ``gate_up_proj_bias`` ``(E, 2f)`` likewise, ``down_proj`` ``(E, f, d)``, ``down_proj_bias``
    ``(E, d)``. Qwen3-Next (``Qwen3NextSparseMoeBlock``): one ``shared_expert`` and its
    ``shared_expert_gate`` ``(1, d)``. Llama 4 (``Llama4TextMoe``, into a ``MixtureOfExperts(scoring=
    "sigmoid", n_shared=1, weight_inputs=True)``): the router is ``router``, the experts
    ``gate_up_proj`` ``(E, d, 2f)`` (the gate's columns first) and ``down_proj`` ``(E, f, d)``.

    Raises:
        ValueError: A shape that does not match (another number of experts, widths), or
            shared experts (or their gate) on one side only.
    """
    router = getattr(hf, "router", None) if getattr(hf, "gate", None) is None else hf.gate
    copy_weights(ours.router.proj, router)
    correction = getattr(router, "e_score_correction_bias", None)
    if correction is not None:
        ours.router.selection_bias.copy_(correction)
    experts = hf.experts
    stacked = getattr(experts, "gate_up_proj", None)
    interleaved = getattr(experts, "gate_up_proj_bias", None) is not None  # gpt-oss: x @ W + b, columns alternate
    # Llama 4: x @ W too, (E, d, 2f) with the gate's f columns first (its own class, no bias, no flag).
    transposed = not interleaved and type(experts).__name__ == "Llama4TextExperts"
    if transposed != ours.weight_inputs:  # Llama 4 scales each token before its expert, the others after
        raise ValueError(
            f"{type(experts).__name__} {'weights its inputs' if transposed else 'weights its outputs'}: build the "
            f"MixtureOfExperts with weight_inputs={transposed}"
        )
    for e, expert in enumerate(ours.experts):
        bias = {}
        if transposed:
            gate, up = stacked[e].t().chunk(2, dim=0)  # (d, 2f) -> (2f, d) -> the gate's f rows, then up's
            down = experts.down_proj[e].t()  # (f, d) -> (d, f)
        elif interleaved:
            w, b = stacked[e], experts.gate_up_proj_bias[e]  # (d, 2f), (2f,)
            gate, up, down = w[:, 0::2].t(), w[:, 1::2].t(), experts.down_proj[e].t()  # (f, d), (f, d), (d, f)
            bias = dict(gate=b[0::2], up=b[1::2], down=experts.down_proj_bias[e])
        elif stacked is not None:
            gate, up = stacked[e].chunk(2, dim=0)  # (2f, d) -> the gate's f rows, then the up projection's
            down = experts.down_proj[e]
        else:
            src = experts[e]
            names = ("gate_proj", "up_proj", "down_proj") if hasattr(src, "gate_proj") else ("w1", "w3", "w2")
            gate, up, down = (getattr(src, n).weight for n in names)
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
