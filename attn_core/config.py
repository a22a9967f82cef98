"""The decoder's configuration: a frozen dataclass, its presets, and its parameter count by formula.

* :class:`DecoderConfig` holds every choice that defines a :class:`~attn_core.DecoderLM`
  and checks them together (a value that makes no sense *with another* is refused here,
  naming both). Optional sizes stay ``None`` and are resolved by the ``resolved_*``
  properties from the same defaults the modules use (:func:`~attn_core.mlp.mlp_hidden_dim`,
  :func:`~attn_core.mla.default_rope_dim`), so that a config and the model built from it
  never disagree.
* :meth:`DecoderConfig.gpt2_like` and :meth:`DecoderConfig.llama_like`: the two presets.
* :func:`parameter_count` / :func:`parameter_breakdown`: the number of parameters from
  the configuration alone; a test holds it equal to the module's count.

Shape legend:
    V        vocabulary size
    L        number of layers (blocks)
    d        ``d_model``, the width of the residual stream; ``f`` the MLP hidden width
    H        query heads, ``H_kv`` key/value heads, ``D`` head width
"""

from __future__ import annotations

from dataclasses import dataclass

from .checks import check_bool, check_choice, check_instance, check_int, check_number
from .mla import default_rope_dim
from .mlp import MLP_KINDS, mlp_hidden_dim
from .norms import NORM_KINDS, NORM_POSITIONS

__all__ = ["DecoderConfig", "parameter_count", "parameter_breakdown"]

POSITIONAL_KINDS = ("learned", "rope", "none")
ATTENTION_KINDS = ("mha", "mla")
BLOCK_KINDS = ("standard", "sas", "sas-p")


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
        positional: ``"learned"`` (added to the token embeddings), ``"rope"`` (queries and
            keys rotated in every layer) or ``"none"`` (causal attention alone).
        mlp: ``"gelu"`` or ``"swiglu"``.
        norm: ``"layernorm"`` or ``"rmsnorm"``.
        norm_position: ``"pre"`` or ``"post"``.
        tie_weights: The output projection reuses the token embedding matrix.
        attention: ``"mha"`` (MHA/GQA/MQA) or ``"mla"`` (multi-head latent attention).
        d_latent: MLA's key/value latent width ``d_c`` (required for ``"mla"``).
        d_q_latent: MLA's query latent width (``None``: queries are not compressed).
        head_dim: MLA's per-head width (``None``: ``d_model // n_heads``). For MHA it must
            be ``None`` or ``d_model // n_heads``.
        rope_dim: MLA's decoupled RoPE width per head (``None``: MLA's default,
            :func:`~attn_core.mla.default_rope_dim`, with ``positional="rope"``; otherwise
            no RoPE part).
        block: ``"standard"`` (:class:`~attn_core.TransformerBlock`), ``"sas"`` or ``"sas-p"``
            (:class:`~attn_core.SimplifiedBlock`, He & Hofmann 2023).
        beta_ff: Initial MLP-branch gain ``β_FF`` of the simplified blocks.
        dropout: Dropout on embeddings, attention weights and sub-layer outputs.
        bias: Biases in the attention projections and MLPs (GPT-2: yes, LLaMA: no).
        rope_base: RoPE's base.
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

        if self.attention == "mha" or self.head_dim is None:
            if self.d_model % self.n_heads != 0:
                raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        kv = self.resolved_n_kv_heads
        if self.n_heads % kv != 0:
            raise ValueError(f"n_heads={self.n_heads} is not divisible by n_kv_heads={kv}")
        if self.attention == "mha":
            if self.head_dim is not None and self.head_dim != self.d_model // self.n_heads:
                raise ValueError(
                    f"head_dim={self.head_dim} must equal d_model // n_heads = {self.d_model // self.n_heads} "
                    f"for attention='mha' (a free head_dim is an MLA option)"
                )
            for name in ("d_latent", "d_q_latent", "rope_dim"):
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
        if self.block != "standard":
            if self.attention != "mha" or kv != self.n_heads:
                raise ValueError(
                    f"block={self.block!r} uses its own shaped attention: it needs attention='mha' with "
                    f"n_kv_heads = n_heads, got attention={self.attention!r}, n_kv_heads={kv}, n_heads={self.n_heads}"
                )
            if self.norm_position != "pre":
                raise ValueError(f"block={self.block!r} is a pre-norm block; got norm_position={self.norm_position!r}")

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


