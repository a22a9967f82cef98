"""The transformer block and a decoder-only language model built from it.

* :class:`FeedForward`: the position-wise MLP of the original transformer / GPT-2,
  ``d_model -> d_ff -> d_model`` with a GELU in between.
* :class:`SwiGLU`: the gated MLP of PaLM and LLaMA, ``down(silu(gate(x)) * up(x))``.
* :class:`TransformerBlock`: attention and MLP sub-layers, each on the residual stream,
  with the normalisation before (pre-norm) or after (post-norm) the residual addition.
* :class:`DecoderConfig` (a frozen dataclass, with the presets
  :meth:`DecoderConfig.gpt2_like` and :meth:`DecoderConfig.llama_like`) and
  :class:`DecoderLM`, a causal language model with one code path for training (the full
  sequence) and decoding (a key/value cache per layer).
* :func:`parameter_count` / :func:`parameter_breakdown`: the number of parameters from
  the configuration alone, by formula; a test holds it equal to the module's count.

Shape legend:
    B        batch size
    T        positions in this call; with caches, ``T_k = past + T`` keys
    V        vocabulary size
    d_model  width of the residual stream, ``d_ff`` hidden width of the MLP
    H        query heads, ``H_kv`` key/value heads, ``D`` head width
    L        number of layers (blocks)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import check_int
from .attention import MultiHeadAttention
from .cache import KVCache
from .norms import LayerNorm, RMSNorm

__all__ = [
    "FeedForward",
    "SwiGLU",
    "swiglu_hidden_dim",
    "TransformerBlock",
    "DecoderConfig",
    "DecoderLM",
    "parameter_count",
    "parameter_breakdown",
]

MLP_KINDS = ("gelu", "swiglu")
NORM_KINDS = ("layernorm", "rmsnorm")
NORM_POSITIONS = ("pre", "post")
POSITIONAL_KINDS = ("learned", "rope", "none")
ATTENTION_KINDS = ("mha", "mla")
BLOCK_KINDS = ("standard", "sas", "sas-p")


# --------------------------------------------------------------------------- argument checks


def _check_choice(name: str, value: object, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {name}={value!r}")
    return value  # type: ignore[return-value]


def _check_dropout(dropout: object) -> float:
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be a number in [0, 1), got dropout={dropout!r}")
    return float(dropout)


def _check_sequence(x: object, d_model: int) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 3 or x.shape[-1] != d_model:
        raise ValueError(f"x must have shape (B, T, d_model={d_model}), got {tuple(x.shape)}")


def make_norm(kind: str, d: int) -> nn.Module:
    """``"layernorm"`` -> :class:`~attn_core.LayerNorm`, ``"rmsnorm"`` -> :class:`~attn_core.RMSNorm`."""
    _check_choice("norm", kind, NORM_KINDS)
    return LayerNorm(d) if kind == "layernorm" else RMSNorm(d)


def _norm_params(kind: str, d: int) -> int:
    return 2 * d if kind == "layernorm" else d  # gain (+ bias for LayerNorm)


# --------------------------------------------------------------------------- MLPs
class FeedForward(nn.Module):
    """Position-wise MLP with a GELU: ``down(gelu(up(x)))`` (GPT-2, BERT).

    Every position goes through the same two-layer network on its own: attention mixes
    information *across* positions, the MLP transforms each position's vector.

    Args:
        d_model: Width of the input and output.
        d_ff: Hidden width; default ``4 * d_model`` (the original transformer's ratio).
        dropout: Dropout on the output, in training mode.
        bias: Give both linear layers a bias (GPT-2 does).

    Shapes:
        x: ``(..., d_model)``; output: ``(..., d_model)``
    """

    def __init__(self, d_model: int, d_ff: int | None = None, *, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        check_int("d_model", d_model)
        d_ff = 4 * d_model if d_ff is None else check_int("d_ff", d_ff)
        self.d_model, self.d_ff = d_model, d_ff
        self.up_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(_check_dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Shapes: x ``(..., d_model)`` -> ``(..., d_model)``."""
        return self.dropout(self.down_proj(F.gelu(self.up_proj(x))))

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, d_ff={self.d_ff}"


def swiglu_hidden_dim(d_model: int, multiple_of: int = 8) -> int:
    """LLaMA's SwiGLU hidden width: ``⅔ · 4 · d_model``, rounded *up* to a multiple of ``multiple_of``.

    ``swiglu_hidden_dim(4096, 256) == 11008``, LLaMA-7B's value.
    """
    check_int("d_model", d_model)
    check_int("multiple_of", multiple_of)
    hidden = int(2 * (4 * d_model) / 3)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


class SwiGLU(nn.Module):
    """Gated MLP with a SiLU ("swish") gate: ``down(silu(gate(x)) * up(x))`` (Shazeer, 2020).

    Why the hidden width is ``⅔ · 4 · d_model``: a GELU MLP with hidden width ``4d`` has
    two ``d × 4d`` matrices, ``8d²`` parameters. SwiGLU has *three* matrices (gate, up,
    down); with hidden width ``f`` that is ``3·d·f`` parameters, and ``3·d·f = 8d²`` gives
    ``f = ⅔ · 4d = 8d/3``. So the gated MLP costs the same parameters and FLOPs as the
    one it replaces, which makes the comparison fair (Shazeer's paper and LLaMA both do
    this). The width is then rounded up to a multiple of ``multiple_of`` so that the
    matrices tile well on hardware (LLaMA uses 256: 4096 -> 11008).

    Args:
        d_model: Width of the input and output.
        d_ff: Hidden width; default :func:`swiglu_hidden_dim` ``(d_model, multiple_of)``.
        multiple_of: Rounding of the default hidden width.
        dropout: Dropout on the output, in training mode.
        bias: Give the linear layers biases (LLaMA does not).

    Shapes:
        x: ``(..., d_model)``; output: ``(..., d_model)``
    """

    def __init__(
        self, d_model: int, d_ff: int | None = None, *, multiple_of: int = 8, dropout: float = 0.0, bias: bool = False
    ) -> None:
        super().__init__()
        check_int("d_model", d_model)
        d_ff = swiglu_hidden_dim(d_model, multiple_of) if d_ff is None else check_int("d_ff", d_ff)
        self.d_model, self.d_ff = d_model, d_ff
        self.gate_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.up_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(_check_dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Shapes: x ``(..., d_model)`` -> ``(..., d_model)``."""
        return self.dropout(self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x)))

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, d_ff={self.d_ff}"


def make_mlp(kind: str, d_model: int, d_ff: int | None, *, bias: bool, dropout: float = 0.0) -> nn.Module:
    """``"gelu"`` -> :class:`FeedForward`, ``"swiglu"`` -> :class:`SwiGLU`."""
    _check_choice("mlp", kind, MLP_KINDS)
    if kind == "gelu":
        return FeedForward(d_model, d_ff, dropout=dropout, bias=bias)
    return SwiGLU(d_model, d_ff, dropout=dropout, bias=bias)


def _resolve_d_ff(kind: str, d_model: int, d_ff: int | None) -> int:
    if d_ff is not None:
        return d_ff
    return 4 * d_model if kind == "gelu" else swiglu_hidden_dim(d_model)


def _mlp_params(kind: str, d_model: int, d_ff: int, bias: bool) -> int:
    if kind == "gelu":  # up (d -> f) and down (f -> d)
        return 2 * d_model * d_ff + ((d_ff + d_model) if bias else 0)
    return 3 * d_model * d_ff + ((2 * d_ff + d_model) if bias else 0)  # gate, up, down


# --------------------------------------------------------------------------- the block
class TransformerBlock(nn.Module):
    """One transformer block: an attention sub-layer and an MLP sub-layer on the residual stream.

    The residual stream ``x`` runs through the whole model; each sub-layer ``f`` reads it
    and adds something back. Where the normalisation goes matters (chapter 9):

    * ``norm_position="pre"`` (GPT-2, LLaMA): ``x + f(norm(x))``. The stream itself is
      never normalised, so the identity path from the last layer to the first is clean.
    * ``norm_position="post"`` (the original transformer, BERT): ``norm(x + f(x))``. The
      *sum* is normalised, so the block's output has unit scale; every block's gradient
      passes through a normalisation, which makes deep stacks hard to train without
      learning-rate warm-up.

    Args:
        d_model: Width of the residual stream.
        n_heads: Query heads.
        n_kv_heads: Key/value heads (GQA/MQA); default ``n_heads``.
        d_ff: Hidden width of the MLP; default ``4·d_model`` (GELU) or ``⅔·4·d_model`` (SwiGLU).
        mlp: ``"gelu"`` (:class:`FeedForward`) or ``"swiglu"`` (:class:`SwiGLU`).
        norm: ``"layernorm"`` or ``"rmsnorm"``.
        norm_position: ``"pre"`` or ``"post"``.
        rope: A :class:`~attn_core.RotaryEmbedding` for the queries and keys, or None.
        dropout: Dropout on the attention weights and on each sub-layer's output.
        attention: A ready-made attention module (e.g. multi-head latent attention) used
            instead of a :class:`~attn_core.MultiHeadAttention`; it must accept
            ``forward(x, *, mask=, kv_cache=, return_weights=)``.
        bias: Biases in the attention projections and the MLP.
        causal: Causal self-attention (a decoder); ``False`` for an encoder block.

    Shapes:
        x: ``(B, T, d_model)``; output: ``(B, T, d_model)``; weights: ``(B, H, T, T_k)``
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        n_kv_heads: int | None = None,
        d_ff: int | None = None,
        mlp: str = "gelu",
        norm: str = "layernorm",
        norm_position: str = "pre",
        rope: nn.Module | None = None,
        dropout: float = 0.0,
        attention: nn.Module | None = None,
        bias: bool = False,
        causal: bool = True,
    ) -> None:
        super().__init__()
        check_int("d_model", d_model)
        check_int("n_heads", n_heads)
        _check_choice("mlp", mlp, MLP_KINDS)
        _check_choice("norm", norm, NORM_KINDS)
        self.norm_position = _check_choice("norm_position", norm_position, NORM_POSITIONS)
        self.d_model, self.dropout_p = d_model, _check_dropout(dropout)
        if attention is None:
            attention = MultiHeadAttention(
                d_model, n_heads, n_kv_heads=n_kv_heads, causal=causal, bias=bias, dropout=dropout, rope=rope
            )
        elif not isinstance(attention, nn.Module):
            raise TypeError(f"attention must be an nn.Module or None, got {type(attention).__name__}")
        self.attn_norm = make_norm(norm, d_model)
        self.attn = attention
        self.mlp_norm = make_norm(norm, d_model)
        self.mlp = make_mlp(mlp, d_model, d_ff, bias=bias)
        self.resid_dropout = nn.Dropout(self.dropout_p)

    def make_cache(
        self, batch_size: int, max_len: int, *, dtype: torch.dtype = torch.float32, device=None
    ) -> KVCache:
        """An empty key/value cache for this block's attention (its own, if it makes one)."""
        if hasattr(self.attn, "make_cache"):  # e.g. multi-head latent attention's LatentKVCache
            return self.attn.make_cache(batch_size, max_len, dtype=dtype, device=device)
        return KVCache(batch_size, self.attn.n_kv_heads, self.attn.head_dim, max_len, dtype=dtype, device=device)

    def forward(
        self,
        x: torch.Tensor,
        *,
        mask: torch.Tensor | None = None,
        kv_cache=None,
        return_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Apply the attention and MLP sub-layers.

        Args:
            x: The residual stream.
            mask: Extra attention mask (boolean, ``True`` = may attend), combined with causality.
            kv_cache: The attention's cache for incremental decoding, or None.
            return_weights: Also return the attention weights.

        Shapes:
            x: ``(B, T, d_model)``
            output: ``(B, T, d_model)``
            weights: ``(B, H, T, T_k)``, ``T_k = past + T`` with a cache
        """
        _check_sequence(x, self.d_model)
        pre = self.norm_position == "pre"
        result = self.attn(
            self.attn_norm(x) if pre else x, mask=mask, kv_cache=kv_cache, return_weights=return_weights
        )
        a, weights = result if return_weights else (result, None)
        if pre:
            x = x + self.resid_dropout(a)  # x + f(norm(x))
            x = x + self.resid_dropout(self.mlp(self.mlp_norm(x)))
        else:
            x = self.attn_norm(x + self.resid_dropout(a))  # norm(x + f(x))
            x = self.mlp_norm(x + self.resid_dropout(self.mlp(x)))
        return (x, weights) if return_weights else x

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, norm_position={self.norm_position!r}"


# --------------------------------------------------------------------------- configuration
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
        rope_dim: MLA's decoupled RoPE width per head (``None``: ``head_dim // 2`` with
            ``positional="rope"``, otherwise no RoPE part).
        block: ``"standard"`` (:class:`TransformerBlock`), ``"sas"`` or ``"sas-p"``
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
            if isinstance(self.rope_dim, bool) or not isinstance(self.rope_dim, int) or self.rope_dim < 0:
                raise ValueError(f"rope_dim must be an int >= 0 or None, got rope_dim={self.rope_dim!r}")
        _check_choice("positional", self.positional, POSITIONAL_KINDS)
        _check_choice("mlp", self.mlp, MLP_KINDS)
        _check_choice("norm", self.norm, NORM_KINDS)
        _check_choice("norm_position", self.norm_position, NORM_POSITIONS)
        _check_choice("attention", self.attention, ATTENTION_KINDS)
        _check_choice("block", self.block, BLOCK_KINDS)
        _check_dropout(self.dropout)
        for name in ("tie_weights", "bias"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {name}={getattr(self, name)!r}")
        if isinstance(self.beta_ff, bool) or not isinstance(self.beta_ff, (int, float)):
            raise TypeError(f"beta_ff must be a number, got beta_ff={self.beta_ff!r}")
        if isinstance(self.rope_base, bool) or not isinstance(self.rope_base, (int, float)) or not self.rope_base > 1:
            raise ValueError(f"rope_base must be a number > 1, got rope_base={self.rope_base!r}")

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
                    raise ValueError(f"{name}={getattr(self, name)} is an MLA size; set attention='mla' or leave it None")
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
                raise ValueError(f"rope_dim={self.rope_dim} needs positional='rope', got positional={self.positional!r}")
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
        return _resolve_d_ff(self.mlp, self.d_model, self.d_ff)

    @property
    def resolved_head_dim(self) -> int:
        """The per-head width actually used."""
        return self.d_model // self.n_heads if self.head_dim is None else self.head_dim

    @property
    def resolved_rope_dim(self) -> int:
        """MLA's decoupled RoPE width per head (0: none)."""
        if self.positional != "rope":
            return 0
        return self.resolved_head_dim // 2 if self.rope_dim is None else self.rope_dim

    # Presets --------------------------------------------------------------------------
    @classmethod
    def gpt2_like(cls, **overrides) -> "DecoderConfig":
        """GPT-2's architecture at a toy size: MHA, learned positions, GELU, LayerNorm, pre-norm, tied, biases.

        GPT-2 small's shape is ``gpt2_like(vocab_size=50257, n_layers=12, d_model=768,
        n_heads=12, max_len=1024)`` (124,439,808 parameters).
        """
        base = dict(vocab_size=64, n_layers=2, d_model=64, n_heads=4, max_len=128, positional="learned",
                    mlp="gelu", norm="layernorm", norm_position="pre", tie_weights=True, bias=True)
        return cls(**{**base, **overrides})

    @classmethod
    def llama_like(cls, **overrides) -> "DecoderConfig":
        """LLaMA's architecture at a toy size: GQA, RoPE, SwiGLU, RMSNorm, pre-norm, untied, no biases.

        LLaMA-7B's shape is ``llama_like(vocab_size=32000, n_layers=32, d_model=4096,
        n_heads=32, n_kv_heads=32, d_ff=11008, max_len=2048)`` (6,738,415,616 parameters).
        """
        base = dict(vocab_size=64, n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, max_len=128,
                    positional="rope", mlp="swiglu", norm="rmsnorm", norm_position="pre", tie_weights=False,
                    bias=False)
        return cls(**{**base, **overrides})


# --------------------------------------------------------------------------- parameter count by formula
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
    if not isinstance(config, DecoderConfig):
        raise TypeError(f"config must be a DecoderConfig, got {type(config).__name__}")
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


# --------------------------------------------------------------------------- the language model
class DecoderLM(nn.Module):
    """A decoder-only (GPT-style) language model: embeddings, ``L`` causal blocks, a norm, logits.

    One code path serves training and generation: ``forward(idx)`` runs a whole sequence
    under the causal mask; ``forward(idx, caches=model.make_caches(B, max_len))`` runs
    the next chunk of a sequence whose earlier keys and values sit in the caches, with
    positions continuing after the cached ones. Prefilling a prompt and then feeding one
    token at a time gives the same logits as running the full sequence (a test holds it).

    Args:
        config: The architecture.

    Attributes:
        tok_emb: ``nn.Embedding(V, d_model)``.
        pos_emb: :class:`~attn_core.LearnedPositionalEmbedding` or None.
        rope: The :class:`~attn_core.RotaryEmbedding` shared by all layers, or None.
        blocks: ``nn.ModuleList`` of :class:`TransformerBlock` or
            :class:`~attn_core.SimplifiedBlock`.
        embed_norm: Normalisation of the embeddings for post-norm models (as in BERT),
            ``nn.Identity`` for pre-norm ones.
        final_norm: Normalisation before the output projection for pre-norm models;
            ``nn.Identity`` for post-norm ones, whose blocks end with a norm already.
        lm_head: ``nn.Linear(d_model, V, bias=False)``; its weight *is* ``tok_emb.weight``
            when ``config.tie_weights``.

    Shapes:
        idx: ``(B, T)`` token ids
        logits: ``(B, T, V)``; weights: a list of ``L`` tensors ``(B, H, T, T_k)``
    """

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        if not isinstance(config, DecoderConfig):
            raise TypeError(f"config must be a DecoderConfig, got {type(config).__name__}")
        from .positional import LearnedPositionalEmbedding, RotaryEmbedding  # chapter 8's module

        self.config = c = config
        self.tok_emb = nn.Embedding(c.vocab_size, c.d_model)
        # GPT-2's initialisation: with tied weights the same matrix makes the logits, and
        # N(0, 1) entries would start them at a scale of √d_model.
        nn.init.normal_(self.tok_emb.weight, std=0.02)
        self.pos_emb = LearnedPositionalEmbedding(c.max_len, c.d_model) if c.positional == "learned" else None
        self.rope = None
        if c.positional == "rope" and c.attention == "mha":
            self.rope = RotaryEmbedding(c.resolved_head_dim, base=c.rope_base)
        self.drop = nn.Dropout(c.dropout)
        # Post-norm blocks feed the raw stream to their first attention: normalise the
        # embeddings first (as BERT does), or the first layer attends with vectors of
        # scale 0.02 (the initialisation) and barely learns. Pre-norm blocks normalise
        # their own inputs and need the norm at the other end, before the logits.
        post = c.norm_position == "post"
        self.embed_norm = make_norm(c.norm, c.d_model) if post else nn.Identity()
        self.blocks = nn.ModuleList(self._make_block(i) for i in range(c.n_layers))
        self.final_norm = nn.Identity() if post else make_norm(c.norm, c.d_model)
        self.lm_head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        if c.tie_weights:
            self.lm_head.weight = self.tok_emb.weight  # one Parameter, two uses

    def _make_block(self, i: int) -> nn.Module:
        c = self.config
        if c.block != "standard":
            from .simplified import SimplifiedBlock  # simplified.py imports this module

            return SimplifiedBlock(
                c.d_model, c.n_heads, parallel=(c.block == "sas-p"), d_ff=c.d_ff, mlp=c.mlp, norm=c.norm,
                rope=self.rope, value_proj=(i == 0), beta_ff=c.beta_ff, bias=c.bias, dropout=c.dropout,
            )
        attention = None
        if c.attention == "mla":
            from .mla import MultiHeadLatentAttention  # chapter 7's module

            attention = MultiHeadLatentAttention(
                c.d_model, c.n_heads, d_latent=c.d_latent, d_q_latent=c.d_q_latent, head_dim=c.head_dim,
                rope_dim=c.resolved_rope_dim, causal=True,
            )
        return TransformerBlock(
            c.d_model, c.n_heads, n_kv_heads=c.resolved_n_kv_heads, d_ff=c.d_ff, mlp=c.mlp, norm=c.norm,
            norm_position=c.norm_position, rope=self.rope, dropout=c.dropout, attention=attention, bias=c.bias,
        )

    def make_caches(self, batch_size: int, max_len: int | None = None) -> list:
        """One empty cache per layer (:class:`~attn_core.KVCache`, or MLA's ``LatentKVCache``).

        Args:
            batch_size: ``B``.
            max_len: Positions each cache holds; default ``config.max_len``.
        """
        check_int("batch_size", batch_size)
        max_len = self.config.max_len if max_len is None else check_int("max_len", max_len)
        p = self.tok_emb.weight
        return [b.make_cache(batch_size, max_len, dtype=p.dtype, device=p.device) for b in self.blocks]

    def _check_inputs(self, idx: object, caches) -> int:
        c = self.config
        if not isinstance(idx, torch.Tensor):
            raise TypeError(f"idx must be a torch.Tensor of token ids, got {type(idx).__name__}")
        if idx.dtype not in (torch.long, torch.int, torch.int16, torch.int8, torch.uint8):
            raise TypeError(f"idx must hold integer token ids, got dtype={idx.dtype}")
        if idx.dim() != 2 or idx.shape[1] == 0:
            raise ValueError(f"idx must have shape (B, T) with T >= 1, got {tuple(idx.shape)}")
        lo, hi = int(idx.min()), int(idx.max())
        if lo < 0 or hi >= c.vocab_size:
            raise ValueError(f"token ids must be in [0, vocab_size={c.vocab_size}), got min={lo}, max={hi}")
        if caches is None:
            offset = 0
        else:
            if not isinstance(caches, (list, tuple)) or len(caches) != c.n_layers:
                got = len(caches) if isinstance(caches, (list, tuple)) else type(caches).__name__
                raise ValueError(f"caches must be a list of n_layers={c.n_layers} caches (make_caches), got {got}")
            offset = caches[0].size
        if c.positional == "learned" and offset + idx.shape[1] > c.max_len:
            raise ValueError(
                f"positions {offset}..{offset + idx.shape[1] - 1} exceed max_len={c.max_len} "
                f"(cached={offset}, T={idx.shape[1]})"
            )
        return offset

    def forward(
        self, idx: torch.Tensor, *, caches: list | None = None, return_weights: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, list[torch.Tensor]]:
        """Next-token logits for every position of ``idx``.

        Args:
            idx: Token ids. With ``caches``, the *new* tokens only: their positions start
                at the number of cached positions.
            caches: From :meth:`make_caches`; each is appended to.
            return_weights: Also return every layer's attention weights.

        Returns:
            ``logits``, or ``(logits, weights)``: logits at position ``t`` depend only on
            tokens ``0..t``.

        Shapes:
            idx: ``(B, T)``
            logits: ``(B, T, V)``
            weights: list of ``L`` tensors ``(B, H, T, past + T)``
        """
        offset = self._check_inputs(idx, caches)
        x = self.tok_emb(idx.long())  # (B, T, d_model)
        if self.pos_emb is not None:
            x = self.pos_emb(x, offset)  # positions continue after the cached ones
        x = self.drop(self.embed_norm(x))
        all_weights = []
        for i, block in enumerate(self.blocks):
            cache = None if caches is None else caches[i]
            if return_weights:
                x, w = block(x, kv_cache=cache, return_weights=True)
                all_weights.append(w)
            else:
                x = block(x, kv_cache=cache)
        logits = self.lm_head(self.final_norm(x))  # (B, T, V)
        return (logits, all_weights) if return_weights else logits

    def num_parameters(self) -> int:
        """Parameters of the module (a tied matrix counted once, as ``parameters()`` does)."""
        return sum(p.numel() for p in self.parameters())

    def extra_repr(self) -> str:
        c = self.config
        return f"block={c.block!r}, attention={c.attention!r}, positional={c.positional!r}, tied={c.tie_weights}"

