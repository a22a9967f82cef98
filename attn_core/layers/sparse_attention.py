"""Learned sparse attention: DeepSeek Sparse Attention (DSA) of DeepSeek-V3.2.

Each query attends to only ``k`` of the past tokens, and a small module, the **lightning
indexer** (:class:`~attn_core.layers.indexer.LightningIndexer`, in :mod:`attn_core.layers.indexer`),
chooses which. The selection mask it gives is combined with causality and handed to the
ordinary attention layer: the main attention never changes, it only sees fewer keys.
:class:`SparseAttention` wraps an attention layer with its indexer; :class:`SparseCache`
holds both caches; :func:`sparsify` turns a dense model sparse, :func:`indexer_losses`
collects the indexers' distillation losses, :func:`sparse_attention_flops` counts the cost.

Shape legend:
    B      batch size
    T      new positions (queries); ``T_k`` positions scored (cached + new)
    H_I    indexer heads (``n_heads``), ``D_I`` indexer head width (``head_dim``)
    d_q    width of the indexer's query input (``c_Q`` or ``d_model``)
"""

from __future__ import annotations

import torch
from torch import nn

from ..caches.kv import storage_like
from ..checks import check_bool, check_instance, check_int, check_mask, check_tensor
from ..ops.shapes import head_mask
from .indexer import IndexerKeyCache, LightningIndexer, indexer_loss, topk_selection

__all__ = [
    "SparseCache",
    "SparseAttention",
    "indexer_losses",
    "sparsify",
    "sparse_attention_flops",
]


class SparseCache:
    """The caches of one :class:`SparseAttention` layer: the attention's own and the indexer's keys.

    Attributes:
        attn: The attention layer's cache (``KVCache`` or ``LatentKVCache``).
        index: The :class:`IndexerKeyCache`.
    """

    def __init__(self, attn, index: IndexerKeyCache) -> None:
        self.attn, self.index = attn, check_instance("index", index, IndexerKeyCache)

    @property
    def size(self) -> int:
        """Positions stored."""
        return self.index.size

    def reset(self) -> None:
        """Forget every stored position."""
        self.attn.reset()
        self.index.reset()

    def numel_per_token(self) -> int:
        """Elements stored per position and batch item: the attention's plus the indexer's ``D_I``."""
        return self.attn.numel_per_token() + self.index.numel_per_token()


