"""Multi-head latent attention (MLA), as in DeepSeek-V2 (arXiv 2405.04434).

Keys and values are not cached per head. Each token is compressed into one latent
vector ``c_KV`` of width ``d_c``; every head's key and value are linear read-outs of it
(up-projections ``W_UK``, ``W_UV``). Only ``c_KV`` is cached, plus one small RoPE key
``k_R`` shared by all heads (*decoupled RoPE*): rotating the up-projected keys would put a
position-dependent rotation between the query and ``W_UK`` and stop the trick below.

Because the up-projections are linear, they can be moved out of the cached side:
``q_C·(W_UK c) = (W_UKᵀ q_C)·c`` folds ``W_UK`` into the query, and
``Σ_j w_j (W_UV c_j) = W_UV (Σ_j w_j c_j)`` folds ``W_UV`` into the output. The
*absorbed* form is then multi-query attention in latent space: ``H`` query heads of
width ``d_c + d_r`` attend over one key head ``[c_KV; k_R]`` and one value head
``c_KV``. Both forms call :func:`attn_core.ops.attention.attention`; a test holds them equal.

Shape legend:
    B        batch size
    T        new positions in this call (queries); ``T_k`` positions attended (cache + new)
    d_model  model width
    H        query heads (``n_heads``)
    d_h      per-head width of content queries and keys (``head_dim``)
    d_v      per-head width of values (``v_head_dim``, default ``d_h``; DeepSeek-V3: 128 = d_h)
    d_r      width of the decoupled RoPE query (per head) and key (shared), ``rope_dim``
    d_c      width of the key/value latent ``c_KV`` (``d_latent``)
    d_cq     width of the query latent ``c_Q`` (``d_q_latent``)
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..caches.kv import LatentKVCache, storage_like
from ..caches.size import kv_cache_elements_per_token
from ..checks import (
    check_bool,
    check_choice,
    check_instance,
    check_int,
    check_made_for,
    check_number,
    check_tensor,
)
from ..modules.norms import RMSNorm
from ..ops.attention import attend
from ..ops.shapes import head_mask, merge_heads, split_heads
from ..positions.rope import ROPE_LAYOUTS, RotaryEmbedding
from ..positions.rope_scaling import RopeScaling, deepseek_softmax_factor

__all__ = ["MultiHeadLatentAttention", "default_rope_dim"]


def default_rope_dim(head_dim: int) -> int:
    """MLA's default decoupled RoPE width: the paper's ``d_h / 2``, rounded down to even (RoPE rotates pairs).

    The one definition of the default: :class:`MultiHeadLatentAttention` and
    :attr:`attn_core.DecoderConfig.resolved_rope_dim` both use it.

    Example:
        >>> default_rope_dim(64), default_rope_dim(6)
        (32, 2)
    """
    return (check_int("head_dim", head_dim) // 2) // 2 * 2


class MultiHeadLatentAttention(nn.Module):
    """Multi-head latent attention (DeepSeek-V2), with decoupled RoPE and an absorbed form.

    Per token ``x`` (the paper's ``h_t``), with ``W`` matrices the ``nn.Linear`` layers
    named in brackets:

    * key/value latent ``c_KV = norm(W_DKV x)`` [``kv_down``, ``kv_norm``, an
      :class:`~attn_core.modules.norms.RMSNorm`]: the only
      per-token content that is cached;
    * content keys and values per head ``k_C = W_UK c_KV``, ``v_C = W_UV c_KV``
      [``k_up``, ``v_up``];
    * query latent ``c_Q = norm(W_DQ x)`` [``q_down``, ``q_norm``] when ``d_q_latent``
      is given (it saves activation memory in training, not cache); otherwise the
      queries read ``x`` directly;
    * content queries ``q_C = W_UQ c_Q`` [``q_up``];
    * decoupled RoPE: per-head ``q_R = RoPE(W_QR c_Q)`` [``q_rope``] and one key
      ``k_R = RoPE(W_KR x)`` [``k_rope``] shared by all heads and cached;
    * ``score = (q_C·k_C + q_R·k_R) / √(d_h + d_r)``, output ``W_O [o_1; ...; o_H]``
      [``out_proj``], each ``o_h`` of width ``d_v`` (``v_head_dim``).

    DeepSeek's checkpoints (``rope_interleave=True`` in Hugging Face's DeepSeek-V3) rotate
    neighbouring dimensions of ``q_R`` and ``k_R`` as pairs: ``rope_layout="interleaved"``.

    ``k_up`` and ``v_up`` never have a bias, even with ``bias=True``: a key bias adds the
    same amount to every score of a query (the softmax ignores it), and without them the
    absorbed form is exact.

    Args:
        d_model: Model width.
        n_heads: Number of heads ``H``.
        d_latent: Width ``d_c`` of the cached key/value latent (DeepSeek-V2: ``4·d_h``).
        d_q_latent: Width ``d_cq`` of the query latent, or ``None`` for no query latent.
        head_dim: ``d_h``; defaults to ``d_model // n_heads``.
        v_head_dim: ``d_v``, the width of each head's values (and of the output heads
            ``out_proj`` reads); defaults to ``head_dim``.
        rope_dim: ``d_r``, even; defaults to :func:`default_rope_dim` (``d_h // 2``
            rounded down to even, as in the paper). ``0`` gives latent attention without positions.
        causal: Block attention to future positions.
        latent_norm: RMS-normalise ``c_KV`` (and ``c_Q``), as DeepSeek does.
        rope_base: Base of the rotary embedding.
        bias: Give the projections other than ``k_up``/``v_up`` a bias.
        dropout: Dropout probability on the attention weights, in training mode.
        rope_layout: Which dimensions RoPE pairs (see :class:`~attn_core.RotaryEmbedding`):
            ``"half"`` or ``"interleaved"`` (DeepSeek's checkpoints).
        latent_norm_eps: The ε of the latent RMSNorms (DeepSeek: ``1e-6`` whatever the
            model's ``rms_norm_eps``).
        rope_scaling: Context extension of the decoupled RoPE (a
            :class:`~attn_core.positions.rope_scaling.RopeScaling`; DeepSeek-V3's YaRN, whose
            ``mscale_all_dim`` also raises the score scale: :attr:`scale`), or ``None``.

    Shapes:
        x: ``(B, T, d_model)``; output: ``(B, T, d_model)``; weights: ``(B, H, T, T_k)``
        cache: ``c_kv (B, T_k, d_c)``, ``k_rope (B, T_k, d_r)``

    Raises:
        ValueError: Non-positive sizes, odd ``rope_dim``, ``d_model`` not divisible by
            ``n_heads`` when ``head_dim`` is not given.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        d_latent: int,
        d_q_latent: int | None = None,
        head_dim: int | None = None,
        rope_dim: int | None = None,
        causal: bool = True,
        latent_norm: bool = True,
        rope_base: float = 10000.0,
        bias: bool = False,
        v_head_dim: int | None = None,
        dropout: float = 0.0,
        rope_layout: str = "half",
        latent_norm_eps: float = 1e-6,
        rope_scaling: RopeScaling | None = None,
    ) -> None:
        super().__init__()
        check_int("d_model", d_model)
        check_int("n_heads", n_heads)
        check_int("d_latent", d_latent)
        if d_q_latent is not None:
            check_int("d_q_latent", d_q_latent)
        if head_dim is None:
            if d_model % n_heads != 0:
                raise ValueError(
                    f"d_model={d_model} is not divisible by n_heads={n_heads}; pass head_dim= to choose the head width"
                )
            head_dim = d_model // n_heads
        check_int("head_dim", head_dim)
        if rope_dim is None:
            rope_dim = default_rope_dim(head_dim)
        check_int("rope_dim", rope_dim, minimum=0)
        if rope_dim % 2 != 0:
            raise ValueError(f"rope_dim must be even (RoPE rotates pairs of dimensions), got rope_dim={rope_dim}")
        self.d_model, self.n_heads, self.head_dim, self.rope_dim = d_model, n_heads, head_dim, rope_dim
        self.d_latent, self.d_q_latent, self.causal = d_latent, d_q_latent, bool(causal)
        self.v_head_dim = head_dim if v_head_dim is None else check_int("v_head_dim", v_head_dim)
        self.dropout = check_number("dropout", dropout, low=0.0, high=1.0, high_open=True)
        self.rope_layout = check_choice("rope_layout", rope_layout, ROPE_LAYOUTS)
        H = n_heads
        q_src = d_model if d_q_latent is None else d_q_latent

        # Query path: x -> [c_Q] -> content queries q_C and RoPE queries q_R.
        self.q_down = None if d_q_latent is None else nn.Linear(d_model, d_q_latent, bias=bias)
        self.q_norm = RMSNorm(d_q_latent, eps=latent_norm_eps) if (latent_norm and d_q_latent is not None) else None
        self.q_up = nn.Linear(q_src, H * head_dim, bias=bias)
        self.q_rope = nn.Linear(q_src, H * rope_dim, bias=bias) if rope_dim else None

        # Key/value path: x -> c_KV (cached) -> per-head keys and values.
        self.kv_down = nn.Linear(d_model, d_latent, bias=bias)
        self.kv_norm = RMSNorm(d_latent, eps=latent_norm_eps) if latent_norm else None
        self.k_up = nn.Linear(d_latent, H * head_dim, bias=False)
        self.v_up = nn.Linear(d_latent, H * self.v_head_dim, bias=False)
        # One RoPE key for all heads, computed from x (not from c_KV) and cached.
        self.k_rope = nn.Linear(d_model, rope_dim, bias=bias) if rope_dim else None
        self.rope_scaling = check_instance("rope_scaling", rope_scaling, RopeScaling, optional=True)
        if rope_scaling is not None and not rope_dim:
            raise ValueError(f"rope_scaling={rope_scaling!r} scales RoPE, but rope_dim=0 rotates nothing")
        self.rope = (
            RotaryEmbedding(rope_dim, base=rope_base, layout=rope_layout, scaling=rope_scaling) if rope_dim else None
        )

        self.out_proj = nn.Linear(H * self.v_head_dim, d_model, bias=bias)

    @property
    def scale(self) -> float:
        """The score scale ``1/√(d_h + d_r)``: a query/key pair has ``d_h + d_r`` dimensions.

        With DeepSeek's YaRN (``rope_scaling`` a :class:`~attn_core.positions.rope_scaling.YarnScaling`
        with ``mscale_all_dim``) it is multiplied by ``yarn_mscale(factor, mscale_all_dim)²``:
        DeepSeek sharpens *every* score, the content part too, while YaRN's own temperature
        (``mscale / mscale_all_dim``, 1 when they are equal as in DeepSeek-V3) scales only the
        rotated part through the cos/sin tables.
        """
        return 1.0 / math.sqrt(self.head_dim + self.rope_dim) * deepseek_softmax_factor(self.rope_scaling)

    # ------------------------------------------------------------------ pieces
    def queries(self, x: torch.Tensor, offset: int | torch.Tensor = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """Content queries ``q_C`` and rotated RoPE queries ``q_R`` of the positions ``offset ..``.

        Shapes:
            x: ``(B, T, d_model)``
            returns: ``q_C (B, H, T, d_h)``, ``q_R (B, H, T, d_r)``
        """
        src = x
        if self.q_down is not None:
            src = self.q_down(x)  # (B, T, d_cq)
            if self.q_norm is not None:
                src = self.q_norm(src)
        q_c = split_heads(self.q_up(src), self.n_heads)  # (B, H, T, d_h)
        if self.q_rope is None:
            q_r = x.new_zeros(x.shape[0], self.n_heads, x.shape[1], 0)  # (B, H, T, 0)
        else:
            q_r = self.rope(split_heads(self.q_rope(src), self.n_heads), offset=offset)  # (B, H, T, d_r)
        return q_c, q_r

    def latents(self, x: torch.Tensor, offset: int | torch.Tensor = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """What the cache stores for each new token: the latent ``c_KV`` and the rotated key ``k_R``.

        Shapes:
            x: ``(B, T, d_model)``
            returns: ``c_KV (B, T, d_c)``, ``k_R (B, T, d_r)``
        """
        c_kv = self.kv_down(x)  # (B, T, d_c)
        if self.kv_norm is not None:
            c_kv = self.kv_norm(c_kv)
        if self.k_rope is None:
            k_r = x.new_zeros(x.shape[0], x.shape[1], 0)  # (B, T, 0)
        else:
            # Positions run along dim -2, so RoPE rotates (B, T, d_r) directly.
            k_r = self.rope(self.k_rope(x), offset=offset)  # (B, T, d_r)
        return c_kv, k_r

    # ------------------------------------------------------------------ forward
    def forward(
        self,
        x: torch.Tensor,
        *,
        mask: torch.Tensor | None = None,
        kv_cache: LatentKVCache | None = None,
        return_weights: bool = False,
        absorbed: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Attend from ``x`` to itself and to the cached positions.

        Args:
            x: The new tokens.
            mask: Boolean (``True`` = may attend) or float bias of shape ``(T, T_k)``,
                ``(B, T, T_k)`` (same for every head) or ``(B, H, T, T_k)``.
            kv_cache: A :class:`~attn_core.LatentKVCache` (see :meth:`make_cache`); the
                new latents are appended and positions continue after ``kv_cache.size``.
            return_weights: Also return the attention weights.
            absorbed: Use the absorbed form (``W_UK`` folded into the queries, ``W_UV``
                into the output): multi-query attention over the latents. Same result.

        Shapes:
            x: ``(B, T, d_model)``
            output: ``(B, T, d_model)``; weights: ``(B, H, T, T_k)``
        """
        check_tensor("x", x, ("B", "T", ("d_model", self.d_model)), like=self.kv_down.weight)
        check_instance("kv_cache", kv_cache, LatentKVCache, optional=True)
        if kv_cache is not None:
            check_made_for(
                "kv_cache",
                kv_cache.made_for,
                {"batch_size": x.shape[0], "d_latent": self.kv_down.out_features, "d_rope": self.rope_dim},
                fix="make it with this layer's make_cache(batch_size, max_len)",
            )
        check_bool("absorbed", absorbed)
        mask = head_mask(mask)  # (B, T, T_k) -> (B, 1, T, T_k): the same for every head
        past = 0 if kv_cache is None else kv_cache.offset  # a static cache's: a device tensor
        q_c, q_r = self.queries(x, offset=past)  # (B, H, T, d_h), (B, H, T, d_r)
        c_kv, k_r = self.latents(x, offset=past)  # (B, T, d_c), (B, T, d_r)
        if kv_cache is not None:
            c_kv, k_r = kv_cache.update(c_kv, k_r)  # (B, T_k, d_c), (B, T_k, d_r)
        attend = self._attend_absorbed if absorbed else self._attend_naive
        out, weights = attend(q_c, q_r, c_kv, k_r, mask, return_weights)  # (B, H, T, d_v)
        out = self.out_proj(merge_heads(out))  # (B, H, T, d_v) -> (B, T, H*d_v) -> (B, T, d_model)
        return (out, weights) if return_weights else out

    def _attend_naive(self, q_c, q_r, c_kv, k_r, mask, return_weights):
        """Decompress every head's keys and values from the latents, then ordinary attention."""
        B, H, T_k = c_kv.shape[0], self.n_heads, c_kv.shape[1]
        k_c = split_heads(self.k_up(c_kv), self.n_heads)  # (B, H, T_k, d_h)
        v = split_heads(self.v_up(c_kv), self.n_heads)  # (B, H, T_k, d_v)
        k_r = k_r.unsqueeze(1).expand(B, H, T_k, self.rope_dim)  # (B, T_k, d_r) -> (B, H, T_k, d_r): shared
        q = torch.cat((q_c, q_r), dim=-1)  # (B, H, T, d_h + d_r)
        k = torch.cat((k_c, k_r), dim=-1)  # (B, H, T_k, d_h + d_r)
        return attend(
            q,
            k,
            v,
            mask=mask,
            is_causal=self.causal,
            scale=self.scale,
            dropout_p=self._dropout_p(),
            return_weights=return_weights,
        )

    def _dropout_p(self) -> float:
        return self.dropout if self.training else 0.0

    def _attend_absorbed(self, q_c, q_r, c_kv, k_r, mask, return_weights):
        """Multi-query attention in latent space: W_UK on the query side, W_UV on the output side."""
        H, d_h, d_v, d_c = self.n_heads, self.head_dim, self.v_head_dim, self.d_latent
        # nn.Linear stores W as (out, in) = (H*d_h, d_c); head h's block is W[h*d_h:(h+1)*d_h].
        w_uk = self.k_up.weight.view(H, d_h, d_c)  # (H*d_h, d_c) -> (H, d_h, d_c)
        w_uv = self.v_up.weight.view(H, d_v, d_c)  # (H*d_v, d_c) -> (H, d_v, d_c)
        # q_C·(W_UK c) = (W_UKᵀ q_C)·c: each head's query moves into latent space.
        q_lat = torch.einsum("bhtd,hdc->bhtc", q_c, w_uk)  # (B, H, T, d_c)
        q = torch.cat((q_lat, q_r), dim=-1)  # (B, H, T, d_c + d_r)
        k = torch.cat((c_kv, k_r), dim=-1).unsqueeze(1)  # (B, T_k, d_c + d_r) -> (B, 1, T_k, d_c + d_r)
        v = c_kv.unsqueeze(1)  # (B, T_k, d_c) -> (B, 1, T_k, d_c): one value head for all queries
        # The scale is that of the *unabsorbed* dot products (d_h + d_r wide), not 1/√(d_c + d_r).
        o_lat, weights = attend(  # (B, H, T, d_c)
            q,
            k,
            v,
            mask=mask,
            is_causal=self.causal,
            scale=self.scale,
            dropout_p=self._dropout_p(),
            return_weights=return_weights,
        )
        # Σ_j w_j (W_UV c_j) = W_UV (Σ_j w_j c_j): decompress once per query, not once per key.
        out = torch.einsum("bhtc,hdc->bhtd", o_lat, w_uv)  # (B, H, T, d_v)
        return out, weights

    # ------------------------------------------------------------------ cache and cost
    def make_cache(
        self,
        batch_size: int,
        max_len: int,
        *,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ) -> LatentKVCache:
        """An empty :class:`~attn_core.LatentKVCache` for this layer (dtype/device of its weights by default).

        Shapes:
            stores ``c_kv (B, max_len, d_c)`` and ``k_rope (B, max_len, d_r)``
        """
        storage = storage_like(self.kv_down.weight, dtype, device)
        return LatentKVCache(batch_size, self.d_latent, self.rope_dim, max_len, **storage)

    def cache_elements_per_token(self) -> int:
        """Cached elements per token and layer (``d_c + d_r``), measured on a real cache; see
        :func:`~attn_core.caches.size.kv_cache_elements_per_token`."""
        return kv_cache_elements_per_token(self)

    def decode_flops(self, context_len: int, *, absorbed: bool = False) -> int:
        """Floating-point operations (2 per multiply-add) of the matrix products of one decoding step.

        One new token of one sequence attends to ``context_len`` positions (the cached
        ones and itself). Counts the projections and the two attention products, as
        ``torch.utils.flop_counter`` does; element-wise work (norms, RoPE, softmax) is
        left out. The naive form re-decompresses every cached latent into ``H`` keys and
        values at every step; the absorbed form never does, but attends in the wider
        latent space.

        Returns:
            The count, an int.
        """
        T_k = check_int("context_len", context_len)
        H, d_h, d_r, d_c, d = self.n_heads, self.head_dim, self.rope_dim, self.d_latent, self.d_model
        d_v = self.v_head_dim
        q_src = d if self.d_q_latent is None else self.d_q_latent
        macs = H * (d_h + d_r) * q_src  # q_up and q_rope
        if self.d_q_latent is not None:
            macs += d * self.d_q_latent  # q_down
        macs += d * (d_c + d_r)  # kv_down and k_rope of the new token
        macs += H * d_v * d  # out_proj
        if absorbed:
            macs += H * (d_h + d_v) * d_c  # W_UK into the query, W_UV out of the latent output
            macs += H * T_k * (d_c + d_r) + H * T_k * d_c  # scores and weighted sum in latent space
        else:
            macs += T_k * d_c * H * (d_h + d_v)  # k_up and v_up of every cached latent
            macs += H * T_k * (d_h + d_r) + H * T_k * d_v  # scores and weighted sum per head
        return 2 * macs

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, n_heads={self.n_heads}, head_dim={self.head_dim}, "
            f"v_head_dim={self.v_head_dim}, d_latent={self.d_latent}, "
            f"d_q_latent={self.d_q_latent}, rope_dim={self.rope_dim}, causal={self.causal}"
        )
