"""attn_core.parallel.formulas: the formulas agree with the bytes and scores counted in spawned ranks."""

from __future__ import annotations

import pytest
from parallel_jobs import SHAPE, case_name, equality_cases, results

from attn_core.parallel.formulas import allgather_bytes, ring_bytes, ring_scores, ulysses_bytes

E = 8  # float64


@pytest.mark.parametrize("W", [2, 4])
def test_measured_bytes_equal_the_formulas(W):
    B, H, T, D = SHAPE["B"], SHAPE["H"], SHAPE["T"], SHAPE["D"]
    for case in equality_cases(W):
        H_kv = case["H_kv"]
        if case["scheme"] == "ring":
            forward = ring_bytes(B=B, H_kv=H_kv, T=T, D=D, W=W, element_size=E)
            backward = ring_bytes(B=B, H_kv=H_kv, T=T, D=D, W=W, element_size=E, backward=True)
        elif case["scheme"] == "ulysses":
            forward = backward = ulysses_bytes(B=B, H=H, H_kv=H_kv, T=T, D=D, W=W, element_size=E)
        else:
            forward = backward = allgather_bytes(B=B, H_kv=H_kv, T=T, D=D, W=W, element_size=E)
        for rank, report in enumerate(results(W)):
            cost = report[case_name(case)][1]
            assert cost["forward"][:2] == (forward, forward), (case_name(case), rank, cost)
            assert cost["backward"] == (backward, backward), (case_name(case), rank, cost)


@pytest.mark.parametrize("W", [2, 4])
def test_measured_scores_equal_the_formula_and_zigzag_balances_them(W):
    T = SHAPE["T"]  # the ring counts a block's T_q · T_k once for all batch rows and heads
    for layout in ("contiguous", "zigzag"):
        for is_causal in (False, True):
            case = {"scheme": "ring", "is_causal": is_causal, "layout": layout, "H_kv": 4}
            measured = [report[case_name(case)][1]["forward"][2] for report in results(W)]
            assert measured == ring_scores(T, W, layout=layout, is_causal=is_causal), (layout, is_causal)
    assert len(set(ring_scores(T, W, layout="zigzag", is_causal=True))) == 1
    contiguous = ring_scores(T, W, layout="contiguous", is_causal=True)
    assert contiguous[-1] == W * contiguous[0]


def test_closed_forms():
    assert ring_scores(16, 4, is_causal=False) == [64] * 4
    assert ring_scores(16, 4, layout="contiguous", is_causal=True) == [16, 32, 48, 64]
    assert ring_scores(16, 4, layout="zigzag", is_causal=True) == [36] * 4  # (2·4 + 1) · 2²
    # The causal total is the same triangle-plus-diagonal either way, just distributed differently.
    assert sum(ring_scores(16, 4, layout="zigzag", is_causal=True)) < sum(ring_scores(16, 4, is_causal=False))
    assert ring_bytes(B=1, H_kv=2, T=8, D=4, W=2, element_size=4) == 1 * 2 * 4 * 8 * 4
    assert ring_bytes(B=1, H_kv=2, T=8, D=4, W=2, element_size=4, backward=True) == 3 * 2 * 4 * 8 * 4
    assert allgather_bytes(B=1, H_kv=2, T=8, D=4, W=4, element_size=2) == 3 * 2 * 2 * 8 * 2
    # Ulysses, W = 2, MHA: half of q, k, v and the output cross: (H·D·4) · T_l · B / 2 elements.
    assert ulysses_bytes(B=1, H=2, H_kv=2, T=8, D=4, W=2, element_size=1) == 4 * 8 * 4 // 2
    # MQA on 4 ranks: the one key/value head is repeated 4 times before the split.
    assert ulysses_bytes(B=1, H=4, H_kv=1, T=8, D=2, W=4, element_size=1) == 3 * 2 * (8 + 8 + 8 + 8) // 4


def test_bad_sizes_are_named():
    with pytest.raises(ValueError, match="H=6 is not divisible by W=4"):
        ulysses_bytes(B=1, H=6, H_kv=6, T=8, D=2, W=4, element_size=4)
    with pytest.raises(ValueError, match="T=10 is not divisible by W=4"):
        ring_bytes(B=1, H_kv=1, T=10, D=2, W=4, element_size=4)
    with pytest.raises(ValueError, match="T=12 is not divisible by the 8 chunks"):
        ring_scores(12, 4, layout="zigzag", is_causal=True)
    with pytest.raises(TypeError, match="is_causal must be a bool"):
        ring_scores(8, 2, is_causal=1)
