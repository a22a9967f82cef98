"""The kernel-free explorer fits its map to the page's column, in headless Chromium.

Unlike ``test_book.py`` this needs no built book: each test writes a page with explorers
from ``attn_core.teach.viz`` into a column of a given width and opens it from disk. Cells are
22 px where they fit; a wider map gets smaller cells (down to 8 px) and labels every n-th
token so that labels never overlap; only below 8 px does the view scroll sideways.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

from attn_core.teach import viz

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
IN_CI = os.environ.get("CI", "").lower() == "true"


def _require(condition: bool, reason: str) -> None:
    if not condition:
        if IN_CI:
            pytest.fail(f"{reason} (CI=true: this layer may not be skipped)")
        pytest.skip(reason)


@pytest.fixture(scope="module")
def browser():
    _require(Path(CHROMIUM).exists(), "Debian's chromium is not installed (make test installs it)")
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


def _weights(T_q, T_k=None, L=1):
    g = torch.Generator().manual_seed(T_q)
    return torch.softmax(torch.randn(L, 1, T_q, T_k or T_q, generator=g), -1)


# What the page drew, per explorer: the column's width, the map's width and cell size, whether
# the view scrolls, the column labels' x positions and font size, the query slider's label.
_MEASURE = """() => [...document.querySelectorAll('.attn-explorer')].map(e => {
  const view = e.querySelector('.attnx-view'), svg = view.querySelector('svg');
  const cols = [...svg.querySelectorAll('[data-col-label]')];
  return {
    column: e.clientWidth,
    mapWidth: svg.getBoundingClientRect().width,
    cell: Number(svg.getAttribute('data-cell-size')),
    font: Number(svg.getAttribute('font-size')),
    scrolls: view.scrollWidth > view.clientWidth,
    colLabels: cols.map(t => Number(t.getAttribute('data-col-label'))),
    slider: e.querySelector('input[data-control="query"]').parentElement.textContent.trim().split(/\\s/)[0],
    colTitle: svg.querySelector('.attnx-col-title').textContent,
    rowTitle: svg.querySelector('.attnx-row-title').textContent,
    bar: view.querySelectorAll('svg')[1].querySelector('text').textContent,
  };
})"""


def _open(browser, tmp_path, explorers, width):
    page_file = tmp_path / f"page{width}.html"
    body = "".join(e.html() for e in explorers)
    page_file.write_text(f'<html><body><div style="width:{width}px">{body}</div></body></html>', encoding="utf-8")
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    errors = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.goto(page_file.as_uri())
    ready = "n => document.querySelectorAll('.attn-explorer[data-ready]').length >= n"
    page.wait_for_function(ready, arg=len(explorers))
    return page, errors


def test_maps_fit_the_column(browser, tmp_path):
    small = viz.explorer(_weights(12), list("abcdefghijkl"))
    bytes82 = viz.explorer(_weights(82), [chr(33 + i % 90) for i in range(82)])
    page, errors = _open(browser, tmp_path, [small, bytes82], 760)
    few, many = page.evaluate(_MEASURE)
    # 12 tokens: full-size cells, every label.
    assert few["cell"] == 22 and few["colLabels"] == list(range(12)) and not few["scrolls"]
    # 82 tokens: the map fits the 760 px column (the old 22 px cells needed over 1,800 px) ...
    assert 8 <= many["cell"] < 22 and many["mapWidth"] <= many["column"] and not many["scrolls"], many
    # ... with labels at least 9 px and never closer than their font size.
    gaps = {(b - a) * many["cell"] for a, b in zip(many["colLabels"], many["colLabels"][1:])}
    assert many["font"] >= 9 and min(gaps) >= many["font"], many
    assert many["colLabels"][0] == 0 and len(many["colLabels"]) < 82
    page.close()
    assert not errors, errors


def test_below_the_smallest_cell_the_view_scrolls(browser, tmp_path):
    bytes82 = viz.explorer(_weights(82), [chr(33 + i % 90) for i in range(82)])
    page, errors = _open(browser, tmp_path, [bytes82], 400)
    (m,) = page.evaluate(_MEASURE)
    assert m["cell"] == 8 and m["scrolls"] and m["mapWidth"] > m["column"], m  # not clipped: scrollable
    page.close()
    assert not errors, errors


def test_axis_labels_name_what_rows_and_columns_are(browser, tmp_path):
    router = viz.explorer(
        _weights(6, 4, L=2),
        list("hello!"),
        [f"expert {i}" for i in range(4)],
        temperature=False,
        row_label="character",
        col_label="expert",
    )
    attention = viz.explorer(_weights(6), list("hello!"))
    page, errors = _open(browser, tmp_path, [router, attention], 760)
    r, a = page.evaluate(_MEASURE)
    assert (r["slider"], r["rowTitle"], r["colTitle"]) == ("character", "character", "expert"), r
    assert r["bar"] == "character \u201ch\u201d: weight per expert", r
    assert (a["slider"], a["rowTitle"], a["colTitle"]) == ("query", "query (attending)", "key (attended to)"), a
    assert a["bar"] == "query \u201ch\u201d attends to", a
    page.close()
    assert not errors, errors
