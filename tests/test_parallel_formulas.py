"""attn_core.parallel.formulas: the formulas agree with the bytes and scores counted in spawned ranks."""

from __future__ import annotations

import pytest
from parallel_jobs import SHAPE, results

from attn_core.parallel.formulas import SCHEMES, allgather_bytes, ring_bytes, ring_scores, scheme_bytes, ulysses_bytes


@pytest.mark.parametrize("W", [2, 4])
def test_measured_bytes_equal_the_formulas(W):
    checked = 0
    for rank, report in enumerate(results(W)):
        for key in (k for k in report if isinstance(k, tuple)):
            for name in SCHEMES:
                row = report[key][name]
                sizes = dict(B=SHAPE["batch"], H=SHAPE["heads"], H_kv=key[1], T=SHAPE["T"], D=SHAPE["head_dim"], W=W)
                forward = scheme_bytes(name, **sizes, element_size=8)  # float64
                backward = scheme_bytes(name, **sizes, element_size=8, backward=True)
                assert (row["bytes_sent"], row["bytes_received"]) == (forward, forward), (rank, key, name, row)
                assert (row["backward_bytes_sent"], row["backward_bytes_received"]) == (backward, backward)
                checked += 1
    assert checked == W * 10 * len(SCHEMES)


@pytest.mark.parametrize("W", [2, 4])
def test_measured_scores_equal_the_formula_and_zigzag_balances_them(W):
    # The ring counts a block's T_q · T_k once for all batch rows and heads.
    for is_causal in (False, True):
        for name, layout in (("ring", "contiguous"), ("ring-zigzag", "zigzag")):
            measured = [report[(is_causal, 4, None)][name]["scores"] for report in results(W)]
            assert measured == ring_scores(SHAPE["T"], W, layout=layout, is_causal=is_causal), (name, is_causal)
    assert len(set(ring_scores(16, W, layout="zigzag", is_causal=True))) == 1
    contiguous = ring_scores(16, W, layout="contiguous", is_causal=True)
    assert contiguous[-1] == W * contiguous[0]


def test_closed_forms():
    assert ring_scores(16, 4, is_causal=False) == [64] * 4
    assert ring_scores(16, 4, layout="contiguous", is_causal=True) == [16, 32, 48, 64]
    assert ring_scores(16, 4, layout="zigzag", is_causal=True) == [36] * 4  # (2·4 + 1) · 2²
    assert ring_bytes(B=1, H_kv=2, T=8, D=4, W=2, element_size=4) == 1 * 2 * 4 * 8 * 4
    assert ring_bytes(B=1, H_kv=2, T=8, D=4, W=2, element_size=4, backward=True) == 3 * 2 * 4 * 8 * 4
    # Half-precision inputs: the blocks go round in bf16, their gradients in float32.
    half = ring_bytes(B=1, H_kv=2, T=8, D=4, W=2, element_size=2, backward=True)
    assert half == 1 * 2 * 4 * 8 * 2 + 2 * 2 * 4 * 8 * 4
    assert allgather_bytes(B=1, H_kv=2, T=8, D=4, W=4, element_size=2) == 3 * 2 * 2 * 8 * 2
    # Ulysses, W = 2, MHA: half of q, k, v and the output cross: (H·D·4) · T_l · B / 2 elements.
    assert ulysses_bytes(B=1, H=2, H_kv=2, T=8, D=4, W=2, element_size=1) == 4 * 8 * 4 // 2
    # MQA on 4 ranks: the one key/value head is repeated 4 times before the split.
    assert ulysses_bytes(B=1, H=4, H_kv=1, T=8, D=2, W=4, element_size=1) == 3 * 2 * (8 + 8 + 8 + 8) // 4
    kv_sizes = dict(B=1, H_kv=2, T=8, D=4, W=2, element_size=4)
    sizes = dict(kv_sizes, H=4)
    assert scheme_bytes("ring", **sizes) == scheme_bytes("ring-zigzag", **sizes) == ring_bytes(**kv_sizes)
    assert scheme_bytes("ring-zigzag", **sizes, backward=True) == ring_bytes(**kv_sizes, backward=True)
    assert scheme_bytes("ulysses", **sizes) == scheme_bytes("ulysses", **sizes, backward=True) == ulysses_bytes(**sizes)
    assert scheme_bytes("allgather", **sizes, backward=True) == allgather_bytes(**kv_sizes)


def test_bad_sizes_are_named():
    with pytest.raises(ValueError, match="H=6 is not divisible by W=4"):
        ulysses_bytes(B=1, H=6, H_kv=6, T=8, D=2, W=4, element_size=4)
    with pytest.raises(ValueError, match="T=10 is not divisible by W=4"):
        ring_bytes(B=1, H_kv=1, T=10, D=2, W=4, element_size=4)
    with pytest.raises(ValueError, match="T=12 is not divisible by the 8 chunks"):
        ring_scores(12, 4, layout="zigzag", is_causal=True)
    with pytest.raises(TypeError, match="is_causal must be a bool"):
        ring_scores(8, 2, is_causal=1)
    with pytest.raises(ValueError, match="scheme must be one of"):
        scheme_bytes("ring-zig-zag", B=1, H=2, H_kv=2, T=8, D=2, W=2, element_size=4)
