"""FlashAttention's Triton kernels: the fused forward and the two backward kernels.

:mod:`attn_core.ops.efficient` writes FlashAttention's tiled loop in Python: it saves memory
but every tile still travels through main memory. Here the same loop is one *fused*
kernel (Dao et al. 2022; the loop order of FlashAttention-2, Dao 2023): a program owns a
block of ``BLOCK_M`` queries, keeps them with the running maximum ``m``, the running sum
``l`` and the output accumulator in registers, and streams the key/value blocks past
them. Nothing of size ``T_q × T_k`` is ever written. The forward saves one number per
query, the log-sum-exp of its scores; the backward *recomputes* the probabilities from it
(cheaper than reading a stored ``T_q × T_k`` matrix back) in two kernels, one that owns a
key block and accumulates ``dK, dV`` over the queries, one that owns a query block and
accumulates ``dQ`` over the keys.

Running on a CPU. Triton compiles kernels for GPUs; with ``TRITON_INTERPRET=1`` it runs
them instead in an interpreter, on NumPy, block by block, which is slow but exact enough
to test against PyTorch. Triton decides between the two when a kernel is *decorated*
(``@triton.jit`` reads the setting then; older releases read it when ``triton`` is
imported), so the choice has to be made before this module defines its kernels. It is
made in one place, ``attn_core/__init__.py``, which every import of this module runs
first: when no CUDA device is present and ``TRITON_INTERPRET`` is not set, it sets it to
``"1"``, before anything imports ``triton``. This changes the environment of the whole
process (any Triton kernel defined afterwards is interpreted too), which is what a CPU
needs anyway; set ``TRITON_INTERPRET`` yourself to choose otherwise. This module reads the
choice (:data:`INTERPRETED`). The interpreter has no bfloat16 (NumPy has none): there,
bfloat16 inputs are computed in float32 and the result is cast back.

Scores are kept in base 2: the kernels multiply ``Q Kᵀ`` by ``scale · log2(e)`` and use
``exp2`` (a cheaper instruction than ``exp`` on a GPU); the saved log-sum-exp is in the
same base-2 units.

The Python side (argument checks, launches, autograd) is :mod:`attn_core.ops.backends.flash`; it reaches
the kernels through :data:`KERNELS`, by name.

Shape legend:
    B     batch
    H     query heads; ``H_kv`` key/value heads (``H_kv`` divides ``H``), ``G = H // H_kv``
    T_q   queries, ``T_k`` keys (= values)
    D     head width (queries, keys and values share it), a power of two in [16, 256]
"""

from __future__ import annotations

from types import SimpleNamespace

try:
    import triton
    import triton.language as tl
except ImportError:  # the package works without Triton; flash_attention says how to get it
    triton = None
    tl = SimpleNamespace(constexpr=None)  # only read in the kernels' annotations


def _jit(fn):
    return fn if triton is None else triton.jit(fn)


__all__ = ["KERNELS", "INTERPRETED", "LATE_INTERPRETER", "triton", "tl"]


# The kernels are printed in a book whose pages are 88 columns wide: they keep their own
# layout at that width, not the formatter's at 120.
# fmt: off
@_jit
def _allowed(rows, cols, T_q, T_k, window,
             IS_CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr):
    """Which (query, key) pairs of a tile may attend: both lengths, causal, window."""
    pos = rows + (T_k - T_q)  # bottom-right alignment: query i sits at T_k - T_q + i
    ok = (rows[:, None] < T_q) & (cols[None, :] < T_k)  # (BLOCK_M, BLOCK_N): the tails
    if IS_CAUSAL:
        ok = ok & (cols[None, :] <= pos[:, None])
    if HAS_WINDOW:
        ok = ok & (cols[None, :] > pos[:, None] - window)
    return ok


@_jit
def _key_range(start_m, T_q, T_k, window, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               IS_CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr):
    """The key blocks a query block must visit: ``[lo, hi)``; the others are skipped."""
    lo = 0
    hi = T_k
    if IS_CAUSAL:  # keys after the block's last query position are all masked
        hi = tl.minimum(T_k, start_m + BLOCK_M + T_k - T_q)
    if HAS_WINDOW:  # keys before the first query's window are all masked
        lo = tl.maximum(0, start_m + T_k - T_q - window + 1) // BLOCK_N * BLOCK_N
    return lo, hi


