"""attn_core.parallel.measure: every scheme in spawned processes, counted and checked against one device."""

from __future__ import annotations

import pytest
from parallel_jobs import results

from attn_core.parallel.formulas import SCHEMES as FORMULA_SCHEMES
from attn_core.parallel.formulas import scheme_bytes
from attn_core.parallel.measure import SCHEMES, measure_schemes


def test_measure_schemes_runs_each_scheme_and_reports_every_rank():
    # float32, forward only, GQA: one small spawned run of the public function.
    measured = measure_schemes(2, heads=4, kv_heads=2, T=8, head_dim=4, backward=False, dtype="float32")
    assert set(measured) == set(SCHEMES) == set(FORMULA_SCHEMES)
    for name, ranks in measured.items():
        assert len(ranks) == 2
        for row in ranks:
            assert row["output_error"] < 1e-5, (name, row)
            expected = scheme_bytes(name, B=1, H=4, H_kv=2, T=8, D=4, W=2, element_size=4)
            assert row["bytes_sent"] == row["bytes_received"] == expected, (name, row)
            assert "grad_error" not in row
    assert [r["scores"] for r in measured["ring"]] == [16, 32]  # causal, contiguous: unbalanced
    assert [r["scores"] for r in measured["ring-zigzag"]] == [20, 20]  # zig-zag: (2W + 1) · 2²


def test_scheme_costs_in_the_shared_job_cover_every_scheme_and_layout():
    # tests/parallel_jobs.py calls scheme_costs in each rank, with gradients, for every case.
    keys = {key for key in results(2)[0] if isinstance(key, tuple)}
    assert {layout for _, _, layout in keys} == {None, "zigzag"}
    for key in keys:
        assert set(results(2)[0][key]) == set(SCHEMES)
        assert all("grad_error" in row for row in results(2)[0][key].values())


def test_bad_arguments_are_refused_before_any_process_starts():
    with pytest.raises(ValueError, match="schemes must be one of"):
        measure_schemes(2, schemes=["ring", "rnig"])
    with pytest.raises(ValueError, match="dtype must be one of"):
        measure_schemes(2, dtype="float16")
    with pytest.raises(ValueError, match="layout must be one of"):
        measure_schemes(2, layout="zig-zag")
    with pytest.raises(ValueError, match="heads must be >= 1"):
        measure_schemes(2, heads=0)
