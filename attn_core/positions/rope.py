"""Rotary position embedding (RoPE): queries and keys rotated by position-dependent angles.

:class:`RotaryEmbedding` rotates each pair of a head's dimensions by an angle proportional
to the position, so that a query-key dot product depends on their *relative* position
only (Su et al., 2021). It takes an optional context-extension rule
(:class:`~attn_core.positions.rope_scaling.RopeScaling`), a partial ``rotary_dim`` and either pair
layout: ``"half"`` (dimension ``i`` with ``i + R/2``, Hugging Face's Llama) or
``"interleaved"`` (``2i`` with ``2i + 1``, the paper and Meta's checkpoints).
:func:`rope_permutation` and :func:`convert_rope_layout` move weights and tensors between
the two layouts; :func:`check_rope` is the check of every attention layer taking ``rope=``.

Shape legend:
    B        batch size
    T        number of positions in this call
    D        width of one attention head (RoPE's ``head_dim``)
    R        rotated dimensions of a head (``rotary_dim``, ``D`` unless partial); ``R/2`` pairs
    ...      any leading dimensions, e.g. ``(B, H)``
"""

from __future__ import annotations

import torch
from torch import nn

from ..checks import check_choice, check_instance, check_int, check_number, check_tensor
from .rope_scaling import RopeScaling

__all__ = [
    "ROPE_LAYOUTS",
    "RotaryEmbedding",
    "rope_permutation",
    "convert_rope_layout",
    "check_rope",
]


