"""Simplified transformer blocks (He & Hofmann, 2023, arXiv 2311.01906): shaped attention, SAS, SAS-P.

A standard pre-norm block keeps signals alive through depth with skip connections. He
& Hofmann remove the attention skip, the value projection and the output projection,
and keep training stable by *shaping* the attention matrix instead (Noci et al., 2023,
arXiv 2306.17759):

    A = α·I + β·softmax(QKᵀ/√D + M) − γ·C

``M`` is the causal mask and ``C`` the *causal uniform* matrix, row ``i`` averaging
positions ``0..i`` (``C = softmax(M)``, what the softmax gives when every score is 0).
With ``W_Q`` initialised to zero the scores are 0, the softmax equals ``C``, and with
``β = γ`` the matrix is ``α·I``: at initialisation every attention layer passes its
input through unchanged (``α = 1``), like a skip connection would, and training moves it
away from the identity.

Shape legend:
    B        batch size
    T        positions in this call (queries); ``T_k = past + T`` keys with a cache
    d_model  model width
    H        heads, ``D = d_model // H`` head width
"""

from __future__ import annotations

import torch
from torch import nn

from ..caches.kv import KVCache, storage_like
from ..checks import (
    check_bool,
    check_choice,
    check_instance,
    check_int,
    check_made_for,
    check_number,
    check_tensor,
    first_weight,
)
from ..modules.dropout import Dropout
from ..modules.mlp import MLP_KINDS, make_mlp
from ..modules.norms import NORM_KINDS, make_norm
from ..ops.attention import attend, split_result
from ..ops.masks import causal_mask
from ..ops.shapes import head_mask, merge_heads, split_heads
from ..positions.rope import check_rope

__all__ = ["ShapedAttention", "SimplifiedBlock", "centring_matrix"]


