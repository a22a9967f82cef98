"""Checks for the exercises of chapter 23 (attention across devices).

* :func:`check_ring_backward_bytes` (predict, then run): the bytes one rank sends in the
  ring's backward pass, as a function of the shapes, held against bytes *measured* in
  spawned gloo processes (:func:`attn_core.parallel.measure.measure_schemes`) at two or
  more world sizes, and against :func:`attn_core.parallel.formulas.ring_bytes` in bfloat16.
* :func:`check_balanced_layout` (design): an assignment of ``n`` chunks to each of ``W``
  ranks whose causal work is equal, the work measured by counting the tiles of the dense
  causal mask that each rank's query chunks touch, in total and at every ring step (the
  ring's step-synchronous critical path equals each rank's total).
* :func:`check_step_plan` (find the bug): which blocks a rank computes against another
  rank's keys in one ring step; the fixed plan is run, rank by rank, as a ring simulated
  in one process (:func:`attn_core.ops.partial.partial_attention` and
  :func:`attn_core.ops.partial.merge_partials`), and compared with one-device attention.
"""

from __future__ import annotations

import functools

import torch

from ...ops.attention import attention
from ...ops.masks import causal_mask
from ...ops.partial import merge_partials, partial_attention
from ...parallel.formulas import ring_bytes
from ...parallel.measure import measure_schemes
from ...parallel.sharding import LAYOUTS, shard_chunks, shard_sequence
from ._common import report

__all__ = ["check_ring_backward_bytes", "check_balanced_layout", "check_step_plan"]

# The shapes of the measured runs of exercise 23.1: grouped-query (H_kv < H), 3 ranks, and
# 2 ranks when the caller has no measured runs of its own (so that ``W + 2`` cannot pass).
BACKWARD_RUN = {"B": 1, "H": 4, "H_kv": 2, "T": 24, "D": 8, "W": 3, "element_size": 8}


@functools.lru_cache(maxsize=2)
def measured_ring_backward_bytes(W: int = 3) -> int:
    """Bytes rank 0 sends in the ring's backward pass at :data:`BACKWARD_RUN` on ``W`` ranks, measured once."""
    s = BACKWARD_RUN
    run = measure_schemes(
        W, batch=s["B"], heads=s["H"], kv_heads=s["H_kv"], T=s["T"], head_dim=s["D"], schemes=("ring",)
    )
    return _one_value(run["ring"])


def _one_value(ranks: list[dict]) -> int:
    sent = {row["backward_bytes_sent"] for row in ranks}
    if len(sent) != 1:  # every rank sends the same blocks; a difference is a library bug
        raise RuntimeError(f"ranks sent different backward bytes: {sorted(sent)}")
    return sent.pop()


def _hint(got, want: int, s: dict) -> str:
    """Why ``got`` differs from the measured ``want`` at the shapes ``s``."""
    block = want // (2 * s["W"] - 1)  # one key/value shard, the unit of every ring message
    hints = {
        (s["W"] - 1) * block: "the forward pass's traffic; what else travels back?",
        2 * (s["W"] - 1) * block: "a gradient block needs one more hop, home",
        2 * s["W"] * block: "K, V need no hop after the last step",
        s["W"] * block: "K, V travel again too (dK, dV need them)",
    }
    heads = s["H"] / s["H_kv"]
    for factor in range(1, 2 * s["W"] + 1):
        hints.setdefault(factor * block * heads, "only the key/value heads travel, not the query heads")
    return hints.get(got, f"off by a factor {got / want:.3g}")


