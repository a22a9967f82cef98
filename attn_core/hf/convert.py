"""Hugging Face causal LMs into attn_core: :func:`from_hf` builds the model and copies its weights.

:func:`from_hf` reads the model's configuration with
:func:`~attn_core.hf.configs.config_from_hf` (what converts, per family, and what is
refused, is said there), builds the :class:`~attn_core.DecoderLM` and copies every weight
into it: attention (:func:`copy_attention`: multi-head, latent, Llama 4's chunked and NoPE
layers), the lightning indexer (:func:`copy_indexer`), mixtures of experts (:func:`copy_moe`)
and Gated DeltaNet layers (:func:`copy_gated_deltanet`). The copy is LLaMA's; where a family lays
its weights out otherwise, its :class:`~attn_core.hf.families.base.Family` says so
(``norm_offset``: Gemma's and Qwen3-Next's RMSNorms multiply by ``1 + weight``, their gains are
copied as such; ``attention_view``: Phi-3's fused ``qkv_proj``; ``mlp_name``: Llama 4's
``feed_forward``; ``check_attention``: Llama 4's per-layer options).

attn_core does not depend on ``transformers``: this module never imports it. It reads
the model object it is given (its ``config`` and its modules), so any version of
``transformers`` whose model has these attribute names works (4.51 and later, 5.x).

Name map (``L`` = ``model.model.layers[i]``, ``B`` = ``DecoderLM.blocks[i]``):

==========================================  ===========================================
Hugging Face                                 attn_core
==========================================  ===========================================
``model.embed_tokens`` / ``lm_head``        ``tok_emb`` / ``lm_head``
``model.norm``                              ``final_norm``
``L.input_layernorm`` / ``L.post_attention_layernorm``  ``B.attn_norm`` / ``B.mlp_norm``
Gemma ``L.input_layernorm``                  ``B.attn_norm`` (gain ``1 + weight``, as all Gemma's)
Gemma ``L.post_attention_layernorm``         ``B.attn_post_norm``
Gemma ``L.pre_feedforward_layernorm``        ``B.mlp_norm``
Gemma ``L.post_feedforward_layernorm``       ``B.mlp_post_norm``
``L.self_attn.{q,k,v}_proj``, ``o_proj``    ``B.attn.{q,k,v}_proj``, ``out_proj``
``L.self_attn.q_norm`` / ``k_norm`` (Qwen3)  ``B.attn.q_norm`` / ``k_norm``
``L.mlp.{gate,up,down}_proj``               ``B.mlp.{gate,up,down}_proj``
DeepSeek ``q_proj`` or ``q_b_proj``         rows split per head into ``q_up`` / ``q_rope``
DeepSeek ``q_a_proj``, ``q_a_layernorm``    ``q_down``, ``q_norm``
DeepSeek ``kv_a_proj_with_mqa``             rows split into ``kv_down`` / ``k_rope``
DeepSeek ``kv_a_layernorm``                 ``kv_norm``
DeepSeek ``kv_b_proj``                      rows split per head into ``k_up`` / ``v_up``
DeepSeek-V3.2 ``self_attn.indexer``         ``B.attn.indexer`` (``wq_b``, ``wk``, ``k_norm``, ``weights_proj``)
Phi-3 ``qkv_proj``                           rows split into ``q_proj`` / ``k_proj`` / ``v_proj``
Phi-3 ``mlp.gate_up_proj``                   rows split into ``gate_proj`` / ``up_proj``
Cohere 2 ``L.input_layernorm``               ``B.attn_norm`` (its parallel block's one norm)
==========================================  ===========================================

Shape legend:
    H        query heads; ``H_kv`` key/value heads
    d_h      content (no-RoPE) query/key width per head (DeepSeek's ``qk_nope_head_dim``)
    d_r      RoPE width (``qk_rope_head_dim``); ``d_v`` value width (``v_head_dim``)
"""

import torch
from torch import nn

from ..checks import check_instance
from ..layers.gated_deltanet import GatedDeltaNet
from ..layers.mla import MultiHeadLatentAttention
from ..layers.multihead import MultiHeadAttention
from ..layers.sparse_attention import SparseAttention
from ..model.decoder import DecoderLM
from ..modules.moe import MixtureOfExperts
from .configs import config_from_hf
from .families import FAMILIES, Family, family_of
from .weights import copy_gated_deltanet, copy_indexer, copy_mlp, copy_moe, copy_norm, copy_weights

__all__ = ["copy_attention", "from_hf"]


