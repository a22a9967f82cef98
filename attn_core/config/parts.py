"""The parts of a :class:`~attn_core.config.DecoderConfig`: frozen dataclasses that check themselves.

Each part holds one concern of the architecture and refuses, in its own ``__post_init__``,
a value that makes no sense by itself or with another of its own fields (naming them).
A rule that involves the core config (MoE needs standard blocks, the pattern gives one
type per layer) is checked once, by :class:`~attn_core.config.DecoderConfig`.

* :class:`Positions`: the positional encoding (learned, sinusoidal, RoPE and its
  extensions, ALiBi, none) and which layers have it.
* :class:`LayerPattern`: each layer's attention type (full, sliding, linear, chunked),
  the window, the chunk and cross-layer key/value sharing.
* :class:`LinearLayers`: the sizes of the ``"linear"`` (Gated DeltaNet) layers.
* :class:`MoE`: the mixture-of-experts MLPs and their router.
* :class:`Indexer`: DeepSeek Sparse Attention's lightning indexer.

:data:`PARTS` maps each part's field name in the config to its class.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields

from ..checks import check_bool, check_choice, check_instance, check_int, check_number
from ..modules.router import ROUTER_SCORINGS, check_router_rules
from ..ops.masks import check_window
from ..positions.positional import check_temperature
from ..positions.rope import ROPE_LAYOUTS
from ..positions.rope_scaling import RopeScaling

__all__ = [
    "POSITIONAL_KINDS",
    "LAYER_TYPES",
    "PARTS",
    "changed_fields_repr",
    "Indexer",
    "LayerPattern",
    "LinearLayers",
    "MoE",
    "Positions",
]

POSITIONAL_KINDS = ("learned", "rope", "none", "sinusoidal", "alibi")
LAYER_TYPES = ("full", "sliding", "linear", "chunked")


def _frozen_tuple(part: object, name: str) -> None:
    """Store a list field (e.g. read back from JSON) as the tuple a frozen config holds."""
    if isinstance(getattr(part, name), list):
        object.__setattr__(part, name, tuple(getattr(part, name)))


def changed_fields_repr(config: object) -> str:
    """A config's repr that names what sets it apart: the required fields and those not at their defaults.

    ``eval`` of it gives an equal config (with the part classes in scope), as the dataclass
    repr does, but a config that changes three fields prints three, not all of them.
    """
    shown = []
    for f in fields(config):
        value = getattr(config, f.name)
        if f.default is MISSING and f.default_factory is MISSING:
            shown.append(f"{f.name}={value!r}")  # required: always printed
        elif value != (f.default if f.default is not MISSING else f.default_factory()):
            shown.append(f"{f.name}={value!r}")
    return f"{type(config).__name__}({', '.join(shown)})"


@dataclass(frozen=True)
class Positions:
    """Where positions come from, and which layers use them.

    Attributes:
        positional: ``"learned"`` (a trained vector per position added to the token
            embeddings; none past ``max_len``), ``"sinusoidal"`` (the fixed sine/cosine
            vectors of :class:`~attn_core.SinusoidalPositionalEncoding`, added to token
            embeddings scaled by ``√d_model``; needs an even ``d_model``), ``"rope"``
            (queries and keys rotated in every layer), ``"alibi"`` (:class:`~attn_core.ALiBi`'s
            per-head distance penalty on every layer's scores) or ``"none"`` (NoPE).
        rope_base: RoPE's base (``positional="rope"`` only when not 10000).
        rope_layout: Which dimensions RoPE pairs: ``"half"`` (Hugging Face's LLaMA/Qwen3
            checkpoints) or ``"interleaved"`` (Meta's LLaMA code, DeepSeek's MLA checkpoints).
        rotary_dim: RoPE turns only the first ``rotary_dim`` dimensions of each query and key
            head (Hugging Face's ``partial_rotary_factor · head_dim``); ``None``: the whole head.
        rope_scaling: Context extension of the RoPE (a :class:`~attn_core.positions.rope_scaling.RopeScaling`:
            PI, NTK-aware, YaRN, Llama 3.1's, LongRoPE) or ``None``. The sliding layers' own
            RoPE (``sliding_rope_base``) is not scaled; with MLA it scales the decoupled RoPE.
        rope_layers: Per layer, whether it rotates its queries and keys (``False``: a NoPE
            layer, SmolLM3's ``no_rope_layers``); ``None``: every layer.
        sliding_rope_base: The RoPE base of the ``"sliding"`` layers (Gemma 3: 10000 locally);
            ``None``: ``rope_base`` everywhere.
        rope_full_layers: ``False``: the ``"full"`` layers have no RoPE (Cohere 2, Llama 4's
            NoPE layers), the ``"sliding"`` ones keep it.
        nope_temperature: ``(floor_scale, attn_scale)``: the layers without RoPE multiply each
            query by :func:`~attn_core.positions.positional.query_temperature` of its position (Llama 4).
        nope_qk_norm: ``False``: the QK-norm only in the layers with RoPE (Llama 4).
    """

    positional: str = "learned"
    rope_base: float = 10000.0
    rope_layout: str = "half"
    rotary_dim: int | None = None
    rope_scaling: RopeScaling | None = None
    rope_layers: tuple[bool, ...] | None = None
    sliding_rope_base: float | None = None
    rope_full_layers: bool = True
    nope_temperature: tuple[float, float] | None = None
    nope_qk_norm: bool = True

    __repr__ = changed_fields_repr

    def __post_init__(self) -> None:
        _frozen_tuple(self, "rope_layers")
        _frozen_tuple(self, "nope_temperature")
        check_choice("positional", self.positional, POSITIONAL_KINDS)
        check_number("rope_base", self.rope_base, low=1.0, low_open=True)
        check_choice("rope_layout", self.rope_layout, ROPE_LAYOUTS)
        if self.rotary_dim is not None:
            check_int("rotary_dim", self.rotary_dim)
            if self.rotary_dim % 2:
                raise ValueError(f"rotary_dim must be even (RoPE rotates pairs), got {self.rotary_dim}")
        check_instance("rope_scaling", self.rope_scaling, RopeScaling, optional=True)
        if self.sliding_rope_base is not None:
            check_number("sliding_rope_base", self.sliding_rope_base, low=1.0, low_open=True)
        check_bool("rope_full_layers", self.rope_full_layers)
        check_temperature(self.nope_temperature)
        check_bool("nope_qk_norm", self.nope_qk_norm)
        if self.rope_layers is not None:
            if not isinstance(self.rope_layers, tuple):
                raise ValueError(
                    f"rope_layers must give True (RoPE) or False (no positions) per layer, got {self.rope_layers!r}"
                )
            for i, on in enumerate(self.rope_layers):
                check_bool(f"rope_layers[{i}]", on)
        if self.positional != "rope":  # every RoPE option needs the RoPE
            for f in fields(self)[1:-2]:  # rope_base .. rope_full_layers
                if getattr(self, f.name) != f.default:
                    raise ValueError(
                        f"{f.name}={getattr(self, f.name)!r} needs positional='rope', "
                        f"got positional={self.positional!r}"
                    )
        if not self.rope_full_layers and self.sliding_rope_base is not None:
            raise ValueError(
                f"sliding_rope_base={self.sliding_rope_base} with rope_full_layers=False: only the sliding layers "
                "rotate, so rope_base is theirs; leave sliding_rope_base=None"
            )

    def rotated_width(self, head_dim: int) -> int:
        """How many dimensions of a multi-head attention head of width ``head_dim`` RoPE turns."""
        return head_dim if self.rotary_dim is None else self.rotary_dim


@dataclass(frozen=True)
class LayerPattern:
    """Each layer's attention type, and what the types need.

    Attributes:
        layer_types: ``"full"``, ``"sliding"``, ``"linear"`` (a :class:`~attn_core.GatedDeltaNet`
            in place of attention) or ``"chunked"`` (attention within chunks of
            ``attention_chunk_size``, Llama 4) per layer; see :func:`~attn_core.teach.window.layer_pattern`.
            ``None``: every layer sliding when ``sliding_window`` is set, else every layer full.
        sliding_window: The window of the sliding layers: a query sees itself and the
            ``sliding_window - 1`` positions before it (a :class:`~attn_core.RollingKVCache`
            of that many slots when decoding).
        kv_share: Cross-layer KV sharing (Brandon et al. 2024): per layer, the index of the
            layer whose keys and values it reuses (itself: it computes its own). A source is an
            earlier layer of the same type that computes its own; ``None``: no sharing.
        attention_chunk_size: The chunk of the ``"chunked"`` layers (Llama 4: 8192).
    """

    layer_types: tuple[str, ...] | None = None
    sliding_window: int | None = None
    kv_share: tuple[int, ...] | None = None
    attention_chunk_size: int | None = None

    __repr__ = changed_fields_repr

    def __post_init__(self) -> None:
        _frozen_tuple(self, "layer_types")
        _frozen_tuple(self, "kv_share")
        check_window(self.sliding_window, "sliding_window")
        if self.attention_chunk_size is not None:
            check_int("attention_chunk_size", self.attention_chunk_size)
        if self.layer_types is not None:
            if not isinstance(self.layer_types, tuple):
                raise ValueError(f"layer_types must give one of {LAYER_TYPES} per layer, got {self.layer_types!r}")
            for kind in self.layer_types:
                check_choice("layer_types[i]", kind, LAYER_TYPES)
            if "sliding" in self.layer_types and self.sliding_window is None:
                raise ValueError("layer_types has 'sliding' layers but sliding_window=None: give the window")
            if "sliding" not in self.layer_types and self.sliding_window is not None:
                raise ValueError(f"sliding_window={self.sliding_window} but no layer of layer_types is 'sliding'")
        chunked = self.layer_types is not None and "chunked" in self.layer_types
        if chunked != (self.attention_chunk_size is not None):
            raise ValueError(
                f"attention_chunk_size={self.attention_chunk_size} is the chunk of the 'chunked' layers: give both "
                f"or neither (layer_types={self.layer_types!r})"
            )
        if self.kv_share is not None:
            self._check_kv_share()

    def _check_kv_share(self) -> None:
        """Each layer reads an earlier (or its own) source of its type that computes its own keys and values."""
        if not isinstance(self.kv_share, tuple):
            raise ValueError(f"kv_share must give a source layer per layer, got {self.kv_share!r}")
        types = self.types(len(self.kv_share))
        if len(types) != len(self.kv_share):
            raise ValueError(f"kv_share must give a source layer per layer ({len(types)}), got {self.kv_share!r}")
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

    def types(self, n_layers: int) -> tuple[str, ...]:
        """The type of each of ``n_layers`` layers: ``layer_types``, else all sliding (with a window) or full."""
        if self.layer_types is not None:
            return self.layer_types
        return ("sliding" if self.sliding_window is not None else "full",) * n_layers


@dataclass(frozen=True)
class LinearLayers:
    """The sizes of the ``"linear"`` layers (:class:`~attn_core.GatedDeltaNet`, Qwen3-Next).

    Attributes:
        linear_n_heads: Query/key heads ``H_k`` (``linear_num_key_heads``); ``None``: ``n_heads``.
        linear_head_dim: Width of their query/key heads; ``None``: the attention's head width.
        linear_n_value_heads: Value heads (a multiple of ``linear_n_heads``); ``None``:
            ``linear_n_heads``.
        linear_value_head_dim: Width of the value heads; ``None``: ``linear_head_dim``.
        linear_conv_size: Taps of the short causal convolution (Qwen3-Next: 4).
    """

    linear_n_heads: int | None = None
    linear_head_dim: int | None = None
    linear_n_value_heads: int | None = None
    linear_value_head_dim: int | None = None
    linear_conv_size: int = 4

    __repr__ = changed_fields_repr

    def __post_init__(self) -> None:
        for name in ("linear_n_heads", "linear_head_dim", "linear_n_value_heads", "linear_value_head_dim"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name))
        check_int("linear_conv_size", self.linear_conv_size)

    def sizes(self, n_heads: int, head_dim: int) -> tuple[int, int, int, int]:
        """``(H_k, D_k, H_v, D_v)``: query/key heads and width, value heads and width, each
        falling back on the attention's ``n_heads`` and ``head_dim``.

        Raises:
            ValueError: The value heads are not a multiple of the query/key heads.
        """
        h_k = n_heads if self.linear_n_heads is None else self.linear_n_heads
        d_k = head_dim if self.linear_head_dim is None else self.linear_head_dim
        h_v = h_k if self.linear_n_value_heads is None else self.linear_n_value_heads
        d_v = d_k if self.linear_value_head_dim is None else self.linear_value_head_dim
        if h_v % h_k:
            raise ValueError(f"linear_n_value_heads={h_v} is not a multiple of linear_n_heads={h_k}")
        return h_k, d_k, h_v, d_v


@dataclass(frozen=True)
class MoE:
    """Mixture-of-experts MLPs (:class:`~attn_core.MixtureOfExperts`) and their router.

    Attributes:
        n_experts: Routed experts ``E``.
        experts_per_token: ``k``, experts each token goes to (Mixtral: 2, DeepSeek-V3: 8).
        n_shared_experts: Experts every token goes through besides its ``k`` (DeepSeek: 1).
        moe_d_ff: Each expert's hidden width; ``None``: the config's dense MLP width.
        router_scoring: ``"softmax"`` or ``"sigmoid"`` (DeepSeek-V3).
        router_topk_first: Top-k logits, then a softmax over them (Mixtral, gpt-oss);
            ``False``: scores for all experts, then the top k (Qwen3-MoE, DeepSeek).
        router_normalize: Divide the kept weights by their sum (``norm_topk_prob``).
        router_scale: Multiplies the routed weights (DeepSeek-V3's ``routed_scaling_factor``).
        router_groups: Expert groups of group-limited routing (DeepSeek-V3's ``n_group``, 8).
        router_topk_groups: Groups a token may use (``topk_group``, 4).
        router_bias: A bias in the router's linear layer (gpt-oss).
        expert_swiglu_limit: gpt-oss's clamped experts (:class:`~attn_core.modules.mlp.ClampedSwiGLU`);
            ``None``: plain SwiGLU experts.
        shared_expert_d_ff: The shared experts' hidden width; ``None``: ``n_shared_experts · moe_d_ff``.
        shared_expert_gate: The shared experts' output times a learned sigmoid gate (Qwen3-Next).
        capacity_factor: Each expert takes at most ``ceil(capacity_factor · N · k / E)``
            assignments per forward, the rest are dropped; ``None``: no limit.
        first_dense_layers: The first layers keep a dense MLP (DeepSeek-V3's ``first_k_dense_replace``).
        moe_layer_step: Every ``moe_layer_step``-th layer after those is a mixture of experts
            (layer ``i`` when ``(i + 1) % step == 0``; Llama 4 Maverick: 2).
        router_weight_inputs: Each expert reads its token times the routing weight (Llama 4).
    """

    n_experts: int
    experts_per_token: int = 2
    n_shared_experts: int = 0
    moe_d_ff: int | None = None
    router_scoring: str = "softmax"
    router_topk_first: bool = False
    router_normalize: bool = False
    router_scale: float = 1.0
    router_groups: int = 1
    router_topk_groups: int = 1
    router_bias: bool = False
    expert_swiglu_limit: float | None = None
    shared_expert_d_ff: int | None = None
    shared_expert_gate: bool = False
    capacity_factor: float | None = None
    first_dense_layers: int = 0
    moe_layer_step: int = 1
    router_weight_inputs: bool = False

    __repr__ = changed_fields_repr

    def __post_init__(self) -> None:
        E, k = check_int("n_experts", self.n_experts), check_int("experts_per_token", self.experts_per_token)
        check_int("n_shared_experts", self.n_shared_experts, minimum=0)
        check_int("first_dense_layers", self.first_dense_layers, minimum=0)
        check_int("moe_layer_step", self.moe_layer_step)
        for name in ("router_topk_first", "router_normalize", "router_bias", "shared_expert_gate",
                     "router_weight_inputs"):  # fmt: skip
            check_bool(name, getattr(self, name))
        for name in ("moe_d_ff", "shared_expert_d_ff"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name))
        for name in ("capacity_factor", "expert_swiglu_limit"):
            if getattr(self, name) is not None:
                check_number(name, getattr(self, name), low=0.0, low_open=True)
        if self.n_shared_experts == 0:
            for name in ("shared_expert_d_ff", "shared_expert_gate"):
                if getattr(self, name) not in (None, False):
                    raise ValueError(
                        f"{name}={getattr(self, name)!r} configures the shared experts, but n_shared_experts=0"
                    )
        self._check_router(E, k)

    def _check_router(self, E: int, k: int) -> None:
        """The router's rules (what :class:`~attn_core.modules.moe.TopKRouter` would refuse), named by these fields."""
        if k > E:
            raise ValueError(f"experts_per_token={k} must be in 1..n_experts={E}")
        check_choice("router_scoring", self.router_scoring, ROUTER_SCORINGS)
        check_number("router_scale", self.router_scale, low=0.0, low_open=True)
        G, g = check_int("router_groups", self.router_groups), check_int("router_topk_groups", self.router_topk_groups)
        names = {"k": "experts_per_token", "n_groups": "router_groups", "topk_groups": "router_topk_groups"}
        names.update({key: f"router_{key}" for key in ("scoring", "topk_first", "normalize")})
        check_router_rules(E, k, self.router_scoring, self.router_topk_first, self.router_normalize, G, g, names=names)

    def is_moe_layer(self, i: int) -> bool:
        """Whether layer ``i``'s MLP is a mixture of experts (past ``first_dense_layers``, per ``moe_layer_step``)."""
        return i >= self.first_dense_layers and (i + 1) % self.moe_layer_step == 0


@dataclass(frozen=True)
class Indexer:
    """DeepSeek Sparse Attention's lightning indexer (DeepSeek-V3.2): every MLA layer becomes a
    :class:`~attn_core.SparseAttention` whose :class:`~attn_core.LightningIndexer` picks its keys.

    Attributes:
        index_n_heads: The indexer's heads (64). Its queries read MLA's query latent, its RoPE
            turns the first ``rope_dim`` dimensions.
        index_head_dim: Its head width ``D_I`` (128).
        index_topk: Tokens each query attends to (2048); ``None``: every token (the dense warm-up).
    """

    index_n_heads: int
    index_head_dim: int | None = None
    index_topk: int | None = None

    __repr__ = changed_fields_repr

    def __post_init__(self) -> None:
        check_int("index_n_heads", self.index_n_heads)
        if self.index_head_dim is None:
            raise ValueError(f"index_n_heads={self.index_n_heads} needs index_head_dim (the indexer's head width)")
        check_int("index_head_dim", self.index_head_dim)
        if self.index_topk is not None:
            check_int("index_topk", self.index_topk)


#: Each part by its field name in :class:`~attn_core.config.DecoderConfig`: the config rebuilds a part
#: given as a dict from it, and :func:`~attn_core.hf.configs.assemble_config` sorts flat values into parts.
PARTS = {"positions": Positions, "pattern": LayerPattern, "linear": LinearLayers, "moe": MoE, "indexer": Indexer}
