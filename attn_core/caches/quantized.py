"""An int8 key/value cache: asymmetric min-max quantization, keys per channel, values per token.

A cache entry in int8 takes a quarter of the bytes of float32 (half of bf16), plus the
scales and zero points that undo the rounding. **Asymmetric min-max** quantization maps
the range ``[min, max]`` of a group of numbers onto the 256 codes of int8::

    scale = (max - min) / 255        zero = min + 128 * scale
    q = clamp(round((x - zero) / scale), -128, 127)        x ~ q * scale + zero

so every number comes back within ``scale / 2`` of itself (round to nearest), and the
group's ``min`` and ``max`` come back (up to float rounding) at the codes -128 and 127.

*Which* numbers share a scale decides the error. Keys have a few **outlier channels**:
channels whose values are large at every token. A scale shared along a token's channels
(per token) is set by the outlier and crushes the small channels to a few codes; a scale
shared along the tokens of one channel (per channel) sees only that channel's range.
Values have no such channels, and the attention output is a weighted sum of value
*rows*: each row quantized with its own range (per token) keeps its error relative to
itself. This is KIVI's choice (Liu et al. 2024): keys per channel, values per token.

Per-channel statistics need several tokens. :class:`QuantizedKVCache` therefore keeps the
newest ``< group`` tokens in full precision (the *residual*) and quantizes them as one
block of ``group`` tokens when it fills up; values are quantized by the same blocks
(per token, so the block changes nothing but keeps both in step).

Shape legend:
    B      batch size
    H_kv   key/value heads stored
    T      positions stored so far; ``T_new`` added by one update
    D      width of one key/value head
    G      ``group``: tokens quantized together
"""

from __future__ import annotations

import torch
from torch import nn

from ..checks import check_instance, check_int, check_tensor, first_weight
from .kv import KVCache

__all__ = ["quantize_int8", "dequantize_int8", "QuantizedKVCache", "make_quantized_caches", "WithQuantizedCache"]

_QMIN, _QMAX = -128, 127


def _stats_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32, or float64 for float64 input: scales of bf16/fp16 input are kept in float32."""
    return torch.promote_types(dtype, torch.float32)


def quantize_int8(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Quantize ``x`` to int8 with one scale and zero point per slice along ``dim`` (min-max, asymmetric).

    The statistics (``min``, ``max``) are reduced over ``dim``: ``dim`` is the axis whose
    entries *share* a scale. For keys ``(B, H_kv, G, D)`` per channel that is the token
    axis (``dim=2``); for values per token, the channel axis (``dim=-1``).

    A slice whose entries are all equal gets ``scale = 1`` and comes back exactly (a zero
    range would divide by zero). Non-finite input is not checked (that would read the data
    on the device) and gives non-finite scales.

    Args:
        x: A floating-point tensor, at least one entry along ``dim``.
        dim: The axis reduced over (negative counts from the end).

    Returns:
        ``(q, scale, zero)``: ``q`` int8 of ``x``'s shape; ``scale`` and ``zero`` of
        ``x``'s shape with ``dim`` of size 1 (``keepdim``), float32 (float64 for float64
        input). ``dequantize_int8(q, scale, zero)`` is within ``scale / 2`` of ``x``.

    Raises:
        TypeError: ``x`` is not a floating-point tensor; ``dim`` is not an int.
        ValueError: ``dim`` is out of range, or ``x`` has no entry along it.

    Shapes:
        x: ``(..., N, ...)`` with ``N`` at ``dim``
        returns: q ``(..., N, ...)`` int8; scale, zero ``(..., 1, ...)``
    """
    check_tensor("x", x, floating=True)
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"dim must be an int, got {type(dim).__name__} ({dim!r})")
    if not -x.dim() <= dim < x.dim():
        raise ValueError(f"dim must be in [{-x.dim()}, {x.dim()}) for x of shape {tuple(x.shape)}, got dim={dim}")
    if x.shape[dim] == 0:
        raise ValueError(f"x has no entry along dim={dim} to take statistics over: shape {tuple(x.shape)}")
    xf = x.detach().to(_stats_dtype(x.dtype))
    lo, hi = xf.amin(dim=dim, keepdim=True), xf.amax(dim=dim, keepdim=True)
    span = hi - lo
    scale = torch.where(span > 0, span / (_QMAX - _QMIN), torch.ones_like(span))
    zero = lo - _QMIN * scale  # the value that the code 0 stands for
    q = torch.round((xf - zero) / scale).clamp_(_QMIN, _QMAX).to(torch.int8)
    return q, scale, zero


