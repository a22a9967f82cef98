"""The transformer block: an attention sub-layer and an MLP sub-layer on the residual stream.

The residual stream runs through the whole model; each sub-layer reads it and adds
something back, with the normalisation before (pre-norm: GPT-2, LLaMA) or after
(post-norm: the original transformer, BERT) the residual addition, or on both sides of
the sub-layer inside the residual branch (sandwich: Gemma 2/3). The decoder-only
model that stacks these blocks is :class:`attn_core.model.decoder.DecoderLM`.

Shape legend:
    B        batch size
    T        positions in this call; with a cache, ``T_k = past + T`` keys
    d_model  width of the residual stream
    H        query heads
"""

from __future__ import annotations

import torch
from torch import nn

from ..caches.kv import KVCache, LatentKVCache
from ..checks import (
    check_bool,
    check_choice,
    check_instance,
    check_int,
    check_number,
    check_tensor,
    first_weight,
)
from ..layers.multihead import MultiHeadAttention
from ..modules.dropout import Dropout
from ..modules.mlp import MLP_KINDS, make_mlp
from ..modules.norms import NORM_KINDS, NORM_POSITIONS, make_norm
from ..ops.attention import split_result

__all__ = ["TransformerBlock", "SandwichBlock", "ParallelBlock", "ScaledDropout", "make_block"]

#: The norm positions whose block is a :class:`SandwichBlock` (a norm on each sub-layer's output).
SANDWICH_POSITIONS = ("sandwich", "post_sublayer")


def _attention(
    d_model: int, n_heads: int, attention: nn.Module | None, options: dict, *, bias: bool, dropout: float, norm_eps
) -> nn.Module:
    """A block's attention: a :class:`MultiHeadAttention` built with the given ``options``, or ``attention`` itself.

    ``options`` are the block's arguments that configure the built-in attention (``None``: not given). Beside
    ``attention=`` each given one is refused, as a mismatched ``n_heads`` is: nothing is silently ignored.
    """
    for name in ("causal", "sinks", "qkv_bias"):
        if options[name] is not None:  # None: not given; a flag must be a bool (not 1 or "no")
            check_bool(name, options[name])
    given = {name: value for name, value in options.items() if value is not None}
    if attention is None:  # what is not given keeps MultiHeadAttention's default, but a block is causal unless told
        eps = {} if norm_eps is None else {"norm_eps": norm_eps}
        return MultiHeadAttention(d_model, n_heads, bias=bias, dropout=dropout, **{"causal": True, **given}, **eps)
    check_instance("attention", attention, nn.Module)
    if given:
        got = ", ".join(f"{name}={value!r}" for name, value in given.items())
        raise ValueError(
            f"{', '.join(given)} configure the built-in attention; with attention= they would be ignored: "
            f"set them on the attention module instead (got {got})"
        )
    if getattr(attention, "n_heads", n_heads) != n_heads:
        raise ValueError(f"n_heads={n_heads} does not match attention.n_heads={attention.n_heads}")
    return attention