def check_ring_backward_bytes(fn, runs: dict | None = None, sizes: dict | None = None) -> bool:
    """Exercise 23.1: ``fn(B, H, H_kv, T, D, W, element_size)`` -> bytes one rank sends in the ring's backward.

    Measured: three spawned processes run ring attention forward and backward (float64,
    GQA) and count the bytes each rank hands to ``torch.distributed``. Other world sizes
    come from ``runs`` (:func:`measure_schemes` reports by ``W``, with the backward pass,
    measured at the keyword sizes ``sizes``, float64) when given, else from one more
    measured run on 2 ranks.
    """
    name = "23.1 ring backward bytes"
    cases = [(BACKWARD_RUN, measured_ring_backward_bytes)]
    if runs is None:
        cases.append((dict(BACKWARD_RUN, W=2), lambda: measured_ring_backward_bytes(2)))
    else:
        z = dict(sizes or {})
        base = {"B": z.get("batch", 1), "H": z["heads"], "T": z["T"], "D": z["head_dim"], "element_size": 8}
        base["H_kv"] = z.get("kv_heads") or z["heads"]
        for W, run in sorted(runs.items()):
            cases.append((dict(base, W=W), functools.partial(_one_value, run["ring"])))
    for i, (s, measured) in enumerate(cases):
        try:
            got = fn(**s)
        except Exception as e:  # a learner's bug prints, it does not stop the notebook
            return report(name, False, f"W={s['W']}: {type(e).__name__}: {e}")
        if not isinstance(got, (int, float)) or isinstance(got, bool):
            return report(name, False, f"expected a number of bytes, got {type(got).__name__}")
        want = measured()
        if got != want:
            before = f"right at W={cases[0][0]['W']}, not at W={s['W']}: " if i else ""
            return report(name, False, before + _hint(got, want, s))
    # bfloat16 inputs (not run here): K, V travel in 2 bytes, dK, dV in the ring's float32.
    s = dict(BACKWARD_RUN, element_size=2)
    want = ring_bytes(**{k: s[k] for k in ("B", "H_kv", "T", "D", "W")}, element_size=2, backward=True)
    try:
        got = fn(**s)
    except Exception as e:
        return report(name, False, f"bfloat16: {type(e).__name__}: {e}")
    if got != want:
        W = s["W"]
        elements = want // ((W - 1) * 2 + W * 4)  # one key/value shard's numbers (K, V in 2 bytes, dK, dV in 4)
        in_input_dtype = (2 * W - 1) * elements * 2  # dK, dV sent in bfloat16 as well
        why = "dK, dV travel in float32 (the accumulation dtype)" if got == in_input_dtype else _hint(got, want, s)
        return report(name, False, f"right in float64, not in bfloat16 (element_size=2): {why}")
    sizes_run = ", ".join(str(s["W"]) for s, _ in sorted(cases, key=lambda c: c[0]["W"]))
    return report(name, True, f"measured bytes at W={sizes_run}, bfloat16 formula")


def _tiles(n_chunks: int) -> torch.Tensor:
    """Which (query chunk, key chunk) blocks a causal mask touches, from the dense mask's tiles.

    Shapes:
        returns: (n_chunks, n_chunks), bool; row ``a`` marks the key chunks query chunk ``a`` meets.
    """
    c = 2  # tokens per chunk: any size gives the same tiles
    mask = causal_mask(n_chunks * c, n_chunks * c)  # (T, T), True = may attend
    return mask.reshape(n_chunks, c, n_chunks, c).any(dim=3).any(dim=1)  # (chunks, chunks)


def _critical_path(layout: list[tuple[int, ...]], tiles: torch.Tensor) -> int:
    """The ring's step-synchronous time in blocks: sum over steps of the busiest rank's blocks.

    At step ``s`` rank ``r`` meets the key chunks of rank ``(r - s) mod W`` (the ring's order).
    """
    W = len(layout)
    return sum(max(int(tiles[list(layout[r])][:, list(layout[(r - s) % W])].sum()) for r in range(W)) for s in range(W))


# (W, chunks per rank): an even count (mirrored pairs work), odd ones that need a design,
# and cases where no layout of equal work exists (False): the learner returns None there.
LAYOUT_CASES = (
    (3, 2, True),
    (4, 4, True),
    (3, 3, True),
    (5, 3, True),
    (2, 6, True),
    (2, 3, False),  # 21 blocks do not split in two
    (4, 3, False),  # nor 78 in four
    (3, 1, False),  # 6 blocks split in three, but one chunk each has work 1, 2, 3
)


def check_balanced_layout(fn) -> bool:
    """Exercise 23.2: ``fn(W, n)`` -> ``W`` tuples of ``n`` chunk indices (of ``n · W``), of equal causal work.

    Equal at every ring step too: rank ``r`` meets rank ``(r - s) mod W``'s chunks at step
    ``s``, and the sum over steps of the busiest rank's blocks must equal each rank's total.

    Where no such layout exists, ``fn`` returns ``None`` (the cases are known in advance:
    the test module searches every partition of each one).
    """
    name = "23.2 balanced layout"
    for W, n, exists in LAYOUT_CASES:
        try:
            answer = fn(W, n)
            layout = None if answer is None else [tuple(int(i) for i in chunks) for chunks in answer]
        except Exception as e:
            return report(name, False, f"W={W}, n={n}: {type(e).__name__}: {e}")
        if layout is None:
            if exists:
                return report(name, False, f"W={W}, n={n}: returned None, but a balanced layout exists")
            continue
        if len(layout) != W or any(len(chunks) != n for chunks in layout):
            sizes = [len(chunks) for chunks in layout]
            return report(name, False, f"W={W}, n={n}: expected {W} ranks of {n} chunks, got sizes {sizes}")
        seen = sorted(i for chunks in layout for i in chunks)
        if seen != list(range(n * W)):
            twice = sorted({i for i in seen if seen.count(i) > 1})
            missing = sorted(set(range(n * W)) - set(seen))
            what = f"chunk {twice[0]} is on two ranks" if twice else f"chunk {missing[0]} is on no rank"
            return report(name, False, f"W={W} n={n}: {what} (not a partition)")
        tiles = _tiles(n * W)
        work = tiles.sum(dim=1).tolist()
        per_rank = [sum(work[i] for i in chunks) for chunks in layout]
        if max(per_rank) != min(per_rank):
            busiest = max(range(W), key=per_rank.__getitem__)
            ratio = max(per_rank) * W / sum(per_rank)
            return report(
                name,
                False,
                f"W={W} n={n}: rank {busiest} has {per_rank[busiest]} blocks, mean {sum(per_rank) / W:g} "
                f"(max/mean {ratio:.2f})" + ("" if exists else "; no layout of equal work exists here: return None"),
            )
        path = _critical_path(layout, tiles)
        if path != per_rank[0]:
            return report(
                name,
                False,
                f"W={W} n={n}: {per_rank[0]} blocks on every rank, but the ring's critical path is "
                f"{path} blocks, not {per_rank[0]}: at step s rank r meets rank r - s's chunks, "
                "and each step waits for its busiest rank",
            )
    found = sum(exists for _, _, exists in LAYOUT_CASES)
    return report(name, True, f"equal blocks in {found} cases, None in the {len(LAYOUT_CASES) - found} without")


