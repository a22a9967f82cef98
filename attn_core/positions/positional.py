"""Positional information for attention: sinusoidal, learned, rotary (RoPE) and ALiBi.

Attention by itself is permutation-equivariant: shuffle the tokens and the outputs are
shuffled the same way. Each scheme here breaks that symmetry differently:

* :class:`SinusoidalPositionalEncoding` adds fixed sines and cosines to the token
  vectors (Vaswani et al., 2017); defined for every position.
* :class:`LearnedPositionalEmbedding` adds a trained vector per position (GPT-2);
  defined only up to ``max_len``.
* :class:`~attn_core.positions.rope.RotaryEmbedding` (in :mod:`attn_core.positions.rope`) rotates queries and
  keys by position-dependent angles, so that a query-key dot product depends on their
  *relative* position (Su et al., 2021).
* :class:`ALiBi` adds a per-head linear penalty on the distance to the attention
  scores (Press et al., 2022).

Shape legend:
    B        batch size
    T        number of positions in this call; ``T_q`` queries, ``T_k`` keys
    d_model  width of a token vector (sinusoidal, learned)
    H        attention heads (ALiBi)
    ...      any leading dimensions, e.g. ``(B, H)``
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..checks import check_int, check_number, check_tensor

__all__ = [
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
    "ALiBi",
    "query_temperature",
    "check_temperature",
]


class SinusoidalPositionalEncoding(nn.Module):
    """Fixed sine/cosine position vectors added to the token vectors (Vaswani et al., 2017).

    ``PE[p, 2i] = sin(p / base^(2i/d_model))`` and ``PE[p, 2i+1] = cos(p / base^(2i/d_model))``.
    Each pair of dimensions is a clock turning at its own speed, from one turn per
    ``2π`` positions (``i = 0``) down to one turn per ``2π·base`` positions.

    The encodings are computed on the fly for the positions asked for, so there is no
    maximum length and no buffer that breaks on a longer input.

    Args:
        d_model: Width of the token vectors; must be even (the dimensions come in pairs).
        base: Wavelength scale, 10000 in the paper.

    Shapes:
        x: ``(B, T, d_model)``; output: ``(B, T, d_model)``
        encodings(T): ``(T, d_model)``

    Raises:
        ValueError: If ``d_model`` is not a positive even int, or ``base <= 1``.
    """

    def __init__(self, d_model: int, *, base: float = 10000.0) -> None:
        super().__init__()
        check_int("d_model", d_model)
        if d_model % 2 != 0:
            raise ValueError(f"d_model must be even (sine/cosine pairs), got d_model={d_model}")
        self.d_model, self.base = d_model, check_number("base", base, low=1.0, low_open=True)

    def encodings(
        self, T: int, offset: int = 0, *, device: torch.device | str | None = None, dtype: torch.dtype = torch.float32
    ) -> torch.Tensor:
        """The encodings of positions ``offset .. offset + T - 1``.

        Shapes:
            output: ``(T, d_model)``
        """
        check_int("T", T)
        offset = check_int("offset", offset, minimum=0)
        # float64 for the angles: positions times frequencies lose digits in float32
        # once positions reach the thousands.
        pos = torch.arange(offset, offset + T, dtype=torch.float64, device=device)  # (T,)
        i = torch.arange(0, self.d_model, 2, dtype=torch.float64, device=device)  # (d_model/2,)
        angles = pos[:, None] / self.base ** (i / self.d_model)  # (T, d_model/2)
        # Interleave: sin in the even dimensions, cos in the odd ones.
        pe = torch.stack((angles.sin(), angles.cos()), dim=-1)  # (T, d_model/2, 2)
        return pe.flatten(-2).to(dtype)  # (T, d_model/2, 2) -> (T, d_model)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Add the encodings of positions ``offset .. offset + T - 1`` to ``x``.

        Shapes:
            x: ``(B, T, d_model)``; output: ``(B, T, d_model)``
        """
        check_tensor("x", x, ("B", "T", ("d_model", self.d_model)), floating=True)
        return x + self.encodings(x.shape[1], offset, device=x.device, dtype=x.dtype)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, base={self.base:g}"


