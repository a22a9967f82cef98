"""The lightning indexer of DeepSeek Sparse Attention: which ``k`` past tokens each query attends to.

For query ``t`` and past token ``s`` the indexer scores

    I[t, s] = Σ_j  w[t, j] · ReLU(q[t, j] · k[s] · D_I^-1/2)

with ``H_I`` small indexer heads ``j`` (query ``q[t, j]``, per-head weight ``w[t, j]``,
both from the query token) and **one** key ``k[s]`` per token, shared by the heads and
cached like the main keys (:class:`IndexerKeyCache`). :func:`topk_selection` turns the
scores into a boolean *selection mask* (``True`` = may attend, the ``top-k`` tokens of each
row; a query with fewer than ``k`` past tokens keeps them all), which the sparse layer
(:class:`~attn_core.layers.sparse_attention.SparseAttention`) combines with causality.

The top-k is not differentiable, so the indexer cannot learn from the language-model
loss. DeepSeek trains it by distillation (:func:`indexer_loss`): the KL divergence from
the main attention's distribution, summed over heads and renormalised, to the softmax of
the index scores; and it detaches the indexer's input, so that this loss trains only the
indexer and the language-model loss only the rest (DeepSeek-AI, *DeepSeek-V3.2*, 2025,
arXiv 2512.02556).

Following Hugging Face's ``DeepseekV32Indexer``: the queries read the query latent
``c_Q`` of multi-head latent attention (or ``x`` when there is none), the key is
``LayerNorm(W_k x)``, RoPE (half layout) rotates the first ``rope_dim`` dimensions of
the indexer's queries and key, and the scores are summed over heads with the weights
``W_w x · H_I^-1/2``.

Shape legend:
    B      batch size
    T      new positions (queries); ``T_k`` positions scored (cached + new)
    H_I    indexer heads (``n_heads``), ``D_I`` indexer head width (``head_dim``)
    d_q    width of the indexer's query input (``c_Q`` or ``d_model``)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..caches.kv import SlotCache
from ..checks import check_instance, check_int, check_made_for, check_mask, check_number, check_tensor
from ..modules.norms import LayerNorm
from ..ops.masks import causal_mask
from ..positions.rope import RotaryEmbedding

__all__ = [
    "LightningIndexer",
    "IndexerKeyCache",
    "topk_selection",
    "indexer_loss",
]


class IndexerKeyCache(SlotCache):
    """The indexer's keys, one ``D_I``-wide key per token (shared by its heads), preallocated.

    Shapes:
        update(k): ``(B, T_new, D_I)`` -> ``(B, T + T_new, D_I)``
    """

    def __init__(
        self,
        batch_size: int,
        head_dim: int,
        max_len: int,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        shape = (check_int("batch_size", batch_size), check_int("head_dim", head_dim))
        super().__init__({"k": shape}, max_len, seq_dim=1, dtype=dtype, device=device)
        self._made_for = dict(zip(("batch_size", "head_dim"), shape))

    def update(self, k: torch.Tensor) -> torch.Tensor:
        """Append the new keys; return every stored key (a view, no copy).

        Shapes:
            k: ``(B, T_new, D_I)``; returns ``(B, T + T_new, D_I)``
        """
        return self._append(k=k)[0]


class LightningIndexer(nn.Module):
    """DeepSeek-V3.2's lightning indexer: a few ReLU heads score every past token for each query.

    Parameters (Hugging Face's names in brackets): ``q_proj`` [``wq_b``] makes ``H_I``
    queries of width ``D_I`` from the query input; ``k_proj`` [``wk``] and ``k_norm``
    [``k_norm``, a LayerNorm with bias] make one key per token; ``weights_proj``
    [``weights_proj``] makes one weight per head from ``x``.

    Args:
        d_model: Width of ``x``.
        n_heads: Indexer heads ``H_I`` (DeepSeek-V3.2: 64).
        head_dim: Indexer head width ``D_I`` (DeepSeek-V3.2: 128).
        d_query: Width of the query input (MLA's ``d_q_latent``, DeepSeek-V3.2: 1536);
            default ``d_model`` (the queries read ``x``).
        rope_dim: Leading dimensions of each query and key rotated by RoPE (DeepSeek-V3.2:
            64, the main attention's ``d_r``); 0: no positions.
        rope_base: RoPE's base.
        norm_eps: ε of the key's LayerNorm (DeepSeek: 1e-6).

    Shapes:
        x: ``(B, T, d_model)``; q_input: ``(B, T, d_q)``; index scores: ``(B, T, T_k)``

    Raises:
        ValueError: Non-positive sizes, ``rope_dim`` odd or larger than ``head_dim``.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        head_dim: int,
        *,
        d_query: int | None = None,
        rope_dim: int = 0,
        rope_base: float = 10000.0,
        norm_eps: float = 1e-6,
    ) -> None:
        super().__init__()
        self.d_model, self.n_heads = check_int("d_model", d_model), check_int("n_heads", n_heads)
        self.head_dim = check_int("head_dim", head_dim)
        self.d_query = d_model if d_query is None else check_int("d_query", d_query)
        self.rope_dim = check_int("rope_dim", rope_dim, minimum=0)
        if rope_dim % 2 or rope_dim > head_dim:
            raise ValueError(f"rope_dim must be even and <= head_dim={head_dim}, got rope_dim={rope_dim}")
        check_number("norm_eps", norm_eps, low=0.0, low_open=True)
        self.q_proj = nn.Linear(self.d_query, n_heads * head_dim, bias=False)
        self.k_proj = nn.Linear(d_model, head_dim, bias=False)
        self.k_norm = LayerNorm(head_dim, eps=norm_eps)
        self.weights_proj = nn.Linear(d_model, n_heads, bias=False)
        self.rope = RotaryEmbedding(rope_dim, base=rope_base, layout="half") if rope_dim else None

    @property
    def scale(self) -> float:
        """``D_I^-1/2``, the scale of each head's dot product."""
        return self.head_dim**-0.5

    def _rotate(self, t: torch.Tensor, offset: int) -> torch.Tensor:
        """RoPE on the leading ``rope_dim`` dimensions; positions along dim -2."""
        if self.rope is None:
            return t
        rot, rest = t.split([self.rope_dim, self.head_dim - self.rope_dim], dim=-1)
        return torch.cat((self.rope(rot, offset=offset), rest), dim=-1)

    def keys(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """One key per token, shared by the heads: what the indexer caches.

        Shapes:
            x: ``(B, T, d_model)``; returns ``(B, T, D_I)``
        """
        return self._rotate(self.k_norm(self.k_proj(x)), offset)  # (B, T, D_I), positions along dim -2

    def forward(
        self,
        x: torch.Tensor,
        q_input: torch.Tensor | None = None,
        *,
        key_cache: IndexerKeyCache | None = None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Index scores of every new query against every visible token; ``-inf`` where not visible.

        Args:
            x: The new tokens.
            q_input: What the queries read (MLA's ``c_Q``); default ``x``.
            key_cache: An :class:`IndexerKeyCache`: the new keys are appended, positions
                continue after ``key_cache.size``.
            mask: Extra boolean mask (``True`` = visible, e.g. padding), combined with causality.

        Shapes:
            x: ``(B, T, d_model)``; q_input: ``(B, T, d_q)``; mask: broadcastable to ``(B, T, T_k)``
            returns: ``(B, T, T_k)``, in at least float32
        """
        check_tensor("x", x, ("B", "T", ("d_model", self.d_model)), floating=True, like=self.k_proj.weight)
        q_input = x if q_input is None else q_input
        check_tensor(
            "q_input",
            q_input,
            (("B", x.shape[0]), ("T", x.shape[1]), ("d_query", self.d_query)),
            like=self.q_proj.weight,
        )
        check_instance("key_cache", key_cache, IndexerKeyCache, optional=True)
        B, T, _ = x.shape
        if key_cache is not None:
            check_made_for(
                "key_cache",
                key_cache.made_for,
                {"batch_size": B, "head_dim": self.head_dim},
                fix="make it with IndexerKeyCache(batch_size, indexer.head_dim, max_len)",
            )
        past = 0 if key_cache is None else key_cache.size
        # Boolean only: the mask is combined with causality by `&`; a 0/1 integer mask would not be.
        check_mask("mask", mask, (B, T, past + T), allow_float=False, target="the index scores' shape")
        q = self.q_proj(q_input).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H_I, T, D_I)
        q = self._rotate(q, past)
        k = self.keys(x, offset=past)  # (B, T, D_I)
        if key_cache is not None:
            k = key_cache.update(k)  # (B, T_k, D_I)
        dtype = torch.promote_types(x.dtype, torch.float32)  # scores in >= float32, as Hugging Face's
        # One key for all heads: (B, H_I, T, D_I) @ (B, 1, D_I, T_k) broadcasts over the heads.
        per_head = F.relu((q.to(dtype) @ k.to(dtype).transpose(-1, -2).unsqueeze(1)) * self.scale)  # (B, H_I, T, T_k)
        w = self.weights_proj(x).to(dtype) * self.n_heads**-0.5  # (B, T, H_I)
        scores = torch.einsum("bth,bhts->bts", w, per_head)  # (B, T, T_k): weighted sum over heads
        allowed = causal_mask(T, k.shape[1], device=x.device)  # (T, T_k), bottom-right aligned
        if mask is not None:
            allowed = allowed & mask
        return scores.masked_fill(~allowed, float("-inf"))

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}, head_dim={self.head_dim}, d_query={self.d_query}, rope_dim={self.rope_dim}"


def topk_selection(index_scores: torch.Tensor, k: int) -> torch.Tensor:
    """The boolean selection mask: each query's ``k`` highest-scoring visible tokens.

    Tokens scored ``-inf`` (not visible) are never selected, so a query with fewer than
    ``k`` visible tokens selects them all. Equal scores are common (the indexer's ReLU
    gives exactly 0 wherever every head is negative), so ties go to the **most recent**
    token: a rule that does not depend on how many keys the call sees, which keeps a
    cached decode selecting what the full pass selects. (Hugging Face leaves ties to
    ``torch.topk``, whose choice can change with the number of keys.)

    Shapes:
        index_scores: ``(..., T, T_k)``; returns ``(..., T, T_k)``, boolean (``True`` = selected)

    Raises:
        ValueError: ``k <= 0``, naming it.
    """
    check_tensor("index_scores", index_scores, ("...", "T", "T_k"), floating=True)
    k = check_int("k", k)
    T_k = index_scores.shape[-1]
    # A stable sort keeps tied scores in index order; on the reversed keys that is newest first.
    order = index_scores.flip(-1).sort(dim=-1, descending=True, stable=True).indices  # (..., T, T_k)
    top = (T_k - 1) - order[..., : min(k, T_k)]  # (..., T, min(k, T_k)): back to key positions
    chosen = torch.zeros_like(index_scores, dtype=torch.bool).scatter(-1, top, True)
    return chosen & (index_scores > float("-inf"))  # fewer than k visible: the -inf picks are dropped


def indexer_loss(
    index_scores: torch.Tensor, attn_weights: torch.Tensor, selected: torch.Tensor | None = None
) -> torch.Tensor:
    """DeepSeek-V3.2's indexer loss: ``KL(p ‖ softmax(I))`` per query, averaged over queries.

    The target ``p`` is the main attention's distribution summed over its heads and
    L1-normalised (detached: a target, not a path for gradients). In the dense warm-up
    both run over every visible token; in the sparse stage (``selected`` given) over the
    selected tokens only.

    Shapes:
        index_scores: ``(B, T, T_k)`` (``-inf`` where not visible)
        attn_weights: ``(B, H, T, T_k)``; selected: ``(B, T, T_k)`` or None
        returns: a scalar

    Raises:
        ValueError: Shapes that do not match, naming them.
    """
    check_tensor("index_scores", index_scores, ("B", "T", "T_k"), floating=True)
    check_tensor("attn_weights", attn_weights, ("B", "H", "T", "T_k"), floating=True)
    if attn_weights.shape[:1] + attn_weights.shape[2:] != index_scores.shape:
        raise ValueError(
            f"attn_weights {tuple(attn_weights.shape)} and index_scores {tuple(index_scores.shape)} "
            "must agree on (B, T, T_k)"
        )
    keep = index_scores > float("-inf")  # (B, T, T_k)
    if selected is not None:
        if selected.shape != index_scores.shape:
            raise ValueError(
                f"selected {tuple(selected.shape)} must have index_scores' shape {tuple(index_scores.shape)}"
            )
        keep = keep & selected
    dtype = torch.promote_types(index_scores.dtype, torch.float32)
    p = attn_weights.detach().to(dtype).sum(1) * keep  # (B, T, T_k): Σ over heads
    p = p / p.sum(-1, keepdim=True).clamp_min(torch.finfo(dtype).tiny)  # L1-normalised
    log_q = torch.log_softmax(index_scores.to(dtype).masked_fill(~keep, float("-inf")), dim=-1)
    # 0 · log 0 = 0: xlogy for p log p; zeros (not -inf) where p is 0, or 0 · inf = NaN in the backward.
    kl = torch.xlogy(p, p) - p * log_q.masked_fill(~keep, 0.0)  # (B, T, T_k)
    return kl.sum(-1).mean()
