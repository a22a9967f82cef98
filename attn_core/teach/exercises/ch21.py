"""Checks for the exercises of chapter 21 (FlashAttention in Triton).

* 21.1 counts the tiles a causal, windowed kernel must visit (a formula to derive);
* 21.2 writes Gemma 2's soft-cap as a Triton kernel (Triton has no ``tanh``, and a
  ragged last block must be masked);
* 21.3 combines Flash-Decoding's partial results when the attention has a sink;
* 21.4 writes the loop of a forward kernel (the online softmax over key blocks) and the loop
  of the backward's dQ kernel, in a scaffold that gives everything else (loads, stores, the
  launch): the checks launch them and compare with :func:`attn_core.attention` and its
  autograd gradient;
* 21.5 reads, from a measured time ratio and a tile ratio, the share of a kernel's time that
  does not shrink with the tiles it visits.

The learner's kernels of 21.2 and 21.4 run in Triton's interpreter on a CPU
(:mod:`attn_core.ops.backends.flash_kernels` chooses it when it is imported); the other checks need no Triton.
"""

from __future__ import annotations

import math
import warnings
from typing import Callable

import torch

from ...ops.attention import attention
from ...ops.backends import flash_kernels
from ...ops.masks import causal_mask
from ._common import mismatch, report

__all__ = ["check_visited_tiles", "check_softcap_kernel", "check_combine_with_sink", "check_fixed_share"]

# imported (or not) by attn_core.ops.backends.flash_kernels, after it chose the interpreter
triton = flash_kernels.triton