class LearnedPositionalEmbedding(nn.Module):
    """One trained vector per position, added to the token vectors (as in GPT-2).

    The table has ``max_len`` rows: a position past it has no vector at all, so the
    model cannot run on longer inputs (it raises instead of silently wrapping around).

    Args:
        max_len: Number of positions the table covers.
        d_model: Width of the token vectors.

    Shapes:
        x: ``(B, T, d_model)``; output: ``(B, T, d_model)``
        encodings(T): ``(T, d_model)``

    Raises:
        ValueError: On a non-positive size, or positions ``>= max_len``.
    """

    def __init__(self, max_len: int, d_model: int) -> None:
        super().__init__()
        self.max_len = check_int("max_len", max_len)
        self.d_model = check_int("d_model", d_model)
        self.embedding = nn.Embedding(max_len, d_model)
        # GPT-2's initialisation: small, so that positions start as a gentle nudge.
        nn.init.normal_(self.embedding.weight, std=0.02)

    def encodings(self, T: int, offset: int = 0) -> torch.Tensor:
        """The embeddings of positions ``offset .. offset + T - 1``.

        Shapes:
            output: ``(T, d_model)``
        """
        check_int("T", T)
        offset = check_int("offset", offset, minimum=0)
        if offset + T > self.max_len:
            raise ValueError(
                f"positions {offset}..{offset + T - 1} exceed the learned table: max_len={self.max_len} "
                f"(offset={offset}, T={T}); a learned embedding has no vector past position {self.max_len - 1}"
            )
        pos = torch.arange(offset, offset + T, device=self.embedding.weight.device)  # (T,)
        return self.embedding(pos)  # (T, d_model)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Add the embeddings of positions ``offset .. offset + T - 1`` to ``x``.

        Shapes:
            x: ``(B, T, d_model)``; output: ``(B, T, d_model)``
        """
        check_tensor("x", x, ("B", "T", ("d_model", self.d_model)), floating=True)
        return x + self.encodings(x.shape[1], offset).to(x.dtype)

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, d_model={self.d_model}"


def check_temperature(temperature: object) -> tuple[float, float] | None:
    """``temperature`` as ``(floor_scale, attn_scale)`` floats (:func:`query_temperature`), or None.

    Raises:
        TypeError: Not a pair (or None).
        ValueError: ``floor_scale <= 0`` or ``attn_scale < 0``, naming the value.
    """
    if temperature is None:
        return None
    if not isinstance(temperature, (tuple, list)) or len(temperature) != 2:
        raise TypeError(f"temperature must be a pair (floor_scale, attn_scale) or None, got {temperature!r}")
    floor_scale = check_number("temperature floor_scale", temperature[0], low=0.0, low_open=True)
    attn_scale = check_number("temperature attn_scale", temperature[1], low=0.0)
    return floor_scale, attn_scale


def query_temperature(positions: torch.Tensor, floor_scale: float, attn_scale: float) -> torch.Tensor:
    """Llama 4's attention temperature in its NoPE layers: what the query at each position is multiplied by.

    ``1 + attn_scale · log(1 + floor((p + 1) / floor_scale))`` (Hugging Face's
    ``attn_temperature_tuning``, after Nakanishi 2025, arXiv 2501.19399): 1 for the first
    ``floor_scale - 1`` positions, then a step up every ``floor_scale`` positions, growing
    like a logarithm. Without positions, a far query's softmax over ever more keys flattens;
    sharpening it (a larger query is a lower temperature) keeps it peaked.

    Args:
        positions: Absolute position of each query (integers).
        floor_scale: Positions per step (Llama 4: 8192).
        attn_scale: Strength (Llama 4: 0.1).

    Shapes:
        positions: ``(T,)``; output: ``(T,)`` float64 (cast where it is used)

    Raises:
        TypeError / ValueError: ``positions`` not a 1-D integer tensor, or bad scales (:func:`check_temperature`).
    """
    check_tensor("positions", positions, ("T",), integer=True)
    floor_scale, attn_scale = check_temperature((floor_scale, attn_scale))
    steps = torch.floor((positions.to(torch.float64) + 1.0) / floor_scale)  # (T,)
    return torch.log1p(steps) * attn_scale + 1.0


class ALiBi(nn.Module):
    """Attention with Linear Biases (Press et al., 2022, arXiv 2108.12409).

    No position vectors at all: head ``h`` adds ``-m_h · (i - j)`` to the score of query
    position ``i`` for key position ``j``, a penalty growing linearly with the distance.
    The slopes ``m_h`` form a geometric sequence, so some heads look far and some only
    nearby. For ``n`` heads (a power of two) the slopes are ``r, r², ..., rⁿ`` with
    ``r = 2^(-8/n)``; for other ``n``, the paper takes the slopes of the nearest smaller
    power of two ``p`` and adds every other slope of ``2p`` heads until it has ``n``.

    ALiBi is defined for causal attention: use the bias together with ``is_causal=True``
    (or a causal mask). Future keys (``j > i``) get the symmetric penalty
    ``-m_h · (j - i)``, so the bias alone never favours them.

    Args:
        n_heads: Number of attention heads ``H``.

    Attributes:
        slopes: ``(H,)`` float32 buffer.

    Shapes:
        bias(T_q, T_k): ``(H, T_q, T_k)``, usable as ``mask=`` of
        :func:`~attn_core.attention` for scores ``(B, H, T_q, T_k)``.
    """

    slopes: torch.Tensor

    def __init__(self, n_heads: int) -> None:
        super().__init__()
        self.n_heads = check_int("n_heads", n_heads)
        self.register_buffer("slopes", torch.tensor(self.slopes_for(n_heads), dtype=torch.float32), persistent=False)

    @staticmethod
    def slopes_for(n_heads: int) -> list[float]:
        """The paper's head slopes for ``n_heads`` heads, as Python floats (exact powers of two when ``H`` is one)."""
        check_int("n_heads", n_heads)

        def geometric(n: int) -> list[float]:  # n a power of two
            # r^(h+1) with r = 2^(-8/n), written as one power of two so that it is exact
            # whenever the exponent is an integer (8 heads: 1/2, 1/4, ..., 1/256).
            return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]

        p = 2 ** int(math.floor(math.log2(n_heads)))
        if p == n_heads:
            return geometric(n_heads)
        # Not a power of two: p heads' slopes, then interleave with the slopes of 2p
        # heads (every other one, i.e. the ones halfway between p's) to fill up.
        return geometric(p) + geometric(2 * p)[0::2][: n_heads - p]

    def bias(
        self,
        T_q: int,
        T_k: int | None = None,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> torch.Tensor:
        """Additive score bias ``-m_h · |i - j|``, aligned bottom-right like :func:`~attn_core.causal_mask`.

        With ``T_q < T_k`` (decoding with a cache), the queries are the last ``T_q`` of
        ``T_k`` positions: query row ``r`` sits at position ``T_k - T_q + r``.

        Shapes:
            output: ``(H, T_q, T_k)``
        """
        T_q = check_int("T_q", T_q)
        T_k = T_q if T_k is None else check_int("T_k", T_k)
        if T_k < T_q:
            raise ValueError(
                f"ALiBi.bias needs T_k >= T_q (queries are the last T_q of T_k positions), got T_q={T_q}, T_k={T_k}"
            )
        device = self.slopes.device if device is None else device
        q_pos = torch.arange(T_k - T_q, T_k, device=device)  # (T_q,)
        k_pos = torch.arange(T_k, device=device)  # (T_k,)
        # Negate the integer distance, not the float product: -(slope * 0) would be -0.0.
        neg_distance = -(q_pos[:, None] - k_pos[None, :]).abs()  # (T_q, T_k), integer
        return self.slopes.to(device=device, dtype=dtype)[:, None, None] * neg_distance.to(dtype)  # (H, T_q, T_k)

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}"