def _check_attention_kinds(attn: object, hf_attn: object) -> None:
    """``attn`` an attn_core attention layer, ``hf_attn`` a Hugging Face attention layer (not its decoder layer)."""
    check_instance("attn", attn, (MultiHeadAttention, MultiHeadLatentAttention))
    check_instance("hf_attn", hf_attn, nn.Module)
    if hasattr(hf_attn, "self_attn"):  # a decoder layer: the usual slip
        raise TypeError(
            f"hf_attn is a decoder layer ({type(hf_attn).__name__}), not its attention: pass layer.self_attn"
        )
    has_q = any(hasattr(hf_attn, name) for name in ("q_proj", "q_a_proj", "q_b_proj", "qkv_proj"))
    if not has_q or not hasattr(hf_attn, "o_proj"):
        raise TypeError(
            f"hf_attn must be a Hugging Face attention layer (with q_proj/o_proj, e.g. LlamaAttention), "
            f"got {type(hf_attn).__name__}"
        )


def _check_same_widths(attn: nn.Module, hf_attn: nn.Module) -> None:
    """The Hugging Face layer's widths, read off its projections, must be the layer's: compared before the score scale.

    Otherwise another head width shows up first as another score scale (1/sqrt(head_dim)).
    """
    name = type(hf_attn).__name__
    D = getattr(hf_attn, "head_dim", attn.head_dim)
    hf = {
        "d_model": hf_attn.q_proj.in_features,
        "head_dim": D,
        "n_heads": hf_attn.o_proj.in_features // D,  # not q_proj's: Qwen3-Next's makes the query and the gate
        "n_kv_heads": hf_attn.k_proj.out_features // D,
    }
    ours = {"d_model": attn.d_model, "head_dim": attn.head_dim, "n_heads": attn.n_heads, "n_kv_heads": attn.n_kv_heads}
    for key, value in hf.items():
        if value != ours[key]:
            raise ValueError(
                f"{name} has {key}={value}, the layer {key}={ours[key]}: build the layer with {key}={value}"
            )


def _check_same_attention(attn: nn.Module, hf_attn: nn.Module, family: Family) -> None:
    """Refuse to copy into a layer that would compute something else (a missing sink, cap, window, gate, scale)."""
    name = type(hf_attn).__name__
    has_sinks = getattr(hf_attn, "sinks", None) is not None
    if has_sinks != (attn.sinks is not None):
        raise ValueError(
            f"{name} {'has' if has_sinks else 'has no'} learned sinks: build the layer with sinks={has_sinks}"
        )
    cap = getattr(hf_attn, "attn_logit_softcapping", None)
    if cap != attn.softcap:
        raise ValueError(f"{name} soft-caps its logits at {cap}, the layer at softcap={attn.softcap}")
    if hasattr(hf_attn, "sliding_window") and hf_attn.sliding_window != attn.window:
        raise ValueError(f"{name} has sliding_window={hf_attn.sliding_window}, the layer window={attn.window}")
    ours = attn.head_dim**-0.5 if attn.scale is None else attn.scale
    scaling = getattr(hf_attn, "scaling", ours)
    if abs(scaling - ours) > 1e-12 * scaling:
        raise ValueError(
            f"{name} scales its scores by {scaling:.6g}, the layer by {ours:.6g}: build it with scale={scaling!r} "
            "(Gemma's query_pre_attn_scalar**-0.5, Granite's attention_multiplier)"
        )
    family.check_attention(attn, hf_attn)  # e.g. Llama 4's RoPE or not, chunk, temperature, QK-norm per layer
    gated = hf_attn.q_proj.weight.shape[0] == 2 * attn.n_heads * attn.head_dim
    if gated != (attn.gate_proj is not None) or (gated and attn.gate_proj.out_features != attn.n_heads * attn.head_dim):
        raise ValueError(
            f"{name} {'makes an' if gated else 'has no'} output gate per query element: "
            f"build the layer with gate={'elementwise' if gated else None!r}"
        )


