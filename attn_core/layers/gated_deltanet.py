"""Gated DeltaNet, the linear-attention layer of Qwen3-Next.

The layer around :func:`attn_core.ops.delta_rule.delta_rule_chunked` (the gated delta
rule; Yang et al., 2024, arXiv 2412.06464): projections, a short causal depthwise
convolution, L2-normalised queries and keys, the learned decay and update strength, an
output RMSNorm gated by ``SiLU(z)``. Decoding carries a :class:`~attn_core.caches.recurrent.GatedDeltaNetCache`, whose
size does not grow with the sequence: the convolution's last ``K - 1`` inputs and the
``D_k × D_v`` state per value head.

Shape legend:
    B      batch size
    T      positions
    H_k    query/key heads; ``H_v`` value heads (``r = H_v / H_k`` value heads per key head)
    D_k    width of a query/key head; ``D_v`` width of a value head
    K      the short convolution's kernel size; ``C_conv`` its channels ``2·H_k·D_k + H_v·D_v``
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..caches.kv import storage_like
from ..caches.recurrent import GatedDeltaNetCache
from ..checks import check_bool, check_instance, check_int, check_made_for, check_tensor
from ..modules.norms import RMSNorm
from ..ops.delta_rule import delta_rule_chunked, delta_rule_matrix
from ..ops.linear_attention import l2_normalize
from ..ops.shapes import merge_heads, split_heads

__all__ = ["GatedDeltaNet"]


class GatedDeltaNet(nn.Module):
    """Gated DeltaNet, the linear-attention layer of Qwen3-Next (Yang et al., arXiv 2412.06464).

    From ``x``: queries, keys, values through a causal depthwise convolution of ``conv_size``
    taps and SiLU; ``q``, ``k`` L2-normalised; ``β = sigmoid(x W_β)``; the decay
    ``g = −exp(A_log) · softplus(x W_a + dt_bias)`` (so ``α = exp(g) ∈ (0, 1)``); the gated
    delta rule (chunked); per value head an RMSNorm gated by ``SiLU(x W_z)``; the output
    projection. With ``n_value_heads = r · n_heads`` each query/key head serves ``r``
    consecutive value heads.

    It follows the attention-layer protocol: ``forward(x, *, mask=None, kv_cache=None,
    return_weights=False)`` and ``make_cache(batch_size, max_len)``.

    Args:
        d_model: Width of the input and output.
        n_heads: Query/key heads ``H_k``.
        head_dim: Width ``D_k`` of a query/key head.
        n_value_heads: Value heads ``H_v`` (a multiple of ``n_heads``); default ``n_heads``.
        value_head_dim: Width ``D_v`` of a value head; default ``head_dim``.
        conv_size: Taps ``K`` of the short convolution (``>= 1``; 1 is a per-channel scale).
        chunk_size: Chunk length of the chunked delta rule.
        norm_eps: The output RMSNorm's ``eps``.

    Shapes:
        x, output: ``(B, T, d_model)``; weights: ``(B, H_v, T, T)``
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        head_dim: int,
        *,
        n_value_heads: int | None = None,
        value_head_dim: int | None = None,
        conv_size: int = 4,
        chunk_size: int = 64,
        norm_eps: float = 1e-6,
    ) -> None:
        super().__init__()
        self.d_model, self.n_heads = check_int("d_model", d_model), check_int("n_heads", n_heads)
        self.head_dim = check_int("head_dim", head_dim)
        self.n_value_heads = n_heads if n_value_heads is None else check_int("n_value_heads", n_value_heads)
        self.value_head_dim = head_dim if value_head_dim is None else check_int("value_head_dim", value_head_dim)
        if self.n_value_heads % n_heads:
            raise ValueError(f"n_value_heads={self.n_value_heads} is not a multiple of n_heads={n_heads}")
        self.conv_size, self.chunk_size = check_int("conv_size", conv_size), check_int("chunk_size", chunk_size)
        key_width, value_width = n_heads * head_dim, self.n_value_heads * self.value_head_dim
        self.q_proj = nn.Linear(d_model, key_width, bias=False)
        self.k_proj = nn.Linear(d_model, key_width, bias=False)
        self.v_proj = nn.Linear(d_model, value_width, bias=False)
        self.gate_proj = nn.Linear(d_model, value_width, bias=False)  # z: the output gate
        self.beta_proj = nn.Linear(d_model, self.n_value_heads, bias=False)  # b: the writing strength
        self.decay_proj = nn.Linear(d_model, self.n_value_heads, bias=False)  # a: the decay's time step
        channels = 2 * key_width + value_width
        # Depthwise (groups = channels): each channel mixes only its own last K positions.
        self.conv = nn.Conv1d(channels, channels, conv_size, groups=channels, bias=False)
        # Mamba-2's parametrisation: A ∈ [1, 16] and a time step dt ∈ [1e-3, 0.1] at init,
        # dt_bias = softplus⁻¹(dt) so that softplus(0 + dt_bias) = dt.
        self.A_log = nn.Parameter(torch.empty(self.n_value_heads).uniform_(1.0, 16.0).log())
        dt = torch.empty(self.n_value_heads).uniform_(math.log(1e-3), math.log(0.1)).exp()
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self.norm = RMSNorm(self.value_head_dim, eps=norm_eps)
        self.out_proj = nn.Linear(value_width, d_model, bias=False)

    def make_cache(self, batch_size: int, max_len: int | None = None, *, dtype=None, device=None) -> GatedDeltaNetCache:
        """An empty :class:`GatedDeltaNetCache`; ``max_len`` is accepted for the protocol and unused (constant size)."""
        return GatedDeltaNetCache(
            batch_size, self.conv.in_channels, self.conv_size, self.n_value_heads, self.head_dim,
            self.value_head_dim, **storage_like(self.q_proj.weight, dtype, device),
        )  # fmt: skip

    def forward(
        self,
        x: torch.Tensor,
        *,
        mask: torch.Tensor | None = None,
        kv_cache: GatedDeltaNetCache | None = None,
        return_weights: bool = False,
    ):
        """Run the layer on a sequence, or on the next tokens of one with ``kv_cache``.

        Args:
            x: The input.
            mask: Must be None: the layer is causal by construction and has no mask to combine.
            kv_cache: A cache from :meth:`make_cache`, updated in place; None: start from zeros.
            return_weights: Also return the gated delta rule's matrix (``core = weights @ v``,
                before the norm and gate; see :func:`delta_rule_matrix`). Not with a cache.

        Returns:
            The output, or ``(output, weights)``.

        Shapes:
            x, output: ``(B, T, d_model)``; weights: ``(B, H_v, T, T)``
        """
        check_tensor("x", x, ("B", "T", ("d_model", self.d_model)), floating=True, like=self.q_proj.weight)
        if mask is not None:
            raise ValueError("GatedDeltaNet is causal by construction and takes no mask, got a mask")
        check_instance("kv_cache", kv_cache, GatedDeltaNetCache, optional=True)
        check_bool("return_weights", return_weights)
        if kv_cache is not None and return_weights:
            raise ValueError("return_weights=True needs a whole sequence from an empty state, got a kv_cache")
        B, T, _ = x.shape
        if kv_cache is not None:
            check_made_for(
                "kv_cache",
                kv_cache.made_for,
                {
                    "batch_size": B,
                    "conv_channels": self.conv.in_channels,
                    "conv_size": self.conv_size,
                    "n_heads": self.n_value_heads,
                    "head_dim": self.head_dim,
                    "value_head_dim": self.value_head_dim,
                },
                fix="make it with this layer's make_cache(batch_size)",
            )

        qkv = torch.cat([self.q_proj(x), self.k_proj(x), self.v_proj(x)], dim=-1).transpose(1, 2)  # (B, C_conv, T)
        history = x.new_zeros(B, qkv.shape[1], self.conv_size - 1) if kv_cache is None else kv_cache.conv_state
        padded = torch.cat([history.to(qkv.dtype), qkv], dim=-1)  # (B, C_conv, K - 1 + T): causal left padding
        mixed = F.silu(F.conv1d(padded, self.conv.weight, groups=self.conv.groups))  # (B, C_conv, T)
        key_width = self.n_heads * self.head_dim
        q, k, v = mixed.transpose(1, 2).split([key_width, key_width, mixed.shape[1] - 2 * key_width], dim=-1)
        r = self.n_value_heads // self.n_heads
        q, k = (l2_normalize(split_heads(t, self.n_heads)) for t in (q, k))  # (B, H_k, T, D_k)
        if r > 1:  # (B, H_k, T, D_k) -> (B, H_v, T, D_k): value head h reads query/key head h // r
            q, k = q.repeat_interleave(r, dim=1), k.repeat_interleave(r, dim=1)
        v = split_heads(v, self.n_value_heads)  # (B, H_v, T, D_v)
        beta = torch.sigmoid(self.beta_proj(x)).transpose(1, 2)  # (B, H_v, T)
        g = (-self.A_log.exp() * F.softplus(self.decay_proj(x) + self.dt_bias)).transpose(1, 2)  # (B, H_v, T)

        state = None if kv_cache is None else kv_cache.state.to(x.dtype)
        core, state = delta_rule_chunked(q, k, v, beta, g, chunk_size=self.chunk_size, initial_state=state)
        if kv_cache is not None:  # store values, not the graph
            kv_cache.conv_state.copy_(padded[..., padded.shape[-1] - (self.conv_size - 1) :].detach())
            kv_cache.state.copy_(state.detach())
            kv_cache.advance(T)

        z = split_heads(self.gate_proj(x), self.n_value_heads)  # (B, H_v, T, D_v)
        out = self.out_proj(merge_heads(self.norm(core) * F.silu(z)))  # (B, T, d_model)
        if return_weights:
            return out, delta_rule_matrix(q, k, beta, g)
        return out

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, n_heads={self.n_heads}, head_dim={self.head_dim}, "
            f"n_value_heads={self.n_value_heads}, value_head_dim={self.value_head_dim}, conv_size={self.conv_size}"
        )