def dequantize_int8(
    q: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """The values int8 codes stand for: ``q * scale + zero``, in ``dtype``.

    Args:
        q: int8 codes (from :func:`quantize_int8`).
        scale: Step between two codes; broadcasts to ``q`` (the same number of axes).
        zero: The value of the code 0; the shape of ``scale``.
        dtype: The floating-point dtype returned.

    Raises:
        TypeError: ``q`` is not int8, ``scale``/``zero`` not floating point, ``dtype`` not
            a floating-point dtype.
        ValueError: ``scale`` and ``zero`` differ in shape, or do not broadcast to ``q``
            axis by axis.

    Shapes:
        q: ``(..., N, ...)``; scale, zero: ``(..., 1, ...)`` (or any shape of ``q``'s
        rank that broadcasts to it)
        returns: ``q``'s shape, ``dtype``
    """
    check_tensor("q", q)
    if q.dtype != torch.int8:
        raise TypeError(f"q must be an int8 tensor, got dtype={q.dtype}")
    check_tensor("scale", scale, floating=True)
    check_tensor("zero", zero, floating=True)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
    if scale.shape != zero.shape:
        raise ValueError(f"scale and zero must have the same shape, got {tuple(scale.shape)} and {tuple(zero.shape)}")
    fits = scale.dim() == q.dim() and all(s in (1, n) for s, n in zip(scale.shape, q.shape))
    if not fits:
        raise ValueError(
            f"scale and zero of shape {tuple(scale.shape)} do not broadcast to q of shape {tuple(q.shape)}: "
            f"each axis must be 1 or q's size (as quantize_int8 returns them, keepdim=True)"
        )
    return (q.to(scale.dtype) * scale + zero).to(dtype)


class QuantizedKVCache(KVCache):
    """A :class:`~attn_core.KVCache` that stores keys and values in int8 (KIVI: keys per channel, values per token).

    Positions are quantized ``group`` at a time: a full block of ``G`` tokens gets one
    scale and zero point per key channel (statistics over its ``G`` tokens) and one per
    value token (statistics over the ``D`` channels). The newest ``size mod G`` positions
    wait in full precision (the residual) until their block fills.

    :meth:`update` returns what the cache *holds*: the quantized blocks dequantized, then
    the residual, the positions just added included. So a prefill attends over the same
    numbers as the steps after it, and a read equals the dequantized writes exactly.
    Dequantizing the whole history at every step costs time (a fused kernel would read
    the int8 codes directly); the memory is what this cache is for.

    A layer takes it where it takes a :class:`~attn_core.KVCache` (it is one);
    :func:`make_quantized_caches` builds one per layer from a model's ``make_caches``.

    Args:
        batch_size: ``B``.
        n_kv_heads: Key/value heads stored, ``H_kv``.
        head_dim: Width of one head, ``D``.
        max_len: Most positions the cache can hold.
        group: Tokens quantized together, ``G`` (KIVI uses 32 to 128).
        dtype: The dtype of the residual and of what :meth:`update` returns.
        device: Storage device.

    Shapes:
        update(k, v): k, v ``(B, H_kv, T_new, D)`` -> k, v ``(B, H_kv, T + T_new, D)``
    """

    def __init__(
        self,
        batch_size: int,
        n_kv_heads: int,
        head_dim: int,
        max_len: int,
        *,
        group: int = 32,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        # KVCache.__init__ is not called: its float buffers are what this cache replaces (it is a
        # KVCache so that every layer that checks for one takes it; update/read are its own).
        B, H = check_int("batch_size", batch_size), check_int("n_kv_heads", n_kv_heads)
        D = check_int("head_dim", head_dim)
        self.max_len, self.group = check_int("max_len", max_len), check_int("group", group)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
        self.dtype = dtype
        self._made_for = {"batch_size": B, "n_kv_heads": H, "head_dim": D}
        n_blocks = max_len // group  # the positions past the last full block stay in the residual
        stats = _stats_dtype(dtype)
        codes = (B, H, n_blocks * group, D)
        self._k_q = torch.zeros(codes, dtype=torch.int8, device=device)
        self._v_q = torch.zeros(codes, dtype=torch.int8, device=device)
        self._k_scale = torch.zeros(B, H, n_blocks, 1, D, dtype=stats, device=device)  # per block and channel
        self._k_zero = torch.zeros_like(self._k_scale)
        self._v_scale = torch.zeros(B, H, n_blocks * group, 1, dtype=stats, device=device)  # per token
        self._v_zero = torch.zeros_like(self._v_scale)
        self._k_res = torch.zeros(B, H, group, D, dtype=dtype, device=device)
        self._v_res = torch.zeros_like(self._k_res)
        self._quantized = 0  # positions held as int8 (a multiple of group)
        self._residual = 0  # positions held in full precision (< group)

    @property
    def size(self) -> int:
        """Number of positions stored (quantized and residual)."""
        return self._quantized + self._residual

    @property
    def offset(self) -> int:
        """Where the positions of the next update start: :attr:`size`."""
        return self.size

    @property
    def quantized(self) -> int:
        """Positions stored as int8 (full blocks of ``group``); the rest are the residual."""
        return self._quantized

    def reset(self) -> None:
        """Forget every stored position (the memory is kept for reuse)."""
        self._quantized = self._residual = 0

    def truncate(self, size: int) -> None:
        """Keep the first ``size`` positions: only residual ones can go (a quantized block lost its originals).

        Raises:
            ValueError: ``size`` outside ``[quantized, size]``.
        """
        check_int("size", size, minimum=0)
        if not self._quantized <= size <= self.size:
            raise ValueError(
                f"a QuantizedKVCache can be truncated only within its full-precision residual: size must be in "
                f"[{self._quantized}, {self.size}] (quantized={self._quantized}, stored={self.size}), got size={size}"
            )
        self._residual = size - self._quantized

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``k`` and ``v`` (quantizing every block they fill); return every stored key and value.

        Shapes:
            k, v: ``(B, H_kv, T_new, D)``
            returns: two tensors ``(B, H_kv, T + T_new, D)`` in the cache's ``dtype``
        """
        B, H, G, D = self._k_res.shape
        for name, t in (("k", k), ("v", v)):
            check_tensor(name, t, (("B", B), ("H_kv", H), "T_new", ("D", D)), floating=True)
        if k.shape != v.shape:
            raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
        T_new = k.shape[2]
        if self.size + T_new > self.max_len:
            raise ValueError(
                f"cache overflow: {self.size} stored + {T_new} new > max_len={self.max_len}; "
                f"create the cache with a larger max_len"
            )
        r = self._residual
        k_all = torch.cat((self._k_res[:, :, :r], k.detach().to(self.dtype)), dim=2)  # (B, H, r + T_new, D)
        v_all = torch.cat((self._v_res[:, :, :r], v.detach().to(self.dtype)), dim=2)
        n = (r + T_new) // G * G  # positions that fill whole blocks now
        if n:
            self._store_blocks(k_all[:, :, :n], v_all[:, :, :n])
        rest = r + T_new - n
        self._k_res[:, :, :rest] = k_all[:, :, n:]
        self._v_res[:, :, :rest] = v_all[:, :, n:]
        self._residual = rest
        return self.read()

    def _store_blocks(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """Quantize ``n`` positions (whole blocks) after the quantized ones. Shapes: k, v ``(B, H, n, D)``"""
        B, H, n, D = k.shape
        start, b0 = self._quantized, self._quantized // self.group
        q, scale, zero = quantize_int8(k.reshape(B, H, n // self.group, self.group, D), dim=3)  # per channel
        self._k_q[:, :, start : start + n] = q.reshape(B, H, n, D)
        self._k_scale[:, :, b0 : b0 + n // self.group] = scale
        self._k_zero[:, :, b0 : b0 + n // self.group] = zero
        q, scale, zero = quantize_int8(v, dim=-1)  # per token: statistics over the channels
        self._v_q[:, :, start : start + n] = q
        self._v_scale[:, :, start : start + n] = scale
        self._v_zero[:, :, start : start + n] = zero
        self._quantized += n

    def read(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every stored key and value, the quantized blocks dequantized, in the cache's ``dtype``.

        Shapes:
            returns: two tensors ``(B, H_kv, T, D)``
        """
        B, H, G, D = self._k_res.shape
        n, nb = self._quantized, self._quantized // G
        codes = self._k_q[:, :, :n].reshape(B, H, nb, G, D)
        k = dequantize_int8(codes, self._k_scale[:, :, :nb], self._k_zero[:, :, :nb], self.dtype).reshape(B, H, n, D)
        v = dequantize_int8(self._v_q[:, :, :n], self._v_scale[:, :, :n], self._v_zero[:, :, :n], self.dtype)
        r = self._residual
        return torch.cat((k, self._k_res[:, :, :r]), dim=2), torch.cat((v, self._v_res[:, :, :r]), dim=2)

    def bytes_per_token(self) -> float:
        """Bytes one more position costs per batch item once its block is quantized: codes and scales.

        ``2·H_kv·D`` int8 codes, the keys' scale and zero point per channel shared by ``G``
        tokens (``2·H_kv·D/G`` numbers), the values' per token (``2·H_kv``); the residual's
        ``G`` full-precision positions are a fixed cost (:meth:`nbytes`), not per token.
        """
        H, D = self._made_for["n_kv_heads"], self._made_for["head_dim"]
        stat_bytes = self._k_scale.element_size()
        return 2 * H * D + stat_bytes * (2 * H * D / self.group + 2 * H)

    def numel_per_token(self) -> int:
        """Int8 codes stored per position and batch item (keys and values; scales not counted)."""
        return 2 * self._made_for["n_kv_heads"] * self._made_for["head_dim"]

    def nbytes(self) -> int:
        """Bytes allocated: codes, scales, zero points and the residual."""
        parts = (
            self._k_q,
            self._v_q,
            self._k_scale,
            self._k_zero,
            self._v_scale,
            self._v_zero,
            self._k_res,
            self._v_res,
        )
        return sum(t.numel() * t.element_size() for t in parts)


def make_quantized_caches(
    layer_caches: list, max_len: int, *, group: int = 32, dtype: torch.dtype, device: torch.device | str | None = None
) -> list:
    """Int8 counterparts of a model's per-layer caches (``model.make_caches(B, ...)``), same sizes.

    Each :class:`~attn_core.KVCache` becomes a :class:`QuantizedKVCache` of ``max_len``
    positions; ``None`` (a layer that reads another's keys and values) stays ``None``. Only
    their sizes are read, so ``model.make_caches(B, 1)`` is enough to pass::

        caches = make_quantized_caches(model.make_caches(B, 1), T_max, dtype=torch.float32)
        logits = model(idx, caches=caches)

    Raises:
        ValueError: A cache of another kind (MLA's latent, a sliding window's ring), named.
    """
    check_instance("layer_caches", layer_caches, (list, tuple))
    out = []
    for i, cache in enumerate(layer_caches):
        if cache is None:
            out.append(None)
        elif type(cache) is KVCache:
            out.append(QuantizedKVCache(**cache.made_for, max_len=max_len, group=group, dtype=dtype, device=device))
        else:
            raise ValueError(
                f"layer {i}'s cache is a {type(cache).__name__}: the int8 cache quantizes a KVCache's keys and values"
            )
    return out


class WithQuantizedCache(nn.Module):
    """A model whose ``make_caches`` builds int8 caches: what :func:`~attn_core.generate` needs to decode with them.

    ``generate(WithQuantizedCache(model, group=32), idx, N)`` decodes ``model`` with a
    :class:`QuantizedKVCache` per layer. The wrapper owns no weights: ``forward`` is the
    model's, and ``config`` is the model's config.

    Args:
        model: A decoder with ``make_caches(B, max_len)`` and ``forward(idx, caches=...)``
            (a :class:`~attn_core.DecoderLM`).
        group: Tokens quantized together (:class:`QuantizedKVCache`).
    """

    def __init__(self, model: nn.Module, *, group: int = 32) -> None:
        super().__init__()
        check_instance("model", model, nn.Module)
        if not callable(getattr(model, "make_caches", None)):
            raise TypeError(
                f"model must have make_caches(batch_size, max_len), as a DecoderLM has; got {type(model).__name__}"
            )
        self.model, self.group = model, check_int("group", group)
        self.config = getattr(model, "config", None)

    def make_caches(self, batch_size: int, max_len: int | None = None) -> list:
        """One :class:`QuantizedKVCache` per layer (``None`` where the model's own cache is ``None``)."""
        max_len = self.config.max_len if max_len is None else check_int("max_len", max_len)
        w = first_weight(self.model)
        return make_quantized_caches(
            self.model.make_caches(batch_size, 1), max_len, group=self.group, dtype=w.dtype, device=w.device
        )

    def forward(self, *args, **kwargs):
        """The wrapped model's forward."""
        return self.model(*args, **kwargs)