class SparseAttention(nn.Module):
    """An attention layer that attends only to the tokens its lightning indexer selects (DSA).

    The attention layer (:class:`~attn_core.MultiHeadAttention` or
    :class:`~attn_core.MultiHeadLatentAttention`) is unchanged: it gets the top-k
    selection as a boolean mask, combined with causality in the one attention core.

    The indexer reads a *detached* copy of the layer's input, as in DeepSeek-V3.2: the
    language-model loss never reaches it (the top-k is not differentiable anyway) and
    its own loss never reaches the rest of the model. With ``distill = True``, a forward
    pass in training mode stores :func:`indexer_loss` in ``last_indexer_loss`` (collect
    them with :func:`indexer_losses`): over every visible token when ``topk`` is None
    (the dense warm-up), over the selected ones otherwise (the sparse stage).

    Args:
        attention: The attention layer; its ``forward(x, mask=, kv_cache=, return_weights=)``.
        indexer: A :class:`LightningIndexer`; its ``d_query`` is the attention's query
            latent width (MLA with ``d_q_latent``) or ``d_model``.
        topk: Tokens each query attends to; None: every token (dense, the warm-up).

    Shapes:
        x: ``(B, T, d_model)``; output: ``(B, T, d_model)``; weights: ``(B, H, T, T_k)``

    Raises:
        TypeError, ValueError: A bad ``topk`` or an indexer whose widths do not fit.
    """

    def __init__(self, attention: nn.Module, indexer: LightningIndexer, topk: int | None) -> None:
        super().__init__()
        check_instance("indexer", indexer, LightningIndexer)
        self.attn, self.indexer = attention, indexer
        self.d_model = indexer.d_model
        q_down = getattr(attention, "q_down", None)
        want = q_down.out_features if q_down is not None else self.d_model
        if indexer.d_query != want:
            raise ValueError(
                f"the indexer's d_query={indexer.d_query} must be the attention's query input width {want}"
            )
        self.topk = topk
        self.distill = False
        self.last_indexer_loss: torch.Tensor | None = None

    @property
    def topk(self) -> int | None:
        """Tokens each query attends to (None: all)."""
        return self._topk

    @topk.setter
    def topk(self, value: int | None) -> None:
        self._topk = None if value is None else check_int("topk", value)

    def query_input(self, x: torch.Tensor) -> torch.Tensor:
        """What the indexer's queries read: MLA's query latent ``c_Q = norm(W_DQ x)``, else ``x``.

        Shapes:
            x: ``(B, T, d_model)``; returns ``(B, T, d_q)``
        """
        q_down = getattr(self.attn, "q_down", None)
        if q_down is None:
            return x
        c_q = q_down(x)  # (B, T, d_cq)
        return c_q if self.attn.q_norm is None else self.attn.q_norm(c_q)

    def index(
        self, x: torch.Tensor, *, kv_cache: SparseCache | None = None, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The index scores and the selection of ``x``'s queries (the indexer's keys are cached).

        Shapes:
            x: ``(B, T, d_model)``; returns scores and selection ``(B, T, T_k)``
        """
        # The indexer's inputs are detached from the model's graph: its loss must not train
        # the model, MLA's query latent included (a parameter of the attention, not the indexer).
        x = x.detach()
        q_input = self.query_input(x).detach()
        scores = self.indexer(x, q_input, key_cache=None if kv_cache is None else kv_cache.index, mask=mask)
        selected = scores > float("-inf") if self.topk is None else topk_selection(scores, self.topk)
        return scores, selected

    def forward(
        self,
        x: torch.Tensor,
        *,
        mask: torch.Tensor | None = None,
        kv_cache: SparseCache | None = None,
        return_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Attend from each query of ``x`` to the tokens the indexer selects for it.

        Args:
            x: The new tokens.
            mask: An extra mask of the attention (boolean, or a float bias such as ALiBi's).
            kv_cache: A :class:`SparseCache` (:meth:`make_cache`).
            return_weights: Also return the attention weights (zero off the selection).

        Shapes:
            x: ``(B, T, d_model)``; mask: broadcastable to ``(B, H, T, T_k)``
            output: ``(B, T, d_model)``; weights: ``(B, H, T, T_k)``
        """
        check_tensor("x", x, ("B", "T", ("d_model", self.d_model)), floating=True, like=self.indexer.k_proj.weight)
        check_instance("kv_cache", kv_cache, SparseCache, optional=True)
        check_bool("return_weights", return_weights)
        # Checked here, before it is combined with the selection: an integer mask would be
        # taken as a 0/1 additive bias and block nothing.
        B, T, _ = x.shape
        mask = head_mask(mask)  # (B, T, T_k) -> (B, 1, T, T_k), as the attention layers do
        T_k = T + (0 if kv_cache is None else kv_cache.size)
        check_mask("mask", mask, (B, self.attn.n_heads, T, T_k))
        scores, selected = self.index(x, kv_cache=kv_cache)  # (B, T, T_k) each
        sel = selected[:, None]  # (B, 1, T, T_k): the same selection for every head
        if mask is None:
            combined = sel
        elif mask.dtype == torch.bool:
            combined = mask & sel
        else:  # a float bias: -inf off the selection
            combined = mask.to(x.dtype).masked_fill(~sel, float("-inf"))
        need = return_weights or (self.distill and self.training)
        result = self.attn(x, mask=combined, kv_cache=None if kv_cache is None else kv_cache.attn, return_weights=need)
        out, weights = result if need else (result, None)
        if self.distill and self.training:
            self.last_indexer_loss = indexer_loss(scores, weights, None if self.topk is None else selected)
        return (out, weights) if return_weights else out

    def make_cache(
        self, batch_size: int, max_len: int, *, dtype: torch.dtype | None = None, device=None
    ) -> SparseCache:
        """The attention's cache and an :class:`IndexerKeyCache`, together."""
        storage = storage_like(self.indexer.k_proj.weight, dtype, device)
        attn_cache = self.attn.make_cache(batch_size, max_len, **storage)
        return SparseCache(attn_cache, IndexerKeyCache(batch_size, self.indexer.head_dim, max_len, **storage))

    def extra_repr(self) -> str:
        return f"topk={self.topk}"


