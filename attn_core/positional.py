"""Positional information for attention: sinusoidal, learned, rotary (RoPE) and ALiBi.

Attention by itself is permutation-equivariant: shuffle the tokens and the outputs are
shuffled the same way. Each scheme here breaks that symmetry differently:

* :class:`SinusoidalPositionalEncoding` adds fixed sines and cosines to the token
  vectors (Vaswani et al., 2017); defined for every position.
* :class:`LearnedPositionalEmbedding` adds a trained vector per position (GPT-2);
  defined only up to ``max_len``.
* :class:`RotaryEmbedding` rotates queries and keys by position-dependent angles, so
  that a query-key dot product depends on their *relative* position (Su et al., 2021).
* :class:`ALiBi` adds a per-head linear penalty on the distance to the attention
  scores (Press et al., 2022).

Shape legend:
    B        batch size
    T        number of positions in this call; ``T_q`` queries, ``T_k`` keys
    d_model  width of a token vector (sinusoidal, learned)
    D        width of one attention head (RoPE's ``head_dim``)
    R        rotated dimensions of a head (RoPE's ``rotary_dim``, ``D`` unless partial); ``R/2`` pairs
    H        attention heads (ALiBi)
    ...      any leading dimensions, e.g. ``(B, H)``
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .checks import check_choice, check_instance, check_int, check_number, check_tensor
from .rope_scaling import RopeScaling

__all__ = [
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
    "RotaryEmbedding",
    "ALiBi",
    "rope_permutation",
    "convert_rope_layout",
    "check_rope",
    "query_temperature",
    "check_temperature",
]

ROPE_LAYOUTS = ("half", "interleaved")


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


def rope_permutation(head_dim: int, *, src: str = "interleaved", dst: str = "half") -> torch.Tensor:
    """Index that reorders a head's dimensions from one RoPE layout to the other.

    RoPE rotates pairs of dimensions. The paper and Meta's LLaMA code pair neighbours,
    ``(0, 1), (2, 3), ...`` (``"interleaved"``); GPT-NeoX and Hugging Face's LLaMA pair
    the two halves, ``(0, D/2), (1, D/2 + 1), ...`` (``"half"``). The two are the same
    rotation once the dimensions are reordered: ``x[..., rope_permutation(D)]`` turns
    an interleaved-layout vector into a half-layout one. (Hugging Face's weight
    conversion applies this reordering to the rows of the query and key projections.)

    Args:
        head_dim: ``D``; must be even.
        src: Layout of the input.
        dst: Layout wanted.

    Returns:
        A permutation ``perm`` of ``range(D)`` with ``y = x[..., perm]``.

    Shapes:
        output: ``(D,)``

    Example:
        >>> rope_permutation(6)
        tensor([0, 2, 4, 1, 3, 5])
    """
    check_int("head_dim", head_dim)
    if head_dim % 2 != 0:
        raise ValueError(f"head_dim must be even (RoPE rotates pairs of dimensions), got head_dim={head_dim}")
    check_choice("src", src, ROPE_LAYOUTS)
    check_choice("dst", dst, ROPE_LAYOUTS)
    idx = torch.arange(head_dim)
    if src == dst:
        return idx
    # Interleaved -> half: the first members of the pairs (even dims) go to the first half.
    to_half = torch.cat((idx[0::2], idx[1::2]))  # (D,)
    # Half -> interleaved is the inverse permutation.
    return to_half if dst == "half" else torch.argsort(to_half)


def convert_rope_layout(x: torch.Tensor, *, src: str, dst: str) -> torch.Tensor:
    """Reorder the last dimension of ``x`` from RoPE layout ``src`` to ``dst``.

    Shapes:
        x: ``(..., D)``; output: ``(..., D)``
    """
    check_tensor("x", x)
    return x[..., rope_permutation(x.shape[-1], src=src, dst=dst).to(x.device)]


class RotaryEmbedding(nn.Module):
    """Rotary position embedding, RoPE (Su et al., 2021, arXiv 2104.09864).

    The head's first ``R = rotary_dim`` dimensions (all ``D`` of them by default) form
    ``R/2`` pairs; pair ``i`` of a vector at position ``m`` is rotated by the angle
    ``m·θ_i`` with ``θ_i = base^(-2i/R)``. A rotation by ``m·θ`` followed by the
    transpose of a rotation by ``n·θ`` is a rotation by ``(m - n)·θ``, so the dot
    product of a rotated query and a rotated key depends on the positions only through
    ``m - n``. Apply it to queries and keys, never values.

    Partial rotation (``rotary_dim < head_dim``; Hugging Face's ``partial_rotary_factor
    = R/D``, used by GPT-NeoX, Phi, GLM, Qwen3-Next): only the first ``R`` dimensions
    of each head are rotated, the last ``D - R`` pass through unchanged and carry
    content whatever the distance. The pairs are formed *within* the rotated part:
    ``"half"`` pairs ``i`` with ``i + R/2`` (not ``i + D/2``), and the speeds use
    ``R`` in the exponent, exactly as Hugging Face's ``apply_rotary_pos_emb`` with a
    ``cos`` of width ``R``.

    Context extension (``scaling``, see :mod:`attn_core.rope_scaling`): the speeds
    ``θ_i`` come from the scaling (PI, NTK-aware, dynamic NTK, YaRN, Llama 3.1, LongRoPE)
    instead, and the cosines and sines are multiplied by its attention factor (YaRN's
    temperature), as Hugging Face does: queries and keys each, so the logits of the
    rotated part by its square; the unrotated dimensions are not scaled. Dynamic NTK and
    LongRoPE change their speeds with the length a call reaches (``offset + T``), as
    Hugging Face's ``dynamic_rope_update``; see their classes.

    The cosines and sines are cached for the positions seen so far and the cache grows
    by itself when a later position is asked for (there is no maximum length). The
    angles are computed in float64 and the rotation in at least float32, so half-
    precision inputs lose nothing to the position arithmetic.

    Args:
        head_dim: ``D``, the width of one query/key head; must be even.
        base: ``θ`` base; 10000 in the paper, larger in long-context models.
        layout: Which dimensions form a pair: ``"half"`` pairs ``i`` with ``i + R/2``
            (GPT-NeoX, Hugging Face LLaMA); ``"interleaved"`` pairs ``2i`` with
            ``2i + 1`` (the paper, Meta's LLaMA, GLM). See :func:`rope_permutation`.
        rotary_dim: ``R``, how many leading dimensions of each head are rotated;
            ``None`` means all (``R = D``). Must be even and in ``[2, D]``.
        scaling: A :class:`~attn_core.rope_scaling.RopeScaling` (e.g.
            ``YarnScaling(factor=4.0, original_max_position=4096)``), or ``None`` for plain RoPE.

    Shapes:
        x: ``(..., T, D)``, e.g. ``(B, H, T, D)``; output: same shape and dtype.

    Raises:
        ValueError: If ``head_dim`` is odd or not positive, ``base <= 1``, the
            layout is unknown, ``rotary_dim`` is odd, not positive or above ``head_dim``,
            or the scaling does not fit ``rotary_dim`` (e.g. LongRoPE factors of another length).
        TypeError: ``scaling`` is not a ``RopeScaling``.
    """

    def __init__(
        self,
        head_dim: int,
        *,
        base: float = 10000.0,
        layout: str = "half",
        rotary_dim: int | None = None,
        scaling: RopeScaling | None = None,
    ) -> None:
        super().__init__()
        check_int("head_dim", head_dim)
        if head_dim % 2 != 0:
            raise ValueError(f"head_dim must be even (RoPE rotates pairs of dimensions), got head_dim={head_dim}")
        self.head_dim, self.base = head_dim, check_number("base", base, low=1.0, low_open=True)
        self.layout = check_choice("layout", layout, ROPE_LAYOUTS)
        if rotary_dim is None:
            rotary_dim = head_dim
        check_int("rotary_dim", rotary_dim)
        if rotary_dim % 2 != 0 or rotary_dim > head_dim:
            raise ValueError(
                f"rotary_dim must be even (pairs are rotated) and at most head_dim={head_dim}, "
                f"got rotary_dim={rotary_dim}"
            )
        self.rotary_dim = rotary_dim
        self.scaling = check_instance("scaling", scaling, RopeScaling, optional=True)
        # The length the current speeds were computed for (see RopeScaling.frequency_length);
        # None for plain RoPE and the static scalings.
        self._freq_length: int | None = None
        if scaling is not None:
            scaling.frequencies(self.base, rotary_dim)  # fail now, not at the first call
        # Plain attributes, not buffers: ``module.half()`` would cast buffers to float16
        # and throw away the precision the angles need. They follow the input's device.
        self._cos: torch.Tensor | None = None  # (L, R/2), float64
        self._sin: torch.Tensor | None = None  # (L, R/2), float64

    @property
    def inv_freq(self) -> torch.Tensor:
        """The rotation speeds in radians per position, float64: ``θ_i = base^(-2i/R)``, or the scaling's.

        With dynamic NTK or LongRoPE, the speeds of the last call's length.

        Shapes:
            output: ``(R/2,)``
        """
        if self.scaling is not None:
            return self.scaling.frequencies(self.base, self.rotary_dim, self._freq_length)[0]
        i = torch.arange(0, self.rotary_dim, 2, dtype=torch.float64)  # (R/2,)
        return self.base ** (-i / self.rotary_dim)

    @property
    def attention_factor(self) -> float:
        """What cos and sin are multiplied by: 1.0 unless the scaling has one (YaRN, LongRoPE)."""
        if self.scaling is None:
            return 1.0
        return self.scaling.frequencies(self.base, self.rotary_dim, self._freq_length)[1]

    @property
    def cached_len(self) -> int:
        """Number of positions whose cosines and sines are cached."""
        return 0 if self._cos is None else self._cos.shape[0]

    def _extend(self, length: int, device: torch.device) -> None:
        # Grow geometrically so that decoding one token at a time rebuilds the cache
        # only O(log T) times.
        new_len = max(length, 2 * self.cached_len, 16)
        pos = torch.arange(new_len, dtype=torch.float64)  # (L,)
        if self.scaling is None:
            inv_freq, factor = self.inv_freq, 1.0
        else:
            inv_freq, factor = self.scaling.frequencies(self.base, self.rotary_dim, self._freq_length)
        angles = pos[:, None] * inv_freq[None, :]  # (L, R/2)
        cos, sin = angles.cos(), angles.sin()
        if factor != 1.0:
            # Hugging Face's attention_scaling: on the tables, in float64.
            cos, sin = cos * factor, sin * factor
        dtype = torch.float32 if device.type == "mps" else torch.float64  # MPS has no float64
        self._cos = cos.to(device=device, dtype=dtype)
        self._sin = sin.to(device=device, dtype=dtype)

    def cos_sin(
        self, T: int, offset: int = 0, *, device: torch.device | str | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Cosines and sines of the angles ``m·θ_i`` for positions ``m = offset .. offset + T - 1``.

        Both are multiplied by :attr:`attention_factor`. With dynamic NTK or LongRoPE this
        call's length ``offset + T`` may change the speeds first (and empty the cache).

        Shapes:
            output: two tensors ``(T, R/2)`` (float64, or float32 on MPS)
        """
        check_int("T", T)
        offset = check_int("offset", offset, minimum=0)
        device = torch.device("cpu") if device is None else torch.device(device)
        if self.scaling is not None:
            length = self.scaling.frequency_length(offset + T, self._freq_length)
            if length != self._freq_length:
                self._freq_length, self._cos, self._sin = length, None, None  # other speeds: rebuild
        if self._cos is None or self.cached_len < offset + T or self._cos.device != device:
            self._extend(max(offset + T, self.cached_len), device)
        return self._cos[offset : offset + T], self._sin[offset : offset + T]

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Rotate ``x``, whose positions are ``offset .. offset + T - 1``.

        Args:
            x: Queries or keys, positions along dimension ``-2``.
            offset: Position of the first row; the number of cached tokens when decoding.

        Returns:
            The rotated tensor, same shape and dtype as ``x``. The last ``D - R``
            dimensions of every position are unchanged, and so is position 0 when the
            attention factor is 1.

        Shapes:
            x: ``(..., T, D)``; output: ``(..., T, D)``
        """
        check_tensor("x", x, ("...", "T", ("head_dim", self.head_dim)), floating=True)
        T = x.shape[-2]
        if T == 0:
            return x
        R = self.rotary_dim
        cos, sin = self.cos_sin(T, offset, device=x.device)  # (T, R/2) each
        # Rotate in at least float32 (float64 inputs stay float64): in float16 the
        # products of large positions' angles would lose most of their digits.
        work = torch.promote_types(x.dtype, torch.float32)
        cos, sin, xw = cos.to(work), sin.to(work), x.to(work)
        rot = xw[..., :R] if R < self.head_dim else xw  # (..., T, R)
        if self.layout == "half":
            x1, x2 = rot[..., : R // 2], rot[..., R // 2 :]  # (..., T, R/2) each
        else:
            pairs = rot.unflatten(-1, (R // 2, 2))  # (..., T, R) -> (..., T, R/2, 2)
            x1, x2 = pairs[..., 0], pairs[..., 1]  # (..., T, R/2) each
        # The 2-D rotation of every pair (x1, x2) by its angle.
        y1 = x1 * cos - x2 * sin
        y2 = x1 * sin + x2 * cos
        if self.layout == "half":
            y = torch.cat((y1, y2), dim=-1)  # (..., T, R)
        else:
            y = torch.stack((y1, y2), dim=-1).flatten(-2)  # (..., T, R/2, 2) -> (..., T, R)
        if R < self.head_dim:
            # The unrotated tail, unchanged (the casts to and from ``work`` are exact).
            y = torch.cat((y, xw[..., R:]), dim=-1)  # (..., T, R) + (..., T, D - R) -> (..., T, D)
        return y.to(x.dtype)

    def extra_repr(self) -> str:
        partial = f", rotary_dim={self.rotary_dim}" if self.rotary_dim != self.head_dim else ""
        scaling = f", scaling={self.scaling}" if self.scaling is not None else ""
        return f"head_dim={self.head_dim}, base={self.base:g}, layout={self.layout!r}{partial}{scaling}"


def check_rope(rope: nn.Module | None, head_dim: int) -> nn.Module | None:
    """Return ``rope`` (a rotary embedding, or None) if it rotates heads of width ``head_dim``; raise otherwise.

    The check of every attention layer that takes a ``rope=`` argument.

    Raises:
        TypeError: ``rope`` is not an ``nn.Module`` (or None).
        ValueError: ``rope.head_dim`` differs from ``head_dim``.
    """
    if check_instance("rope", rope, nn.Module, optional=True) is None:
        return None
    if getattr(rope, "head_dim", head_dim) != head_dim:
        raise ValueError(f"rope.head_dim={rope.head_dim} does not match head_dim={head_dim}")
    return rope


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
