"""The decoder's configuration: a frozen dataclass and its presets.

* :class:`DecoderConfig` holds every choice that defines a :class:`~attn_core.DecoderLM`
  and checks them together (a value that makes no sense *with another* is refused here,
  naming both). Optional sizes stay ``None`` and are resolved by the ``resolved_*``
  properties from the same defaults the modules use (:func:`~attn_core.mlp.mlp_hidden_dim`,
  :func:`~attn_core.mla.default_rope_dim`), so that a config and the model built from it
  never disagree.
* :meth:`DecoderConfig.gpt2_like` and :meth:`DecoderConfig.llama_like`: toy presets;
  :meth:`DecoderConfig.llama3_8b`, :meth:`DecoderConfig.qwen3_8b`,
  :meth:`DecoderConfig.qwen3_0_6b` and :meth:`DecoderConfig.deepseek_v3`: the shapes of
  real models, whose parameter counts by formula equal the published ones.
The parameter count by formula lives in :mod:`attn_core.params`.

Shape legend:
    V        vocabulary size
    L        number of layers (blocks)
    d        ``d_model``, the width of the residual stream; ``f`` the MLP hidden width
    H        query heads, ``H_kv`` key/value heads, ``D`` head width
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import torch

from .checks import check_bool, check_choice, check_instance, check_int, check_number
from .gating import GATE_KINDS
from .masks import check_window
from .mla import default_rope_dim
from .mlp import MLP_KINDS, mlp_hidden_dim
from .norms import NORM_KINDS, NORM_POSITIONS, check_qk_norm
from .positional import check_temperature
from .rope import ROPE_LAYOUTS
from .rope_scaling import RopeScaling

__all__ = ["DecoderConfig"]

POSITIONAL_KINDS = ("learned", "rope", "none", "sinusoidal", "alibi")
ATTENTION_KINDS = ("mha", "mla")
BLOCK_KINDS = ("standard", "sas", "sas-p")
LAYER_TYPES = ("full", "sliding", "linear", "chunked")


@dataclass(frozen=True)
class DecoderConfig:
    """Everything that defines a :class:`DecoderLM`; frozen, so one config means one architecture.

    Optional sizes (``None``) are resolved by the ``resolved_*`` properties, never written
    back, so that ``dataclasses.replace(config, d_model=128)`` recomputes them.

    Attributes:
        vocab_size: ``V``.
        n_layers: Number of blocks ``L``.
        d_model: Width of the residual stream.
        n_heads: Query heads ``H``.
        n_kv_heads: Key/value heads (GQA/MQA); ``None`` = ``n_heads``.
        d_ff: MLP hidden width; ``None`` = ``4·d_model`` (GELU) or ``⅔·4·d_model`` rounded (SwiGLU).
        max_len: Longest sequence (learned positions have one vector per position; caches
            are sized by it).
        positional: ``"learned"`` (a trained vector per position added to the token
            embeddings; none past ``max_len``), ``"sinusoidal"`` (the fixed sine/cosine
            vectors of :class:`~attn_core.SinusoidalPositionalEncoding` added instead, to
            token embeddings scaled by ``√d_model`` as in the paper; needs an even
            ``d_model``), ``"rope"`` (queries and keys rotated in every layer), ``"alibi"``
            (:class:`~attn_core.ALiBi`'s per-head distance penalty added to every layer's
            scores; standard multi-head attention without sliding layers or shared
            keys/values) or ``"none"`` (causal attention alone, NoPE).
        mlp: ``"gelu"`` (exact GELU), ``"gelu_tanh"`` (GPT-2's tanh approximation), ``"swiglu"``
            or ``"geglu_tanh"`` (the gated MLP with a tanh-GELU gate, Gemma 2/3).
        norm: ``"layernorm"`` or ``"rmsnorm"``.
        norm_position: ``"pre"``, ``"post"``, ``"sandwich"`` (a second norm on each
            sub-layer's output, Gemma 2/3) or ``"post_sublayer"`` (the output's norm alone,
            ``x + norm(f(x))``, OLMo 2/3); see :class:`~attn_core.TransformerBlock`.
        tie_weights: The output projection reuses the token embedding matrix.
        attention: ``"mha"`` (MHA/GQA/MQA) or ``"mla"`` (multi-head latent attention).
        d_latent: MLA's key/value latent width ``d_c`` (required for ``"mla"``).
        d_q_latent: MLA's query latent width (``None``: queries are not compressed).
        head_dim: Per-head width of queries and keys (``None``: ``d_model // n_heads``); it
            may differ from ``d_model // n_heads`` (Qwen3, Gemma; MLA's ``qk_nope_head_dim``).
        rope_dim: MLA's decoupled RoPE width per head (``None``: MLA's default,
            :func:`~attn_core.mla.default_rope_dim`, with ``positional="rope"``; otherwise
            no RoPE part).
        block: ``"standard"`` (:class:`~attn_core.TransformerBlock`), ``"sas"`` or ``"sas-p"``
            (:class:`~attn_core.SimplifiedBlock`, He & Hofmann 2023).
        beta_ff: Initial MLP-branch gain ``β_FF`` of the simplified blocks.
        dropout: Dropout on embeddings, attention weights and sub-layer outputs.
        bias: Biases in the attention projections and MLPs (GPT-2: yes, LLaMA: no).
        rope_base: RoPE's base (needs ``positional="rope"`` when not the default 10000).
        norm_eps: The ε of every norm of the blocks and the final norm, and of the QK-norm
            (``None``: each norm's default, ``1e-5`` LayerNorm, ``1e-6`` RMSNorm). MLA's
            latent norms keep DeepSeek's ``1e-6``.
        qk_norm: RMSNorm on every query and key head before RoPE (Qwen3, Gemma 3), or
            ``"all_heads"``: over all of a token's heads together (OLMo 2/3;
            :class:`~attn_core.norms.HeadsRMSNorm`); ``attention="mha"`` only.
        v_head_dim: MLA's value width per head (``None``: ``head_dim``); DeepSeek-V3 has
            ``head_dim=128`` (its ``qk_nope_head_dim``) and ``v_head_dim=128``, DeepSeek-V2-Lite too.
        rope_layout: Which dimensions RoPE pairs: ``"half"`` (Hugging Face's LLaMA/Qwen3
            checkpoints) or ``"interleaved"`` (Meta's LLaMA code, DeepSeek's MLA checkpoints).
        layer_types: ``"full"``, ``"sliding"`` or ``"linear"`` per layer (chapter 15: Gemma 3's
            five sliding layers per full one, gpt-oss's alternation; chapter 17: a
            ``"linear"`` layer is a :class:`~attn_core.GatedDeltaNet` in place of attention,
            Qwen3-Next's three per full layer; see :func:`~attn_core.layer_pattern`). A
            ``"chunked"`` layer attends within chunks of ``attention_chunk_size`` (Llama 4).
            ``None``: every layer sliding when ``sliding_window`` is set, else every layer full.
        sliding_window: The window of the sliding layers: a query sees itself and the
            ``sliding_window - 1`` positions before it; they decode from a
            :class:`~attn_core.RollingKVCache` of that many slots.
        attention_sinks: gpt-oss's learned sink logit per head in every layer's softmax
            denominator (``MultiHeadAttention(sinks=True)``).
        kv_share: Cross-layer KV sharing (chapter 15; Brandon et al. 2024): for each layer,
            the index of the layer whose keys and values it reuses (itself: it computes its
            own). A source must be an earlier layer of the same type that computes its own;
            ``None``: no sharing.
        attention_gate: The attention's output gate (chapter 16; Qwen3-Next):
            ``"elementwise"``, ``"headwise"`` or ``None``.
        attention_softcap: The attention-logit soft-cap (chapter 16; Gemma 2: 50.0) or ``None``.
        scale_embeddings: Multiply the token embeddings by ``√d_model`` before the first
            block (Gemma's scaled word embeddings; :attr:`DecoderLM.embed_scale`). Sinusoidal
            positions already scale them, so ``True`` is refused there.
        sliding_rope_base: The RoPE base of the ``"sliding"`` layers (Gemma 3: 10000 locally,
            ``rope_base`` = 1e6 in the full layers); ``None``: ``rope_base`` everywhere. Needs
            ``positional="rope"``, multi-head attention and at least one sliding layer.
        final_softcap: The final-logit soft-cap (Gemma 2: 30.0): :class:`DecoderLM` returns
            ``cap · tanh(logits / cap)`` (every logit inside ``(-cap, cap)``); ``None``: the
            ``lm_head`` logits as they are. Must be > 0.
        linear_n_heads: Query/key heads ``H_k`` of the ``"linear"`` layers (Qwen3-Next's
            ``linear_num_key_heads``); ``None``: ``n_heads``.
        linear_head_dim: Width of their query/key heads; ``None``: the attention's head width.
        linear_n_value_heads: Their value heads (a multiple of ``linear_n_heads``); ``None``:
            ``linear_n_heads``.
        linear_value_head_dim: Width of their value heads; ``None``: ``linear_head_dim``.
        linear_conv_size: Taps of their short causal convolution (Qwen3-Next: 4).
        n_experts: Routed experts ``E`` of the mixture-of-experts MLPs (chapter 19;
            :class:`~attn_core.MixtureOfExperts`); ``None``: every MLP dense. Needs
            ``mlp="swiglu"`` (the experts are SwiGLUs) and ``block="standard"``.
        experts_per_token: ``k``, experts each token goes to (Mixtral: 2, DeepSeek-V3: 8).
        n_shared_experts: Experts every token goes through besides its ``k`` (DeepSeek: 1).
        moe_d_ff: Each expert's hidden width; ``None``: ``resolved_d_ff`` (Mixtral's experts
            are its MLP width; DeepSeek-V3's are 2048 next to a dense 18432).
        router_scoring: ``"softmax"`` or ``"sigmoid"`` (DeepSeek-V3).
        router_topk_first: Top-k logits, then a softmax over them (Mixtral, gpt-oss);
            ``False``: scores for all experts, then the top k (Qwen3-MoE, DeepSeek).
        router_normalize: Divide the kept weights by their sum (Qwen3-MoE's ``norm_topk_prob``, DeepSeek-V3).
        router_scale: Multiplies the routed weights (DeepSeek-V3's ``routed_scaling_factor``, 2.5).
        router_groups: Expert groups of DeepSeek-V3's group-limited routing (``n_group``, 8).
        router_topk_groups: Groups a token may use (``topk_group``, 4).
        router_bias: A bias in the router's linear layer (gpt-oss).
        expert_swiglu_limit: gpt-oss's clamped experts (:class:`~attn_core.mlp.ClampedSwiGLU`,
            ``limit`` 7.0, ``alpha`` 1.702); ``None``: plain SwiGLU experts.
        shared_expert_d_ff: The shared experts' hidden width (Qwen3-Next's
            ``shared_expert_intermediate_size``); ``None``: ``n_shared_experts · moe_d_ff``.
        shared_expert_gate: Qwen3-Next: the shared experts' output times a learned sigmoid gate per token.
        capacity_factor: Each expert takes at most ``ceil(capacity_factor · N · k / E)``
            assignments per forward, the rest are dropped; ``None``: no limit.
        first_dense_layers: The first layers keep a dense MLP (DeepSeek-V3's
            ``first_k_dense_replace``, 3); the rest are mixtures of experts.
        qkv_bias: Biases on the query, key and value projections only (Qwen2, GLM-4), none
            on the output projection or the MLP; ``bias=True`` gives every projection one.
            Multi-head attention only.
        attention_scale: What every layer multiplies its scores ``q·k`` by (``None``:
            ``1/√head_dim``): Gemma 2 27B's ``query_pre_attn_scalar**-0.5``, Granite's
            ``attention_multiplier``. Multi-head attention only.
        embedding_multiplier: Multiplies the token embeddings (after ``scale_embeddings``'
            ``√d_model``; Granite's ``embedding_multiplier``, 12).
        residual_multiplier: Multiplies each sub-layer's output before it joins the residual
            stream, ``x + m·f(norm(x))`` (Granite's ``residual_multiplier``, 0.22).
        logit_scale: Multiplies the final logits, before ``final_softcap`` (Cohere's
            ``logit_scale``; Granite's ``1 / logits_scaling``).
        parallel_block: Attention and MLP read the same normalised input and are added
            together, ``x + attn(norm(x)) + mlp(norm(x))``, one norm per block (GPT-J,
            Cohere; :class:`~attn_core.blocks.ParallelBlock`). Pre-norm standard blocks only.
        rope_full_layers: ``False``: the ``"full"`` layers have no RoPE (position-free global
            attention, Cohere 2 and Llama 4's NoPE layers), the ``"sliding"`` ones keep it.
        index_n_heads: DeepSeek Sparse Attention (chapter 18; DeepSeek-V3.2): every layer's MLA
            becomes a :class:`~attn_core.SparseAttention` whose
            :class:`~attn_core.LightningIndexer` has this many heads (64); ``None``: dense.
            Its queries read MLA's query latent, its RoPE turns the first ``rope_dim``
            dimensions. Needs ``attention="mla"``.
        index_head_dim: The indexer's head width ``D_I`` (128); required with ``index_n_heads``.
        index_topk: Tokens each query attends to (DeepSeek-V3.2: 2048); ``None``: every
            token (the dense warm-up).
        rotary_dim: RoPE turns only the first ``rotary_dim`` dimensions of each query and
            key head (Hugging Face's ``partial_rotary_factor · head_dim``: GLM-4-MoE's half,
            Phi-4-mini's three quarters); the rest pass through. ``None``: the whole head.
            Multi-head attention with ``positional="rope"`` (MLA has ``rope_dim``).
        rope_scaling: Context extension of the RoPE with base ``rope_base`` (issue 28): a
            :class:`~attn_core.rope_scaling.RopeScaling` (PI, NTK-aware, dynamic NTK, YaRN with
            its temperature, Llama 3.1's, LongRoPE), e.g. read from Hugging Face's
            ``rope_parameters`` by :func:`~attn_core.rope_scaling.scaling_from_hf`. ``None``:
            plain RoPE. The ``"sliding"`` layers' own RoPE (``sliding_rope_base``) is not scaled.
            Needs ``positional="rope"``; with ``attention="mla"`` it scales the decoupled RoPE
            (DeepSeek-V3's YaRN, whose ``mscale_all_dim`` also raises MLA's score scale).
        rope_layers: Per layer, whether it rotates its queries and keys (``True``) or has no
            positions at all (``False``, a NoPE layer: SmolLM3's every fourth layer, its
            ``no_rope_layers``). ``None``: every layer as ``positional`` and
            ``rope_full_layers`` say. A layer has RoPE only where both allow it.
            Multi-head attention with ``positional="rope"`` in standard blocks.
        attention_chunk_size: The chunk of the ``"chunked"`` layers (Llama 4's RoPE layers,
            8192): a query sees only the earlier keys of its own chunk (``MultiHeadAttention(chunk=)``).
        nope_temperature: ``(floor_scale, attn_scale)``: the layers without RoPE multiply each
            query by :func:`~attn_core.positional.query_temperature` of its position (Llama 4's
            ``attn_temperature_tuning``, ``(8192, 0.1)``). ``None``: none.
        nope_qk_norm: ``False``: ``qk_norm`` only in the layers with RoPE (Llama 4 normalises its
            rotated queries and keys only). Needs ``qk_norm``.
        router_weight_inputs: Each expert reads its token times the routing weight, instead of
            its output being weighted (Llama 4; ``MixtureOfExperts(weight_inputs=True)``).
        moe_layer_step: Every ``moe_layer_step``-th layer after the first dense ones is a mixture of
            experts (layer ``i`` when ``(i + 1) % step == 0``: Llama 4 Maverick's
            ``interleave_moe_layer_step=2``), the others keep the dense MLP of width ``d_ff``.

    Fields added after the first edition (``field(repr=False)``) appear in the repr only
    when set, so that a config that does not use them prints as it always did.
    """

    vocab_size: int
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int | None = None
    d_ff: int | None = None
    max_len: int = 128
    positional: str = "learned"
    mlp: str = "gelu"
    norm: str = "layernorm"
    norm_position: str = "pre"
    tie_weights: bool = True
    attention: str = "mha"
    d_latent: int | None = None
    d_q_latent: int | None = None
    head_dim: int | None = None
    rope_dim: int | None = None
    block: str = "standard"
    beta_ff: float = 0.1
    dropout: float = 0.0
    bias: bool = False
    rope_base: float = 10000.0
    norm_eps: float | None = field(default=None, repr=False)
    qk_norm: bool | str = field(default=False, repr=False)
    v_head_dim: int | None = field(default=None, repr=False)
    rope_layout: str = field(default="half", repr=False)
    layer_types: tuple[str, ...] | None = field(default=None, repr=False)
    sliding_window: int | None = field(default=None, repr=False)
    attention_sinks: bool = field(default=False, repr=False)
    kv_share: tuple[int, ...] | None = field(default=None, repr=False)
    attention_gate: str | None = field(default=None, repr=False)
    attention_softcap: float | None = field(default=None, repr=False)
    scale_embeddings: bool = field(default=False, repr=False)
    sliding_rope_base: float | None = field(default=None, repr=False)
    final_softcap: float | None = field(default=None, repr=False)
    linear_n_heads: int | None = field(default=None, repr=False)
    linear_head_dim: int | None = field(default=None, repr=False)
    linear_n_value_heads: int | None = field(default=None, repr=False)
    linear_value_head_dim: int | None = field(default=None, repr=False)
    linear_conv_size: int = field(default=4, repr=False)
    n_experts: int | None = field(default=None, repr=False)
    experts_per_token: int = field(default=2, repr=False)
    n_shared_experts: int = field(default=0, repr=False)
    moe_d_ff: int | None = field(default=None, repr=False)
    router_scoring: str = field(default="softmax", repr=False)
    router_topk_first: bool = field(default=False, repr=False)
    router_normalize: bool = field(default=False, repr=False)
    router_scale: float = field(default=1.0, repr=False)
    router_groups: int = field(default=1, repr=False)
    router_topk_groups: int = field(default=1, repr=False)
    router_bias: bool = field(default=False, repr=False)
    expert_swiglu_limit: float | None = field(default=None, repr=False)
    shared_expert_d_ff: int | None = field(default=None, repr=False)
    shared_expert_gate: bool = field(default=False, repr=False)
    capacity_factor: float | None = field(default=None, repr=False)
    first_dense_layers: int = field(default=0, repr=False)
    qkv_bias: bool = field(default=False, repr=False)
    attention_scale: float | None = field(default=None, repr=False)
    embedding_multiplier: float = field(default=1.0, repr=False)
    residual_multiplier: float = field(default=1.0, repr=False)
    logit_scale: float = field(default=1.0, repr=False)
    parallel_block: bool = field(default=False, repr=False)
    rope_full_layers: bool = field(default=True, repr=False)
    index_n_heads: int | None = field(default=None, repr=False)
    index_head_dim: int | None = field(default=None, repr=False)
    index_topk: int | None = field(default=None, repr=False)
    rotary_dim: int | None = field(default=None, repr=False)
    rope_scaling: RopeScaling | None = field(default=None, repr=False)
    rope_layers: tuple[bool, ...] | None = field(default=None, repr=False)
    attention_chunk_size: int | None = field(default=None, repr=False)
    nope_temperature: tuple[float, float] | None = field(default=None, repr=False)
    nope_qk_norm: bool = field(default=True, repr=False)
    router_weight_inputs: bool = field(default=False, repr=False)
    moe_layer_step: int = field(default=1, repr=False)

    def __repr__(self) -> str:
        # Every field with repr=True, and the repr=False ones only where they differ from their default.
        shown = [f for f in fields(self) if f.repr or getattr(self, f.name) != f.default]
        return f"{type(self).__name__}({', '.join(f'{f.name}={getattr(self, f.name)!r}' for f in shown)})"

    def __post_init__(self) -> None:
        for name in ("vocab_size", "n_layers", "d_model", "n_heads", "max_len"):
            check_int(name, getattr(self, name))
        for name in ("n_kv_heads", "d_ff", "d_latent", "d_q_latent", "head_dim"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name))
        if self.rope_dim is not None:
            check_int("rope_dim", self.rope_dim, minimum=0)
        check_choice("positional", self.positional, POSITIONAL_KINDS)
        check_choice("mlp", self.mlp, MLP_KINDS)
        check_choice("norm", self.norm, NORM_KINDS)
        check_choice("norm_position", self.norm_position, NORM_POSITIONS)
        check_choice("attention", self.attention, ATTENTION_KINDS)
        check_choice("block", self.block, BLOCK_KINDS)
        check_number("dropout", self.dropout, low=0.0, high=1.0, high_open=True)
        check_bool("tie_weights", self.tie_weights)
        check_bool("bias", self.bias)
        check_number("beta_ff", self.beta_ff)
        check_number("rope_base", self.rope_base, low=1.0, low_open=True)

        self._check_parity_fields()
        self._check_layer_pattern()
        self._check_gate_and_softcap()
        self._check_positional()
        self._check_gemma_fields()
        self._check_moe()
        self._check_scales_and_layout()
        self._check_indexer()
        self._check_rope_extensions()
        self._check_llama4_fields()
        if self.head_dim is None:
            if self.d_model % self.n_heads != 0:
                raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        kv = self.resolved_n_kv_heads
        if self.n_heads % kv != 0:
            raise ValueError(f"n_heads={self.n_heads} is not divisible by n_kv_heads={kv}")
        if self.attention == "mha":
            for name in ("d_latent", "d_q_latent", "rope_dim", "v_head_dim"):
                if getattr(self, name) is not None:
                    raise ValueError(
                        f"{name}={getattr(self, name)} is an MLA size; set attention='mla' or leave it None"
                    )
            if self.positional == "rope" and self.resolved_head_dim % 2 != 0:
                raise ValueError(f"positional='rope' needs an even head width, got head_dim={self.resolved_head_dim}")
        else:
            if self.d_latent is None:
                raise ValueError("attention='mla' needs d_latent (the key/value latent width)")
            if self.n_kv_heads is not None and self.n_kv_heads != self.n_heads:
                raise ValueError(
                    f"attention='mla' has no separate key/value heads; got n_kv_heads={self.n_kv_heads} "
                    f"with n_heads={self.n_heads}"
                )
            if self.positional != "rope" and self.rope_dim:
                raise ValueError(
                    f"rope_dim={self.rope_dim} needs positional='rope', got positional={self.positional!r}"
                )
            if self.resolved_rope_dim % 2 != 0:
                raise ValueError(f"rope_dim must be even (RoPE rotates pairs), got rope_dim={self.resolved_rope_dim}")
            if self.positional == "rope" and self.resolved_rope_dim == 0:
                raise ValueError(
                    "rope_dim=0 with positional='rope' rotates nothing (rope_base and rope_layout would be "
                    "ignored): use positional='none' for latent attention without positions"
                )
            if self.qk_norm:
                raise ValueError(
                    "qk_norm=True is not supported with attention='mla' (its latents have their own norms)"
                )
        if self.block != "standard":
            if self.attention != "mha" or kv != self.n_heads:
                raise ValueError(
                    f"block={self.block!r} uses its own shaped attention: it needs attention='mha' with "
                    f"n_kv_heads = n_heads, got attention={self.attention!r}, n_kv_heads={kv}, n_heads={self.n_heads}"
                )
            if self.norm_position != "pre":
                raise ValueError(f"block={self.block!r} is a pre-norm block; got norm_position={self.norm_position!r}")
            unsupported = {
                "head_dim": self.head_dim is not None and self.head_dim != self.d_model // self.n_heads,
                "qk_norm": self.qk_norm,
                "norm_eps": self.norm_eps is not None,
            }
            for name, used in unsupported.items():
                if used:
                    raise ValueError(
                        f"block={self.block!r} does not support {name}={getattr(self, name)!r} "
                        f"(the simplified blocks build their own attention and norms); use block='standard'"
                    )
        elif self.beta_ff != 0.1:
            raise ValueError(
                f"beta_ff={self.beta_ff} is the simplified blocks' MLP gain; block='standard' has none "
                f"(leave it at 0.1 or use block='sas'/'sas-p')"
            )

    def _check_rope_extensions(self) -> None:
        """Check ``rope_scaling`` (a RopeScaling fitting the rotated width) and ``rope_layers`` (a bool per layer)."""
        if isinstance(self.rope_layers, list):  # e.g. read back from JSON: store the frozen form
            object.__setattr__(self, "rope_layers", tuple(self.rope_layers))
        check_instance("rope_scaling", self.rope_scaling, RopeScaling, optional=True)
        if self.rope_scaling is not None and self.positional != "rope":
            raise ValueError(
                f"rope_scaling changes the RoPE: it needs positional='rope', got positional={self.positional!r}"
            )
        if self.rope_scaling is not None and self.index_n_heads is not None:
            raise ValueError("rope_scaling with a lightning indexer (index_n_heads): the indexer's RoPE is not scaled")
        if self.rope_layers is not None and (self.positional != "rope" or self.attention != "mha"):
            raise ValueError(
                "rope_layers change multi-head attention's RoPE: they need positional='rope' and "
                f"attention='mha', got positional={self.positional!r}, attention={self.attention!r}"
            )
        if self.rope_scaling is not None:  # fail here, not when the model is built (e.g. LongRoPE factors' length)
            rotated = self.resolved_rope_dim if self.attention == "mla" else self.rotary_dim or self.resolved_head_dim
            self.rope_scaling.frequencies(self.rope_base, rotated)
        if self.rope_layers is None:
            return
        if self.block != "standard":
            raise ValueError(f"rope_layers needs block='standard', got block={self.block!r}")
        if not isinstance(self.rope_layers, tuple) or len(self.rope_layers) != self.n_layers:
            raise ValueError(
                f"rope_layers must give True (RoPE) or False (no positions) per layer ({self.n_layers}), "
                f"got {self.rope_layers!r}"
            )
        for i, on in enumerate(self.rope_layers):
            check_bool(f"rope_layers[{i}]", on)

    def _check_llama4_fields(self) -> None:
        """Check Llama 4's fields: chunked layers and their chunk, the NoPE layers' temperature and QK-norm."""
        chunked = "chunked" in self.resolved_layer_types
        if self.attention_chunk_size is not None:
            check_int("attention_chunk_size", self.attention_chunk_size)
        if chunked != (self.attention_chunk_size is not None):
            raise ValueError(
                f"attention_chunk_size={self.attention_chunk_size} is the chunk of the 'chunked' layers: give both "
                f"or neither (layer_types={self.layer_types!r})"
            )
        if isinstance(self.nope_temperature, list):  # e.g. read back from JSON: store the frozen form
            object.__setattr__(self, "nope_temperature", tuple(self.nope_temperature))
        check_temperature(self.nope_temperature)
        check_bool("nope_qk_norm", self.nope_qk_norm)
        if not self.nope_qk_norm and not self.qk_norm:
            raise ValueError("nope_qk_norm=False leaves out the NoPE layers' QK-norm, but qk_norm=False")
        kinds = self.resolved_layer_types  # a "linear" layer has no queries to warm
        nope = any(not self.layer_has_rope(i) and kinds[i] != "linear" for i in range(self.n_layers))
        if self.nope_temperature is not None and not nope:
            raise ValueError(
                f"nope_temperature={self.nope_temperature} is for the attention layers without RoPE, and every "
                "attention layer has RoPE"
            )
        used = [n for n, on in (("nope_temperature", self.nope_temperature), ("chunked layers", chunked)) if on]
        if used and (self.attention != "mha" or self.block != "standard"):
            raise ValueError(
                f"{', '.join(used)}: options of the standard blocks' multi-head attention, got "
                f"attention={self.attention!r}, block={self.block!r}"
            )

    def layer_chunk(self, i: int) -> int | None:
        """The attention chunk of layer ``i`` (``attention_chunk_size`` if it is ``"chunked"``), else None."""
        return self.attention_chunk_size if self.resolved_layer_types[i] == "chunked" else None

    def layer_temperature(self, i: int) -> tuple[float, float] | None:
        """The query temperature of layer ``i``: ``nope_temperature`` if it has no RoPE, else None."""
        return None if self.layer_has_rope(i) else self.nope_temperature

    def layer_qk_norm(self, i: int) -> bool | str:
        """The QK-norm of layer ``i``: ``qk_norm``, except in a NoPE layer when ``nope_qk_norm`` is False."""
        return self.qk_norm if self.nope_qk_norm or self.layer_has_rope(i) else False

    def layer_has_rope(self, i: int) -> bool:
        """Whether layer ``i`` rotates its queries and keys (``positional``, ``rope_full_layers``, ``rope_layers``)."""
        if self.positional != "rope" or self.resolved_layer_types[i] == "linear":
            return False
        if self.resolved_layer_types[i] == "full" and not self.rope_full_layers:
            return False
        return self.rope_layers is None or self.rope_layers[i]

    def _check_parity_fields(self) -> None:
        """Check the fields that real checkpoints need (norm ε, QK-norm, value width, RoPE layout)."""
        if self.norm_eps is not None:
            check_number("norm_eps", self.norm_eps, low=0.0)
        check_qk_norm(self.qk_norm)  # False, True or "all_heads"
        if self.v_head_dim is not None:
            check_int("v_head_dim", self.v_head_dim)
        check_choice("rope_layout", self.rope_layout, ROPE_LAYOUTS)
        if self.positional != "rope":
            for name, default in (("rope_base", 10000.0), ("rope_layout", "half")):
                if getattr(self, name) != default:
                    raise ValueError(
                        f"{name}={getattr(self, name)!r} needs positional='rope', got positional={self.positional!r}"
                    )

    def _check_positional(self) -> None:
        """Sinusoidal positions need sine/cosine pairs; ALiBi's bias goes into the standard blocks' attention."""
        if self.positional == "sinusoidal" and self.d_model % 2 != 0:
            raise ValueError(
                f"positional='sinusoidal' needs an even d_model (sine/cosine pairs), got d_model={self.d_model}"
            )
        if self.positional != "alibi":
            return
        if self.attention != "mha" or self.block != "standard":
            raise ValueError(
                f"positional='alibi' adds its bias to the standard blocks' multi-head attention; "
                f"got attention={self.attention!r}, block={self.block!r}"
            )
        # A rolling cache's keys are ring slots and a layer that shares keys takes its
        # source's mask: neither can take the bias, so refuse instead of ignoring it.
        for name, used in (("sliding_window", self.sliding_window is not None), ("kv_share", self.kv_share)):
            if used:
                raise ValueError(
                    f"positional='alibi' is not supported with {name}={getattr(self, name)!r} "
                    f"(sliding layers and shared keys/values take no score bias)"
                )

    def _check_scales_and_layout(self) -> None:
        """Check the q/k/v biases, the score scale, the multipliers, the parallel block and NoPE full layers."""
        for name in ("qkv_bias", "parallel_block", "rope_full_layers"):
            check_bool(name, getattr(self, name))
        for name in ("embedding_multiplier", "residual_multiplier", "logit_scale"):
            check_number(name, getattr(self, name), low=0.0, low_open=True)
        if self.attention_scale is not None:
            check_number("attention_scale", self.attention_scale, low=0.0, low_open=True)
        if self.rotary_dim is not None:
            check_int("rotary_dim", self.rotary_dim)
            if self.positional != "rope" or self.attention != "mha" or self.block != "standard":
                raise ValueError(
                    f"rotary_dim={self.rotary_dim} is the rotated part of a multi-head attention head: it needs "
                    f"positional='rope', attention='mha', block='standard' (MLA's is rope_dim), got "
                    f"positional={self.positional!r}, attention={self.attention!r}, block={self.block!r}"
                )
            if self.rotary_dim % 2 or self.rotary_dim > self.resolved_head_dim:
                raise ValueError(
                    f"rotary_dim must be even and at most head_dim={self.resolved_head_dim}, got {self.rotary_dim}"
                )
        if self.qkv_bias and self.bias:
            raise ValueError("qkv_bias=True adds biases to q/k/v only; bias=True already gives every projection one")
        mha_only = {"qkv_bias": self.qkv_bias, "attention_scale": self.attention_scale is not None}
        mha_only["parallel_block"] = self.parallel_block
        mha_only["rope_full_layers"] = not self.rope_full_layers
        used = [name for name, on in mha_only.items() if on]
        if used and (self.attention != "mha" or self.block != "standard"):
            raise ValueError(
                f"{', '.join(f'{n}={getattr(self, n)!r}' for n in used)} need attention='mha' and block='standard', "
                f"got attention={self.attention!r}, block={self.block!r}"
            )
        if self.parallel_block and self.norm_position != "pre":
            raise ValueError(
                f"parallel_block=True reads one pre-norm for both sub-layers; got norm_position={self.norm_position!r}"
            )
        if self.residual_multiplier != 1.0 and self.block != "standard":
            raise ValueError(f"residual_multiplier={self.residual_multiplier} needs block='standard'")
        if not self.rope_full_layers:
            if self.positional != "rope" or "sliding" not in self.resolved_layer_types:
                raise ValueError(
                    "rope_full_layers=False leaves RoPE to the 'sliding' layers: it needs positional='rope' and "
                    f"some sliding layers, got positional={self.positional!r}, layer_types={self.layer_types!r}"
                )
            if self.sliding_rope_base is not None:
                raise ValueError(
                    f"sliding_rope_base={self.sliding_rope_base} with rope_full_layers=False: only the sliding layers "
                    "rotate, so rope_base is theirs; leave sliding_rope_base=None"
                )

    def _check_indexer(self) -> None:
        """Check DeepSeek Sparse Attention's indexer sizes: all unset, or heads, width (and top-k) with MLA."""
        if self.index_n_heads is None:
            for name in ("index_head_dim", "index_topk"):
                if getattr(self, name) is not None:
                    raise ValueError(
                        f"{name}={getattr(self, name)} configures the lightning indexer; set index_n_heads"
                    )
            return
        check_int("index_n_heads", self.index_n_heads)
        if self.index_head_dim is None:
            raise ValueError(f"index_n_heads={self.index_n_heads} needs index_head_dim (the indexer's head width)")
        check_int("index_head_dim", self.index_head_dim)
        if self.index_topk is not None:
            check_int("index_topk", self.index_topk)
        if self.attention != "mla" or self.block != "standard":
            raise ValueError(
                f"index_n_heads={self.index_n_heads}: the lightning indexer reads MLA's query latent; it needs "
                f"attention='mla' and block='standard', got attention={self.attention!r}, block={self.block!r}"
            )
        if self.resolved_rope_dim > self.index_head_dim:
            raise ValueError(
                f"the indexer rotates the first rope_dim={self.resolved_rope_dim} of its index_head_dim="
                f"{self.index_head_dim} dimensions: index_head_dim must be at least rope_dim"
            )

    def _check_gemma_fields(self) -> None:
        """Check the embedding scale and the sliding layers' own RoPE base (Gemma 3)."""
        check_bool("scale_embeddings", self.scale_embeddings)
        if self.scale_embeddings and self.positional == "sinusoidal":
            raise ValueError(
                "scale_embeddings=True with positional='sinusoidal': sinusoidal positions already scale the "
                "embeddings by sqrt(d_model); leave scale_embeddings=False"
            )
        if self.sliding_rope_base is None:
            return
        check_number("sliding_rope_base", self.sliding_rope_base, low=1.0, low_open=True)
        if self.positional != "rope" or self.attention != "mha" or self.block != "standard":
            raise ValueError(
                f"sliding_rope_base={self.sliding_rope_base} needs positional='rope' with attention='mha' and "
                f"block='standard', got positional={self.positional!r}, attention={self.attention!r}, "
                f"block={self.block!r}"
            )
        if "sliding" not in self.resolved_layer_types:
            raise ValueError(
                f"sliding_rope_base={self.sliding_rope_base} but no layer is 'sliding' (layer_types="
                f"{self.layer_types!r}, sliding_window={self.sliding_window!r})"
            )

    def _check_gate_and_softcap(self) -> None:
        """Check the attention's output gate and logit soft-cap (chapter 16): built-in attention only."""
        if self.attention_gate is not None:
            check_choice("attention_gate", self.attention_gate, GATE_KINDS)
        if self.attention_softcap is not None:
            check_number("attention_softcap", self.attention_softcap, low=0.0, low_open=True)
        if self.final_softcap is not None:  # on the logits, so any attention or block kind
            check_number("final_softcap", self.final_softcap, low=0.0, low_open=True)
        for name in ("attention_gate", "attention_softcap"):
            if getattr(self, name) is not None and (self.attention != "mha" or self.block != "standard"):
                raise ValueError(
                    f"{name}={getattr(self, name)!r} is an option of the standard blocks' multi-head attention; "
                    f"got attention={self.attention!r}, block={self.block!r}"
                )

    def _check_layer_pattern(self) -> None:
        """Check the per-layer attention pattern (chapter 15): windows, sinks, shared keys and values."""
        for name in ("layer_types", "kv_share"):
            value = getattr(self, name)
            if isinstance(value, list):  # e.g. read back from JSON: store the frozen form
                object.__setattr__(self, name, tuple(value))
        check_window(self.sliding_window, "sliding_window")
        check_bool("attention_sinks", self.attention_sinks)
        L = self.n_layers
        if self.layer_types is not None:
            if not isinstance(self.layer_types, tuple) or len(self.layer_types) != L:
                raise ValueError(
                    f"layer_types must give one of {LAYER_TYPES} per layer ({L}), got {self.layer_types!r}"
                )
            for kind in self.layer_types:
                check_choice("layer_types[i]", kind, LAYER_TYPES)
            if "sliding" in self.layer_types and self.sliding_window is None:
                raise ValueError("layer_types has 'sliding' layers but sliding_window=None: give the window")
            if "sliding" not in self.layer_types and self.sliding_window is not None:
                raise ValueError(f"sliding_window={self.sliding_window} but no layer of layer_types is 'sliding'")
        self._check_linear_layers()
        if self.kv_share is not None:
            if not isinstance(self.kv_share, tuple) or len(self.kv_share) != L:
                raise ValueError(f"kv_share must give a source layer per layer ({L}), got {self.kv_share!r}")
            types = self.resolved_layer_types
            for i, j in enumerate(self.kv_share):
                check_int(f"kv_share[{i}]", j, minimum=0)
                if j > i or self.kv_share[j] != j:
                    raise ValueError(
                        f"kv_share[{i}]={j}: a layer reuses an earlier (or its own) layer that computes its own "
                        f"keys and values, got kv_share={self.kv_share}"
                    )
                if types[i] == "linear" and j != i:
                    raise ValueError(
                        f"kv_share[{i}]={j}: layer {i} is 'linear' (Gated DeltaNet), which has no keys to share"
                    )
                if types[i] != types[j]:
                    raise ValueError(f"kv_share[{i}]={j} shares keys between a {types[i]!r} and a {types[j]!r} layer")
        used = [
            n
            for n, on in (
                ("layer_types", self.layer_types is not None),
                ("sliding_window", self.sliding_window),
                ("attention_sinks", self.attention_sinks),
                ("kv_share", self.kv_share),
            )
            if on
        ]
        if used and (self.attention != "mha" or self.block != "standard"):
            raise ValueError(
                f"{', '.join(used)} need attention='mha' and block='standard', got attention={self.attention!r}, "
                f"block={self.block!r}"
            )

    def _check_linear_layers(self) -> None:
        """Check the ``"linear"`` (Gated DeltaNet) layers' sizes (chapter 17)."""
        for name in ("linear_n_heads", "linear_head_dim", "linear_n_value_heads", "linear_value_head_dim"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name))
        check_int("linear_conv_size", self.linear_conv_size)
        set_ = [f.name for f in fields(self) if f.name.startswith("linear_") and getattr(self, f.name) != f.default]
        if "linear" not in self.resolved_layer_types:
            if set_:
                raise ValueError(f"{', '.join(set_)} configure 'linear' layers, but layer_types={self.layer_types!r}")
            return
        if self.linear_n_value_heads is not None and self.linear_n_value_heads % self.resolved_linear_n_heads:
            raise ValueError(
                f"linear_n_value_heads={self.linear_n_value_heads} is not a multiple of "
                f"linear_n_heads={self.resolved_linear_n_heads}"
            )
        if self.positional == "alibi":  # a Gated DeltaNet layer has no scores to add a bias to
            raise ValueError("'linear' layers take no score bias: positional='alibi' cannot be used with them")

    @property
    def resolved_linear_n_heads(self) -> int:
        """Query/key heads of a ``"linear"`` layer: ``linear_n_heads``, else ``n_heads``."""
        return self.n_heads if self.linear_n_heads is None else self.linear_n_heads

    @property
    def resolved_linear_head_dim(self) -> int:
        """Query/key head width of a ``"linear"`` layer: ``linear_head_dim``, else the attention's."""
        return self.resolved_head_dim if self.linear_head_dim is None else self.linear_head_dim

    @property
    def resolved_linear_n_value_heads(self) -> int:
        """Value heads of a ``"linear"`` layer: ``linear_n_value_heads``, else its query/key heads."""
        return self.resolved_linear_n_heads if self.linear_n_value_heads is None else self.linear_n_value_heads

    @property
    def resolved_linear_value_head_dim(self) -> int:
        """Value head width of a ``"linear"`` layer: ``linear_value_head_dim``, else its query/key width."""
        return self.resolved_linear_head_dim if self.linear_value_head_dim is None else self.linear_value_head_dim

    @property
    def resolved_layer_types(self) -> tuple[str, ...]:
        """The type of each layer: ``layer_types``, else every layer sliding if ``sliding_window``, else full."""
        if self.layer_types is not None:
            return self.layer_types
        return ("sliding" if self.sliding_window is not None else "full",) * self.n_layers

    def layer_window(self, i: int) -> int | None:
        """The attention window of layer ``i`` (None: full attention)."""
        return self.sliding_window if self.resolved_layer_types[i] == "sliding" else None

    _MOE_FIELDS = (
        "experts_per_token", "n_shared_experts", "moe_d_ff", "router_scoring", "router_topk_first",
        "router_normalize", "router_scale", "router_groups", "router_topk_groups", "router_bias",
        "capacity_factor", "first_dense_layers", "expert_swiglu_limit", "shared_expert_d_ff", "shared_expert_gate",
        "router_weight_inputs", "moe_layer_step",
    )  # fmt: skip

    def _check_moe(self) -> None:
        """Check the mixture-of-experts fields (chapter 19): the router's own checks run on a probe router."""
        if self.n_experts is None:
            changed = [n for n in self._MOE_FIELDS if getattr(self, n) != type(self).__dataclass_fields__[n].default]
            if changed:
                raise ValueError(f"{', '.join(changed)} configure mixture-of-experts layers; set n_experts too")
            return
        check_int("n_experts", self.n_experts)
        check_int("n_shared_experts", self.n_shared_experts, minimum=0)
        check_int("first_dense_layers", self.first_dense_layers, minimum=0)
        check_int("moe_layer_step", self.moe_layer_step)
        check_bool("router_weight_inputs", self.router_weight_inputs)
        if self.moe_layer_step != 1 and not any(self.is_moe_layer(i) for i in range(self.n_layers)):
            raise ValueError(
                f"first_dense_layers={self.first_dense_layers}, moe_layer_step={self.moe_layer_step} leave no "
                f"mixture-of-experts layer of n_layers={self.n_layers}; leave n_experts=None for a dense model"
            )
        if self.moe_d_ff is not None:
            check_int("moe_d_ff", self.moe_d_ff)
        if self.capacity_factor is not None:
            check_number("capacity_factor", self.capacity_factor, low=0.0, low_open=True)
        if self.mlp != "swiglu" or self.block != "standard":
            raise ValueError(
                f"n_experts={self.n_experts}: the experts are SwiGLUs in standard blocks; got mlp={self.mlp!r}, "
                f"block={self.block!r}"
            )
        if self.first_dense_layers >= self.n_layers:
            raise ValueError(
                f"first_dense_layers={self.first_dense_layers} leaves no mixture-of-experts layer of "
                f"n_layers={self.n_layers}; leave n_experts=None for a dense model"
            )
        if self.expert_swiglu_limit is not None:
            check_number("expert_swiglu_limit", self.expert_swiglu_limit, low=0.0, low_open=True)
        check_bool("shared_expert_gate", self.shared_expert_gate)
        if self.shared_expert_d_ff is not None:
            check_int("shared_expert_d_ff", self.shared_expert_d_ff)
        for name in ("shared_expert_d_ff", "shared_expert_gate"):
            if getattr(self, name) not in (None, False) and not self.n_shared_experts:
                raise ValueError(
                    f"{name}={getattr(self, name)!r} configures the shared experts, but n_shared_experts=0"
                )
        from .moe import TopKRouter  # the router checks k, the scoring, the order and the groups

        with torch.device("meta"):
            TopKRouter(
                1, self.n_experts, self.experts_per_token, scoring=self.router_scoring,
                topk_first=self.router_topk_first, normalize=self.router_normalize, scale=self.router_scale,
                n_groups=self.router_groups, topk_groups=self.router_topk_groups, bias=self.router_bias,
            )  # fmt: skip

    def is_moe_layer(self, i: int) -> bool:
        """Whether layer ``i``'s MLP is a mixture of experts (past ``first_dense_layers``, per ``moe_layer_step``)."""
        return self.n_experts is not None and i >= self.first_dense_layers and (i + 1) % self.moe_layer_step == 0

    @property
    def resolved_moe_d_ff(self) -> int:
        """An expert's hidden width: ``moe_d_ff``, else ``resolved_d_ff``."""
        return self.resolved_d_ff if self.moe_d_ff is None else self.moe_d_ff

    # Resolved sizes -----------------------------------------------------------------
    @property
    def resolved_n_kv_heads(self) -> int:
        """``n_kv_heads``, or ``n_heads`` when it is None."""
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def resolved_d_ff(self) -> int:
        """The MLP hidden width actually used."""
        return mlp_hidden_dim(self.mlp, self.d_model, self.d_ff)

    @property
    def resolved_head_dim(self) -> int:
        """The per-head width actually used."""
        return self.d_model // self.n_heads if self.head_dim is None else self.head_dim

    @property
    def resolved_v_head_dim(self) -> int:
        """MLA's value width per head actually used (``head_dim`` when ``v_head_dim`` is None)."""
        return self.resolved_head_dim if self.v_head_dim is None else self.v_head_dim

    @property
    def resolved_rope_dim(self) -> int:
        """MLA's decoupled RoPE width per head (0: none); MLA's own default when ``rope_dim`` is None."""
        if self.positional != "rope":
            return 0
        return default_rope_dim(self.resolved_head_dim) if self.rope_dim is None else self.rope_dim

    # Presets --------------------------------------------------------------------------
    @classmethod
    def gpt2_like(cls, **overrides) -> DecoderConfig:
        """GPT-2's architecture at a toy size: MHA, learned positions, GELU, LayerNorm, pre-norm, tied, biases.

        GPT-2 small's shape is ``gpt2_like(vocab_size=50257, n_layers=12, d_model=768,
        n_heads=12, max_len=1024)`` (124,439,808 parameters).
        """
        base = dict(
            vocab_size=64,
            n_layers=2,
            d_model=64,
            n_heads=4,
            max_len=128,
            positional="learned",
            mlp="gelu",
            norm="layernorm",
            norm_position="pre",
            tie_weights=True,
            bias=True,
        )
        return cls(**{**base, **overrides})

    @classmethod
    def llama_like(cls, **overrides) -> DecoderConfig:
        """LLaMA's architecture at a toy size: GQA, RoPE, SwiGLU, RMSNorm, pre-norm, untied, no biases.

        LLaMA-7B's shape is ``llama_like(vocab_size=32000, n_layers=32, d_model=4096,
        n_heads=32, n_kv_heads=32, d_ff=11008, max_len=2048)`` (6,738,415,616 parameters).
        """
        base = dict(
            vocab_size=64,
            n_layers=2,
            d_model=64,
            n_heads=4,
            n_kv_heads=2,
            max_len=128,
            positional="rope",
            mlp="swiglu",
            norm="rmsnorm",
            norm_position="pre",
            tie_weights=False,
            bias=False,
        )
        return cls(**{**base, **overrides})

    # The shapes of real models (from their config.json); parameter_count equals the published counts.
    @classmethod
    def llama3_8b(cls, **overrides) -> DecoderConfig:
        """Meta-Llama-3-8B: 32 layers, d=4096, GQA 32/8 heads, SwiGLU 14336, θ=500000, ε=1e-5; 8,030,261,248."""
        base = dict(
            vocab_size=128256, n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8, d_ff=14336, max_len=8192,
            rope_base=500000.0, norm_eps=1e-5,
        )  # fmt: skip
        return cls.llama_like(**{**base, **overrides})

    @classmethod
    def qwen3_8b(cls, **overrides) -> DecoderConfig:
        """Qwen3-8B: 36 layers, d=4096, GQA 32/8 heads of width 128, QK-norm, SwiGLU 12288, untied; 8,190,735,360."""
        base = dict(
            vocab_size=151936, n_layers=36, d_model=4096, n_heads=32, n_kv_heads=8, head_dim=128, d_ff=12288,
            max_len=40960, rope_base=1000000.0, norm_eps=1e-6, qk_norm=True,
        )  # fmt: skip
        return cls.llama_like(**{**base, **overrides})

    @classmethod
    def qwen3_0_6b(cls, **overrides) -> DecoderConfig:
        """Qwen3-0.6B: 28 layers, d=1024, 16 query heads of width 128 (> d/H = 64), tied; 596,049,920 parameters."""
        base = dict(
            vocab_size=151936, n_layers=28, d_model=1024, n_heads=16, n_kv_heads=8, head_dim=128, d_ff=3072,
            max_len=40960, rope_base=1000000.0, norm_eps=1e-6, qk_norm=True, tie_weights=True,
        )  # fmt: skip
        return cls.llama_like(**{**base, **overrides})

    # Mixtures of experts (chapter 19): total and active counts (attn_core.params) equal the published ones.
    @classmethod
    def mixtral_8x7b(cls, **overrides) -> DecoderConfig:
        """Mixtral-8x7B: 32 layers, d=4096, GQA 32/8, 8 SwiGLU experts of width 14336, top-2; 46,702,792,704.

        Its router keeps the top-2 logits and softmaxes over them (``router_topk_first``);
        12,879,925,248 parameters are active per token (embedding included): "12.9B".
        """
        base = dict(
            vocab_size=32000, n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8, d_ff=14336, max_len=32768,
            rope_base=1000000.0, norm_eps=1e-5, n_experts=8, experts_per_token=2, router_topk_first=True,
        )  # fmt: skip
        return cls.llama_like(**{**base, **overrides})

    @classmethod
    def gpt_oss_20b(cls, **overrides) -> DecoderConfig:
        """gpt-oss-20b's shapes: 24 layers, d=2880, GQA 64/8 heads of 64, sinks, windows of 128 on alternate layers,
        biases, 32 experts of width 2880, top-4 with a router bias; 20,914,757,184 parameters.

        Not gpt-oss itself: its experts' SwiGLU is clamped (``limit=7``, ``(up + 1)·gate·σ(1.702·gate)``),
        which attn_core does not compute, and its RoPE is YaRN-scaled (``rope_scaling=YarnScaling(factor=32.0,
        original_max_position=4096, truncate=False)`` would give that); the parameters (and so the counts) are
        the same. Active per token without the embedding: 3,608,307,264 ("3.61B").
        """
        base = dict(
            vocab_size=201088, n_layers=24, d_model=2880, n_heads=64, n_kv_heads=8, head_dim=64, d_ff=2880,
            max_len=131072, rope_base=150000.0, norm_eps=1e-5, bias=True, attention_sinks=True, sliding_window=128,
            layer_types=("sliding", "full") * 12, n_experts=32, experts_per_token=4, router_topk_first=True,
            router_bias=True,
        )  # fmt: skip
        return cls.llama_like(**{**base, **overrides})

    @classmethod
    def gpt_oss_120b(cls, **overrides) -> DecoderConfig:
        """gpt-oss-120b's shapes: as :meth:`gpt_oss_20b` with 36 layers and 128 experts; 116,829,156,672 parameters.

        Active per token without the embedding: 5,132,849,472 ("5.13B").
        """
        base = dict(n_layers=36, layer_types=("sliding", "full") * 18, n_experts=128)
        return cls.gpt_oss_20b(**{**base, **overrides})

    @classmethod
    def deepseek_v3_moe(cls, **overrides) -> DecoderConfig:
        """DeepSeek-V3 with its mixture of experts: :meth:`deepseek_v3` whose layers 3..60 route each token to
        8 of 256 experts of width 2048 (sigmoid scores, 8 groups of which 4 may be used, weights renormalised
        and scaled by 2.5) plus 1 shared expert; 671,026,404,352 parameters ("671B"), 36,625,603,584 active
        per token without the embedding ("37B"). The multi-token-prediction module (14B) is not counted, as
        in the paper's 671B.
        """
        base = dict(
            n_experts=256, experts_per_token=8, n_shared_experts=1, moe_d_ff=2048, router_scoring="sigmoid",
            router_normalize=True, router_scale=2.5, router_groups=8, router_topk_groups=4, first_dense_layers=3,
        )  # fmt: skip
        return cls.deepseek_v3(**{**base, **overrides})

    @classmethod
    def deepseek_v3(cls, **overrides) -> DecoderConfig:
        """DeepSeek-V3's attention and dense layers: MLA with 128 heads, every layer dense (no MoE).

        DeepSeek-V3 has 61 layers; the first 3 have a dense SwiGLU MLP (width 18432), the
        other 58 a mixture of experts, which attn_core does not implement. This preset makes
        *every* layer dense, so its total is not DeepSeek-V3's; what equals the published
        shapes is each part: the attention of a layer (187,107,328 parameters: q-LoRA 1536,
        KV latent 512, content/RoPE/value widths 128/64/128), a dense layer (583,483,392)
        and the embeddings. With the 58 MoE layers' experts added (256 routed + 1 shared of
        width 2048, and the router) the sum is 671,026,419,200: the published 671B
        (``tests/test_config.py`` does that sum).
        """
        base = dict(
            vocab_size=129280, n_layers=61, d_model=7168, n_heads=128, d_ff=18432, max_len=4096,
            attention="mla", d_latent=512, d_q_latent=1536, head_dim=128, rope_dim=64, v_head_dim=128,
            norm_eps=1e-6, rope_layout="interleaved",
        )  # fmt: skip
        return cls.llama_like(**{"n_kv_heads": None, **base, **overrides})
