"""Checks for the exercises of chapter 6 (grouped-query attention)."""

from __future__ import annotations

from typing import Callable

import torch

from ...ops.attention import attention
from ._common import compare, report

__all__ = [
    "check_gqa_to_mha",
    "check_gqa_to_mha_prediction",
    "check_kv_head_of",
    "check_kv_heads_on_gpu",
    "check_tp_prediction",
]


# Exercise 6.1: a probe designed by the reader. The candidates below look alike from
# outside (the same signature, shapes and kind of output); each reads its key/value heads
# in its own order. Two differ from plain attention in ways that do not change the map (a
# causal mask, another score scale), so that a probe comparing outputs with a reference
# of its own fails on them.
_PROBE_CASES = [
    # (n_heads, n_kv_heads, map from query head to key/value head, causal, scale)
    (8, 2, [0, 0, 0, 0, 1, 1, 1, 1], False, None),
    (8, 2, [0, 1, 0, 1, 0, 1, 0, 1], False, None),  # tiled: bug 1
    (6, 3, [0, 0, 1, 1, 2, 2], True, None),
    (6, 3, [2, 2, 0, 0, 1, 1], False, 0.05),
    (8, 4, [0, 0, 1, 1, 2, 2, 3, 0], False, None),  # the last head breaks the pattern
    (12, 4, [3, 1, 2, 0, 3, 1, 2, 0, 3, 1, 2, 0], True, 1.0),
    (4, 1, [0, 0, 0, 0], False, None),
]


def _black_box(mapping: list[int], causal: bool, scale: float | None) -> Callable:
    """An attention over grouped heads whose query head ``h`` reads key/value head ``mapping[h]``.

    Shapes:
        q: ``(B, H, T, D)``; k, v: ``(B, H_kv, T, D)``; output: ``(B, H, T, D)``
    """
    index = torch.tensor(mapping)

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if q.dim() != 4 or k.shape != v.shape or k.dim() != 4 or q.shape[1] != len(mapping):
            raise ValueError(
                f"attend takes q (B, {len(mapping)}, T, D) and k, v (B, H_kv, T, D), "
                f"got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
            )
        # (B, H, T, D): each query head's key/value head, gathered
        return attention(q, k[:, index], v[:, index], is_causal=causal, scale=scale)

    return attend


