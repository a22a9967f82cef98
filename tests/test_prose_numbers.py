"""The numbers a chapter's text quotes are numbers its cells print (or explained exceptions).

nbval compares every output with the committed one, but it masks the value slot of a
measured claim (``… : 0.969 (held above 0.95)``): those digits cannot be the same on every
machine. So when a maintainer re-executes a chapter, the printed values change, nbval
passes, and a sentence that quoted the old value ("about 10.6 here") is left behind,
wrong. This test reads the committed notebooks: every decimal number in a Markdown cell
(outside math, code spans and links), and every whole number of a percentage or a factor,
must be one that a code cell of the same notebook prints or contains, after rounding it to
the digits the text gives (0.969 → "0.97", a share 0.997 → "99.7%"). A number that comes
from elsewhere (a paper, a published model size) or is worked out from printed ones is
listed in ``NOT_PRINTED`` with its reason.

It is a net, not a proof: a stale value that happens to equal another printed number
passes.

The bounds are checked more strictly: a guarantee the text states ("held above 0.9") must be
a bound that a cell of the chapter prints beside its value (``(held above 0.9)``), so that
moving a bound in the code without the text fails here.
"""

from __future__ import annotations

import json
import re
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest

BOOK = Path(__file__).resolve().parents[1] / "book"
NOTEBOOKS = sorted(BOOK.glob("*.ipynb"))

# A decimal in prose, or a whole number of a percentage or a factor ("75%", "22×", "6 times"):
# not part of a version (2.13.0), a section sign (§5.4), a word or a thousands group.
PROSE_NUMBER = re.compile(r"(?<![\w.§,])(\d+\.\d+(?![\w.])|\d+(?=%|×| times\b))")
ANY_NUMBER = re.compile(r"\d[\d,]*\.\d+|\d+")
SKIPPED = re.compile(r"\$\$.*?\$\$|\$[^$]*\$|`[^`]*`|\[[^\]]*\]\([^)]*\)", re.DOTALL)

# (notebook stem, number as the text writes it): why no cell prints it.
NOT_PRINTED = {
    ("15_sliding_window_and_sinks", "134.5"): "SmolLM2-135M's size, printed in the LLM appendix",
    ("appendix_explorer", "134.5"): "SmolLM2-135M's size, printed in the LLM appendix",
    ("appendix_reading_an_llm", "134.5"): "the introduction quotes the count cell 4 prints in full",
    ("appendix_explorer", "7.7"): "ipywidgets 7.7, Colab's version",
    ("appendix_explorer", "0.001"): "the value of attn_core.teach.plots.LOG_FLOOR, which the text names",
    ("10_transformer_block", "8.2"): "Qwen3-8B's published size (the cell prints its count by formula)",
    ("14_variants_compared", "93.3"): "DeepSeek-V2's abstract",
    ("14_variants_compared", "5.76"): "DeepSeek-V2's abstract",
    ("14_variants_compared", "0.46"): "chapter 5's iso-parameter MQA verdict, printed there",
    ("16_gated_attention", "5.55"): "2 ln 16, the divergence threshold the code writes as an expression",
    ("17_linear_attention", "0.65"): "the middle of the printed range 0.63-0.69",
    ("17_linear_attention", "7.5"): "5,040 of 66,848 parameters, both printed",
    ("01_self_attention", "18.22"): "Britz et al. 2017, Table 6 (multiplicative attention at width 1024)",
}


# "held above 0.9", "held below 15%", "held between 0.5 and 10" (text and printed claims alike)
NUMBER = r"(\d+(?:\.\d+)?(?:e-?\d+)?)(%?)"
HELD = re.compile(rf"held\s+(above|below|between)\s+{NUMBER}(?:\s+and\s+{NUMBER})?")


def _bounds(text: str) -> set[tuple[str, Decimal]]:
    """``(side, bound)`` of every "held ..." in ``text``; "between a and b" counts as above a and below b."""
    found = set()
    for side, low, low_pct, high, high_pct in HELD.findall(text):
        low_d = Decimal(low) / (100 if low_pct else 1)
        if side == "between":  # "between a" with no "and b" in reach is read as "above a"
            found.add(("above", low_d))
            if high:
                found.add(("below", Decimal(high) / (100 if high_pct else 1)))
        else:
            found.add((side, low_d))
    return found


