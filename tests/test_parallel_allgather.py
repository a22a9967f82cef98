"""attn_core.parallel.allgather: all-gather attention in spawned gloo processes equals one-device attention."""

from __future__ import annotations

import pytest
from parallel_jobs import case_name, equality_cases, results

TOLERANCE = 1e-10


@pytest.mark.parametrize("W", [2, 4])
def test_every_case_equals_one_device_attention(W):
    cases = [c for c in equality_cases(W) if c["scheme"] == "allgather"]
    assert {(c["is_causal"], c["layout"], c["H_kv"]) for c in cases} == {
        (causal, layout, H_kv) for causal in (False, True) for layout in ("contiguous", "zigzag") for H_kv in (4, 2)
    }
    for rank, report in enumerate(results(W)):
        for case in cases:
            errors, _ = report[case_name(case)]
            worst = dict(zip(("output", "dq", "dk", "dv"), errors))
            assert max(errors) < TOLERANCE, f"W={W} rank {rank} {case_name(case)}: {worst}"


def test_disagreeing_ranks_fail_on_every_rank():
    for W in (2, 4):
        for report in results(W):
            kind, message = report["bad"]["allgather_lengths"]
            assert kind == "ValueError" and "allgather_attention needs the same q (shape, dtype, device)" in message