def centring_matrix(
    T_q: int,
    T_k: int | None = None,
    *,
    causal: bool = True,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """The centring matrix ``C`` of shaped attention: uniform attention over the allowed keys.

    Causal: row ``r`` (absolute position ``p = T_k - T_q + r``, aligned bottom-right like
    :func:`~attn_core.causal_mask`) is ``1/(p+1)`` on keys ``0..p`` and 0 after them.
    Not causal: every entry is ``1/T_k``.

    Shapes:
        output: ``(T_q, T_k)``

    Raises:
        TypeError, ValueError: A length that is not an int >= 1, a non-bool ``causal``, a
            ``dtype`` that is not floating-point.
    """
    T_q = check_int("T_q", T_q)
    T_k = T_q if T_k is None else check_int("T_k", T_k)  # 0 keys would divide by zero below
    check_bool("causal", causal)
    check_instance("dtype", dtype, torch.dtype)
    if not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point dtype (the entries are 1/n), got dtype={dtype}")
    if not causal:
        return torch.full((T_q, T_k), 1.0 / T_k, device=device, dtype=dtype)
    allowed = causal_mask(T_q, T_k, device=device)  # (T_q, T_k)
    return allowed.to(dtype) / allowed.sum(-1, keepdim=True).to(dtype)


class ShapedAttention(nn.Module):
    """Shaped attention ``A = α·I + β·softmax(QKᵀ/√D + M) − γ·C`` with identity values and output.

    Per head ``h`` the output is ``A_h V_h`` where ``V_h`` is simply head ``h``'s slice of the
    input (no value projection; ``value_proj=True`` adds one, for the first layer only,
    as the paper does) and the heads are concatenated without an output projection.

    The softmax part is :func:`attn_core.ops.attention.attention`; the other two terms never need
    the ``T×T`` matrix: ``I·V`` is ``V`` itself and ``C·V`` is the running mean of ``V``
    (a cumulative sum divided by the position count).

    Initialisation, as in the paper's code (``attn_mat_skip_gain = 1``,
    ``attn_mat_resid_gain = 1``, ``centre_attn_gain`` = the latter, ``query_init_std = 0``):
    ``α = β = γ = 1`` per head, all three trainable, and ``W_Q = 0``, so that ``A = I`` at
    initialisation. ``W_K`` keeps PyTorch's default initialisation. The first layer's
    ``W_V`` starts as the identity here; the paper's code instead starts it as the identity
    plus a random matrix, with trainable gains (``first_layer_value_resid_gain = 1``).

    Args:
        d_model: Model width; divisible by ``n_heads``.
        n_heads: Heads ``H``.
        causal: Causal mask ``M`` and causal uniform ``C`` (a decoder). ``False``: no mask,
            ``C`` uniform over all positions.
        value_proj: Give this layer a value projection (the first layer of a model).
        rope: A :class:`~attn_core.RotaryEmbedding` for queries and keys, or None.
        bias: Biases in ``W_Q``, ``W_K`` (zero-initialised).
        alpha: Initial ``α`` (identity gain).
        beta: Initial ``β`` (softmax gain).
        gamma: Initial ``γ`` (centring gain); ``β = γ`` makes ``A = α·I`` at initialisation.

    Attributes:
        alpha, beta, gamma: ``(H,)`` trainable gains.

    Shapes:
        x: ``(B, T, d_model)``; output: ``(B, T, d_model)``; weights (``A``): ``(B, H, T, T_k)``
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        causal: bool = True,
        value_proj: bool = False,
        rope: nn.Module | None = None,
        bias: bool = False,
        alpha: float = 1.0,
        beta: float = 1.0,
        gamma: float = 1.0,
    ) -> None:
        super().__init__()
        check_int("d_model", d_model)
        check_int("n_heads", n_heads)
        if d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        for name, value in (("alpha", alpha), ("beta", beta), ("gamma", gamma)):
            check_number(name, value)
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, d_model // n_heads
        self.n_kv_heads = n_heads  # for caches: one stored key/value head per head
        self.causal = check_bool("causal", causal)  # bool(1) or bool("no") would pass silently
        self.rope = check_rope(rope, self.head_dim)
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        # W_Q = 0: every score is 0, the softmax is the uniform C, and A = α·I.
        nn.init.zeros_(self.q_proj.weight)
        for lin in (self.q_proj, self.k_proj):
            if lin.bias is not None:
                nn.init.zeros_(lin.bias)
        self.v_proj = None
        if value_proj:
            self.v_proj = nn.Linear(d_model, d_model, bias=False)
            nn.init.eye_(self.v_proj.weight)  # starts as the identity, like the layers without one
        self.alpha = nn.Parameter(torch.full((n_heads,), float(alpha)))
        self.beta = nn.Parameter(torch.full((n_heads,), float(beta)))
        self.gamma = nn.Parameter(torch.full((n_heads,), float(gamma)))

    def _gains(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # (H,) -> (H, 1, 1): broadcast over (B, H, T, ·)
        return tuple(g.to(dtype).view(self.n_heads, 1, 1) for g in (self.alpha, self.beta, self.gamma))

    def forward(
        self,
        x: torch.Tensor,
        *,
        mask: torch.Tensor | None = None,
        kv_cache: KVCache | None = None,
        return_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """``A·V`` per head, heads concatenated.

        Args:
            x: Input sequence (already normalised by the block).
            mask: Extra boolean mask for the softmax term only (e.g. padding); ``I`` and
                ``C`` are not affected by it.
            kv_cache: A :class:`~attn_core.KVCache` of ``H`` heads (keys and values).
            return_weights: Also return the shaped matrix ``A`` (not the softmax alone).

        Shapes:
            x: ``(B, T, d_model)``
            output: ``(B, T, d_model)``
            weights: ``(B, H, T, T_k)``
        """
        check_tensor("x", x, ("B", "T", ("d_model", self.d_model)), like=self.q_proj.weight)
        check_instance("kv_cache", kv_cache, KVCache, optional=True)
        if kv_cache is not None:
            check_made_for(
                "kv_cache",
                kv_cache.made_for,
                {"batch_size": x.shape[0], "n_kv_heads": self.n_heads, "head_dim": self.head_dim},
                fix="make it with this layer's make_cache(batch_size, max_len)",
            )
        B, T, _ = x.shape
        q = split_heads(self.q_proj(x), self.n_heads)  # (B, T, d_model) -> (B, H, T, D)
        k = split_heads(self.k_proj(x), self.n_heads)  # (B, T, d_model) -> (B, H, T, D)
        v = split_heads(x if self.v_proj is None else self.v_proj(x), self.n_heads)  # (B, H, T, D): identity values
        past = 0 if kv_cache is None else kv_cache.size
        if self.rope is not None:
            q, k = self.rope(q, offset=past), self.rope(k, offset=past)
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)  # (B, H, T_k, D)
        mask = head_mask(mask)  # (B, T, T_k) -> (B, 1, T, T_k): the same for every head
        T_k = k.shape[-2]
        softmax_v, softmax_w = attend(  # (B, H, T, D), (B, H, T, T_k) or None
            q, k, v, mask=mask, is_causal=self.causal, return_weights=return_weights
        )
        alpha, beta, gamma = self._gains(v.dtype)
        # I·V: each query's own value (the last T of the T_k positions).
        self_v = v[:, :, T_k - T :, :]  # (B, H, T, D)
        # C·V: the mean of the values each query may see, without building C.
        work = torch.promote_types(v.dtype, torch.float32)
        if self.causal:
            counts = torch.arange(T_k - T + 1, T_k + 1, device=v.device, dtype=work)  # (T,)
            mean_v = v.to(work).cumsum(dim=-2)[:, :, T_k - T :, :] / counts[:, None]  # (B, H, T, D)
        else:
            mean_v = v.to(work).mean(dim=-2, keepdim=True).expand(B, self.n_heads, T, self.head_dim)
        out = alpha * self_v + beta * softmax_v - gamma * mean_v.to(v.dtype)  # (B, H, T, D)
        out = merge_heads(out)  # (B, H, T, D) -> (B, T, d_model)
        if not return_weights:
            return out
        eye = torch.eye(T_k, device=v.device, dtype=softmax_w.dtype)[T_k - T :]  # (T, T_k), bottom-right
        C = centring_matrix(T, T_k, causal=self.causal, device=v.device, dtype=softmax_w.dtype)  # (T, T_k)
        alpha, beta, gamma = self._gains(softmax_w.dtype)
        return out, alpha * eye + beta * softmax_w - gamma * C  # (B, H, T, T_k)

    def make_cache(self, batch_size: int, max_len: int, *, dtype: torch.dtype | None = None, device=None) -> KVCache:
        """An empty cache for the keys and (identity) values of this layer (dtype/device of its weights by default)."""
        storage = storage_like(self.k_proj.weight, dtype, device)
        return KVCache(batch_size, self.n_heads, self.head_dim, max_len, **storage)

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, n_heads={self.n_heads}, causal={self.causal}, "
            f"value_proj={self.v_proj is not None}"
        )


class SimplifiedBlock(nn.Module):
    """He & Hofmann's simplified block: SAS (sequential) or SAS-P (parallel).

    * SAS (``parallel=False``): ``h = ShapedAttn(norm₁(x))``, ``out = h + β_FF·MLP(norm₂(h))``.
      No skip around attention (the shaped matrix's ``α·I`` plays its part), no value or
      output projection; the MLP keeps its skip.
    * SAS-P (``parallel=True``): ``n = norm(x)``, ``out = ShapedAttn(n) + β_FF·MLP(n)``:
      attention and MLP side by side on one normalised input, no skip at all.

    ``β_FF`` is a trainable scalar, initialised to 0.1 (the paper's code uses 0.1 and
    suggests ``O(1/√depth)``): it keeps the MLP branch from swamping the identity-like
    attention path at initialisation.

    Args:
        d_model: Model width.
        n_heads: Heads.
        parallel: SAS-P instead of SAS.
        d_ff: MLP hidden width (default as in :class:`~attn_core.TransformerBlock`).
        mlp: ``"gelu"`` or ``"swiglu"``.
        norm: ``"rmsnorm"`` (the paper's default) or ``"layernorm"``.
        rope: A :class:`~attn_core.RotaryEmbedding`, or None.
        value_proj: Give the attention a value projection (the model's first block).
        beta_ff: Initial MLP-branch gain ``β_FF``.
        bias: Biases in ``W_Q``, ``W_K`` and the MLP.
        dropout: Dropout on the MLP branch.
        causal: Causal attention (a decoder).

    Shapes:
        x: ``(B, T, d_model)``; output: ``(B, T, d_model)``; weights: ``(B, H, T, T_k)``
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        parallel: bool = False,
        d_ff: int | None = None,
        mlp: str = "gelu",
        norm: str = "rmsnorm",
        rope: nn.Module | None = None,
        value_proj: bool = False,
        beta_ff: float = 0.1,
        bias: bool = False,
        dropout: float = 0.0,
        causal: bool = True,
    ) -> None:
        super().__init__()
        check_choice("mlp", mlp, MLP_KINDS)
        check_choice("norm", norm, NORM_KINDS)
        check_number("beta_ff", beta_ff)
        self.d_model, self.parallel = d_model, bool(parallel)
        self.attn_norm = make_norm(norm, d_model)
        self.attn = ShapedAttention(d_model, n_heads, causal=causal, value_proj=value_proj, rope=rope, bias=bias)
        self.mlp_norm = None if self.parallel else make_norm(norm, d_model)
        self.mlp = make_mlp(mlp, d_model, d_ff, bias=bias)
        self.beta_ff = nn.Parameter(torch.tensor(float(beta_ff)))
        self.mlp_dropout = Dropout(check_number("dropout", dropout, low=0.0, high=1.0, high_open=True))

    def make_cache(self, batch_size: int, max_len: int, *, dtype: torch.dtype | None = None, device=None) -> KVCache:
        """An empty cache for this block's shaped attention."""
        return self.attn.make_cache(batch_size, max_len, dtype=dtype, device=device)

    def forward(
        self,
        x: torch.Tensor,
        *,
        mask: torch.Tensor | None = None,
        kv_cache: KVCache | None = None,
        return_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Apply the block.

        Shapes:
            x: ``(B, T, d_model)``; output: ``(B, T, d_model)``; weights: ``(B, H, T, T_k)``
        """
        check_tensor("x", x, ("B", "T", ("d_model", self.d_model)), like=first_weight(self))
        n = self.attn_norm(x)
        result = self.attn(n, mask=mask, kv_cache=kv_cache, return_weights=return_weights)
        h, weights = split_result(result, return_weights)
        beta_ff = self.beta_ff.to(x.dtype)
        if self.parallel:
            out = h + beta_ff * self.mlp_dropout(self.mlp(n))  # SAS-P: both branches read norm(x)
        else:
            out = h + beta_ff * self.mlp_dropout(self.mlp(self.mlp_norm(h)))  # SAS: no skip around attention
        return (out, weights) if return_weights else out

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, parallel={self.parallel}"
