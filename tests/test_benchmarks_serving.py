"""benchmarks/serving.py runs (quick mode): both kinds of batching give generate's tokens, and the ratio is reported."""

from __future__ import annotations

import json
import math

from benchmarks.serving import main


def test_quick_run_writes_the_ratio_and_passes_its_checks(tmp_path):
    out = tmp_path / "serving.json"
    assert main(["--quick", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    names = [r["name"] for r in result["rows"]]
    assert names == ["static batching", "continuous batching"]
    engine = result["rows"][1]
    assert math.isfinite(engine["time_ratio"]) and engine["time_ratio"] > 0 and engine["steps"] > 0
    assert all(t["passed"] for t in result["targets"])
