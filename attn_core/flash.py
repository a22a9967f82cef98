"""FlashAttention written by hand in Triton: fused forward and backward kernels.

:mod:`attn_core.efficient` writes FlashAttention's tiled loop in Python: it saves memory
but every tile still travels through main memory. Here the same loop is one *fused*
kernel (Dao et al. 2022; the loop order of FlashAttention-2, Dao 2023): a program owns a
block of ``BLOCK_M`` queries, keeps them with the running maximum ``m``, the running sum
``l`` and the output accumulator in registers, and streams the key/value blocks past
them. Nothing of size ``T_q × T_k`` is ever written. The forward saves one number per
query, the log-sum-exp of its scores; the backward *recomputes* the probabilities from it
(cheaper than reading a stored ``T_q × T_k`` matrix back) in two kernels, one that owns a
key block and accumulates ``dK, dV`` over the queries, one that owns a query block and
accumulates ``dQ`` over the keys.

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

Running on a CPU. Triton compiles kernels for GPUs; with ``TRITON_INTERPRET=1`` it runs
them instead in an interpreter, on NumPy, block by block, which is slow but exact enough
to test against PyTorch. Triton decides between the two when a kernel is *decorated*
(``@triton.jit`` reads the setting then; older releases read it when ``triton`` is
imported), so the choice has to be made before this module defines its kernels: when no
CUDA device is present and ``TRITON_INTERPRET`` is not set, importing this module sets it
to ``"1"`` *before* it imports ``triton``. This changes the environment of the whole
process (any Triton kernel defined afterwards is interpreted too), which is what a CPU
needs anyway; set ``TRITON_INTERPRET`` yourself to choose otherwise. The interpreter has
no bfloat16 (NumPy has none): there, bfloat16 inputs are computed in float32 and the
result is cast back.

Triton is optional: ``attn_core`` imports without it, and :func:`flash_attention` then
raises an ``ImportError`` that says ``pip install triton``.

Scores are kept in base 2: the kernels multiply ``Q Kᵀ`` by ``scale · log2(e)`` and use
``exp2`` (a cheaper instruction than ``exp`` on a GPU); the saved log-sum-exp is in the
same base-2 units.

Shape legend:
    B     batch
    H     query heads; ``H_kv`` key/value heads (``H_kv`` divides ``H``), ``G = H // H_kv``
    T_q   queries, ``T_k`` keys (= values)
    D     head width (queries, keys and values share it), a power of two in [16, 256]
"""

from __future__ import annotations

import inspect
import math
import os
from types import SimpleNamespace

import torch

from .checks import check_bool, check_int, check_number, check_tensor
from .masks import check_window

# Before ``import triton``: see the module docstring (the interpreter is chosen when a
# kernel is decorated, and some Triton releases read the variable at import).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

try:
    import triton
    import triton.language as tl
except ImportError:  # the package works without Triton; flash_attention says how to get it
    triton = None
    tl = SimpleNamespace(constexpr=None)  # only read in the kernels' annotations


def _jit(fn):
    return fn if triton is None else triton.jit(fn)


__all__ = [
    "flash_attention",
    "flash_forward",
    "flash_backward",
    "kernel_source",
    "default_blocks",
    "INTERPRETED",
    "LOG2E",
]

LOG2E = 1.4426950408889634  # log2(e): exp(x) = exp2(x · log2(e))
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@_jit
def _allowed(rows, cols, T_q, T_k, window, IS_CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr):
    """Which (query, key) pairs of a tile may attend: inside both lengths, causal, inside the window."""
    pos = rows + (T_k - T_q)  # bottom-right alignment: query i sits at position T_k - T_q + i
    ok = (rows[:, None] < T_q) & (cols[None, :] < T_k)  # (BLOCK_M, BLOCK_N): ragged tails
    if IS_CAUSAL:
        ok = ok & (cols[None, :] <= pos[:, None])
    if HAS_WINDOW:
        ok = ok & (cols[None, :] > pos[:, None] - window)
    return ok