class TransformerBlock(nn.Module):
    """One transformer block: an attention sub-layer and an MLP sub-layer on the residual stream.

    The residual stream ``x`` runs through the whole model; each sub-layer ``f`` reads it
    and adds something back. Where the normalisation goes matters:

    * ``norm_position="pre"`` (GPT-2, LLaMA): ``x + f(norm(x))``. The stream itself is
      never normalised, so the identity path from the last layer to the first is clean.
    * ``norm_position="post"`` (the original transformer, BERT): ``norm(x + f(x))``. The
      *sum* is normalised, so the block's output has unit scale; every block's gradient
      passes through a normalisation, which makes deep stacks hard to train without
      learning-rate warm-up.
    * ``norm_position="sandwich"`` (Gemma 2/3): ``x + post_norm(f(norm(x)))``, a second
      norm on each sub-layer's output before it joins the stream (``attn_post_norm``,
      ``mlp_post_norm``; Hugging Face's ``post_attention_layernorm`` and
      ``post_feedforward_layernorm``). The stream stays un-normalised as in pre-norm, and
      what each sub-layer adds has a learned, bounded scale. That is a
      :class:`SandwichBlock`, the subclass whose ``forward`` adds the two post-norms (this
      class's ``forward`` is the pre/post one).
    * ``norm_position="post_sublayer"`` (OLMo 2/3): ``x + post_norm(f(x))``, the sandwich
      without its first norms (``attn_norm`` and ``mlp_norm`` are ``nn.Identity``): only
      what each sub-layer adds is normalised; also a :class:`SandwichBlock`.

    :func:`make_block` builds the class that ``norm_position`` and ``parallel`` name;
    this class itself refuses the positions and the flag its ``forward`` does not compute.

    Args:
        d_model: Width of the residual stream.
        n_heads: Query heads.
        n_kv_heads: Key/value heads (GQA/MQA); default ``n_heads``.
        d_ff: Hidden width of the MLP; default ``4·d_model`` (GELU) or ``⅔·4·d_model`` (SwiGLU).
        mlp: ``"gelu"``, ``"gelu_tanh"`` (:class:`FeedForward`), ``"swiglu"`` or
            ``"geglu_tanh"`` (:class:`SwiGLU`).
        norm: ``"layernorm"`` or ``"rmsnorm"``.
        norm_position: ``"pre"`` or ``"post"`` (``"sandwich"`` and ``"post_sublayer"`` are
            a :class:`SandwichBlock`'s).
        rope: A :class:`~attn_core.RotaryEmbedding` for the queries and keys, or None.
        dropout: Dropout on the attention weights and on each sub-layer's output (with
            ``attention=``, on the sub-layers' outputs only: the module has its own).
        attention: A ready-made attention module (e.g. multi-head latent attention) used
            instead of a :class:`~attn_core.MultiHeadAttention`; it must follow the
            attention-layer protocol, ``forward(x, *, mask=, kv_cache=, return_weights=)``
            and ``make_cache(batch_size, max_len)``. The arguments that only configure the
            built-in attention (``n_kv_heads``, ``rope``, ``causal``) must then be left
            unset, and ``n_heads`` must match the module's: nothing is silently ignored.
        bias: Biases in the attention projections and the MLP.
        causal: Causal self-attention (a decoder, the default); ``False`` for an encoder block.
        head_dim: Width of one attention head (default ``d_model // n_heads``; see
            :class:`~attn_core.MultiHeadAttention`).
        qk_norm: RMS-normalise each query and key head before RoPE (Qwen3, Gemma 3); ``"all_heads"``:
            all of a token's heads together (OLMo 2/3; see :class:`~attn_core.MultiHeadAttention`).
        norm_eps: The ε of the block's norms (and of the QK-norm); ``None``: each norm's default.
        gate: The attention's output gate, ``"elementwise"`` or ``"headwise"`` (gated attention).
        softcap: The attention's logit soft-cap (Gemma 2).
        window: The attention's sliding window (Mistral, Gemma, gpt-oss).
        sinks: A learned sink logit per head in the attention's softmax (gpt-oss).
        qkv_bias: Biases on the attention's query/key/value projections only (Qwen2; see
            :class:`~attn_core.MultiHeadAttention`).
        scale: The attention's score scale (``None``: ``1/√head_dim``; Gemma 2 27B, Granite).
        parallel: Attention and MLP read one norm's output and are added together: only
            a :class:`ParallelBlock` (GPT-J and Cohere) takes ``True``; needs ``norm_position="pre"``.
        residual_scale: Multiplies each sub-layer's output before the residual addition,
            ``x + m·f(norm(x))`` (Granite's ``residual_multiplier``): ``resid_dropout`` is then a
            :class:`ScaledDropout`.
        mlp_module: The MLP sub-layer as a module (e.g. a :class:`~attn_core.MixtureOfExperts`);
            ``None``: the ``mlp`` kind of width ``d_ff``.

    Raises:
        ValueError: ``norm_position="sandwich"``/``"post_sublayer"`` or ``parallel=True`` given to this class
            itself (build a :class:`SandwichBlock` or :class:`ParallelBlock`, or call :func:`make_block`);
            ``attention=`` given together with an option of the built-in attention (``n_kv_heads``, ``rope``,
            ``causal``, ``head_dim``, ``qk_norm``, ``gate``, ``softcap``, ``window``, ``sinks``, ``qkv_bias``,
            ``scale``), or with an ``n_heads`` that differs from ``attention.n_heads``.

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
        causal: bool | None = None,
        head_dim: int | None = None,
        qk_norm: bool | str | None = None,
        norm_eps: float | None = None,
        gate: str | None = None,
        softcap: float | None = None,
        window: int | None = None,
        sinks: bool | None = None,
        qkv_bias: bool | None = None,
        scale: float | None = None,
        parallel: bool = False,
        residual_scale: float = 1.0,
        mlp_module: nn.Module | None = None,
    ) -> None:
        super().__init__()
        check_int("d_model", d_model)
        check_int("n_heads", n_heads)
        check_choice("mlp", mlp, MLP_KINDS)
        check_choice("norm", norm, NORM_KINDS)
        self.norm_position = check_choice("norm_position", norm_position, NORM_POSITIONS)
        self.d_model = d_model
        self.dropout_p = check_number("dropout", dropout, low=0.0, high=1.0, high_open=True)
        residual_scale = self._check_wiring(norm_position, parallel, residual_scale)
        # The built-in attention's options (None: not given), one table to build it or to refuse them beside attention=.
        options = dict(n_kv_heads=n_kv_heads, rope=rope, causal=causal, head_dim=head_dim, qk_norm=qk_norm, gate=gate)
        options.update(softcap=softcap, window=window, sinks=sinks, qkv_bias=qkv_bias, scale=scale)
        attention = _attention(d_model, n_heads, attention, options, bias=bias, dropout=dropout, norm_eps=norm_eps)
        # The sub-layers in the order of the stream (and of the state dict); only the attention and MLP draw weights.
        sandwich = norm_position in SANDWICH_POSITIONS  # a norm on each sub-layer's output
        # OLMo 2/3 have no norm before a sub-layer: x + norm(f(x)).
        pre_norm = nn.Identity() if norm_position == "post_sublayer" else None
        self.attn_norm = pre_norm or make_norm(norm, d_model, norm_eps)
        self.attn = attention
        if sandwich:  # only then: the other blocks' modules (and state dicts) stay as they were
            self.attn_post_norm = make_norm(norm, d_model, norm_eps)
        if not parallel:  # a parallel block's MLP reads attn_norm's output
            self.mlp_norm = pre_norm or make_norm(norm, d_model, norm_eps)
        self.mlp = make_mlp(mlp, d_model, d_ff, bias=bias) if mlp_module is None else mlp_module
        if sandwich:
            self.mlp_post_norm = make_norm(norm, d_model, norm_eps)
        # A plain Dropout unless the branches are scaled (then the modules print as they always did).
        scaled = residual_scale != 1.0
        self.resid_dropout = ScaledDropout(self.dropout_p, residual_scale) if scaled else Dropout(self.dropout_p)

    def _check_wiring(self, norm_position: str, parallel: bool, residual_scale: float) -> float:
        """Check that this class computes ``norm_position`` and ``parallel``; return the checked ``residual_scale``."""
        check_bool("parallel", parallel)
        residual_scale = check_number("residual_scale", residual_scale, low=0.0, low_open=True)
        if parallel and norm_position != "pre":
            raise ValueError(
                f"parallel=True reads one pre-norm for both sub-layers, got norm_position={norm_position!r}"
            )
        if type(self) is TransformerBlock and (norm_position in SANDWICH_POSITIONS or parallel):
            raise ValueError(
                f"TransformerBlock computes the pre- and post-norm blocks, got norm_position={norm_position!r}, "
                f"parallel={parallel!r}: build a SandwichBlock or ParallelBlock, or call make_block(...)"
            )
        return residual_scale

    def make_cache(
        self, batch_size: int, max_len: int, *, dtype: torch.dtype | None = None, device=None
    ) -> KVCache | LatentKVCache:
        """An empty cache for this block's attention, built by the attention layer itself."""
        return self.attn.make_cache(batch_size, max_len, dtype=dtype, device=device)

    def forward(
        self,
        x: torch.Tensor,
        *,
        mask: torch.Tensor | None = None,
        kv_cache: KVCache | LatentKVCache | None = None,
        return_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Apply the attention and MLP sub-layers.

        Args:
            x: The residual stream.
            mask: Extra attention mask (boolean, ``True`` = may attend), combined with causality.
            kv_cache: The attention's cache for incremental decoding (:meth:`make_cache`), or None.
            return_weights: Also return the attention weights.

        Shapes:
            x: ``(B, T, d_model)``
            output: ``(B, T, d_model)``
            weights: ``(B, H, T, T_k)``, ``T_k = past + T`` with a cache
        """
        check_tensor("x", x, ("B", "T", ("d_model", self.d_model)), like=first_weight(self))
        pre = self.norm_position == "pre"
        result = self.attn(self.attn_norm(x) if pre else x, mask=mask, kv_cache=kv_cache, return_weights=return_weights)
        a, weights = split_result(result, return_weights)
        if pre:
            x = x + self.resid_dropout(a)  # x + f(norm(x))
            x = x + self.resid_dropout(self.mlp(self.mlp_norm(x)))
        else:
            x = self.attn_norm(x + self.resid_dropout(a))  # norm(x + f(x))
            x = self.mlp_norm(x + self.resid_dropout(self.mlp(x)))
        return (x, weights) if return_weights else x

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, norm_position={self.norm_position!r}"


def make_block(
    d_model: int, n_heads: int, *, norm_position: str = "pre", parallel: bool = False, **kwargs
) -> TransformerBlock:
    """The block that ``norm_position`` and ``parallel`` name: a ``TransformerBlock`` or one of its subclasses.

    ``"sandwich"`` and ``"post_sublayer"`` build a :class:`SandwichBlock`, ``parallel=True``
    a :class:`ParallelBlock`, ``"pre"`` and ``"post"`` a :class:`TransformerBlock`; each
    class checks the combination (``parallel=True`` with a sandwich position is refused).

    Args:
        d_model: Width of the residual stream.
        n_heads: Query heads.
        norm_position: ``"pre"``, ``"post"``, ``"sandwich"`` or ``"post_sublayer"``.
        parallel: Attention and MLP on one norm's output (GPT-J, Cohere).
        **kwargs: The other arguments of :class:`TransformerBlock`.

    Shapes:
        the block's: x ``(B, T, d_model)`` -> ``(B, T, d_model)``
    """
    if norm_position in SANDWICH_POSITIONS:
        return SandwichBlock(d_model, n_heads, norm_position=norm_position, parallel=parallel, **kwargs)
    if parallel is True:
        return ParallelBlock(d_model, n_heads, norm_position=norm_position, **kwargs)
    return TransformerBlock(d_model, n_heads, norm_position=norm_position, parallel=parallel, **kwargs)


class _AfterAttentionBlock(TransformerBlock):
    """The forward :class:`SandwichBlock` and :class:`ParallelBlock` share: the attention on ``attn_norm(x)``,
    then the subclass's :meth:`_add` of both sub-layers to the stream."""

    def forward(
        self,
        x: torch.Tensor,
        *,
        mask: torch.Tensor | None = None,
        kv_cache: KVCache | LatentKVCache | None = None,
        return_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Apply the attention and MLP sub-layers (as :meth:`TransformerBlock.forward`; the wiring is :meth:`_add`'s).

        Shapes:
            x: ``(B, T, d_model)``; output: ``(B, T, d_model)``; weights: ``(B, H, T, T_k)``
        """
        check_tensor("x", x, ("B", "T", ("d_model", self.d_model)), like=first_weight(self))
        h = self.attn_norm(x)
        a, weights = split_result(
            self.attn(h, mask=mask, kv_cache=kv_cache, return_weights=return_weights), return_weights
        )
        x = self._add(x, h, a)
        return (x, weights) if return_weights else x

    def _add(self, x: torch.Tensor, h: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """The stream after both sub-layers, from the stream ``x``, the attention's input ``h`` and output ``a``."""
        raise NotImplementedError


class SandwichBlock(_AfterAttentionBlock):
    """A :class:`TransformerBlock` with sandwich norms (Gemma 2/3): a norm before *and* after each sub-layer.

    ``h = x + attn_post_norm(attn(attn_norm(x)))``, then
    ``out = h + mlp_post_norm(mlp(mlp_norm(h)))``: both norms sit inside the residual
    branch, so the stream is never normalised (as in pre-norm) and each sub-layer's
    contribution is rescaled by a learned gain before it is added. What
    ``make_block(..., norm_position="sandwich")`` builds; the arguments are
    :class:`TransformerBlock`'s. With ``norm_position="post_sublayer"`` (OLMo 2/3) ``attn_norm``
    and ``mlp_norm`` are ``nn.Identity``: ``x + attn_post_norm(attn(x))``.

    Attributes:
        attn_post_norm: The norm of the attention's output (Hugging Face's ``post_attention_layernorm``).
        mlp_post_norm: The norm of the MLP's output (``post_feedforward_layernorm``); ``mlp_norm``
            is Gemma's ``pre_feedforward_layernorm``.

    Shapes:
        x: ``(B, T, d_model)``; output: ``(B, T, d_model)``; weights: ``(B, H, T, T_k)``
    """

    def __init__(self, d_model: int, n_heads: int, *, norm_position: str = "sandwich", **kwargs) -> None:
        if norm_position not in SANDWICH_POSITIONS:
            raise ValueError(
                f"SandwichBlock has norm_position='sandwich' or 'post_sublayer', got norm_position={norm_position!r}"
            )
        super().__init__(d_model, n_heads, norm_position=norm_position, **kwargs)

    def _add(self, x: torch.Tensor, h: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """``x + norm₂(a)``, then the MLP between its two norms the same way."""
        x = x + self.resid_dropout(self.attn_post_norm(a))  # x + norm₂(f(norm₁(x)))
        return x + self.resid_dropout(self.mlp_post_norm(self.mlp(self.mlp_norm(x))))


class ParallelBlock(_AfterAttentionBlock):
    """A :class:`TransformerBlock` whose attention and MLP run side by side on one norm (GPT-J, Cohere).

    ``out = x + (attn(h) + mlp(h))`` with ``h = attn_norm(x)``: one norm per block (no
    ``mlp_norm``), and the two sub-layers no longer see each other's output within a block,
    so they can run at the same time. What ``make_block(..., parallel=True)`` builds;
    the arguments are :class:`TransformerBlock`'s (``norm_position="pre"``).

    Shapes:
        x: ``(B, T, d_model)``; output: ``(B, T, d_model)``; weights: ``(B, H, T, T_k)``
    """

    def __init__(self, d_model: int, n_heads: int, *, parallel: bool = True, **kwargs) -> None:
        if parallel is not True:
            raise ValueError(f"ParallelBlock has parallel=True, got parallel={parallel!r}")
        super().__init__(d_model, n_heads, parallel=True, **kwargs)

    def _add(self, x: torch.Tensor, h: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """``x + (a + mlp(h))``: both sub-layers read the one norm's output ``h``."""
        return x + (self.resid_dropout(a) + self.resid_dropout(self.mlp(h)))  # x + (f(h) + g(h)), Cohere's order

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, parallel=True"


class ScaledDropout(nn.Dropout):
    """Dropout, then a constant factor: a residual branch scaled before it joins the stream (Granite).

    ``ScaledDropout(p, scale)(x) = scale · dropout(x)``; in eval mode ``scale · x``.

    Args:
        p: Dropout probability, in training mode.
        scale: The factor (Granite's ``residual_multiplier``).

    Shapes:
        x: any; output: the same
    """

    def __init__(self, p: float, scale: float) -> None:
        super().__init__(p)
        self.scale = check_number("scale", scale, low=0.0, low_open=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Shapes: x ``(...)`` -> ``(...)``."""
        return super().forward(x) * self.scale

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, scale={self.scale:g}"