def copy_attention(attn: nn.Module, hf_attn: nn.Module) -> None:
    """Copy a Hugging Face attention layer's weights into an attn_core one of the same shape.

    Into a :class:`~attn_core.MultiHeadAttention`: ``LlamaAttention``, ``MistralAttention``,
    ``Qwen3Attention`` (``qk_norm=True``), ``GptOssAttention`` (``window=`` on its sliding
    layers, ``sinks=True``: the learned sink logits are copied), ``Gemma2Attention``
    (``softcap=``) and ``Qwen3NextAttention`` (``qk_norm=True, gate="elementwise"``: its
    ``q_proj`` makes each head's query and gate together, and are split here). Gemma's and
    Qwen3-Next's RMSNorm multiply by ``1 + weight``; the gains are copied as ``1 + weight``.
    ``Llama4TextAttention``: into a layer with its ``chunk`` (chunked layers), ``temperature``
    (NoPE layers) and, where it has ``use_qk_norm``'s gain-free L2 norm, ``qk_norm=True`` (gains set to 1).
    RoPE is the layer's own (``rope=``); give it the model's base (Gemma 3's local layers
    have their own).

    ``Phi3Attention``'s fused ``qkv_proj`` is split into its query, key and value rows; a
    layer built with ``scale=`` (Gemma 2 27B, Granite) must scale as the Hugging Face one does.

    Into a :class:`~attn_core.MultiHeadLatentAttention`: ``DeepseekV3Attention`` and
    ``DeepseekV32Attention`` (its indexer: :func:`copy_indexer`), whose
    fused projections are split per head (content and RoPE query rows; latent and
    RoPE-key rows; key and value rows of ``kv_b_proj``).

    Raises:
        TypeError: ``attn`` is not an attn_core attention layer, or ``hf_attn`` not a Hugging
            Face attention layer (a decoder layer, say: pass its ``.self_attn``).
        ValueError: The shapes do not match, or the layer would compute something else
            (sinks, soft-capping, window, score scale or gate not as the Hugging Face
            layer's), naming the difference.
    """
    _check_attention_kinds(attn, hf_attn)
    family = family_of(hf_attn)
    hf_attn = family.attention_view(hf_attn)  # Phi-3: its fused qkv_proj seen as three projections
    if not hasattr(attn, "d_latent"):  # multi-head attention and its GQA/MQA forms
        _check_same_widths(attn, hf_attn)
        _check_same_attention(attn, hf_attn, family)
        q_proj = hf_attn.q_proj
        if attn.gate_proj is None:
            copy_weights(attn.q_proj, q_proj)
        else:  # Qwen3-Next: per head, D query rows then D gate rows
            H, D = attn.n_heads, attn.head_dim
            w = q_proj.weight.view(H, 2, D, -1)  # (H·2D, d) -> (H, 2, D, d)
            b = None if q_proj.bias is None else q_proj.bias.view(H, 2, D)  # (H·2D,) -> (H, 2, D)
            copy_weights(attn.q_proj, w[:, 0].reshape(H * D, -1), bias=None if b is None else b[:, 0].reshape(-1))
            copy_weights(attn.gate_proj, w[:, 1].reshape(H * D, -1), bias=None if b is None else b[:, 1].reshape(-1))
        for name in ("k_proj", "v_proj"):
            copy_weights(getattr(attn, name), getattr(hf_attn, name))
        copy_weights(attn.out_proj, hf_attn.o_proj)
        if attn.q_norm is not None and not family.qk_norm_gain:  # Llama 4: an L2 norm without a gain
            with torch.no_grad():
                attn.q_norm.weight.fill_(1.0)
                attn.k_norm.weight.fill_(1.0)
        elif attn.q_norm is not None:
            copy_weights(attn.q_norm, hf_attn.q_norm.weight + family.norm_offset)
            copy_weights(attn.k_norm, hf_attn.k_norm.weight + family.norm_offset)
        if attn.sinks is not None:
            with torch.no_grad():
                attn.sinks.copy_(hf_attn.sinks)
        return
    H, d_h, d_r, d_v, d_c = attn.n_heads, attn.head_dim, attn.rope_dim, attn.v_head_dim, attn.d_latent
    q = hf_attn.q_proj if getattr(hf_attn, "q_proj", None) is not None else hf_attn.q_b_proj
    w_q = q.weight.view(H, d_h + d_r, -1)  # (H·(d_h + d_r), in) -> (H, d_h + d_r, in): per head, content then RoPE
    copy_weights(attn.q_up, w_q[:, :d_h].reshape(H * d_h, -1))
    copy_weights(attn.q_rope, w_q[:, d_h:].reshape(H * d_r, -1))
    if attn.q_down is not None:
        copy_weights(attn.q_down, hf_attn.q_a_proj)
        copy_weights(attn.q_norm, hf_attn.q_a_layernorm)
    kv_a = hf_attn.kv_a_proj_with_mqa  # (d_c + d_r, d): the latent's rows, then the shared RoPE key's
    kv_bias = kv_a.bias if kv_a.bias is not None else kv_a.weight.new_zeros(d_c + d_r)
    copy_weights(attn.kv_down, kv_a.weight[:d_c], bias=kv_bias[:d_c])
    copy_weights(attn.k_rope, kv_a.weight[d_c:], bias=kv_bias[d_c:])
    copy_weights(attn.kv_norm, hf_attn.kv_a_layernorm)
    w_kv = hf_attn.kv_b_proj.weight.view(H, d_h + d_v, d_c)  # (H·(d_h + d_v), d_c) -> (H, d_h + d_v, d_c)
    copy_weights(attn.k_up, w_kv[:, :d_h].reshape(H * d_h, d_c))
    copy_weights(attn.v_up, w_kv[:, d_h:].reshape(H * d_v, d_c))
    copy_weights(attn.out_proj, hf_attn.o_proj)