@_jit
def _key_range(start_m, T_q, T_k, window, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               IS_CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr):  # fmt: skip
    """The key blocks a query block must visit: ``[lo, hi)``; the others are skipped."""
    lo = 0
    hi = T_k
    if IS_CAUSAL:  # keys after the block's last query position are all masked
        hi = tl.minimum(T_k, start_m + BLOCK_M + T_k - T_q)
    if HAS_WINDOW:  # keys before the first query's window are all masked
        lo = tl.maximum(0, start_m + T_k - T_q - window + 1) // BLOCK_N * BLOCK_N
    return lo, hi


@_jit
def _query_range(start_n, T_q, T_k, window, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 IS_CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr):  # fmt: skip
    """The query blocks that see a key block: ``[lo, hi)`` (the backward's dK/dV loop)."""
    lo = 0
    hi = T_q
    if IS_CAUSAL:  # queries before position start_n do not see it
        lo = tl.maximum(0, start_n - (T_k - T_q)) // BLOCK_M * BLOCK_M
    if HAS_WINDOW:  # queries past the block's last key + window - 1 do not see it
        hi = tl.minimum(T_q, start_n + BLOCK_N - 1 + window - (T_k - T_q))
    return lo, hi


@_jit
def _flash_fwd(Q, K, V, Sinks, Out, Lse, Visited,
               sqb, sqh, sqt, skb, skh, skt, svb, svh, svt, sob, soh, sot,
               H, T_q, T_k, qk_scale, window,
               GROUPS: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               IS_CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, HAS_SINKS: tl.constexpr,
               PRECISION: tl.constexpr):  # fmt: skip
    # One program: one block of BLOCK_M queries of one (batch, head).
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    h_kv = h // GROUPS  # grouped-query attention: G query heads share a key/value head
    rows = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    q = tl.load(Q + b * sqb + h * sqh + rows[:, None] * sqt + offs_d[None, :], mask=rows[:, None] < T_q, other=0.0)
    k_ptr = K + b * skb + h_kv * skh
    v_ptr = V + b * svb + h_kv * svh
    # The online softmax's start: nothing seen (m = -inf, l = 0), or the sink already seen.
    if HAS_SINKS:
        m_i = tl.zeros([BLOCK_M], tl.float32) + tl.load(Sinks + h).to(tl.float32) * 1.4426950408889634
        l_i = tl.zeros([BLOCK_M], tl.float32) + 1.0  # exp2(sink - m) with m = sink
    else:
        m_i = tl.zeros([BLOCK_M], tl.float32) - float("inf")
        l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    lo, hi = _key_range(start_m, T_q, T_k, window, BLOCK_M, BLOCK_N, IS_CAUSAL, HAS_WINDOW)
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(k_ptr + cols[:, None] * skt + offs_d[None, :], mask=cols[:, None] < T_k, other=0.0)
        v = tl.load(v_ptr + cols[:, None] * svt + offs_d[None, :], mask=cols[:, None] < T_k, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale  # (BLOCK_M, BLOCK_N), base 2
        s = tl.where(_allowed(rows, cols, T_q, T_k, window, IS_CAUSAL, HAS_WINDOW), s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing seen yet: no NaN
        alpha = tl.exp2(m_i - m_use)  # rescales what was summed under the old maximum
        p = tl.exp2(s - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new
    # A query that saw no key (and no sink) has l = 0: its output is 0, as in attention().
    l_use = tl.where(l_i == 0.0, 1.0, l_i)
    m_use = tl.where(m_i == float("-inf"), 0.0, m_i)
    tl.store(Out + b * sob + h * soh + rows[:, None] * sot + offs_d[None, :],
             (acc / l_use[:, None]).to(Out.dtype.element_ty), mask=rows[:, None] < T_q)  # fmt: skip
    tl.store(Lse + bh * T_q + rows, m_use + tl.log2(l_use), mask=rows < T_q)  # base-2 log-sum-exp
    tl.store(Visited + bh * tl.num_programs(0) + tl.program_id(0), tl.cdiv(tl.maximum(hi - lo, 0), BLOCK_N))


@_jit
def _flash_bwd_dkdv(Q, K, V, DO, Lse, Delta, DK, DV,
                    sqb, sqh, sqt, skb, skh, skt, svb, svh, svt, sob, soh, sot,
                    H, T_q, T_k, qk_scale, sm_scale, window,
                    GROUPS: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    IS_CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, PRECISION: tl.constexpr):  # fmt: skip
    # One program: one block of BLOCK_N keys of one (batch, key/value head); it loops over
    # the G query heads that share the head and over the query blocks that see the keys.
    start_n = tl.program_id(0) * BLOCK_N
    bh_kv = tl.program_id(1)
    H_kv = H // GROUPS
    b, h_kv = bh_kv // H_kv, bh_kv % H_kv
    cols = start_n + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    k = tl.load(K + b * skb + h_kv * skh + cols[:, None] * skt + offs_d[None, :], mask=cols[:, None] < T_k, other=0.0)
    v = tl.load(V + b * svb + h_kv * svh + cols[:, None] * svt + offs_d[None, :], mask=cols[:, None] < T_k, other=0.0)
    dk = tl.zeros([BLOCK_N, D], tl.float32)
    dv = tl.zeros([BLOCK_N, D], tl.float32)
    lo, hi = _query_range(start_n, T_q, T_k, window, BLOCK_M, BLOCK_N, IS_CAUSAL, HAS_WINDOW)
    for g in range(GROUPS):
        h = h_kv * GROUPS + g
        for start_m in range(lo, hi, BLOCK_M):
            rows = start_m + offs_m
            q_off = b * sqb + h * sqh + rows[:, None] * sqt + offs_d[None, :]
            q = tl.load(Q + q_off, mask=rows[:, None] < T_q, other=0.0)
            do = tl.load(DO + b * sob + h * soh + rows[:, None] * sot + offs_d[None, :],
                         mask=rows[:, None] < T_q, other=0.0)  # fmt: skip
            lse = tl.load(Lse + (b * H + h) * T_q + rows, mask=rows < T_q, other=0.0)
            delta = tl.load(Delta + (b * H + h) * T_q + rows, mask=rows < T_q, other=0.0)
            # Recompute the probabilities from the saved log-sum-exp instead of storing them.
            s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale  # (BLOCK_M, BLOCK_N)
            ok = _allowed(rows, cols, T_q, T_k, window, IS_CAUSAL, HAS_WINDOW)
            p = tl.where(ok, tl.exp2(s - lse[:, None]), 0.0)
            dv += tl.dot(tl.trans(p.to(do.dtype)), do, input_precision=PRECISION)  # dV = Pᵀ dO
            dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)  # dP = dO Vᵀ
            ds = p * (dp - delta[:, None])  # softmax backward: dS = P ∘ (dP - rowsum(dO ∘ O))
            dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision=PRECISION)  # dK = dSᵀ Q (unscaled)
    kv_off = b * skb + h_kv * skh + cols[:, None] * skt + offs_d[None, :]  # DK, DV are laid out like K
    tl.store(DK + kv_off, (dk * sm_scale).to(DK.dtype.element_ty), mask=cols[:, None] < T_k)
    tl.store(DV + kv_off, dv.to(DV.dtype.element_ty), mask=cols[:, None] < T_k)


@_jit
def _flash_bwd_dq(Q, K, V, DO, Lse, Delta, DQ,
                  sqb, sqh, sqt, skb, skh, skt, svb, svh, svt, sob, soh, sot,
                  H, T_q, T_k, qk_scale, sm_scale, window,
                  GROUPS: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  IS_CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, PRECISION: tl.constexpr):  # fmt: skip
    # One program: one block of queries, streaming the key blocks as the forward does.
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    h_kv = h // GROUPS
    rows = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    q_off = b * sqb + h * sqh + rows[:, None] * sqt + offs_d[None, :]  # DQ is laid out like Q
    q = tl.load(Q + q_off, mask=rows[:, None] < T_q, other=0.0)
    do = tl.load(DO + b * sob + h * soh + rows[:, None] * sot + offs_d[None, :], mask=rows[:, None] < T_q, other=0.0)
    lse = tl.load(Lse + bh * T_q + rows, mask=rows < T_q, other=0.0)
    delta = tl.load(Delta + bh * T_q + rows, mask=rows < T_q, other=0.0)
    k_ptr = K + b * skb + h_kv * skh
    v_ptr = V + b * svb + h_kv * svh
    dq = tl.zeros([BLOCK_M, D], tl.float32)
    lo, hi = _key_range(start_m, T_q, T_k, window, BLOCK_M, BLOCK_N, IS_CAUSAL, HAS_WINDOW)
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(k_ptr + cols[:, None] * skt + offs_d[None, :], mask=cols[:, None] < T_k, other=0.0)
        v = tl.load(v_ptr + cols[:, None] * svt + offs_d[None, :], mask=cols[:, None] < T_k, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
        ok = _allowed(rows, cols, T_q, T_k, window, IS_CAUSAL, HAS_WINDOW)
        p = tl.where(ok, tl.exp2(s - lse[:, None]), 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)  # dQ = dS K (unscaled)
    tl.store(DQ + q_off, (dq * sm_scale).to(DQ.dtype.element_ty), mask=rows[:, None] < T_q)


INTERPRETED = bool(triton is not None and triton.knobs.runtime.interpret)
"""Whether the kernels above run in Triton's CPU interpreter (decided when they were defined)."""

# Triton's own library functions (``tl.cdiv``, ``tl.sigmoid``, ...) were defined when
# ``triton`` was first imported: if that happened before ``TRITON_INTERPRET`` was set (by
# something that imported ``torch.utils.flop_counter`` before ``attn_core``), they are
# compiled functions that an interpreted kernel cannot call. Say so now, not deep inside
# a kernel launch.
_LATE_INTERPRETER = INTERPRETED and type(tl.cdiv).__name__ != "InterpretedFunction"


def kernel_source(name: str) -> str:
    """The source of one of this module's Triton functions, for reading (printed next to the text that explains them).

    Args:
        name: ``"forward"``, ``"backward_dkdv"``, ``"backward_dq"``, ``"allowed"``,
            ``"key_range"`` or ``"query_range"``.

    Raises:
        ValueError: Another name.
    """
    functions = {
        "forward": _flash_fwd, "backward_dkdv": _flash_bwd_dkdv, "backward_dq": _flash_bwd_dq,
        "allowed": _allowed, "key_range": _key_range, "query_range": _query_range,
    }  # fmt: skip
    if name not in functions:
        raise ValueError(f"name must be one of {sorted(functions)}, got name={name!r}")
    fn = functions[name]
    return inspect.getsource(getattr(fn, "fn", fn))  # a decorated kernel keeps the Python function in .fn


def default_blocks() -> tuple[int, int]:
    """``(BLOCK_M, BLOCK_N)``: 64 × 64 compiled on a GPU, 32 × 32 in the interpreter (small test shapes)."""
    return (32, 32) if INTERPRETED else (64, 64)


def _check_inputs(q, k, v, is_causal, scale, window, sinks):
    """Check the arguments of :func:`flash_attention`; return ``(groups, scale, window)``."""
    if triton is None:
        raise ImportError("attn_core.flash needs Triton for its kernels: pip install triton")
    if _LATE_INTERPRETER:
        raise RuntimeError(
            "triton was imported before TRITON_INTERPRET=1 was set (torch.utils.flop_counter "
            "imports it), so its library functions cannot run in the CPU interpreter: import "
            "attn_core first, or start Python with TRITON_INTERPRET=1"
        )
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t, ("B", "H", "T", "D"))
        if t.dtype not in _DTYPES:
            raise TypeError(f"{name} must be float32, float16 or bfloat16 for the kernel, got dtype={t.dtype}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share a dtype, got q={q.dtype}, k={k.dtype}, v={v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got q={q.device}, k={k.device}, v={v.device}")
    if q.device.type == "cpu" and not INTERPRETED:
        raise ValueError(
            "q is on the CPU but the kernels were compiled for a GPU: move the tensors to CUDA, or set "
            "TRITON_INTERPRET=1 before importing attn_core.flash"
        )
    B, H, T_q, D = q.shape
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got k.shape={tuple(k.shape)}, v.shape={tuple(v.shape)}")
    if k.shape[0] != B or k.shape[3] != D:
        raise ValueError(
            f"k must have q's batch size and head width, got q.shape={tuple(q.shape)}, k.shape={tuple(k.shape)}"
        )
    if D < 16 or D > 256 or D & (D - 1):
        raise ValueError(f"the head width D must be a power of two in [16, 256] for the kernel's tiles, got D={D}")
    H_kv = k.shape[1]
    if H % H_kv:
        raise ValueError(
            f"the number of query heads must be a multiple of the number of key/value heads, got H={H} "
            f"(q.shape={tuple(q.shape)}) and H_kv={H_kv} (k.shape={tuple(k.shape)})"
        )
    T_k = k.shape[2]
    check_bool("is_causal", is_causal)
    if is_causal and T_q > T_k:
        raise ValueError(
            f"is_causal needs T_k >= T_q (queries are the last T_q of T_k positions), got T_q={T_q}, T_k={T_k}"
        )
    window = check_window(window)
    if window is not None and not is_causal:
        raise ValueError(f"window={window} is a causal sliding window: pass is_causal=True with it")
    scale = 1.0 / math.sqrt(D) if scale is None else check_number("scale", scale, low=0.0, low_open=True)
    if sinks is not None:
        check_tensor("sinks", sinks, ("H",), floating=True)
        if sinks.shape[0] != H:
            raise ValueError(f"sinks needs one logit per query head: got sinks.shape={tuple(sinks.shape)} for H={H}")
        if sinks.device != q.device:
            raise ValueError(f"sinks must be on q's device, got sinks={sinks.device}, q={q.device}")
    return H // H_kv, float(scale), window


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
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    B, H, T_q, D = q.shape
    T_k = k.shape[2]
    out = torch.empty_like(q)
    lse = torch.empty(B, H, T_q, dtype=torch.float32, device=q.device)
    n_m = triton.cdiv(T_q, block_m)
    visited = torch.zeros(B * H, n_m, dtype=torch.int32, device=q.device)
    sinks_arg = sinks.float().contiguous() if sinks is not None else lse  # any pointer: never read without sinks
    _flash_fwd[(n_m, B * H)](
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
    q, k, v, out, d_out = (t.contiguous() for t in (q, k, v, out, d_out))
    B, H, T_q, D = q.shape
    H_kv, T_k = k.shape[1], k.shape[2]
    delta = (d_out.float() * out.float()).sum(-1)  # (B, H, T_q)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    args = _launch_args(q, k, v, d_out, T_q, T_k, H, scale, window)
    meta = dict(GROUPS=groups, D=D, BLOCK_M=block_m, BLOCK_N=block_n, IS_CAUSAL=is_causal,
                HAS_WINDOW=window is not None, PRECISION=_precision(q.dtype))  # fmt: skip
    _flash_bwd_dkdv[(triton.cdiv(T_k, block_n), B * H_kv)](
        q, k, v, d_out, lse, delta, dk, dv, *args, scale, window or 0, **meta
    )
    _flash_bwd_dq[(triton.cdiv(T_q, block_m), B * H)](q, k, v, d_out, lse, delta, dq, *args, scale, window or 0, **meta)
    dsinks = None
    if sinks is not None:
        p_sink = torch.exp2(sinks.float()[:, None] * LOG2E - lse)  # (B, H, T_q): the sink's weight
        dsinks = -(p_sink * delta).sum(dim=(0, 2)).to(sinks.dtype)  # (H,)
    return dq, dk, dv, dsinks


class _FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, sinks, is_causal, scale, window):
        out, lse, _ = flash_forward(q, k, v, is_causal=is_causal, scale=scale, window=window, sinks=sinks)
        ctx.save_for_backward(q, k, v, sinks, out, lse)  # lse: one float per query, not the T_q × T_k weights
        ctx.options = dict(is_causal=is_causal, scale=scale, window=window)
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, sinks, out, lse = ctx.saved_tensors
        dq, dk, dv, dsinks = flash_backward(q, k, v, out, lse, d_out, sinks=sinks, **ctx.options)
        return dq, dk, dv, dsinks, None, None, None


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
    _check_inputs(q, k, v, is_causal, scale, window, sinks)
    if INTERPRETED and q.dtype == torch.bfloat16:
        # NumPy, which runs the interpreter, has no bfloat16: compute in float32, cast back.
        out = _FlashAttention.apply(q.float(), k.float(), v.float(), sinks, is_causal, scale, window)
        return out.to(torch.bfloat16)
    return _FlashAttention.apply(q, k, v, sinks, is_causal, scale, window)