def _printed(nb: dict, *, sources: bool = False) -> str:
    """The code cells' text outputs (not images or HTML), and their sources if asked."""
    text = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        if sources:
            text.append("".join(cell["source"]))
        for out in cell.get("outputs", []):
            text.append("".join(out.get("text", "")))
            text.append("".join(out.get("data", {}).get("text/plain", "")))
    return "\n".join(text)


def _printed_numbers(nb: dict) -> set[Decimal]:
    """Every number in the code cells' sources and text outputs."""
    return {Decimal(m.replace(",", "")) for m in ANY_NUMBER.findall(_printed(nb, sources=True))}


def _quotes(number: str, printed: set[Decimal]) -> bool:
    """Whether a printed number, rounded to the digits of ``number`` (or as a percentage), is ``number``."""
    x = Decimal(number)
    step = Decimal(1).scaleb(x.as_tuple().exponent)
    for y in printed:
        for value in (y, y * 100):
            if any(value.quantize(step, rounding=r) == x for r in (ROUND_HALF_UP, ROUND_HALF_EVEN)):
                return True
    return False


def _unprinted(path: Path) -> list[tuple[str, str]]:
    """``(number, context)`` for each decimal of the notebook's text that no cell prints."""
    nb = json.loads(path.read_text())
    printed = _printed_numbers(nb)
    found = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        prose = SKIPPED.sub(" ", "".join(cell["source"]))
        for m in PROSE_NUMBER.finditer(prose):
            if not _quotes(m.group(1), printed):
                found.append((m.group(1), " ".join(prose[max(0, m.start() - 60) : m.end() + 20].split())))
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_number_the_text_quotes_is_printed(path):
    missing = [(n, ctx) for n, ctx in _unprinted(path) if (path.stem, n) not in NOT_PRINTED]
    assert not missing, "the text quotes numbers no cell prints:\n" + "\n".join(f"  {n}: …{c}…" for n, c in missing)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_bound_the_text_states_is_a_printed_bound(path):
    nb = json.loads(path.read_text())
    printed = _bounds(_printed(nb))
    stated = set()
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            stated |= _bounds(SKIPPED.sub(" ", "".join(cell["source"])))
    assert stated <= printed, f"bounds the text states that no cell prints: {sorted(stated - printed)}"


def test_bounds_read_percentages_and_ranges():
    assert _bounds("held above 60%; held between 0.5 and\n10), held below 1e-3") == {
        ("above", Decimal("0.6")),
        ("above", Decimal("0.5")),
        ("below", Decimal("10")),
        ("below", Decimal("0.001")),
    }


def test_every_exception_is_still_needed():
    """An entry whose number is gone from the text, or is now printed, is removed rather than kept."""
    unprinted = {(p.stem, n) for p in NOTEBOOKS for n, _ in _unprinted(p)}
    assert set(NOT_PRINTED) <= unprinted, sorted(set(NOT_PRINTED) - unprinted)


def test_the_check_catches_a_stale_value_and_reads_rounding():
    nb = {
        "cells": [
            {"cell_type": "code", "source": ["print(ratio)"], "outputs": [{"text": ["ratio: 9.32, share 0.997\n"]}]},
        ]
    }
    printed = _printed_numbers(nb)
    assert _quotes("9.3", printed) and _quotes("9.32", printed) and _quotes("99.7", printed)
    assert not _quotes("10.6", printed) and not _quotes("9.4", printed)
    prose = SKIPPED.sub(" ", "about 10.6 here, 22×, 75%, $x = 2.5$, `torch==2.13.0`, §5.4, [v1.2](u), 30 layers")
    assert [m.group(1) for m in PROSE_NUMBER.finditer(prose)] == ["10.6", "22", "75"]
    assert not _quotes("75", printed) and not _quotes("8", printed) and _quotes("9", printed)