def from_hf(model: nn.Module) -> DecoderLM:
    """A :class:`~attn_core.DecoderLM` with the weights of a Hugging Face causal LM.

    Works with the ``...ForCausalLM`` objects of :data:`~attn_core.hf.families.SUPPORTED_MODEL_TYPES`
    (one file each under ``attn_core/hf/families``; random-initialised or from
    ``from_pretrained``); the result has the model's dtype and device and is in eval mode. Its logits
    equal the Hugging Face model's up to rounding (float64: ~1e-14 measured, held below 1e-10; see
    ``tests/test_parity_hf.py``, ``tests/test_hf_convert.py`` and ``tests/test_hf_families*.py``).

    Args:
        model: The Hugging Face model (``transformers`` itself is not imported here).

    Raises:
        TypeError: ``model`` is not an ``nn.Module`` with a ``config``, or is the base model
            without its language-model head (``LlamaModel`` for ``LlamaForCausalLM``).
        ValueError: What :func:`config_from_hf` refuses.
    """
    if not isinstance(model, nn.Module) or not hasattr(model, "config"):
        raise TypeError(
            f"model must be a Hugging Face causal LM (an nn.Module with .config), got {type(model).__name__}"
        )
    if not isinstance(getattr(model, "model", None), nn.Module):
        base = type(model).__name__
        causal = base[: -len("Model")] + "ForCausalLM" if base.endswith("Model") else "the ...ForCausalLM class"
        raise TypeError(
            f"model must be a causal LM with its head (e.g. {causal}), got the base model {base}: "
            f"load it with AutoModelForCausalLM.from_pretrained(...)"
        )
    c = config_from_hf(model.config)
    weight = model.get_input_embeddings().weight
    ours = DecoderLM(c).to(dtype=weight.dtype, device=weight.device)
    core = model.model
    family = FAMILIES[model.config.model_type]  # config_from_hf has refused the others
    offset = family.norm_offset  # Gemma's gains are 1 + weight
    copy_weights(ours.tok_emb, core.embed_tokens)
    copy_norm(ours.final_norm, core.norm, offset)
    if not c.tie_weights:
        copy_weights(ours.lm_head, model.lm_head)
    for block, layer in zip(ours.blocks, core.layers, strict=True):
        if c.norm_position == "post_sublayer":  # OLMo 2/3: a norm after each sub-layer, none before
            copy_norm(block.attn_post_norm, layer.post_attention_layernorm, offset)
            copy_norm(block.mlp_post_norm, layer.post_feedforward_layernorm, offset)
        else:
            copy_norm(block.attn_norm, layer.input_layernorm, offset)
        if c.norm_position == "sandwich":  # Gemma 2 and 3: a norm on each side of each sub-layer
            copy_norm(block.attn_post_norm, layer.post_attention_layernorm, offset)
            copy_norm(block.mlp_norm, layer.pre_feedforward_layernorm, offset)
            copy_norm(block.mlp_post_norm, layer.post_feedforward_layernorm, offset)
        elif not c.parallel_block and c.norm_position != "post_sublayer":  # Cohere's parallel block has one norm
            copy_norm(block.mlp_norm, layer.post_attention_layernorm, offset)
        hf_mlp = getattr(layer, family.mlp_name)  # Llama 4's is feed_forward
        if isinstance(block.mlp, MixtureOfExperts):
            copy_moe(block.mlp, hf_mlp)
        else:
            copy_mlp(block.mlp, hf_mlp)
        if isinstance(block.attn, GatedDeltaNet):  # Qwen3-Next's linear layers
            copy_gated_deltanet(block.attn, layer.linear_attn)
        elif isinstance(block.attn, SparseAttention):  # DeepSeek-V3.2: MLA and its lightning indexer
            copy_attention(block.attn.attn, layer.self_attn)
            copy_indexer(block.attn.indexer, layer.self_attn.indexer)
        else:
            copy_attention(block.attn, layer.self_attn)
    return ours.eval()