ROPE_LAYOUTS = ("half", "interleaved")


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

    Context extension (``scaling``, see :mod:`attn_core.positions.rope_scaling`): the speeds
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
        scaling: A :class:`~attn_core.positions.rope_scaling.RopeScaling` (e.g.
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
        # The same tables cast once to the dtype the rotation runs in (float32 for half
        # inputs), with the float64 table they came from: a decoding step rotates queries
        # and keys in every layer, and casting the tables anew each time costs two kernel
        # launches per call, more than the rotation itself at batch 1.
        self._work: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

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
        self._cover(offset + T, device)
        return self._cos[offset : offset + T], self._sin[offset : offset + T]

    def reserve(self, length: int, *, device: torch.device | str | None = None) -> None:
        """Compute the cosines and sines of positions ``0 .. length - 1`` now, not as calls reach them.

        The tables otherwise grow (doubling) when a call asks for a later position. A
        compiled decoding step sees the tables as inputs of fixed shape, so a growth between
        two steps compiles the step again: static caches reserve their length up front
        (:meth:`attn_core.DecoderLM.make_caches`). Dynamic NTK and LongRoPE still rebuild
        the tables when a call's length changes their speeds.
        """
        check_int("length", length)
        device = torch.device("cpu") if device is None else torch.device(device)
        self._cover(1, device)  # the speeds (and device) a first call would have
        if self.cached_len < length:
            self._extend(length, device)

    def _cover(self, length: int, device: torch.device) -> None:
        """Make the float64 tables hold positions ``0 .. length - 1`` on ``device``, with speeds that fit ``length``."""
        if self.scaling is not None:
            freq_length = self.scaling.frequency_length(length, self._freq_length)
            if freq_length != self._freq_length:
                self._freq_length, self._cos, self._sin = freq_length, None, None  # other speeds: rebuild
        if self._cos is None or self.cached_len < length or self._cos.device != device:
            self._extend(max(length, self.cached_len), device)

    @property
    def length_dependent(self) -> bool:
        """Whether the speeds change with the length a call reaches (dynamic NTK, LongRoPE).

        Such a rotation needs each call's length on the host, so it takes an ``int`` offset only.
        """
        return self.scaling is not None and type(self.scaling).frequency_length is not RopeScaling.frequency_length

    def _work_tables(
        self, T: int, offset: int | torch.Tensor, dtype: torch.dtype, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`cos_sin` laid out as the pairs are (each angle twice) and cast to ``dtype``, once per table.

        A decoding step rotates the queries and keys of every layer: casting and laying out
        the tables anew at each call would cost more kernel launches than the rotation.
        An ``int`` offset slices the tables (growing them first if needed); a device tensor
        (a static cache's count) gathers its rows on the device, from tables reserved beforehand.

        Shapes:
            output: two tensors ``(T, R)`` of ``dtype``
        """
        if isinstance(offset, torch.Tensor):
            check_tensor("offset", offset, (), integer=True)
            if self._cos is None or self.length_dependent:
                raise ValueError(
                    "a tensor offset needs rotary tables reserved beforehand (reserve(length)) and speeds "
                    f"that do not depend on the length: cached_len={self.cached_len}, scaling={self.scaling}"
                )
            self._cover(self.cached_len, device)  # no growth: only the device
        else:
            offset = check_int("offset", offset, minimum=0)
            self._cover(offset + T, device)  # grows or rebuilds the float64 tables if needed
        if self._work is None or self._work[0] is not self._cos or self._work[1].dtype != dtype:
            if self.layout == "half":  # (L, R/2) -> (L, R): [angles, angles]
                cos, sin = torch.cat((self._cos, self._cos), -1), torch.cat((self._sin, self._sin), -1)
            else:  # (L, R/2) -> (L, R): each angle next to itself
                cos, sin = self._cos.repeat_interleave(2, -1), self._sin.repeat_interleave(2, -1)
            self._work = (self._cos, cos.to(dtype), sin.to(dtype))
        _, cos, sin = self._work
        if isinstance(offset, torch.Tensor):
            rows = offset + torch.arange(T, device=offset.device)  # (T,): positions offset .. offset + T - 1
            return cos.index_select(0, rows), sin.index_select(0, rows)
        return cos[offset : offset + T], sin[offset : offset + T]

    def _quarter_turn(self, x: torch.Tensor) -> torch.Tensor:
        """Every pair ``(x1, x2)`` turned by 90°: ``(-x2, x1)`` (``rotate_half`` for the half layout).

        Shapes:
            x: ``(..., R)``; output: ``(..., R)``
        """
        R = x.shape[-1]
        if self.layout == "half":
            return torch.cat((-x[..., R // 2 :], x[..., : R // 2]), dim=-1)
        pairs = x.unflatten(-1, (R // 2, 2))  # (..., R) -> (..., R/2, 2)
        return torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)  # (..., R/2, 2) -> (..., R)

    def forward(self, x: torch.Tensor, offset: int | torch.Tensor = 0) -> torch.Tensor:
        """Rotate ``x``, whose positions are ``offset .. offset + T - 1``.

        Args:
            x: Queries or keys, positions along dimension ``-2``.
            offset: Position of the first row; the number of cached tokens when decoding.
                A 0-d integer tensor on ``x``'s device (a static cache's
                :attr:`~attn_core.caches.static.StaticKVCache.offset`) is never read by the
                host: the rows are gathered on the device from tables reserved beforehand
                (:meth:`reserve`), which a length-dependent scaling cannot have.

        Returns:
            The rotated tensor, same shape and dtype as ``x``. The last ``D - R``
            dimensions of every position are unchanged, and so is position 0 when the
            attention factor is 1.

        Shapes:
            x: ``(..., T, D)``; output: ``(..., T, D)``

        Raises:
            ValueError: A tensor ``offset`` before :meth:`reserve`, or with a length-dependent
                scaling (:attr:`length_dependent`); a negative ``int`` offset.
        """
        check_tensor("x", x, ("...", "T", ("head_dim", self.head_dim)), floating=True)
        T = x.shape[-2]
        if T == 0:
            return x
        R = self.rotary_dim
        # Rotate in at least float32 (float64 inputs stay float64): in float16 the
        # products of large positions' angles would lose most of their digits.
        work = torch.promote_types(x.dtype, torch.float32)
        cos, sin = self._work_tables(T, offset, work, x.device)  # (T, R) each, every angle twice
        rot = x[..., :R] if R < self.head_dim else x  # (..., T, R)
        # The 2-D rotation of every pair (x1, x2) by its angle, (x1 cos - x2 sin, x1 sin + x2 cos),
        # is rot·cos + (-x2, x1)·sin. A half-precision x times the float32 tables is float32:
        # the products cast it, exactly, without a cast of their own.
        y = rot * cos + self._quarter_turn(rot) * sin  # (..., T, R)
        if R < self.head_dim:
            # The unrotated tail, unchanged.
            return torch.cat((y.to(x.dtype), x[..., R:]), dim=-1)  # (..., T, R) + (..., T, D - R) -> (..., T, D)
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