def indexer_losses(model: nn.Module) -> torch.Tensor:
    """The sum of the indexer losses stored by every :class:`SparseAttention` in ``model`` (then cleared).

    Raises:
        ValueError: No layer stored a loss (set ``layer.distill = True`` and train mode).
    """
    losses = []
    for m in model.modules():
        if isinstance(m, SparseAttention) and m.last_indexer_loss is not None:
            losses.append(m.last_indexer_loss)
            m.last_indexer_loss = None
    if not losses:
        raise ValueError("no indexer loss was stored: set distill=True on the SparseAttention layers, in train mode")
    return torch.stack(losses).sum()


def sparsify(
    model: nn.Module, *, topk: int | None, n_heads: int, head_dim: int, rope_dim: int = 0, seed: int | None = None
) -> nn.Module:
    """Give every attention layer of a :class:`~attn_core.DecoderLM` a lightning indexer, in place.

    Each block's ``attn`` becomes a :class:`SparseAttention` around it; the indexer's
    query input is MLA's query latent when the layer has one. Returns ``model``.

    Args:
        model: A :class:`~attn_core.DecoderLM` (anything with ``blocks`` whose ``attn`` takes
            ``mask=`` and ``kv_cache=``).
        topk: Tokens each query attends to; None: dense (the warm-up).
        n_heads: Indexer heads ``H_I``.
        head_dim: Indexer head width ``D_I``.
        rope_dim: Leading indexer dimensions rotated by RoPE (0: none).
        seed: Seeds the indexers' initialisation (None: the global generator as it is).

    Raises:
        ValueError: A model without ``blocks`` of attention layers.
    """
    blocks = getattr(model, "blocks", None)
    if blocks is None:
        raise ValueError(f"sparsify needs a model with .blocks (a DecoderLM), got {type(model).__name__}")
    if seed is not None:
        torch.manual_seed(seed)
    for block in blocks:
        attn = block.attn
        q_down = getattr(attn, "q_down", None)
        d_model = block.d_model
        p = next(attn.parameters())
        indexer = LightningIndexer(
            d_model,
            n_heads,
            head_dim,
            d_query=None if q_down is None else q_down.out_features,
            rope_dim=rope_dim,
        ).to(dtype=p.dtype, device=p.device)
        block.attn = SparseAttention(attn, indexer, topk)
    return model


def sparse_attention_flops(
    context: int,
    *,
    n_heads: int,
    qk_dim: int,
    v_dim: int,
    topk: int | None = None,
    index_n_heads: int = 0,
    index_head_dim: int = 0,
) -> int:
    """Multiply-adds × 2 of the attention products of one query at position ``context - 1``.

    It sees ``context`` tokens. Full attention: ``2·H·(d_qk + d_v)·context`` (scores and
    the weighted sum). DSA: the indexer scores every token, ``2·H_I·D_I·context`` plus
    ``2·H_I·context`` for the weighted sum over its heads, and the attention runs over
    ``min(k, context)`` tokens. Projections cost the same either way and are left out.

    Raises:
        ValueError: Non-positive sizes, naming them.
    """
    context = check_int("context", context)
    H, d_qk, d_v = check_int("n_heads", n_heads), check_int("qk_dim", qk_dim), check_int("v_dim", v_dim)
    if topk is None:
        return 2 * H * (d_qk + d_v) * context
    topk = check_int("topk", topk)
    h_i = check_int("index_n_heads", index_n_heads)
    d_i = check_int("index_head_dim", index_head_dim)
    return 2 * h_i * (d_i + 1) * context + 2 * H * (d_qk + d_v) * min(topk, context)
