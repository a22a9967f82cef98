"""Ring attention: each rank keeps its queries and passes its key/value block around a ring of ranks.

With the sequence cut into ``W`` shards (:mod:`.sharding`), rank ``r`` holds queries,
keys and values of its shard. In ``W`` steps, rank ``r`` attends its queries to the
key/value block of rank ``r - s`` (step ``s``), while it already sends that block on to
rank ``r + 1`` and receives the next one from rank ``r - 1`` (:func:`.comm.ring_shift`):
after ``W`` steps every query has met every key (Liu et al. 2023, "Ring Attention with
Blockwise Transformers"). Each step's result is partial; the partials merge exactly with
the online softmax's log-sum-exp rule (:func:`attn_core.ops.partial.merge_partials`), step by
step: a rank keeps one running result per query, as FlashAttention keeps one running
``(m, l, acc)`` per query while it visits the key tiles.

Causal masking is by *global* positions: a query chunk never computes a key chunk that
lies wholly in its future (skipped, not masked), computes the chunk on its diagonal with
a causal mask, and every earlier chunk in full. With the contiguous layout rank ``W - 1``
then does ``W`` times the work of rank 0; the zig-zag layout gives every rank the same
(:func:`.formulas.ring_scores` counts it).

The backward pass travels the ring again: a custom ``autograd.Function`` recomputes each
block (as FlashAttention recomputes its tiles), takes its gradients by autograd through
:func:`attn_core.ops.partial.partial_attention`, keeps ``dQ`` at home and sends ``dK, dV``
around the ring with their block until they arrive back at the rank that owns it.

With grouped-query attention only the ``H_kv`` key/value heads travel.

Shape legend:
    B    batch size
    H    query heads; ``H_kv`` key/value heads (``H_kv`` divides ``H``)
    T_l  this rank's shard length (``T / W``); ``c`` one chunk of it
    D    query/key width per head, ``D_v`` value width per head
    W    world size
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ..checks import check_bool, check_choice, check_number
from ..ops.attention import check_qkv
from ..ops.partial import merge_partials, partial_attention
from .checks import agree_across_ranks
from .comm import ring_shift
from .cost import record_scores
from .sharding import LAYOUTS, shard_chunks

__all__ = ["ring_attention", "block_plan"]


def block_plan(
    rank: int, source: int, world_size: int, T_local: int, *, layout: str, is_causal: bool
) -> list[tuple[slice, slice, bool]]:
    """Which blocks rank ``rank`` computes against the key/value shard of rank ``source``.

    Without a mask: one block, every query against every key. With ``is_causal``: for each
    chunk of this rank's queries and each chunk of the source's keys (by their global
    chunk indices, :func:`.sharding.shard_chunks`), nothing when the keys come later, a
    causal block on the diagonal, a full block when the keys come earlier.

    Returns:
        ``(query slice, key slice, causal)`` per block, in local coordinates of the shards.
    """
    if not is_causal:
        return [(slice(0, T_local), slice(0, T_local), False)]
    mine, theirs = shard_chunks(rank, world_size, layout), shard_chunks(source, world_size, layout)
    c = T_local // len(mine)
    plan = []
    for a, q_chunk in enumerate(mine):
        for b, k_chunk in enumerate(theirs):
            if k_chunk <= q_chunk:  # a later key chunk is skipped outright
                plan.append((slice(a * c, (a + 1) * c), slice(b * c, (b + 1) * c), k_chunk == q_chunk))
    return plan


def _step_blocks(q, k, v, plan, scale):
    """Partial results of one ring step, by query slice: ``{(start, stop): [(slice, output, lse), ...]}``."""
    partials: dict[tuple[int, int], list] = {}
    for qs, ks, causal in plan:
        o, lse = partial_attention(q[..., qs, :], k[..., ks, :], v[..., ks, :], is_causal=causal, scale=scale)
        partials.setdefault((qs.start, qs.stop), []).append((qs, o, lse))
    return partials


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, group, W, rank, is_causal, layout, scale):
        T_l = q.shape[-2]
        work = torch.promote_types(q.dtype, torch.float32)  # half inputs merge in float32
        merged: dict[tuple[int, int], tuple] = {}  # per query slice: (output, lse) over the blocks seen so far
        k_cur, v_cur = k, v
        for step in range(W):
            source = (rank - step) % W
            # Send this block on before computing with it: the transfer overlaps the work.
            shift = ring_shift([k_cur, v_cur], group=group) if step < W - 1 else None
            plan = block_plan(rank, source, W, T_l, layout=layout, is_causal=is_causal)
            for qs, ks, _ in plan:
                record_scores(qs.stop - qs.start, ks.stop - ks.start)
            for key, found in _step_blocks(q, k_cur, v_cur, plan, scale).items():
                # The online softmax: fold this step's partials into the running result at once,
                # so that a rank never holds more than one partial output per query.
                outputs = [merged[key][0]] if key in merged else []
                lses = [merged[key][1]] if key in merged else []
                merged[key] = merge_partials(outputs + [p[1].to(work) for p in found], lses + [p[2] for p in found])
            if shift is not None:
                k_cur, v_cur = shift.wait()
        keys = sorted(merged)  # query slices in order along T_l
        out = torch.cat([merged[key][0] for key in keys], dim=-2).to(v.dtype)  # (B, H, T_l, D_v)
        lse = torch.cat([merged[key][1] for key in keys], dim=-1)  # (B, H, T_l)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.settings = (group, W, rank, is_causal, layout, scale)
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, out, lse = ctx.saved_tensors
        group, W, rank, is_causal, layout, scale = ctx.settings
        work = torch.promote_types(q.dtype, torch.float32)
        d_out = d_out.to(work)
        # D = rowsum(dO ∘ O): through the merge, lse_b's gradient is w_b · (dO·o_b - D).
        delta = (d_out * out.to(work)).sum(dim=-1)  # (B, H, T_l)
        dq = torch.zeros_like(q, dtype=work)
        k_cur, v_cur = k, v
        dk_cur, dv_cur = torch.zeros_like(k, dtype=work), torch.zeros_like(v, dtype=work)  # travel with the block
        for step in range(W):
            source = (rank - step) % W
            shift = ring_shift([k_cur, v_cur], group=group) if step < W - 1 else None
            plan = block_plan(rank, source, W, q.shape[-2], layout=layout, is_causal=is_causal)
            with torch.enable_grad():
                qd, kd, vd = (t.detach().requires_grad_() for t in (q, k_cur, v_cur))
                found, wanted = [], []
                for blocks in _step_blocks(qd, kd, vd, plan, scale).values():
                    for qs, o, lse_b in blocks:
                        # Block b's share of each query's softmax, from the merged lse.
                        w = torch.exp(lse_b.detach() - lse[..., qs])  # (B, H, c)
                        g = d_out[..., qs, :]  # (B, H, c, D_v)
                        found += [o, lse_b]
                        wanted += [
                            (w.unsqueeze(-1) * g).to(o.dtype),
                            w * ((g * o.detach().to(work)).sum(-1) - delta[..., qs]),
                        ]
                if found:
                    grads = torch.autograd.grad(found, (qd, kd, vd), wanted, allow_unused=True)
                    for acc, grad in zip((dq, dk_cur, dv_cur), grads):
                        if grad is not None:
                            acc += grad
            # dK, dV of this block go on with it; after the last step this hop takes them home.
            dk_cur, dv_cur = ring_shift([dk_cur, dv_cur], group=group).wait()
            if shift is not None:
                k_cur, v_cur = shift.wait()
        return dq.to(q.dtype), dk_cur.to(k.dtype), dv_cur.to(v.dtype), None, None, None, None, None, None


def ring_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    group: dist.ProcessGroup | None = None,
    is_causal: bool = False,
    layout: str = "contiguous",
    scale: float | None = None,
) -> torch.Tensor:
    """Attention over the whole sequence, of which this rank holds one shard: the ring algorithm.

    A collective: every rank of ``group`` calls it with its own shard (cut by
    :func:`attn_core.parallel.sharding.shard_sequence` with the same ``layout``) and gets
    its shard of the output, equal to that shard of
    ``attn_core.attention(q_full, k_full, v_full, is_causal=is_causal)``. Differentiable in
    ``q``, ``k`` and ``v`` (the backward pass passes ``dK, dV`` around the ring).

    The arguments are checked on every rank and compared across ranks before any block
    moves (:func:`attn_core.parallel.checks.agree_across_ranks`): bad input on one rank is
    an error on every rank, not a hang.

    Args:
        q: This rank's queries.
        k: This rank's keys; ``H_kv`` may divide ``H`` (grouped-query attention: only the
            ``H_kv`` heads travel).
        v: This rank's values.
        group: The ranks sharing the sequence (default: the whole world), in ring order.
        is_causal: Causal mask by global positions; blocks wholly in a query's future are skipped.
        layout: How the sequence was sharded: ``"contiguous"`` or ``"zigzag"``.
        scale: Multiplies the scores; default ``1/√D``.

    Returns:
        This rank's output shard, in the inputs' dtype.

    Shapes:
        q: ``(B, H, T_l, D)``; k: ``(B, H_kv, T_l, D)``; v: ``(B, H_kv, T_l, D_v)``
        output: ``(B, H, T_l, D_v)``, with ``T_l = T / W``

    Raises:
        TypeError, ValueError: On every rank, when any rank's arguments fail the checks of
            :func:`attn_core.attention` (or are not 4-d), the layout is unknown, a zig-zag
            shard has an odd length, or the ranks disagree on a shape, dtype or setting.
    """

    def local_check():
        check_qkv(q, k, v, scale=scale)
        if q.dim() != 4 or k.shape[-2] != q.shape[-2]:
            raise ValueError(
                f"ring_attention takes (B, H, T_l, D) shards with as many keys as queries, "
                f"got q.shape={tuple(q.shape)}, k.shape={tuple(k.shape)}"
            )
        check_bool("is_causal", is_causal)
        check_choice("layout", layout, LAYOUTS)
        if scale is not None:
            check_number("scale", scale, low=0.0, low_open=True)
        if layout == "zigzag" and q.shape[-2] % 2:
            raise ValueError(
                f"the zigzag layout holds two chunks per rank, so the shard length must be even, got T_l={q.shape[-2]}"
            )

    settings = {"q": q, "k": k, "v": v, "is_causal": is_causal, "layout": layout, "scale": scale}
    W, rank = agree_across_ranks("ring_attention", settings, group=group, local_check=local_check)
    return _RingAttention.apply(q, k, v, group, W, rank, is_causal, layout, scale)
