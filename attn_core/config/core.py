"""The decoder's configuration: :class:`DecoderConfig`, the core of a model's shape and its parts.

:class:`DecoderConfig` holds the sizes and choices every decoder has (as nanoGPT's
``GPTConfig``) and the parts of :mod:`~attn_core.config.parts` for the rest: positions,
the layer pattern, the linear layers, the mixture of experts and the sparse-attention
indexer. Each part checks itself; the config checks what ties the parts to the core (an
option of the standard blocks' multi-head attention, a pattern of ``n_layers`` entries),
each rule once. Optional sizes stay ``None`` and are resolved by the ``resolved_*``
properties from the same defaults the modules use (:func:`~attn_core.modules.mlp.mlp_hidden_dim`,
:func:`~attn_core.layers.mla.default_rope_dim`), so that a config and its model never disagree.
:meth:`DecoderConfig.layer` gives what one layer is (:class:`~attn_core.config.LayerSpec`).
The presets (``DecoderConfig.gpt2_like``, ``llama3_8b``, ...) live in
:mod:`~attn_core.config.presets`.

Shape legend:
    V        vocabulary size
    L        number of layers (blocks)
    d        ``d_model``, the width of the residual stream; ``f`` the MLP hidden width
    H        query heads, ``H_kv`` key/value heads, ``D`` head width
"""

from __future__ import annotations

from dataclasses import dataclass

from ..checks import check_bool, check_choice, check_instance, check_int, check_number
from ..layers.gating import GATE_KINDS
from ..layers.mla import default_rope_dim
from ..modules.mlp import MLP_KINDS, mlp_hidden_dim
from ..modules.norms import NORM_KINDS, NORM_POSITIONS, check_qk_norm
from . import presets
from .parts import PARTS, Indexer, LayerPattern, LinearLayers, MoE, Positions, changed_fields_repr
from .rules import check_moe_and_indexer, check_pattern, check_positions, check_standard_mha_options
from .spec import LayerSpec

__all__ = ["DecoderConfig"]

ATTENTION_KINDS = ("mha", "mla")
BLOCK_KINDS = ("standard", "sas", "sas-p")


