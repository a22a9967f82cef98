"""Every chapter that compares trained variants does it by the book's one verdict rule.

The rule lives in :func:`attn_core.teach.evidence.compare_variants` (CONTRIBUTING.md, "The
verdict rule" and "The baseline rule"). This test reads the committed notebooks:

* a chapter that trains over several seeds calls ``compare_variants`` (or is listed in
  ``NO_VERDICT`` with the reason its seeds carry no comparison of variants);
* every report it prints has its floor line (what no attention or no learning achieves),
  and every verdict it prints is one the rule can give;
* no chapter keeps a rule of its own (a verdict from a seed range or a count of standard
  errors computed in the notebook).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from attn_core.teach.evidence import VERDICTS

BOOK = Path(__file__).resolve().parents[1] / "book"
NOTEBOOKS = sorted(BOOK.glob("*.ipynb"))

# Chapters that train over several seeds without comparing variants, with the reason.
NO_VERDICT: dict[str, str] = {}

TRAINS_OVER_SEEDS = re.compile(r"(for seed in|SEEDS\s*=|seeds\s*=\s*range)")
OWN_RULE = re.compile(r"(seed range|largest seed spread|/ spread\b|gap / se\b|gap / threshold)", re.I)


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def _text_outputs(cell: dict) -> str:
    out = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            out.append("".join(o["text"]))
        elif "text/plain" in o.get("data", {}):
            out.append("".join(o["data"]["text/plain"]))
    return "".join(out)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_trained_comparisons_use_the_verdict_rule(path):
    code = [_source(c) for c in _cells(path) if c["cell_type"] == "code"]
    trains = any("train(" in s for s in code) and any(TRAINS_OVER_SEEDS.search(s) for s in code)
    uses_rule = any("compare_variants(" in s for s in code)
    if trains and not uses_rule:
        assert path.stem in NO_VERDICT, (
            f"{path.name} trains over several seeds but never calls compare_variants: compare by the "
            "book's verdict rule, or list it in NO_VERDICT with the reason"
        )
    own = [m.group(0) for s in code for m in [OWN_RULE.search(s)] if m]
    assert not own, f"{path.name} keeps a verdict rule of its own ({own}): use compare_variants"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_report_shows_its_floor_and_a_known_verdict(path):
    for i, cell in enumerate(_cells(path)):
        if cell["cell_type"] != "code" or "compare_variants(" not in _source(cell):
            continue
        out = _text_outputs(cell)
        reports = re.findall(r"^\S.*\(\w+ is better\), .*$", out, flags=re.M)
        assert reports, f"{path.name} cell {i} calls compare_variants but prints no report"
        assert out.count("\n  floor: ") >= len(reports), f"{path.name} cell {i}: a report without its floor line"
        verdicts = re.findall(r"^  .+ - .+?  ([a-z][a-z :]+?): Δ=", out, flags=re.M)
        verdicts += re.findall(r"^  .+ - .+?  ([a-z][a-z :]+)$", out, flags=re.M)
        for v in verdicts:
            assert v in VERDICTS, f"{path.name} cell {i}: unknown verdict {v!r}"
