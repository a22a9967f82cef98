"""The benchmark scripts run (quick mode) and write the JSON the book and the lead rely on."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks.__main__ import main
from benchmarks.common import format_table, time_interleaved
from benchmarks.decoding import can_compile


@pytest.fixture(scope="module")
def quick_result(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "quick.json"
    assert main(["--quick", "--device", "cpu", "--out", str(out)]) == 0
    return json.loads(out.read_text())


def test_json_has_machine_and_versions(quick_result):
    r = quick_result
    for key in (
        "schema",
        "created",
        "quick",
        "machine",
        "torch",
        "devices",
        "matmul_gflops",
        "rows",
        "targets",
        "seconds",
    ):
        assert key in r, key
    assert r["quick"] is True and r["devices"] == ["cpu"]
    for key in ("platform", "processor", "python", "torch", "cpu_count", "torch_threads", "cuda"):
        assert key in r["machine"], key
    assert set(r["matmul_gflops"]) >= {"cpu"} and all(math.isfinite(x) for x in r["matmul_gflops"].values())


def test_every_suite_reports_medians_and_positive_ratios(quick_result):
    rows = quick_result["rows"]
    assert {r["suite"] for r in rows} == {"attention", "memory", "decoding", "distributed"}
    for row in rows:
        assert row["baseline"], row
        assert math.isfinite(row["ratio_to_baseline"]) and row["ratio_to_baseline"] > 0, row
        if "median_s" in row:
            assert row["median_s"] > 0 and row["rounds"] >= 2, row
    names = {r["name"] for r in rows if r["suite"] == "attention" and r["part"] == "main"}
    assert names == {
        "attn_core explicit",
        "einsum",
        "fused QKV, explicit",
        "fused QKV + SDPA",
        "attn_core fast path",
        "nn.MultiheadAttention (need_weights=True)",
        "nn.MultiheadAttention (need_weights=False)",
        "attn_core tiled",
    }
    for row in rows:
        if row["suite"] == "attention":
            assert row["max_abs_diff"] < 1e-4 and 0 < row["fraction_of_matmul"], row
            assert row["paired_ratio_to_baseline"] > 0
        if row["name"] == row["baseline"]:
            assert row["ratio_to_baseline"] == pytest.approx(1.0)


def test_decoding_equality_and_cache_sizes(quick_result):
    rows = [r for r in quick_result["rows"] if r["suite"] == "decoding"]
    longest = [r for r in rows if "identical_tokens" in r]
    assert longest and all(r["identical_tokens"] for r in longest)
    if can_compile("cpu"):  # the compiled static step is timed too, and decodes the same tokens
        assert {r["name"] for r in rows if "tokens_per_s" in r} >= {"with cache", "with cache, compiled"}
        assert all(r["compiled_identical_tokens"] for r in longest)
    cache = {r["name"]: r["cache_bytes_per_token"] for r in rows if r.get("part") == "cache"}
    assert cache["MQA"] < cache["GQA"] < cache["MHA"] and 0 < cache["MLA"] < cache["MHA"]


def test_distributed_rows_count_what_the_formulas_say(quick_result):
    rows = {r["name"]: r for r in quick_result["rows"] if r["suite"] == "distributed"}
    assert set(rows) == {"one process, all T", "ring", "ring-zigzag", "ulysses", "allgather"}
    for name, row in rows.items():
        assert row["ci_low"] <= row["ratio_to_baseline"] <= row["ci_high"], row
        assert row["verdict"] in ("equivalent", "slower", "faster", "indistinguishable")
        if name != row["baseline"]:
            assert row["bytes_sent"] == row["bytes_formula"] > 0, row
    # The two rings send the same bytes; the causal work is balanced only by the zig-zag layout.
    assert rows["ring"]["bytes_sent"] == rows["ring-zigzag"]["bytes_sent"]
    zigzag, contiguous = rows["ring-zigzag"], rows["ring"]
    assert zigzag["scores_max"] == zigzag["scores_min"] == max(zigzag["scores_formula"])
    assert contiguous["scores_max"] == 2 * contiguous["scores_min"] == max(contiguous["scores_formula"])


def test_targets_are_listed(quick_result):
    targets = quick_result["targets"]
    assert len(targets) >= 6
    for t in targets:
        assert set(t) >= {"name", "value", "threshold", "comparison", "passed"}
    # Correctness targets hold even at quick sizes (speed targets need the full sizes).
    for t in targets:
        if "equal" in t["name"] or "identical" in t["name"] or "memory" in t["name"]:
            assert t["passed"], t


def test_time_interleaved_and_table():
    calls = []
    t = time_interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, rounds=3, warmup=1)
    assert calls[:2] == ["a", "b"] and calls[2:] == ["a", "b", "b", "a", "a", "b"]  # rotated order
    assert len(t["a"].seconds) == 3
    with pytest.raises(ValueError, match="rounds=0"):
        time_interleaved({"a": lambda: None}, rounds=0)
    table = format_table([{"x": "row", "y": 1.23456}], [("x", "name", ""), ("y", "value", ".2f")])
    assert "1.23" in table and table.splitlines()[0].startswith("name")