@dataclass(frozen=True)
class DecoderConfig:
    """Everything that defines a :class:`~attn_core.DecoderLM`; frozen, so one config means one architecture.

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
        mlp: ``"gelu"``, ``"gelu_tanh"`` (GPT-2's tanh approximation), ``"swiglu"`` or
            ``"geglu_tanh"`` (Gemma 2/3's gated MLP).
        norm: ``"layernorm"`` or ``"rmsnorm"``.
        norm_position: ``"pre"``, ``"post"``, ``"sandwich"`` (Gemma 2/3) or ``"post_sublayer"``
            (OLMo 2/3); see :class:`~attn_core.TransformerBlock`.
        tie_weights: The output projection reuses the token embedding matrix.
        attention: ``"mha"`` (MHA/GQA/MQA) or ``"mla"`` (multi-head latent attention).
        d_latent: MLA's key/value latent width ``d_c`` (required for ``"mla"``).
        d_q_latent: MLA's query latent width (``None``: queries are not compressed).
        head_dim: Per-head width of queries and keys (``None``: ``d_model // n_heads``).
        rope_dim: MLA's decoupled RoPE width per head (``None``: MLA's default with RoPE).
        v_head_dim: MLA's value width per head (``None``: ``head_dim``).
        block: ``"standard"`` (:class:`~attn_core.TransformerBlock`), ``"sas"`` or ``"sas-p"``
            (:class:`~attn_core.SimplifiedBlock`, He & Hofmann 2023).
        beta_ff: Initial MLP-branch gain ``β_FF`` of the simplified blocks.
        dropout: Dropout on embeddings, attention weights and sub-layer outputs.
        bias: Biases in the attention projections and MLPs (GPT-2: yes, LLaMA: no).
        norm_eps: The ε of every norm and of the QK-norm (``None``: each norm's default).
        qk_norm: RMSNorm on every query and key head before RoPE (Qwen3, Gemma 3), or
            ``"all_heads"`` over all of a token's heads together (OLMo 2/3).
        attention_sinks: gpt-oss's learned sink logit per head in every softmax denominator.
        attention_gate: The attention's output gate (Qwen3-Next): ``"elementwise"``,
            ``"headwise"`` or ``None``.
        attention_softcap: The attention-logit soft-cap (Gemma 2: 50.0) or ``None``.
        attention_scale: What the scores ``q·k`` are multiplied by (``None``: ``1/√head_dim``).
        qkv_bias: Biases on the query, key and value projections only (Qwen2, GLM-4).
        parallel_block: Attention and MLP read the same normalised input (GPT-J, Cohere).
        scale_embeddings: Multiply the token embeddings by ``√d_model`` (Gemma).
        embedding_multiplier: Multiplies the token embeddings (Granite, 12).
        residual_multiplier: Multiplies each sub-layer's output before it joins the stream (Granite).
        logit_scale: Multiplies the final logits (Cohere; Granite's ``1 / logits_scaling``).
        final_softcap: The final-logit soft-cap ``cap · tanh(logits / cap)`` (Gemma 2: 30.0).
        positions: The positional encoding and which layers use it (:class:`Positions`). Each
            part may be given as a dict of its fields (as ``dataclasses.asdict`` writes it).
        pattern: Each layer's attention type, window, chunk, shared keys (:class:`LayerPattern`).
        linear: The ``"linear"`` (Gated DeltaNet) layers' sizes (:class:`LinearLayers`).
        moe: The mixture-of-experts MLPs (:class:`MoE`); ``None``: every MLP dense.
        indexer: DeepSeek Sparse Attention's indexer (:class:`Indexer`); ``None``: dense MLA.
    """

    vocab_size: int
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int | None = None
    d_ff: int | None = None
    max_len: int = 128
    mlp: str = "gelu"
    norm: str = "layernorm"
    norm_position: str = "pre"
    tie_weights: bool = True
    attention: str = "mha"
    d_latent: int | None = None
    d_q_latent: int | None = None
    head_dim: int | None = None
    rope_dim: int | None = None
    v_head_dim: int | None = None
    block: str = "standard"
    beta_ff: float = 0.1
    dropout: float = 0.0
    bias: bool = False
    norm_eps: float | None = None
    qk_norm: bool | str = False
    attention_sinks: bool = False
    attention_gate: str | None = None
    attention_softcap: float | None = None
    attention_scale: float | None = None
    qkv_bias: bool = False
    parallel_block: bool = False
    scale_embeddings: bool = False
    embedding_multiplier: float = 1.0
    residual_multiplier: float = 1.0
    logit_scale: float = 1.0
    final_softcap: float | None = None
    positions: Positions = Positions()
    pattern: LayerPattern = LayerPattern()
    linear: LinearLayers = LinearLayers()
    moe: MoE | None = None
    indexer: Indexer | None = None

    gpt2_like = classmethod(presets.gpt2_like)
    llama_like = classmethod(presets.llama_like)
    llama3_8b = classmethod(presets.llama3_8b)
    qwen3_8b = classmethod(presets.qwen3_8b)
    qwen3_0_6b = classmethod(presets.qwen3_0_6b)
    mixtral_8x7b = classmethod(presets.mixtral_8x7b)
    gpt_oss_20b = classmethod(presets.gpt_oss_20b)
    gpt_oss_120b = classmethod(presets.gpt_oss_120b)
    deepseek_v3 = classmethod(presets.deepseek_v3)
    deepseek_v3_moe = classmethod(presets.deepseek_v3_moe)

    __repr__ = changed_fields_repr

    def __post_init__(self) -> None:
        for name, part in PARTS.items():  # a part given as a dict (e.g. read back from JSON): store the part
            if isinstance(getattr(self, name), dict):
                object.__setattr__(self, name, part(**getattr(self, name)))
        for name in ("vocab_size", "n_layers", "d_model", "n_heads", "max_len"):
            check_int(name, getattr(self, name))
        for name in ("n_kv_heads", "d_ff", "d_latent", "d_q_latent", "head_dim", "v_head_dim"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name))
        if self.rope_dim is not None:
            check_int("rope_dim", self.rope_dim, minimum=0)
        for name, kinds in (("mlp", MLP_KINDS), ("norm", NORM_KINDS), ("norm_position", NORM_POSITIONS),
                            ("attention", ATTENTION_KINDS), ("block", BLOCK_KINDS)):  # fmt: skip
            check_choice(name, getattr(self, name), kinds)
        check_number("dropout", self.dropout, low=0.0, high=1.0, high_open=True)
        for name in ("tie_weights", "bias", "attention_sinks", "qkv_bias", "parallel_block", "scale_embeddings"):
            check_bool(name, getattr(self, name))
        check_number("beta_ff", self.beta_ff)
        if self.norm_eps is not None:
            check_number("norm_eps", self.norm_eps, low=0.0)
        check_qk_norm(self.qk_norm)  # False, True or "all_heads"
        if self.attention_gate is not None:
            check_choice("attention_gate", self.attention_gate, GATE_KINDS)
        for name in ("attention_softcap", "final_softcap", "attention_scale"):
            if getattr(self, name) is not None:
                check_number(name, getattr(self, name), low=0.0, low_open=True)
        for name in ("embedding_multiplier", "residual_multiplier", "logit_scale"):
            check_number(name, getattr(self, name), low=0.0, low_open=True)
        for name, part in (("positions", Positions), ("pattern", LayerPattern), ("linear", LinearLayers)):
            check_instance(name, getattr(self, name), part)
        check_instance("moe", self.moe, MoE, optional=True)
        check_instance("indexer", self.indexer, Indexer, optional=True)
        self._check_heads()
        self._check_blocks()
        check_pattern(self)  # first: the other rules read one pattern entry per layer
        check_standard_mha_options(self)
        check_positions(self)
        check_moe_and_indexer(self)

    def _check_heads(self) -> None:
        """Heads divide the width, key/value heads divide the heads, MLA's sizes go with MLA only."""
        if self.head_dim is None and self.d_model % self.n_heads != 0:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        kv = self.resolved_n_kv_heads
        if self.n_heads % kv != 0:
            raise ValueError(f"n_heads={self.n_heads} is not divisible by n_kv_heads={kv}")
        positional = self.positions.positional
        if self.attention == "mha":
            for name in ("d_latent", "d_q_latent", "rope_dim", "v_head_dim"):
                if getattr(self, name) is not None:
                    raise ValueError(
                        f"{name}={getattr(self, name)} is an MLA size; set attention='mla' or leave it None"
                    )
            if positional == "rope" and self.resolved_head_dim % 2 != 0:
                raise ValueError(f"positional='rope' needs an even head width, got head_dim={self.resolved_head_dim}")
            return
        if self.d_latent is None:
            raise ValueError("attention='mla' needs d_latent (the key/value latent width)")
        if self.n_kv_heads is not None and self.n_kv_heads != self.n_heads:
            raise ValueError(
                f"attention='mla' has no separate key/value heads; got n_kv_heads={self.n_kv_heads} "
                f"with n_heads={self.n_heads}"
            )
        if positional != "rope" and self.rope_dim:
            raise ValueError(f"rope_dim={self.rope_dim} needs positional='rope', got positional={positional!r}")
        if self.resolved_rope_dim % 2 != 0:
            raise ValueError(f"rope_dim must be even (RoPE rotates pairs), got rope_dim={self.resolved_rope_dim}")
        if positional == "rope" and self.resolved_rope_dim == 0:
            raise ValueError(
                "rope_dim=0 with positional='rope' rotates nothing (rope_base and rope_layout would be "
                "ignored): use positional='none' for latent attention without positions"
            )
        if self.qk_norm:
            raise ValueError("qk_norm=True is not supported with attention='mla' (its latents have their own norms)")

    def _check_blocks(self) -> None:
        """The simplified blocks build their own attention and norms; the others have no ``beta_ff``."""
        if self.parallel_block and self.norm_position != "pre":
            raise ValueError(
                f"parallel_block=True reads one pre-norm for both sub-layers; got norm_position={self.norm_position!r}"
            )
        if self.qkv_bias and self.bias:
            raise ValueError("qkv_bias=True adds biases to q/k/v only; bias=True already gives every projection one")
        if self.block == "standard":
            if self.beta_ff != 0.1:
                raise ValueError(
                    f"beta_ff={self.beta_ff} is the simplified blocks' MLP gain; block='standard' has none "
                    f"(leave it at 0.1 or use block='sas'/'sas-p')"
                )
            return
        kv = self.resolved_n_kv_heads
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
            "residual_multiplier": self.residual_multiplier != 1.0,
        }
        for name, used in unsupported.items():
            if used:
                raise ValueError(
                    f"block={self.block!r} does not support {name}={getattr(self, name)!r} "
                    f"(the simplified blocks build their own attention and norms); use block='standard'"
                )

    # What one layer is -------------------------------------------------------------------
    def layer(self, i: int) -> LayerSpec:
        """Layer ``i``'s type, window, chunk, RoPE, QK-norm, temperature, key/value source and MLP kind."""
        kind, p, pat = self.resolved_layer_types[i], self.positions, self.pattern
        rope = self.layer_has_rope(i)
        share = None if pat.kv_share is None or pat.kv_share[i] == i else pat.kv_share[i]
        return LayerSpec(
            index=i,
            kind=kind,
            window=pat.sliding_window if kind == "sliding" else None,
            chunk=pat.attention_chunk_size if kind == "chunked" else None,
            rope=None if not rope else "sliding_rope" if kind == "sliding" and p.sliding_rope_base else "rope",
            qk_norm=self.qk_norm if p.nope_qk_norm or rope else False,
            temperature=None if rope else p.nope_temperature,
            kv_source=share,
            moe=self.is_moe_layer(i),
        )

    def layer_has_rope(self, i: int) -> bool:
        """Whether layer ``i`` rotates its queries and keys (``positional``, ``rope_full_layers``, ``rope_layers``)."""
        p, kind = self.positions, self.resolved_layer_types[i]
        if p.positional != "rope" or kind == "linear" or (kind == "full" and not p.rope_full_layers):
            return False
        return p.rope_layers is None or p.rope_layers[i]

    def is_moe_layer(self, i: int) -> bool:
        """Whether layer ``i``'s MLP is a mixture of experts."""
        return self.moe is not None and self.moe.is_moe_layer(i)

    # Resolved sizes -----------------------------------------------------------------
    @property
    def resolved_layer_types(self) -> tuple[str, ...]:
        """The type of each layer (:meth:`LayerPattern.types`)."""
        return self.pattern.types(self.n_layers)

    @property
    def resolved_linear_sizes(self) -> tuple[int, int, int, int]:
        """A ``"linear"`` layer's ``(H_k, D_k, H_v, D_v)`` (:meth:`LinearLayers.sizes`)."""
        return self.linear.sizes(self.n_heads, self.resolved_head_dim)

    @property
    def resolved_moe_d_ff(self) -> int:
        """An expert's hidden width: ``moe.moe_d_ff``, else ``resolved_d_ff``."""
        return self.resolved_d_ff if self.moe is None or self.moe.moe_d_ff is None else self.moe.moe_d_ff

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
        if self.positions.positional != "rope":
            return 0
        return default_rope_dim(self.resolved_head_dim) if self.rope_dim is None else self.rope_dim