def check_kv_head_of(fn: Callable[[Callable, int, int], list]) -> bool:
    """Exercise 6.1: ``fn(attend, n_heads, n_kv_heads)`` finds, by probing ``attend``, which
    key/value head each of its ``n_heads`` query heads reads.

    ``attend(q, k, v)`` takes ``q`` of shape ``(B, n_heads, T, D)`` and ``k``, ``v`` of shape
    ``(B, n_kv_heads, T, D)`` and returns ``(B, n_heads, T, D)``. ``fn`` returns a list of
    ``n_heads`` ints. The check runs it on hidden candidates, some of them with a causal mask
    or another score scale (which do not change the answer).
    """
    name = "6.1 which K/V head"
    for i, (H, H_kv, mapping, causal, scale) in enumerate(_PROBE_CASES, start=1):
        where = f"candidate {i} of {len(_PROBE_CASES)} (H={H}, H_kv={H_kv})"
        try:
            with torch.random.fork_rng(devices=[]):  # the probe may draw: not from the notebook's RNG
                got = fn(_black_box(mapping, causal, scale), H, H_kv)
            got = [int(h) for h in (got.tolist() if isinstance(got, torch.Tensor) else got)]
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{where}: {type(e).__name__}: {e}")
        if len(got) != H:
            return report(name, False, f"{where}: got {len(got)} heads, want one per query head ({H})")
        if got == mapping:
            continue
        G = H // H_kv
        if got in ([h // G for h in range(H)], [h % H_kv for h in range(H)]):
            hint = " (a usual pattern, assumed: the map must be measured from attend)"
        else:
            wrong = [h for h in range(H) if got[h] != mapping[h]]
            hint = f" at query head{'s' if len(wrong) > 1 else ''} {', '.join(map(str, wrong))}"
            if causal or scale is not None:
                hint += " (this candidate masks or scales its scores otherwise; its map is what counts)"
        return report(name, False, f"{where}: your map is wrong{hint}")
    return report(name, True, f"all {len(_PROBE_CASES)} candidates mapped, masked and rescaled ones too")


def check_gqa_to_mha(fn: Callable[[torch.Tensor, int, int], torch.Tensor]) -> bool:
    """Exercise 6.2 (find the bug): ``fn(weight, n_heads, n_kv_heads)`` turns a GQA key (or
    value) weight into an MHA one whose layer computes exactly what the GQA layer computes.

    Shapes:
        weight: ``(n_kv_heads·D, d_model)``; fn's output: ``(n_heads·D, d_model)``
    """
    from ...layers.multihead import GroupedQueryAttention, MultiHeadAttention

    name = "6.2 GQA -> MHA"
    g = torch.Generator().manual_seed(62)
    d, H = 24, 6
    x = torch.randn(2, 5, d, generator=g, dtype=torch.float64)  # (B, T, d_model)
    for H_kv in (2, 3, 1, 6):
        with torch.random.fork_rng(devices=[]):  # building the layer must not move the notebook's RNG
            torch.manual_seed(620 + H_kv)
            gqa = GroupedQueryAttention(d, H, H_kv, causal=True).double()
        state = gqa.state_dict()
        D = d // H
        try:
            k_new = fn(state["k_proj.weight"].clone(), H, H_kv)
            v_new = fn(state["v_proj.weight"].clone(), H, H_kv)
        except Exception as e:
            return report(name, False, f"{type(e).__name__}: {e}")
        if not (isinstance(k_new, torch.Tensor) and k_new.shape == (H * D, d)):
            shape = tuple(k_new.shape) if isinstance(k_new, torch.Tensor) else type(k_new).__name__
            return report(name, False, f"n_kv_heads={H_kv}: got {shape}, want {(H * D, d)}")
        w = state["k_proj.weight"]
        if H_kv < H and torch.equal(k_new, w.repeat_interleave(H // H_kv, dim=0)):
            return report(
                name,
                False,
                f"n_kv_heads={H_kv}: each *row* repeated G times; what is a head?",
            )
        # (with one key/value head, tiling and repeating blocks are the same thing)
        if 1 < H_kv < H and torch.equal(k_new, w.repeat(H // H_kv, 1)):
            return report(
                name,
                False,
                f"n_kv_heads={H_kv}: heads tiled [a, b, a, b, ...]; query head h needs key/value head h // G",
            )
        with torch.random.fork_rng(devices=[]):  # its weights are overwritten: their draw must not count
            mha = MultiHeadAttention(d, H, causal=True).double()
        mha.load_state_dict({**state, "k_proj.weight": k_new, "v_proj.weight": v_new})
        with torch.no_grad():
            got, want = mha(x), gqa(x)
        if not torch.allclose(got, want, rtol=0.0, atol=1e-12):  # report only a failure
            return compare(f"{name} (n_kv_heads={H_kv})", got, want, atol=1e-12)
    return report(name, True, "the MHA layers equal the GQA ones for n_kv_heads = 2, 3, 1, 6")


# Exercise 6.2, the prediction: the shapes ``(n_heads, n_kv_heads, head_dim)`` the page lists,
# for which the learner says whether the colleague's row-wise repeat_interleave is right.
_BUG_SHAPES = {"a": (8, 2, 4), "b": (8, 8, 4), "c": (8, 2, 1), "d": (6, 1, 4), "e": (4, 4, 1), "f": (6, 3, 2)}


def _rows_repeated_is_right(n_heads: int, n_kv_heads: int, head_dim: int) -> bool:
    """Whether repeating each *row* G times gives the same weight as repeating each head's block."""
    G = n_heads // n_kv_heads
    weight = torch.arange(n_kv_heads * head_dim * 3, dtype=torch.float64).view(-1, 3)  # (H_kv·D, d)
    blocks = weight.view(n_kv_heads, head_dim, 3).repeat_interleave(G, dim=0).reshape(-1, 3)  # (H·D, d)
    return torch.equal(weight.repeat_interleave(G, dim=0), blocks)


def check_gqa_to_mha_prediction(predicted) -> bool:
    """Exercise 6.2, the prediction: the letters of the listed shapes for which the colleague's
    ``weight.repeat_interleave(n_heads // n_kv_heads, dim=0)`` is right.

    ``predicted`` is a set of letters (str) from ``_BUG_SHAPES``; none is not accepted as an
    answer, since some shapes are right.
    """
    name = "6.2 prediction"
    if not isinstance(predicted, (set, frozenset, list, tuple)) or not all(isinstance(x, str) for x in predicted):
        return report(
            name, False, f'give the set of letters of the shapes where it is right, e.g. {{"a"}}, got {predicted!r:.60}'
        )
    got = {x.strip().lower() for x in predicted}
    if not got:
        return report(name, False, "give the letters of the shapes where it is right")
    if got - set(_BUG_SHAPES):
        return report(
            name, False, f"unknown letters {sorted(got - set(_BUG_SHAPES))}: the shapes are {sorted(_BUG_SHAPES)}"
        )
    want = {k for k, shape in _BUG_SHAPES.items() if _rows_repeated_is_right(*shape)}
    for k in sorted(want ^ got):
        H, H_kv, D = _BUG_SHAPES[k]
        shape = f"{k} ({H}, {H_kv}, {D})"
        if k in got:
            why = "each head is a block of D rows, and each row is repeated in place"
            return report(name, False, f"{shape}: not right: {why}")
        why = "a row is a whole head" if D == 1 else "nothing is repeated"
        return report(name, False, f"{shape} is right too: {why}")
    return report(name, True, f"right for {', '.join(sorted(want))}: a row is a whole head, or G = 1")


# Exercise 6.3: tensor parallelism, simulated. GPU ``r`` of ``t`` holds query heads
# ``r·H/t .. (r+1)·H/t - 1`` (Megatron-LM's contiguous split), the rows of the key/value
# projections of the heads the learner names, and its columns of the output projection;
# the sum of the GPUs' partial outputs (the all-reduce) must be the whole layer's output.
_TP_CASES = [(8, 4, 2), (8, 2, 4), (12, 3, 6), (8, 1, 4), (16, 8, 4), (8, 8, 8), (16, 2, 8)]


def check_kv_heads_on_gpu(fn: Callable[[int, int, int, int], list]) -> bool:
    """Exercise 6.3: ``fn(n_heads, n_kv_heads, tp_degree, rank)``: the key/value heads that
    GPU ``rank`` of a tensor-parallel group of ``tp_degree`` GPUs must hold, as a list of
    head indices in any order, the fewest that let it compute its query heads.

    The check splits a GQA layer across the GPUs as a tensor-parallel group would and
    compares the summed partial outputs with the layer's output.
    """
    from ...layers.multihead import GroupedQueryAttention

    name = "6.3 K/V heads per GPU"
    D = 4
    for H, H_kv, t in _TP_CASES:
        d = H * D
        with torch.random.fork_rng(devices=[]):  # the layer and input must not move the notebook's RNG
            torch.manual_seed(630 + H + 7 * H_kv + 31 * t)
            layer = GroupedQueryAttention(d, H, H_kv, causal=True).double()
            x = torch.randn(2, 5, d, dtype=torch.float64)  # (B, T, d_model)
        Wq, Wk, Wv, Wo = (getattr(layer, p).weight for p in ("q_proj", "k_proj", "v_proj", "out_proj"))
        H_local = H // t  # query heads per GPU
        total = torch.zeros(2, 5, d, dtype=torch.float64)
        case = f"H={H}, H_kv={H_kv}, t={t}"
        for rank in range(t):
            try:
                held = fn(H, H_kv, t, rank)
                held = [int(j) for j in (held.tolist() if isinstance(held, torch.Tensor) else held)]
                held.sort()  # a set of heads: any order names the same rows
            except Exception as e:  # a learner's bug should print, not stop the notebook
                return report(name, False, f"{case}, rank {rank}: {type(e).__name__}: {e}")
            where = f"{case}: GPU {rank} holds {held}"
            if not held:
                return report(
                    name, False, f"{where}: no key/value head, but its query heads read one "
                    "(a GPU cannot hold a fraction of a head: with fewer K/V heads than GPUs they are replicated)"
                )  # fmt: skip
            if any(not 0 <= j < H_kv for j in held) or len(set(held)) != len(held):
                return report(name, False, f"{where}: heads out of range 0..{H_kv - 1} or repeated")
            if len(held) > max(H_kv // t, 1) or H_local % len(held):
                return report(name, False, f"{where}: more key/value heads than its query heads read")
            rows = torch.arange(rank * H_local * D, (rank + 1) * H_local * D)  # this GPU's query heads
            kv_rows = torch.cat([torch.arange(j * D, (j + 1) * D) for j in held])
            with torch.no_grad():
                q = (x @ Wq[rows].T).view(2, 5, H_local, D).transpose(1, 2)  # (B, H/t, T, D)
                k = (x @ Wk[kv_rows].T).view(2, 5, len(held), D).transpose(1, 2)  # (B, held, T, D)
                v = (x @ Wv[kv_rows].T).view(2, 5, len(held), D).transpose(1, 2)
                z = attention(q, k, v, is_causal=True).transpose(1, 2).reshape(2, 5, -1)  # (B, T, H/t·D)
                total += z @ Wo[:, rows].T  # this GPU's share of the output projection
        with torch.no_grad():
            want = layer(x)
        if not torch.allclose(total, want, rtol=0.0, atol=1e-10):
            return report(
                name, False, f"{case}: the GPUs' summed outputs differ from the layer's "
                "(some GPU's query heads read a key/value head that is not theirs)"
            )  # fmt: skip
    return report(name, True, f"all {len(_TP_CASES)} splits recompute the layer, replicated heads too")


# Exercise 6.3, the prediction: LLaMA-2-70B's shape (64 query heads, 8 key/value heads) on a
# tensor-parallel group of 16 GPUs, and the GPU the page asks about.
_TP_PREDICTION = (64, 8, 16, 5)  # (n_heads, n_kv_heads, tp_degree, rank)


def check_tp_prediction(predicted: dict) -> bool:
    """Exercise 6.3, the prediction: which key/value head GPU 5 of 16 holds, and which GPUs hold it.

    ``predicted`` maps ``"kv_head"`` to the key/value head GPU 5 holds (an int) and ``"gpus"``
    to the set of GPUs that hold that same head, GPU 5 included, for 64 query heads and 8
    key/value heads split over 16 GPUs (GPU ``r`` computes query heads ``4r .. 4r+3``).
    """
    name = "6.3 prediction"
    H, H_kv, t, rank = _TP_PREDICTION
    if not isinstance(predicted, dict) or set(predicted) != {"kv_head", "gpus"}:
        return report(name, False, f'give a dict with the keys "kv_head" and "gpus", got {predicted!r:.60}')
    head, gpus = predicted["kv_head"], predicted["gpus"]
    if not isinstance(head, int) or not isinstance(gpus, (set, frozenset, list, tuple)):
        return report(name, False, f"kv_head is one int and gpus a set of ints, got {head!r} and {gpus!r}")
    G, per_gpu = H // H_kv, H // t

    def held(r: int) -> set[int]:  # the groups of GPU r's query heads
        return {h // G for h in range(r * per_gpu, (r + 1) * per_gpu)}

    want_head = min(held(rank))
    want_gpus = {r for r in range(t) if held(r) == held(rank)}
    if head != want_head:
        return report(
            name, False, f"GPU {rank} computes query heads {rank * per_gpu}..{(rank + 1) * per_gpu - 1}; "
            f"which group of G={G} are they in? (not key/value head {head})"
        )  # fmt: skip
    if set(gpus) != want_gpus:
        return report(name, False, f"key/value head {head} is right; the GPUs holding it are not {sorted(gpus)}")
    return report(name, True, f"GPU {rank} holds key/value head {head}, as do GPUs {sorted(want_gpus - {rank})}")