@_jit
def _query_range(start_n, T_q, T_k, window,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 IS_CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr):
    """The query blocks that see a key block: ``[lo, hi)`` (the dK/dV loop)."""
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
               GROUPS: tl.constexpr, D: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               IS_CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr,
               HAS_SINKS: tl.constexpr, PRECISION: tl.constexpr):
    # One program: one block of BLOCK_M queries of one (batch, head).
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    h_kv = h // GROUPS  # grouped-query attention: G query heads share a key/value head
    rows = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    q = tl.load(Q + b * sqb + h * sqh + rows[:, None] * sqt + offs_d[None, :],
                mask=rows[:, None] < T_q, other=0.0)
    k_ptr = K + b * skb + h_kv * skh
    v_ptr = V + b * svb + h_kv * svh
    # The online softmax's start: nothing seen (m = -inf, l = 0), or the sink seen.
    if HAS_SINKS:
        sink = tl.load(Sinks + h).to(tl.float32) * 1.4426950408889634  # base 2
        m_i = tl.zeros([BLOCK_M], tl.float32) + sink
        l_i = tl.zeros([BLOCK_M], tl.float32) + 1.0  # exp2(sink - m) with m = sink
    else:
        m_i = tl.zeros([BLOCK_M], tl.float32) - float("inf")
        l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    lo, hi = _key_range(start_m, T_q, T_k, window, BLOCK_M, BLOCK_N,
                        IS_CAUSAL, HAS_WINDOW)
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(k_ptr + cols[:, None] * skt + offs_d[None, :],
                    mask=cols[:, None] < T_k, other=0.0)
        v = tl.load(v_ptr + cols[:, None] * svt + offs_d[None, :],
                    mask=cols[:, None] < T_k, other=0.0)
        # (BLOCK_M, BLOCK_N) scores, base 2
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
        ok = _allowed(rows, cols, T_q, T_k, window, IS_CAUSAL, HAS_WINDOW)
        s = tl.where(ok, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # nothing seen yet: no NaN
        alpha = tl.exp2(m_i - m_use)  # rescales what was summed under the old maximum
        p = tl.exp2(s - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        pv = tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        acc = acc * alpha[:, None] + pv
        m_i = m_new
    # A query that saw no key (and no sink) has l = 0: its output is 0 (attention()'s).
    l_use = tl.where(l_i == 0.0, 1.0, l_i)
    m_use = tl.where(m_i == float("-inf"), 0.0, m_i)
    tl.store(Out + b * sob + h * soh + rows[:, None] * sot + offs_d[None, :],
             (acc / l_use[:, None]).to(Out.dtype.element_ty), mask=rows[:, None] < T_q)
    # the base-2 log-sum-exp, and how many key blocks this program visited
    tl.store(Lse + bh * T_q + rows, m_use + tl.log2(l_use), mask=rows < T_q)
    tl.store(Visited + bh * tl.num_programs(0) + tl.program_id(0),
             tl.cdiv(tl.maximum(hi - lo, 0), BLOCK_N))


@_jit
def _flash_bwd_dkdv(Q, K, V, DO, Lse, Delta, DK, DV,
                    sqb, sqh, sqt, skb, skh, skt, svb, svh, svt, sob, soh, sot,
                    H, T_q, T_k, qk_scale, sm_scale, window,
                    GROUPS: tl.constexpr, D: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    IS_CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr,
                    PRECISION: tl.constexpr):
    # One program: one block of BLOCK_N keys of one (batch, key/value head); it loops
    # over the G query heads that share the head and the query blocks that see the keys.
    start_n = tl.program_id(0) * BLOCK_N
    bh_kv = tl.program_id(1)
    H_kv = H // GROUPS
    b, h_kv = bh_kv // H_kv, bh_kv % H_kv
    cols = start_n + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    kv_off = b * skb + h_kv * skh + cols[:, None] * skt + offs_d[None, :]  # K, DK, DV
    v_off = b * svb + h_kv * svh + cols[:, None] * svt + offs_d[None, :]
    k = tl.load(K + kv_off, mask=cols[:, None] < T_k, other=0.0)
    v = tl.load(V + v_off, mask=cols[:, None] < T_k, other=0.0)
    dk = tl.zeros([BLOCK_N, D], tl.float32)
    dv = tl.zeros([BLOCK_N, D], tl.float32)
    lo, hi = _query_range(start_n, T_q, T_k, window, BLOCK_M, BLOCK_N,
                          IS_CAUSAL, HAS_WINDOW)
    for g in range(GROUPS):
        h = h_kv * GROUPS + g
        for start_m in range(lo, hi, BLOCK_M):
            rows = start_m + offs_m
            q_off = b * sqb + h * sqh + rows[:, None] * sqt + offs_d[None, :]
            q = tl.load(Q + q_off, mask=rows[:, None] < T_q, other=0.0)
            do = tl.load(DO + b * sob + h * soh + rows[:, None] * sot + offs_d[None, :],
                         mask=rows[:, None] < T_q, other=0.0)
            bht = (b * H + h) * T_q + rows  # this head's queries in Lse and Delta
            lse = tl.load(Lse + bht, mask=rows < T_q, other=0.0)
            delta = tl.load(Delta + bht, mask=rows < T_q, other=0.0)
            # Recompute the probabilities from the saved log-sum-exp, not stored.
            s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
            ok = _allowed(rows, cols, T_q, T_k, window, IS_CAUSAL, HAS_WINDOW)
            p = tl.where(ok, tl.exp2(s - lse[:, None]), 0.0)  # (BLOCK_M, BLOCK_N)
            # dV = Pᵀ dO; dP = dO Vᵀ; dS = P ∘ (dP - δ), δ = rowsum(dO ∘ O); dK = dSᵀ Q
            dv += tl.dot(tl.trans(p.to(do.dtype)), do, input_precision=PRECISION)
            dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
            ds = p * (dp - delta[:, None])
            dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision=PRECISION)
    dk = dk * sm_scale  # the scale of S = Q Kᵀ · scale, applied once
    tl.store(DK + kv_off, dk.to(DK.dtype.element_ty), mask=cols[:, None] < T_k)
    tl.store(DV + kv_off, dv.to(DV.dtype.element_ty), mask=cols[:, None] < T_k)


@_jit
def _flash_bwd_dq(Q, K, V, DO, Lse, Delta, DQ,
                  sqb, sqh, sqt, skb, skh, skt, svb, svh, svt, sob, soh, sot,
                  H, T_q, T_k, qk_scale, sm_scale, window,
                  GROUPS: tl.constexpr, D: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  IS_CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr,
                  PRECISION: tl.constexpr):
    # One program: one block of queries, streaming the key blocks as the forward does.
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    h_kv = h // GROUPS
    rows = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    q_off = b * sqb + h * sqh + rows[:, None] * sqt + offs_d[None, :]  # DQ is like Q
    q = tl.load(Q + q_off, mask=rows[:, None] < T_q, other=0.0)
    do = tl.load(DO + b * sob + h * soh + rows[:, None] * sot + offs_d[None, :],
                 mask=rows[:, None] < T_q, other=0.0)
    lse = tl.load(Lse + bh * T_q + rows, mask=rows < T_q, other=0.0)
    delta = tl.load(Delta + bh * T_q + rows, mask=rows < T_q, other=0.0)
    k_ptr = K + b * skb + h_kv * skh
    v_ptr = V + b * svb + h_kv * svh
    dq = tl.zeros([BLOCK_M, D], tl.float32)
    lo, hi = _key_range(start_m, T_q, T_k, window, BLOCK_M, BLOCK_N,
                        IS_CAUSAL, HAS_WINDOW)
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(k_ptr + cols[:, None] * skt + offs_d[None, :],
                    mask=cols[:, None] < T_k, other=0.0)
        v = tl.load(v_ptr + cols[:, None] * svt + offs_d[None, :],
                    mask=cols[:, None] < T_k, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
        ok = _allowed(rows, cols, T_q, T_k, window, IS_CAUSAL, HAS_WINDOW)
        p = tl.where(ok, tl.exp2(s - lse[:, None]), 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)  # dQ = dS K
    dq = dq * sm_scale
    tl.store(DQ + q_off, dq.to(DQ.dtype.element_ty), mask=rows[:, None] < T_q)
# fmt: on


INTERPRETED = bool(triton is not None and triton.knobs.runtime.interpret)
"""Whether the kernels above run in Triton's CPU interpreter (decided when they were defined)."""

# Triton's own library functions (``tl.cdiv``, ``tl.sigmoid``, ...) were defined when
# ``triton`` was first imported: if that happened before ``TRITON_INTERPRET`` was set (by
# something that imported ``torch.utils.flop_counter`` before ``attn_core``), they are
# compiled functions that an interpreted kernel cannot call. Say so now, not deep inside
# a kernel launch.
LATE_INTERPRETER = INTERPRETED and type(tl.cdiv).__name__ != "InterpretedFunction"


KERNELS = {
    "forward": _flash_fwd, "backward_dkdv": _flash_bwd_dkdv, "backward_dq": _flash_bwd_dq,
    "allowed": _allowed, "key_range": _key_range, "query_range": _query_range,
}  # fmt: skip
"""The Triton functions of this module by name: the three kernels and the helpers they inline."""