def _simulated_ring(plan_fn, q, k, v, W: int, layout: str) -> tuple[torch.Tensor, set]:
    """Causal ring attention in one process with a learner's block plan: every rank's output, and the blocks run.

    Returns the full output (each rank's shard put back in sequence order) and the set of
    ``(query chunk, key chunk, causal)`` blocks computed, in global chunk indices.
    """
    c = q.shape[-2] // (W * (1 if layout == "contiguous" else 2))
    out = torch.zeros_like(q)
    ran = set()
    for rank in range(W):
        q_r = shard_sequence(q, rank, W, layout=layout)
        mine = shard_chunks(rank, W, layout)
        partials: dict[int, list] = {a: [] for a in range(len(mine))}
        for step in range(W):
            source = (rank - step) % W
            theirs = shard_chunks(source, W, layout)
            k_s, v_s = (shard_sequence(t, source, W, layout=layout) for t in (k, v))
            for a, b, causal in plan_fn(rank, source, W, layout):
                qs, ks = slice(a * c, (a + 1) * c), slice(b * c, (b + 1) * c)
                o, lse = partial_attention(q_r[..., qs, :], k_s[..., ks, :], v_s[..., ks, :], is_causal=bool(causal))
                partials[a].append((o, lse))
                ran.add((mine[a], theirs[b], bool(causal)))
        for a, chunk in enumerate(mine):
            if partials[a]:
                o, _ = merge_partials([p[0] for p in partials[a]], [p[1] for p in partials[a]])
                out[..., chunk * c : (chunk + 1) * c, :] = o
    return out, ran


def check_step_plan(fn) -> bool:
    """Exercise 23.3: the fixed ``step_plan(rank, source, W, layout)`` -> ``[(a, b, causal), ...]``.

    ``a`` and ``b`` index the chunks inside the query shard and the key shard. The plan is
    run as a causal ring in one process for both layouts and ``W`` = 2, 3, 4, and the
    output compared with one-device attention in float64 (tolerance 1e-10).
    """
    name = "23.3 step plan"
    g = torch.Generator().manual_seed(22)
    for layout in LAYOUTS:
        for W in (2, 3, 4):
            T = 4 * W  # two tokens per zig-zag chunk
            q, k, v = (torch.randn(1, 2, T, 4, generator=g, dtype=torch.float64) for _ in range(3))
            try:
                out, ran = _simulated_ring(fn, q, k, v, W, layout)
            except Exception as e:
                return report(name, False, f"{layout}, W={W}: {type(e).__name__}: {e}")
            err = (out - attention(q, k, v, is_causal=True)).abs().max().item()
            if err <= 1e-10:
                continue
            n = W * (1 if layout == "contiguous" else 2)
            want = {(i, j, i == j) for i in range(n) for j in range(i + 1)}
            pairs = {(i, j) for i, j, _ in ran}
            if any(j > i for i, j in pairs):
                why = "a key chunk after its query chunk is computed"
            elif {(i, j) for i, j, _ in want} - pairs:
                missed = min({(i, j) for i, j, _ in want} - pairs)
                why = f"query chunk {missed[0]} never meets key chunk {missed[1]}"
            elif ran != want:
                why = "a block has the wrong causal flag"
            else:
                why = f"max abs difference {err:.1e} (tolerance 1e-10)"
            return report(name, False, f"{layout}, W={W}: {why}")
    return report(name, True, "ring = causal attention within 1e-10 (2 layouts, W=2,3,4)")
