"""The host's work per decoding step (benchmarks/host_work.py): no more kernel launches than Hugging Face's.

At batch 1 on a GPU a step's time is the host's: counting launches and Python calls on the
CPU measures it without timing noise (the counts are exact and the same on every machine
with the pinned torch and transformers).
"""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from benchmarks.host_work import markdown, run  # noqa: E402


def test_decoding_step_launches_no_more_kernels_than_hugging_face():
    rows = run()
    print(markdown(rows))
    for r in rows:
        assert r["ours_launches"] <= r["hf_launches"], (r["dtype"], r["ours_by_op"], r["hf_by_op"])
        # Python calls: 1.19x Hugging Face's when this test was written (1.47x before); the bound
        # holds that gain without freezing every helper call.
        assert r["ours_python_calls"] <= 1.25 * r["hf_python_calls"], r["dtype"]
        # The operators that do the arithmetic are the same: one matmul per projection.
        assert r["ours_by_op"]["mm"] == r["hf_by_op"]["mm"]
