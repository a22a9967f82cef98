"""The kernel-free explorer fits its map to the page's column, in headless Chromium.

Unlike ``test_book.py`` this needs no built book: each test writes a page with explorers
from ``attn_core.teach.viz`` into a column of a given width and opens it from disk. A short map
grows into the room beside its bar chart (cells up to 40 px); a wider one takes the column
(the bar chart wraps below) and gets smaller cells (down to 8 px) and labels every n-th
token so that labels never overlap; only below 8 px does the view scroll sideways. Under the
map a colour scale names its range, and blocked cells are hatched, with a key.
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
    bar: view.querySelector('.attnx-bars').querySelector('text').textContent,
    barBeside: view.querySelector('.attnx-bars').getBoundingClientRect().top === svg.getBoundingClientRect().top,
    scaleTitle: view.querySelector('.attnx-legend .attnx-scale-title').textContent,
    scaleTicks: [...view.querySelectorAll('.attnx-legend [data-scale-tick]')]
      .map(t => t.getAttribute('data-scale-tick')),
    blockedKey: view.querySelectorAll('.attnx-legend .attnx-blocked-key').length,
    fills: [...new Set([...svg.querySelectorAll('rect[data-cell]')].map(r => r.getAttribute('fill')))],
    rowLabelsLeft: Math.min(...[...svg.querySelectorAll('[data-row-label]')].map(t => t.getBBox().x)),
    layerSlider: (e.querySelector('input[data-control="layer"]') || {parentElement: {textContent: ''}})
      .parentElement.textContent.trim().split(/\\s/)[0],
  };
})"""


def _open(browser, tmp_path, explorers, width):
    page_file = tmp_path / f"page{width}.html"
    body = "".join(e.html() for e in explorers)
    page_file.write_text(
        f'<html><head><meta charset="utf-8"></head><body><div style="width:{width}px">{body}</div></body></html>',
        encoding="utf-8",
    )
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
    # 12 tokens: cells larger than 22 px, beside the bar chart, every label.
    assert 22 < few["cell"] <= 40 and few["barBeside"] and few["colLabels"] == list(range(12)), few
    assert not few["scrolls"]
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


def test_small_maps_grow_and_long_ones_shrink_to_the_column(browser, tmp_path):
    """8 tokens use cells of 40 px; 32 words fit an 820 px column, and wide letters are not cut off."""
    eight = viz.explorer(_weights(8), list("abcdefgh"))
    words = viz.explorer(_weights(32), [f"word{i}" for i in range(32)])
    wide = viz.explorer(_weights(32), ["WWWWWWWWWW"] * 32)  # wider than 8 px a letter: measured
    page, errors = _open(browser, tmp_path, [eight, words, wide], 820)
    e, w, x = page.evaluate(_MEASURE)
    assert e["cell"] == 40 and e["barBeside"] and not e["scrolls"], e
    for m in (w, x):
        assert 8 <= m["cell"] <= 24 and m["mapWidth"] <= m["column"] and not m["scrolls"], m
        assert m["rowLabelsLeft"] >= 0, m  # the longest label fits left of the map
    page.close()
    assert not errors, errors


def test_colour_scale_and_hatched_blocked_cells(browser, tmp_path):
    """The legend names the scale and its range; the log box changes both; blocked cells are hatched."""
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    masked = viz.explorer(None, list("hello!"), scores=torch.randn(1, 1, 6, 6), masks={"causal": causal})
    router = viz.explorer(_weights(6, 4), list("hello!"), list("wxyz"), row_label="character", col_label="expert")
    page, errors = _open(browser, tmp_path, [masked, router], 760)
    m, r = page.evaluate(_MEASURE)
    assert (m["scaleTitle"], m["scaleTicks"]) == ("attention weight", ["0", "0.5", "1"]), m
    assert m["blockedKey"] == 1 and any(f.startswith("url(#") and f.endswith("-hatch)") for f in m["fills"]), m
    assert (r["scaleTitle"], r["blockedKey"]) == ("weight", 0), r
    assert not any(f.startswith("url(") for f in r["fills"]), r
    page.locator('input[data-control="log"]').first.click()
    m = page.evaluate(_MEASURE)[0]
    assert (m["scaleTitle"], m["scaleTicks"]) == ("attention weight (log scale)", ["0.001", "0.01", "0.1", "1"]), m
    page.locator('input[data-control="mask:causal"]').first.click()  # no mask: no blocked cell, no key
    m = page.evaluate(_MEASURE)[0]
    assert m["blockedKey"] == 0 and not any(f.startswith("url(") for f in m["fills"]), m
    page.close()
    assert not errors, errors


def test_layer_slider_is_named_by_layer_label(browser, tmp_path):
    models = viz.explorer(_weights(5, L=2), list("abcde"), layer_names=["trained", "random"], layer_label="model")
    layers = viz.explorer(_weights(5, L=2), list("abcde"))
    page, errors = _open(browser, tmp_path, [models, layers], 760)
    a, b = page.evaluate(_MEASURE)
    assert (a["layerSlider"], b["layerSlider"]) == ("model", "layer"), (a, b)
    page.close()
    assert not errors, errors
