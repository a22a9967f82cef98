"""FlashAttention written by hand in Triton: the Python side of the fused kernels.

The kernels themselves are in :mod:`attn_core.ops.backends.flash_kernels`. Here: the
kernel's row in the table of backends (:mod:`attn_core.ops.backends`): why a call is
:func:`unsupported` (the one list of its conditions, which :func:`flash_attention` raises too),
:func:`auto`, :func:`key`, :func:`run`; the launches (:func:`flash_forward`,
:func:`flash_backward`), the autograd function behind :func:`flash_attention`, and
:func:`kernel_source` to read a kernel.

What the kernel supports, in the conventions of :func:`attn_core.attention`:

* grouped-query attention (``H % H_kv == 0``; query head ``h`` reads key/value head
  ``h // (H // H_kv)``), any lengths (ragged last blocks are masked), ``T_q != T_k``;
* ``is_causal`` aligned bottom-right (query ``i`` sits at position ``T_k - T_q + i``);
  key blocks entirely in a query block's future are *skipped*, not masked;
* ``window``: each query sees itself and the ``window - 1`` keys before it; key blocks
  entirely outside the window are skipped too (attention as block sparsity);
* ``sinks``: gpt-oss's learned logit per head that joins every softmax denominator. In
  the online softmax it is only a different *start*: ``m = sink, l = 1`` instead of
  ``m = -inf, l = 0``.

Triton is optional and imported on the first launch (with ``flash_kernels``), not before:
``attn_core`` imports without it, and :func:`flash_attention` then says ``pip install triton``.

Scores are kept in base 2 (see :mod:`attn_core.ops.backends.flash_kernels`): the launches pass
``scale · log2(e)`` and the saved log-sum-exp is in base-2 units.

Shape legend:
    B     batch
    H     query heads; ``H_kv`` key/value heads (``H_kv`` divides ``H``), ``G = H // H_kv``
    T_q   queries, ``T_k`` keys (= values)
    D     head width (queries, keys and values share it), a power of two in [16, 256]
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import math

import torch

from ...checks import check_bool, check_int, check_number, check_tensor
from .call import Call, check_window_and_sinks

__all__ = [
    "flash_attention", "flash_forward", "flash_backward", "kernel_source", "default_blocks", "LOG2E",
    "unsupported", "auto", "key", "run",  # the kernel's row in the table of backends
]  # fmt: skip

LOG2E = 1.4426950408889634  # log2(e): exp(x) = exp2(x · log2(e))
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@functools.cache
def _kernels():
    """:mod:`.flash_kernels`, imported on first use: it imports Triton, which takes a fraction of a second."""
    from . import flash_kernels

    return flash_kernels


@functools.cache
def _has_triton() -> bool:
    """Whether Triton is installed (found, not imported: importing it takes a fraction of a second)."""
    return importlib.util.find_spec("triton") is not None


def unsupported(call: Call) -> Exception | None:
    """Why the kernel cannot compute ``call``, as the error :func:`flash_attention` raises; None if it can.

    4-D tensors of one dtype (float32, float16, bfloat16) and device (the sinks' too), keys
    and values of one shape with the queries' batch and width, a head width that is a power
    of two in [16, 256], ``H_kv`` dividing ``H``, ``T_q <= T_k`` if causal. The table asks in
    every mode: an input the kernel rejects must not reach it, or its error in ``"auto"`` mode
    would refuse the kernel to every valid input compiled alike.
    """
    q, k, v, sinks = call.q, call.k, call.v, call.sinks
    if q.dim() != 4:
        return ValueError(f"q must have shape (B, H, T, D), got {tuple(q.shape)}")
    if k.dim() != 4:
        return ValueError(f"k must have shape (B, H, T, D), got {tuple(k.shape)}")
    if v.shape != k.shape:
        return ValueError(f"k and v must have the same shape, got k.shape={tuple(k.shape)}, v.shape={tuple(v.shape)}")
    dtype = q.dtype
    if dtype not in _DTYPES:
        return TypeError(f"q must be float32, float16 or bfloat16 for the kernel, got dtype={dtype}")
    if k.dtype != dtype or v.dtype != dtype:
        return TypeError(f"q, k, v must share a dtype, got q={dtype}, k={k.dtype}, v={v.dtype}")
    device = q.device
    if k.device != device or v.device != device:
        return ValueError(f"q, k, v must be on one device, got q={device}, k={k.device}, v={v.device}")
    if sinks is not None and sinks.device != device:
        return ValueError(f"sinks must be on q's device, got sinks={sinks.device}, q={device}")
    B, H, T_q, D = q.shape
    B_k, H_kv, T_k, D_k = k.shape
    # attention() broadcasts a batch of 1 in k and v; the kernel reads one batch per query batch
    if B_k != B or D_k != D:
        return ValueError(
            f"k must have q's batch size and head width, got q.shape={tuple(q.shape)}, k.shape={tuple(k.shape)}"
        )
    if D < 16 or D > 256 or D & (D - 1):
        return ValueError(f"the head width D must be a power of two in [16, 256] for the kernel's tiles, got D={D}")
    if H % H_kv:
        return ValueError(
            f"the number of query heads must be a multiple of the number of key/value heads, got H={H} "
            f"(q.shape={tuple(q.shape)}) and H_kv={H_kv} (k.shape={tuple(k.shape)})"
        )
    if call.is_causal and T_q > T_k:
        return ValueError(
            f"is_causal needs T_k >= T_q (queries are the last T_q of T_k positions), got T_q={T_q}, T_k={T_k}"
        )
    return None


def auto(call: Call) -> bool:
    """CUDA, Triton installed, not inside torch.compile."""  # inside, FlexAttention compiles with the graph
    return call.q.device.type == "cuda" and _has_triton() and not torch.compiler.is_compiling()


def key(call: Call) -> tuple:
    """What a kernel is compiled for, and a failure remembered under: head width, group size, options, dtype, device."""
    q, k = call.q, call.k
    options = (call.is_causal, call.window is not None, call.sinks is not None)
    return (q.shape[-1], q.shape[-3] // k.shape[-3], *options, q.dtype, str(q.device))


def run(call: Call) -> torch.Tensor:
    """The table's entry: the kernel on a call that ``attention()`` checked and :func:`unsupported` accepted.

    Only the runtime is checked: checking the arguments again would add host time to every
    launch (a quarter of ``attention()``'s, measured on a CPU), which a GPU waits for.

    Shapes:
        as :func:`flash_attention`
    """
    q, k = call.q, call.k
    _check_runtime(q)
    return _attention(
        q, k, call.v, q.shape[1] // k.shape[1], call.is_causal, call.softmax_scale, call.window, call.sinks
    )


def kernel_source(name: str) -> str:
    """The source of one of the Triton functions of :mod:`attn_core.ops.backends.flash_kernels`, for reading.

    Args:
        name: ``"forward"``, ``"backward_dkdv"``, ``"backward_dq"``, ``"allowed"``,
            ``"key_range"`` or ``"query_range"``.

    Raises:
        ValueError: Another name.
    """
    kernels = _kernels().KERNELS
    if name not in kernels:
        raise ValueError(f"name must be one of {sorted(kernels)}, got name={name!r}")
    fn = kernels[name]
    return inspect.getsource(getattr(fn, "fn", fn))  # a decorated kernel keeps the Python function in .fn


def default_blocks() -> tuple[int, int]:
    """``(BLOCK_M, BLOCK_N)``: 64 × 64 compiled on a GPU, 32 × 32 in the interpreter (small test shapes)."""
    return (32, 32) if _kernels().INTERPRETED else (64, 64)


def _check_runtime(q):
    """Check that the kernels can run on ``q``'s device: Triton, and the interpreter on a CPU."""
    kernels = _kernels()
    if kernels.triton is None:
        raise ImportError("attn_core.ops.backends.flash needs Triton for its kernels: pip install triton")
    if kernels.LATE_INTERPRETER:
        raise RuntimeError(
            "triton was imported before TRITON_INTERPRET=1 was set (torch.utils.flop_counter "
            "imports it), so its library functions cannot run in the CPU interpreter: import "
            "attn_core first, or start Python with TRITON_INTERPRET=1"
        )
    if q.device.type == "cpu" and not kernels.INTERPRETED:
        raise ValueError(
            "q is on the CPU but the kernels were compiled for a GPU: move the tensors to CUDA, or set "
            "TRITON_INTERPRET=1 before importing attn_core.ops.backends.flash"
        )


def _check_inputs(q, k, v, is_causal, scale, window, sinks):
    """Check the arguments of :func:`flash_attention`; return ``(groups, scale, window)``."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t)
    check_bool("is_causal", is_causal)
    window = check_window_and_sinks(window, sinks, is_causal=is_causal, q=q)
    error = unsupported(Call(q, k, v, is_causal=is_causal, sinks=sinks))
    if error is not None:
        raise error
    _check_runtime(q)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else check_number("scale", scale, low=0.0, low_open=True)
    return q.shape[1] // k.shape[1], float(scale), window


def _launch_args(q, k, v, o, T_q, T_k, H, scale, window):
    """The strides and sizes every kernel takes, in its order (the last stride of each tensor is 1)."""
    strides = [*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *o.stride()[:3]]
    return [*strides, H, T_q, T_k, scale * LOG2E]


def _precision(dtype):
    # tl.dot on float32 would use TF32 on a GPU (10-bit mantissa); "ieee" keeps float32 exact.
    return "ieee" if dtype == torch.float32 else "tf32"


def flash_forward(q, k, v, *, is_causal=False, scale=None, window=None, sinks=None, block_m=None, block_n=None):
    """Run the forward kernel alone: the output, the saved log-sum-exp and the key blocks each program visited.

    :func:`flash_attention` calls this and keeps ``lse`` for its backward; call it directly
    to count the blocks that causality and windows let the kernel skip.

    Args:
        q, k, v, is_causal, scale, window, sinks: As :func:`flash_attention`.
        block_m: Queries per program (a power of two >= 16); default :func:`default_blocks`.
        block_n: Keys per loop step (a power of two >= 16).

    Returns:
        ``(out, lse, visited)``: ``lse`` is each query's log-sum-exp in base 2 (sink
        included; 0 for a query that sees nothing), ``visited[b·H + h, i]`` the number of
        key blocks that the program of query block ``i`` loaded.

    Shapes:
        q: ``(B, H, T_q, D)``; k, v: ``(B, H_kv, T_k, D)``; sinks: ``(H,)``
        out: ``(B, H, T_q, D)``; lse: ``(B, H, T_q)``; visited: ``(B·H, ⌈T_q / block_m⌉)``
    """
    groups, scale, window = _check_inputs(q, k, v, is_causal, scale, window, sinks)
    block_m, block_n = _check_blocks(block_m, block_n)
    return _forward(q, k, v, groups, is_causal, scale, window, sinks, block_m, block_n)


def _cdiv(n: int, d: int) -> int:
    # ⌈n / d⌉ in plain Python: triton.cdiv is a JIT-able function whose host call costs
    # microseconds, and a launch on a GPU waits for its host.
    return -(-n // d)


def _forward(q, k, v, groups, is_causal, scale, window, sinks, block_m, block_n):
    """:func:`flash_forward` after its checks: ``(out, lse, visited)``."""
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    B, H, T_q, D = q.shape
    T_k = k.shape[2]
    out = torch.empty_like(q)
    lse = torch.empty(B, H, T_q, dtype=torch.float32, device=q.device)
    n_m = _cdiv(T_q, block_m)
    visited = torch.empty(B * H, n_m, dtype=torch.int32, device=q.device)  # every program writes its count
    kernels = _kernels()
    if sinks is None:
        sinks_arg = lse  # any pointer: never read without sinks
    else:
        # The kernel converts the sink to float32 as it loads it, so a compiled kernel reads
        # it in its own dtype (no cast to launch first); NumPy, under the interpreter, has
        # no bfloat16.
        sinks_arg = sinks.float().contiguous() if kernels.INTERPRETED else sinks.contiguous()
    kernels.KERNELS["forward"][(n_m, B * H)](
        q, k, v, sinks_arg, out, lse, visited, *_launch_args(q, k, v, out, T_q, T_k, H, scale, window),
        window or 0, GROUPS=groups, D=D, BLOCK_M=block_m, BLOCK_N=block_n, IS_CAUSAL=is_causal,
        HAS_WINDOW=window is not None, HAS_SINKS=sinks is not None, PRECISION=_precision(q.dtype),
    )  # fmt: skip
    return out, lse, visited


def _check_blocks(block_m, block_n):
    default_m, default_n = default_blocks()
    block_m = default_m if block_m is None else check_int("block_m", block_m, minimum=16)
    block_n = default_n if block_n is None else check_int("block_n", block_n, minimum=16)
    for name, value in (("block_m", block_m), ("block_n", block_n)):
        if value & (value - 1):
            raise ValueError(f"{name} must be a power of two, got {name}={value}")
    return block_m, block_n


def flash_backward(q, k, v, out, lse, d_out, *, is_causal, scale, window, sinks, block_m=None, block_n=None):
    """The backward kernels: ``(dq, dk, dv, dsinks)`` from the forward's saved tensors.

    ``delta = rowsum(dO ∘ O)`` (one number per query, the ``Σ_j P_ij dP_ij`` of the
    softmax backward) is computed here in PyTorch; the kernels recompute ``P`` from
    ``lse``. A sink has no value, so its gradient needs no kernel:
    ``d sink_h = -Σ_{b,i} P_sink · delta`` with ``P_sink = exp2(sink·log2 e - lse)``.

    Shapes:
        q, out, d_out: ``(B, H, T_q, D)``; k, v: ``(B, H_kv, T_k, D)``; lse: ``(B, H, T_q)``
        dq: as q; dk, dv: as k; dsinks: ``(H,)`` or None
    """
    groups, scale, window = _check_inputs(q, k, v, is_causal, scale, window, sinks)
    block_m, block_n = _check_blocks(block_m, block_n)
    return _backward(q, k, v, out, lse, d_out, groups, is_causal, scale, window, sinks, block_m, block_n)


def _backward(q, k, v, out, lse, d_out, groups, is_causal, scale, window, sinks, block_m, block_n):
    """:func:`flash_backward` after its checks: ``(dq, dk, dv, dsinks)``."""
    q, k, v, out, d_out = (t.contiguous() for t in (q, k, v, out, d_out))
    B, H, T_q, D = q.shape
    H_kv, T_k = k.shape[1], k.shape[2]
    delta = (d_out.float() * out.float()).sum(-1)  # (B, H, T_q)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    args = _launch_args(q, k, v, d_out, T_q, T_k, H, scale, window)
    meta = dict(GROUPS=groups, D=D, BLOCK_M=block_m, BLOCK_N=block_n, IS_CAUSAL=is_causal,
                HAS_WINDOW=window is not None, PRECISION=_precision(q.dtype))  # fmt: skip
    kernels = _kernels().KERNELS
    kernels["backward_dkdv"][(_cdiv(T_k, block_n), B * H_kv)](
        q, k, v, d_out, lse, delta, dk, dv, *args, scale, window or 0, **meta
    )
    kernels["backward_dq"][(_cdiv(T_q, block_m), B * H)](
        q, k, v, d_out, lse, delta, dq, *args, scale, window or 0, **meta
    )
    dsinks = None
    if sinks is not None:
        p_sink = torch.exp2(sinks.float()[:, None] * LOG2E - lse)  # (B, H, T_q): the sink's weight
        dsinks = -(p_sink * delta).sum(dim=(0, 2)).to(sinks.dtype)  # (H,)
    return dq, dk, dv, dsinks


class _FlashAttention(torch.autograd.Function):
    # Its arguments were checked by flash_attention: forward and backward launch directly.
    @staticmethod
    def forward(ctx, q, k, v, sinks, groups, is_causal, scale, window):
        blocks = default_blocks()
        out, lse, _ = _forward(q, k, v, groups, is_causal, scale, window, sinks, *blocks)
        ctx.save_for_backward(q, k, v, sinks, out, lse)  # lse: one float per query, not the T_q × T_k weights
        ctx.options = (groups, is_causal, scale, window)
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, sinks, out, lse = ctx.saved_tensors
        dq, dk, dv, dsinks = _backward(q, k, v, out, lse, d_out, *ctx.options, sinks, *default_blocks())
        return dq, dk, dv, dsinks, None, None, None, None


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    window: int | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Scaled dot-product attention as fused Triton kernels, forward and backward (FlashAttention-2).

    Computes what :func:`attn_core.attention` computes with the same arguments, without
    materialising the ``T_q × T_k`` scores, and is differentiable (``q``, ``k``, ``v``
    and ``sinks``). On a CPU the kernels run in Triton's interpreter (see the module
    docstring); on a CUDA device they are compiled.

    Args:
        q: Queries.
        k: Keys; ``H_kv`` may divide ``H`` (grouped-query attention, query head ``h``
            reads key/value head ``h // (H // H_kv)``).
        v: Values, one per key, as wide as the keys.
        is_causal: Block attention to future keys, aligned bottom-right (needs ``T_k >= T_q``).
        scale: Multiplies the scores; defaults to ``1/√D``.
        window: Sliding window (needs ``is_causal``): each query sees itself and the
            ``window - 1`` keys before it.
        sinks: One learned logit per query head in every softmax denominator (gpt-oss):
            ``w_j = exp(s_j) / (exp(sink_h) + Σ_k exp(s_k))``.

    Returns:
        The attention output. A query that sees no key gets a zero output.

    Shapes:
        q: ``(B, H, T_q, D)``
        k, v: ``(B, H_kv, T_k, D)``
        sinks: ``(H,)``
        output: ``(B, H, T_q, D)``

    Raises:
        ImportError: Triton is not installed (``pip install triton``).
        RuntimeError: Triton was imported before the interpreter was chosen (import
            ``attn_core`` first on a machine without CUDA).
        TypeError: Non-tensor inputs, a dtype other than float32/float16/bfloat16,
            mismatched dtypes, a non-bool ``is_causal``, a non-int ``window``.
        ValueError: Not 4-D, mismatched batch/width/shapes, ``D`` not a power of two in
            [16, 256], ``H % H_kv != 0``, causal with ``T_q > T_k``, a bad ``scale`` or
            ``window`` (or one without ``is_causal``), ``sinks`` not of shape ``(H,)``,
            CPU tensors with compiled (non-interpreted) kernels.
    """
    groups, scale, window = _check_inputs(q, k, v, is_causal, scale, window, sinks)
    return _attention(q, k, v, groups, is_causal, scale, window, sinks)


def _attention(q, k, v, groups, is_causal, scale, window, sinks):
    """:func:`flash_attention` after its checks: the output."""
    options = (groups, is_causal, scale, window)
    if _kernels().INTERPRETED and q.dtype == torch.bfloat16:
        # NumPy, which runs the interpreter, has no bfloat16: compute in float32, cast back.
        out = _FlashAttention.apply(q.float(), k.float(), v.float(), sinks, *options)
        return out.to(torch.bfloat16)
    if not (torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (q, k, v, sinks))):
        # Nothing to differentiate: launch the forward alone. The autograd function's
        # bookkeeping costs tens of microseconds of host time, which a GPU waits for
        # when the kernel itself takes a fraction of a millisecond.
        return _forward(q, k, v, groups, is_causal, scale, window, sinks, *default_blocks())[0]
    return _FlashAttention.apply(q, k, v, sinks, *options)