def _tiles(T: int, block: int, window: int | None) -> int:
    """Tiles (block × block) of a causal T × T mask with at least one allowed pair: what the kernel visits."""
    n = -(-T // block)
    padded = torch.zeros(n * block, n * block, dtype=torch.bool)
    padded[:T, :T] = causal_mask(T, window=window)
    return int(padded.view(n, block, n, block).any(dim=(1, 3)).sum())


def _tiles_from_bounds(T: int, block: int, window: int | None) -> int:
    """:func:`_tiles` from the kernel's loop bounds, for lengths where no mask fits in memory."""
    total = 0
    for start in range(0, T, block):  # query block: keys from the window's first to its last
        first = 0 if window is None else max(0, start - window + 1) // block
        total += start // block + 1 - first
    return total


def check_visited_tiles(fn: Callable[..., int]) -> bool:
    """Exercise 21.1: ``fn(T, block, window)`` is the number of tiles a causal kernel visits.

    Square causal attention over ``T`` positions, query and key blocks of ``block``
    (``T`` need not be a multiple of it: the last block is ragged), and a sliding
    ``window`` (None: none). The kernel visits a tile when at least one (query, key) pair
    in it is allowed, which is what :func:`attn_core.ops.backends.flash.flash_forward` counts.
    """
    name = "21.1 visited tiles"
    cases = [(256, 32, None), (100, 16, None), (256, 32, 64), (200, 16, 40), (160, 16, 18), (96, 32, 1), (64, 16, 100)]
    big = (10**6, 128, 4096)  # a dense mask would have 10^12 entries: derive, do not mask
    for T, block, window in [*cases, big]:
        want = _tiles(T, block, window) if T < 10**4 else _tiles_from_bounds(T, block, window)
        try:
            got = fn(T, block, window)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            where = " (T = 10^6: no mask fits; count from key_range's bounds)" if T == big[0] else ""
            return report(name, False, f"{type(e).__name__}: {str(e)[:200]}{where}")
        if got != want:
            hint = " (is the last, ragged block counted?)" if T % block else ""
            return report(name, False, f"T={T}, block={block}, window={window}: got {got!r}, expected {want}{hint}")
    return report(name, True, f"{len(cases)} cases match the dense mask, and T = 10^6 its loop bounds")


def check_fixed_share(fn: Callable[[float, float], float]) -> bool:
    """Exercise 21.5: ``fn(time_ratio, tile_ratio)`` is the share of a kernel's time that does not shrink.

    Model: the causal kernel's time is ``a + b`` (normalised to 1), the windowed one's
    ``a + b * tile_ratio``, measured as ``time_ratio``; ``fn`` returns ``a``.
    """
    name = "21.5 fixed share"
    cases = [(0.47, 0.26), (1.0, 0.5), (0.5, 0.5), (0.3, 0.1), (0.9, 0.25)]
    for time_ratio, tile_ratio in cases:
        want = (time_ratio - tile_ratio) / (1 - tile_ratio)
        try:
            got = float(fn(time_ratio, tile_ratio))
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        if not math.isclose(got, want, abs_tol=1e-9):
            return report(
                name,
                False,
                f"time ratio {time_ratio}, tile ratio {tile_ratio}: got {got:.4g}, expected {want:.4g}"
                " (write both times as a + b * tiles, the causal one as 1)",
            )
    return report(name, True, f"{len(cases)} cases, a = (t - r) / (1 - r)")


def check_softcap_kernel(kernel) -> bool:
    """Exercise 21.2: ``kernel(S, Out, n, cap, BLOCK: tl.constexpr)`` is a Triton kernel that soft-caps scores.

    Gemma 2 caps attention scores with ``cap · tanh(s / cap)``; inside a fused kernel it is
    one line after the ``tl.dot``. Triton has no ``tanh``: build it from ``tl.exp`` or
    ``tl.sigmoid``, in a form that stays finite for scores far above the cap. The check
    launches ``kernel`` on ``n`` scores (not a multiple of ``BLOCK``) with
    ``grid = (cdiv(n, BLOCK),)``, compares ``Out[:n]`` with ``cap · tanh(S / cap)`` and
    checks that nothing was written past ``n`` (a masked ragged tail).

    Shapes:
        S: ``(n,)``; Out: ``(n + BLOCK,)`` (the check's buffer; only ``[:n]`` may be written)
    """
    name = "21.2 soft-cap kernel"
    if triton is None:
        return report(name, False, "Triton is not installed: pip install triton")
    n, block, sentinel = 1000, 128, 12345.0
    device = "cpu" if flash_kernels.INTERPRETED else "cuda"  # compiled kernels read GPU memory
    for cap, spread in ((50.0, 1.0), (5.0, 8.0), (2.0, 100.0)):
        g = torch.Generator().manual_seed(int(cap * 10))
        scores = (torch.randn(n, generator=g) * spread).to(device)  # (n,)
        out = torch.full((n + block,), sentinel, device=device)  # (n + BLOCK,): room for a write past the end
        try:
            with warnings.catch_warnings():  # the interpreter's NumPy warns when exp overflows to inf
                warnings.simplefilter("ignore", RuntimeWarning)
                kernel[(triton.cdiv(n, block),)](scores, out, n, cap, BLOCK=block)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        if (out[:n] == sentinel).all():
            return report(name, False, "the kernel wrote nothing: tl.store the capped scores")
        if (out[n:] != sentinel).any():
            return report(name, False, f"cap={cap:g}: the kernel wrote past n={n}: mask the last block")
        if out[:n].isnan().any():
            return report(name, False, f"cap={cap:g}: NaN (exp overflows to inf for large scores: inf / inf)")
        out, scores = out.cpu(), scores.cpu()
        problem = mismatch(out[:n], cap * torch.tanh(scores.double() / cap), atol=1e-5 * cap)
        if problem:
            return report(name, False, f"cap={cap:g}: {problem}")
    return report(name, True, "3 caps, scores to 50x the cap, ragged tail masked")


def _partials(q, k, v, splits):
    """Per-split outputs and natural log-sum-exps of one query over consecutive key chunks (an empty chunk allowed)."""
    scores = k @ q / math.sqrt(q.shape[0])  # (T_k,)
    outs, lses = [], []
    for lo, hi in splits:
        s = scores[lo:hi]
        if hi == lo:  # a split with no key: lse = -inf, output 0 (what a kernel writes)
            outs.append(torch.zeros_like(v[0]))
            lses.append(torch.tensor(float("-inf"), dtype=q.dtype))
            continue
        outs.append(torch.softmax(s, 0) @ v[lo:hi])  # (D,)
        lses.append(torch.logsumexp(s, 0))
    return torch.stack(outs), torch.stack(lses)  # (S, D), (S,)


def check_combine_with_sink(fn: Callable[..., torch.Tensor]) -> bool:
    """Exercise 21.3: ``fn(outs, lses, sink)`` combines Flash-Decoding's splits of an attention with a sink.

    Each split ``s`` attended to its own chunk of keys and returned its normalised output
    ``outs[s]`` and the natural log-sum-exp of its scores ``lses[s]`` (``-inf`` for a
    split with no key). The result must equal one query's attention over all keys with a
    learned sink (:func:`attn_core.attention` with ``sinks=``). Scores as large as 1000
    and an empty split are among the cases.

    Shapes:
        outs: ``(S, D)``; lses: ``(S,)``; sink: ``()``; fn's output: ``(D,)``
    """
    name = "21.3 combine with a sink"
    cases = [
        (1.0, [(0, 10), (10, 20), (20, 33)], 0.5),
        (1.0, [(0, 5), (5, 5), (5, 33)], -1.0),  # an empty split
        (60.0, [(0, 16), (16, 33)], 900.0),  # lse near 1000: exp overflows float64 without a maximum
        (1.0, [(0, 33)], 3.0),
    ]
    for i, (spread, splits, sink) in enumerate(cases):
        g = torch.Generator().manual_seed(200 + i)
        q = torch.randn(16, generator=g, dtype=torch.float64) * spread
        k = torch.randn(33, 16, generator=g, dtype=torch.float64) * spread
        v = torch.randn(33, 16, generator=g, dtype=torch.float64)
        outs, lses = _partials(q, k, v, splits)
        sink_t = torch.tensor(sink, dtype=torch.float64)
        want = attention(q[None, None, None], k[None, None], v[None, None], sinks=sink_t[None])[0, 0, 0]  # (D,)
        try:
            got = fn(outs.clone(), lses.clone(), sink_t.clone())
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        if isinstance(got, torch.Tensor) and got.isnan().any():
            return report(name, False, f"case {i + 1}: NaN (an empty split has lse = -inf; large lse overflow exp)")
        problem = mismatch(got, want, atol=1e-9)
        if problem:
            return report(name, False, f"case {i + 1}: {problem}")
    return report(name, True, f"{len(cases)} cases, an empty split and lse near 1000")


# ---- 21.4: the learner's own attention kernels (the loop bodies of a scaffold) ----

__all__ += ["check_forward_loop", "check_dq_kernel"]

_BLOCK, _D = 16, 16
#: (batch·heads, T_q, T_k, causal) of each launch: ragged and exact lengths, fewer queries
#: than keys (causality aligned bottom-right, as attention() aligns it), causal and not.
_KERNEL_CASES = ((2, 40, 40, True), (1, 23, 37, False), (2, 17, 33, True), (1, 16, 16, False))


def _kernel_tolerance() -> float:
    # The interpreter multiplies float32 on NumPy (errors near 1e-6 here); a GPU's tl.dot
    # rounds float32 inputs to TF32 (a 10-bit mantissa) unless asked for "ieee".
    return 1e-4 if flash_kernels.INTERPRETED else 1e-2


def _kernel_inputs(case: int, BH: int, T_q: int, T_k: int) -> tuple[torch.Tensor, ...]:
    """Seeded float32 ``q, k, v, d_out``: ``q`` and ``d_out`` ``(BH, T_q, D)``, ``k, v`` ``(BH, T_k, D)``."""
    g = torch.Generator().manual_seed(2140 + case)
    device = "cpu" if flash_kernels.INTERPRETED else "cuda"  # compiled kernels read GPU memory
    q, k, v, d_out = (torch.randn(BH, T, _D, generator=g) for T in (T_q, T_k, T_k, T_q))
    return tuple(t.to(device) for t in (q, k, v, d_out))


def _scaled_scores(q: torch.Tensor, k: torch.Tensor, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Float64 scores ``q kᵀ / √D`` and the mask of the pairs that may attend. Shapes: ``(BH, T_q, T_k)`` each."""
    T_q, T_k = q.shape[-2], k.shape[-2]
    scores = q.double() @ k.double().transpose(-2, -1) / math.sqrt(_D)
    allowed = causal_mask(T_q, T_k) if causal else torch.ones(T_q, T_k, dtype=torch.bool)
    return scores, allowed.to(q.device).expand_as(scores)


def _launch(name: str, kernel, BH: int, T_q: int, T_k: int, *args, causal: bool) -> str | None:
    """Run ``kernel`` on the scaffold's grid (one program per query block and batch·head); an error, in one line."""
    try:
        with warnings.catch_warnings():  # an empty loop divides 0 by 0: the check says so, NumPy need not
            warnings.simplefilter("ignore", RuntimeWarning)
            grid = (triton.cdiv(T_q, _BLOCK), BH)
            kernel[grid](*args, T_q, T_k, 1 / math.sqrt(_D), D=_D, BLOCK=_BLOCK, IS_CAUSAL=causal)
    except Exception as e:  # a learner's bug should print, not stop the notebook
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return None


def _close(got: torch.Tensor, want: torch.Tensor, atol: float) -> bool:
    return mismatch(got, want.to(got.device), atol=atol) is None


def _top_left(T_q: int, T_k: int) -> torch.Tensor:
    """The causal mask aligned top-left (query ``i`` sees keys ``0..i``): the typical slip when ``T_q < T_k``."""
    return torch.ones(T_q, T_k, dtype=torch.bool).tril()


_TOP_LEFT = "causal part aligned top-left; the queries are the *last* T_q of T_k positions"


def check_forward_loop(kernel) -> bool:
    """Exercise 21.4a: the body of the online-softmax loop of ``kernel``, a forward attention kernel.

    ``kernel(Q, K, V, Out, Lse, T_q, T_k, sm_scale, D: tl.constexpr, BLOCK: tl.constexpr,
    IS_CAUSAL: tl.constexpr)`` is the chapter's scaffold: one program per block of ``BLOCK``
    queries of one batch·head, launched on ``(cdiv(T_q, BLOCK), BH)``; it stores ``acc / l``
    and ``m + log(l)``. The learner writes the loop over key blocks: the tile's scores
    ``q kᵀ · sm_scale`` (natural units), masked (causal when ``IS_CAUSAL``, aligned
    bottom-right as :func:`attn_core.attention` aligns it, and the lanes past ``T_k``), and
    the updates of the running maximum ``m``, the sum ``l`` and ``acc``. Compared with
    :func:`attn_core.attention` and the log-sum-exp of the scores, for causal and unmasked
    attention, fewer queries than keys and lengths that are not multiples of ``BLOCK``.

    Shapes:
        Q, Out: ``(BH, T_q, D)``, K, V: ``(BH, T_k, D)``, contiguous float32; Lse: ``(BH, T_q)``
    """
    name = "21.4a forward"
    if triton is None:
        return report(name, False, "Triton is not installed: pip install triton")
    atol = _kernel_tolerance()
    for case, (BH, T_q, T_k, causal) in enumerate(_KERNEL_CASES):
        q, k, v, _ = _kernel_inputs(case, BH, T_q, T_k)
        out, lse = torch.full_like(q, float("nan")), torch.full((BH, T_q), float("nan"), device=q.device)
        error = _launch(name, kernel, BH, T_q, T_k, q, k, v, out, lse, causal=causal)
        if error:
            return report(name, False, error)
        out, lse = out.cpu(), lse.cpu()
        scores, allowed = _scaled_scores(q.cpu(), k.cpu(), causal)
        want_out = attention(q.double().cpu(), k.double().cpu(), v.double().cpu(), is_causal=causal)
        want_lse = torch.logsumexp(scores.masked_fill(~allowed, float("-inf")), dim=-1)  # (BH, T_q)
        bad_out, bad_lse = mismatch(out, want_out, atol=atol), mismatch(lse, want_lse, atol=atol)
        if not bad_out and not bad_lse:
            continue
        where = f"T_q={T_q}, T_k={T_k}, {'causal' if causal else 'no mask'}"
        if out.isnan().all() and (lse == float("-inf")).all():
            return report(name, False, "out is 0/0, lse is -inf: m, l and acc never change")
        q64, k64, v64 = (t.double().cpu() for t in (q, k, v))
        padded = [torch.nn.functional.pad(t, (0, 0, 0, -T_k % _BLOCK)) for t in (k64, v64)]  # zero keys up to BLOCK
        if _close(out, attention(q64, k64, v64, is_causal=not causal), atol):
            hint = "every query also sees the keys after it" if causal else "masked causally without IS_CAUSAL"
        elif causal and T_q < T_k and _close(out, attention(q64, k64, v64, mask=_top_left(T_q, T_k)), atol):
            hint = _TOP_LEFT
        elif not causal and T_k % _BLOCK and _close(out, attention(q64, *padded), atol):
            hint = "the lanes past T of the last key block count as keys (score 0): mask them"
        elif _close(out, attention(q64, k64, v64, is_causal=causal, scale=1.0), atol):
            hint = "the scores were not multiplied by sm_scale"
        elif not bad_lse:
            hint = "lse is right (so are m and l), out is not: how does acc change when m rises?"
        elif not bad_out:
            hint = "out is right, lse is not: it is log(sum(exp(scores))) in natural units"
        else:
            hint = f"out: {bad_out}; lse: {bad_lse}"
        return report(name, False, f"{where}: {hint}")
    return report(name, True, f"{len(_KERNEL_CASES)} launches, causal or not, ragged T, T_q < T_k, within {atol:.0e}")


def check_dq_kernel(kernel) -> bool:
    """Exercise 21.4b: the body of the loop of ``kernel``, the backward's dQ kernel.

    ``kernel(Q, K, V, DO, Lse, Delta, DQ, T_q, T_k, sm_scale, D: tl.constexpr, BLOCK: tl.constexpr,
    IS_CAUSAL: tl.constexpr)`` is the chapter's scaffold: one program per query block, as the
    forward; it loads the block's queries, ``dO``, the natural log-sum-exp ``Lse`` of each
    query's scaled scores and ``Delta = rowsum(dO ∘ O)``, and stores the accumulator ``dq``
    as it is. The learner writes the loop over key blocks: recompute ``P = exp(S − lse)``
    (masked as the forward was), ``dP = dO Vᵀ``, ``dS = P ∘ (dP − Delta)``, and add
    ``dS K · sm_scale`` to ``dq``. Compared with autograd's gradient of
    :func:`attn_core.attention` in float64, ``Lse`` and ``Delta`` given exactly.

    Shapes:
        Q, DO, DQ: ``(BH, T_q, D)``, K, V: ``(BH, T_k, D)``, contiguous float32;
        Lse, Delta: ``(BH, T_q)``
    """
    name = "21.4b dQ kernel"
    if triton is None:
        return report(name, False, "Triton is not installed: pip install triton")
    atol = _kernel_tolerance()
    for case, (BH, T_q, T_k, causal) in enumerate(_KERNEL_CASES):
        q, k, v, d_out = _kernel_inputs(case, BH, T_q, T_k)
        q64, k64, v64, do64 = (t.double().cpu() for t in (q, k, v, d_out))
        leaf = q64.clone().requires_grad_()
        out64 = attention(leaf, k64, v64, is_causal=causal)
        (want,) = torch.autograd.grad(out64, leaf, do64)  # (BH, T_q, D)
        scores, allowed = _scaled_scores(q64, k64, causal)
        lse = torch.logsumexp(scores.masked_fill(~allowed, float("-inf")), dim=-1)  # (BH, T_q)
        delta = (do64 * out64.detach()).sum(-1)  # (BH, T_q): rowsum(dO ∘ O)
        dq = torch.full_like(q, float("nan"))
        on_device = (t.float().to(q.device) for t in (lse, delta))
        error = _launch(name, kernel, BH, T_q, T_k, q, k, v, d_out, *on_device, dq, causal=causal)
        if error:
            return report(name, False, error)
        dq = dq.cpu()
        problem = mismatch(dq, want, atol=atol)
        if not problem:
            continue
        where = f"T_q={T_q}, T_k={T_k}, {'causal' if causal else 'no mask'}"
        scale = 1 / math.sqrt(_D)
        p = torch.exp(scores - lse[..., None])  # (BH, T_q, T_k), unmasked
        dp = do64 @ v64.transpose(-2, -1)  # (BH, T_q, T_k)
        masked = p.masked_fill(~allowed, 0.0)
        if (dq == 0).all():
            return report(name, False, "dq stays zero: the loop adds nothing to it")
        if _close(dq * scale, want, atol):
            hint = "dQ is 1/sm_scale times too large: the scores carry sm_scale, so does dS"
        elif _close(dq, (masked * dp) @ k64 * scale, atol):
            hint = "dS = P ∘ dP leaves out the softmax's second term: each row's Delta"
        elif causal and _close(dq, (p * (dp - delta[..., None])) @ k64 * scale, atol):
            hint = "P is recomputed without the causal mask: later keys get exp(s - lse) > 0"
        elif causal and T_q < T_k:
            top_left = p.masked_fill(~_top_left(T_q, T_k), 0.0)
            if _close(dq, (top_left * (dp - delta[..., None])) @ k64 * scale, atol):
                hint = _TOP_LEFT
            else:
                hint = f"dQ: {problem}"
        else:
            hint = f"dQ: {problem}"
        return report(name, False, f"{where}: {hint}")
    return report(name, True, f"{len(_KERNEL_CASES)} launches, causal or not, ragged T, T_q < T_k, within {atol:.0e}")