# --------------------------------------------------------------------------- parameter count by formula
def _norm_params(kind: str, d: int) -> int:
    return 2 * d if kind == "layernorm" else d  # gain (+ bias for LayerNorm)


def _mlp_params(kind: str, d_model: int, d_ff: int, bias: bool) -> int:
    if kind == "gelu":  # up (d -> f) and down (f -> d)
        return 2 * d_model * d_ff + ((d_ff + d_model) if bias else 0)
    return 3 * d_model * d_ff + ((2 * d_ff + d_model) if bias else 0)  # gate, up, down


def _mla_attention_params(c: DecoderConfig) -> int:
    """DeepSeek-V2's latent attention without biases, with RMSNorms on the latents."""
    d, H, D, d_c, r = c.d_model, c.n_heads, c.resolved_head_dim, c.d_latent, c.resolved_rope_dim
    if c.d_q_latent is None:
        q = d * H * (D + r)  # W_Q: d -> H·(D + d_r)
    else:  # W_DQ, its RMSNorm, W_UQ (content) and W_QR (RoPE part)
        q = d * c.d_q_latent + c.d_q_latent + c.d_q_latent * H * (D + r)
    kv = d * d_c + d_c + 2 * d_c * H * D  # W_DKV, its RMSNorm, W_UK, W_UV
    return q + kv + d * r + H * D * d  # + W_KR (shared RoPE key), W_O


def _shaped_attention_params(c: DecoderConfig, first: bool) -> int:
    d = c.d_model
    qk = 2 * d * d + (2 * d if c.bias else 0)  # W_Q, W_K
    return qk + (d * d if first else 0) + 3 * c.n_heads  # first layer's W_V; α, β, γ per head


def parameter_breakdown(config: DecoderConfig) -> dict[str, int]:
    """The parameters of ``DecoderLM(config)`` by component, from the formula alone.

    Keys: ``embedding``, ``positions``, ``attention``, ``mlp``, ``norms``, ``gains``
    (the simplified blocks' ``β_FF``), ``lm_head`` (0 when tied). A tied output
    projection shares the embedding matrix and is counted once.
    """
    check_instance("config", config, DecoderConfig)
    c = config
    d, L, V = c.d_model, c.n_layers, c.vocab_size
    mlp = L * _mlp_params(c.mlp, d, c.resolved_d_ff, c.bias)
    if c.block == "standard":
        if c.attention == "mha":
            H, kv, D = c.n_heads, c.resolved_n_kv_heads, c.resolved_head_dim
            per_layer = d * H * D + 2 * d * kv * D + H * D * d  # W_Q, W_K, W_V, W_O
            if c.bias:
                per_layer += H * D + 2 * kv * D + d
            attention = L * per_layer
        else:
            attention = L * _mla_attention_params(c)
        norms_per_layer, gains = 2, 0
    else:
        attention = sum(_shaped_attention_params(c, first=(i == 0)) for i in range(L))
        norms_per_layer = 2 if c.block == "sas" else 1  # SAS-P shares one norm for both branches
        gains = L  # β_FF per block
    # One extra norm either way: before the logits (pre-norm) or on the embeddings (post-norm).
    extra_norm = 1
    return {
        "embedding": V * d,
        "positions": c.max_len * d if c.positional == "learned" else 0,
        "attention": attention,
        "mlp": mlp,
        "norms": (L * norms_per_layer + extra_norm) * _norm_params(c.norm, d),
        "gains": gains,
        "lm_head": 0 if c.tie_weights else V * d,
    }


def parameter_count(config: DecoderConfig) -> int:
    """Total parameters of ``DecoderLM(config)``, by formula (a tied head counted once)."""
    return sum(parameter_breakdown(config).values())
