"""Checks for the exercises of chapter 6 (grouped-query attention)."""

from __future__ import annotations

from typing import Callable

import torch

from ._common import compare, report

__all__ = [
    "check_decode_intensity",
    "check_gqa_to_mha",
    "check_kv_bytes_per_gpu",
]


# The exercises of the revised chapter: a derivation checked numerically, a conversion
# the chapter did not build, and the tensor-parallel arithmetic.


def check_decode_intensity(fn: Callable[..., float]) -> bool:
    """Exercise 6.1: ``fn(n_heads, n_kv_heads, head_dim, seq_len, bytes_per_element)``: the
    FLOPs per byte of cache read of one decoding step's attention.

    FLOPs: for each of the ``n_heads`` query heads and each of the ``seq_len`` cached
    positions, one dot product with the key and one weighted add of the value, ``2·D``
    FLOPs each (a multiply-add counts 2; the softmax is left out). Bytes: the keys and
    values of ``n_kv_heads`` heads, read once. The answer is ``2·G / bytes_per_element``
    with ``G = n_heads / n_kv_heads``.
    """
    name = "6.1 decode FLOPs per byte"
    # the first layout tells the slips apart (their values all differ there)
    cases = [(16, 1, 32, 7, 4), (8, 8, 64, 1024, 2), (8, 2, 64, 4096, 2), (64, 8, 128, 100, 2), (12, 3, 16, 50, 1)]
    for H, H_kv, D, T, b in cases:
        args = dict(n_heads=H, n_kv_heads=H_kv, head_dim=D, seq_len=T, bytes_per_element=b)
        try:
            got = float(fn(**args))
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        want = (4 * H * T * D) / (2 * H_kv * T * D * b)  # = 2G / b
        if abs(got - want) <= 1e-9 * want:
            continue
        G = H // H_kv
        hints = [
            (2 / b, "MHA's value: in GQA each key/value element read serves G query heads"),
            (4 * G / b, "twice the answer: the bytes are the keys *and* the values"),
            (G / b, "half the answer: the values are multiplied and added too (2·D FLOPs per position)"),
            (2 * G, "bytes_per_element is missing: FLOPs per *byte*, not per element"),
        ]
        hint = next((h for v, h in hints if abs(got - v) <= 1e-9 * v), "")
        return report(name, False, f"{args}: got {got:g}, counted {want:g}" + (f" ({hint})" if hint else ""))
    return report(name, True, f"all {len(cases)} layouts match the counts (2·G / bytes per element)")


def check_gqa_to_mha(fn: Callable[[torch.Tensor, int, int], torch.Tensor]) -> bool:
    """Exercise 6.2: ``fn(weight, n_heads, n_kv_heads)`` turns a GQA key (or value) weight
    into an MHA one whose layer computes exactly what the GQA layer computes.

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
                f"n_kv_heads={H_kv}: each *row* repeated G times; a head is a block of D rows, "
                "repeat whole blocks (view as (n_kv_heads, D, d_model) first)",
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
    return report(name, True, "the MHA layers compute the GQA layers' outputs for n_kv_heads = 2, 3, 1, 6")


def check_kv_bytes_per_gpu(fn: Callable[..., int]) -> bool:
    """Exercise 6.3: ``fn(n_layers, n_kv_heads, head_dim, seq_len, tp_degree, bytes_per_element)``:
    the key/value cache bytes that *one* GPU of a tensor-parallel group holds for one sequence.

    Attention heads are split across the ``tp_degree`` GPUs. With ``n_kv_heads >= tp_degree``
    each GPU holds ``n_kv_heads / tp_degree`` key/value heads; with fewer key/value heads
    than GPUs each GPU still needs the one its query heads read: every head is replicated
    ``tp_degree / n_kv_heads`` times and each GPU holds one.
    """
    name = "6.3 KV-cache bytes per GPU"
    layouts = [(80, 8, 128, 4096, 8, 2), (80, 8, 128, 4096, 16, 2), (80, 1, 128, 4096, 8, 2), (32, 32, 128, 2048, 4, 2),
               (2, 4, 8, 10, 2, 4), (3, 2, 16, 5, 8, 1)]  # fmt: skip
    cases = [
        (
            dict(n_layers=L, n_kv_heads=n_kv, head_dim=D, seq_len=T, tp_degree=tp, bytes_per_element=b),
            2 * L * max(n_kv // tp, 1) * D * T * b,
        )
        for L, n_kv, D, T, tp, b in layouts
    ]
    for kwargs, want in cases:
        try:
            got = fn(**kwargs)
        except Exception as e:  # a learner's bug should print, not stop the notebook
            return report(name, False, f"{type(e).__name__}: {e}")
        if got == want:
            continue
        n_kv, tp = kwargs["n_kv_heads"], kwargs["tp_degree"]
        full = 2 * kwargs["n_layers"] * n_kv * kwargs["head_dim"] * kwargs["seq_len"] * kwargs["bytes_per_element"]
        hint = ""
        if n_kv < tp and got == full / tp:
            hint = " (a GPU cannot hold a fraction of a head: with fewer K/V heads than GPUs each head is replicated)"
        elif got == full:
            hint = " (the whole model's cache: the heads are split across the tp_degree GPUs)"
        elif got == want // 2:
            hint = " (keys *and* values)"
        return report(name, False, f"{kwargs}: got {got!r}, counted {want}{hint}")
    return report(name, True, f"all {len(cases)} layouts match, replication included")
