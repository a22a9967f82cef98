"""The built book, opened as a reader would: headless Chromium, offline.

The site in ``_build/html`` is served on 127.0.0.1; every other request is blocked and
recorded. Each page must load with no failed or blocked request and no uncaught page
error; embedded widgets must render, math must be typeset, every kernel-free explorer
must respond to the keyboard and the mouse (its picture changes), and in a 1300 px and a
1440 px window no code or output block may be wider than its box (the reader would
scroll sideways to read it).

Run ``make book`` first (``make browser`` does). Needs Debian's ``chromium`` (installed
by ``make test``); without it the tests are skipped with a reason, except under CI.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "_build" / "html"
SHOTS = ROOT / "_build" / "screenshots"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
IN_CI = os.environ.get("CI", "").lower() == "true"

# Windows of a laptop's reader with both sidebars shown (the theme folds the right one away
# below 1200 px). The page stops widening at the theme's 88rem (1408 px), so 1440 px stands
# for every wider window.
WINDOWS = (1300, 1440)
CODE_LINE = 88  # the longest line a code cell may have (CONTRIBUTING.md)

# Console messages from third-party code that are known and harmless, matched exactly.
# (They are console messages, not page errors; page errors are never allowed.)
KNOWN_CONSOLE = {
    "Got invalid theme mode: . Resetting to auto.",  # pydata-sphinx-theme, first visit
}


def _require(condition: bool, reason: str) -> None:
    if not condition:
        if IN_CI:
            pytest.fail(f"{reason} (CI=true: this layer may not be skipped)")
        pytest.skip(reason)


@pytest.fixture(scope="module")
def server():
    _require(SITE.joinpath("index.html").exists(), "the book is not built: run `make book`")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(SITE)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser():
    _require(Path(CHROMIUM).exists(), "Debian's chromium is not installed (make test installs it)")
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-sync",
                "--disable-background-networking",
                "--disable-component-update",
            ],
        )
        yield b
        b.close()


class Visit:
    """One page load with every request outside the local server blocked and recorded."""

    def __init__(self, browser, base: str, path: str) -> None:
        self.problems: list[str] = []
        self.page = browser.new_page(viewport={"width": WINDOWS[0], "height": 900})
        self.page.route("**/*", self._route(base))
        self.page.on("requestfailed", lambda r: self.problems.append(f"failed request: {r.url} ({r.failure})"))
        self.page.on("response", lambda r: r.status >= 400 and self.problems.append(f"HTTP {r.status}: {r.url}"))
        self.page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        self.page.on("console", self._console)
        self.page.goto(base + path)
        self.page.wait_for_load_state("networkidle")
        self.page.wait_for_timeout(500)  # widgets and MathJax render after load
        if (SITE / path).is_file():
            _wait_for_explorers(self.page, path)

    def _route(self, base: str):
        def handle(route) -> None:
            url = route.request.url
            if url.startswith(base) or url.startswith("data:"):
                route.continue_()
            else:
                self.problems.append(f"blocked external request: {url}")
                route.abort()

        return handle

    def _console(self, message) -> None:
        if (
            message.type == "error"
            and message.text not in KNOWN_CONSOLE
            and "Failed to load resource" not in message.text
        ):
            self.problems.append(f"console error: {message.text}")


def _pages() -> list[str]:
    return sorted(p.relative_to(SITE).as_posix() for p in SITE.rglob("*.html") if "_static" not in p.parts)


def test_site_has_the_chapters():
    _require(SITE.joinpath("index.html").exists(), "the book is not built: run `make book`")
    pages = _pages()
    assert "book/01_self_attention.html" in pages, pages
    # Guard against a vacuous pass of the explorer checks below: most chapters have one.
    with_explorers = [p for p in pages if 'class="attn-explorer"' in (SITE / p).read_text()]
    assert len(with_explorers) >= 20, with_explorers


@pytest.mark.parametrize("path", _pages() if SITE.exists() else ["index.html"])
def test_page_loads_offline_and_renders(browser, server, path):
    visit = Visit(browser, server, path)
    page = visit.page
    state = page.evaluate(
        """() => ({
          widgetViews: document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]').length,
          rendered: [...document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]')]
                      .filter(s => s.parentElement.querySelector('.jupyter-widgets, .widget-box, .lm-Widget')).length,
          math: document.querySelectorAll('.math, span.math, div.math').length,
          typeset: document.querySelectorAll('mjx-container').length,
          rawTex: [...document.querySelectorAll('.math')].filter(e => !e.querySelector('mjx-container')).length,
          explorers: document.querySelectorAll('.attn-explorer').length,
          readyExplorers: document.querySelectorAll('.attn-explorer[data-ready]').length,
        })"""
    )
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / (path.replace("/", "_") + ".png")))
    assert state["rendered"] == state["widgetViews"], f"{path}: widgets that did not render: {state}"
    assert state["rawTex"] == 0 and state["typeset"] >= state["math"], f"{path}: math not typeset: {state}"
    assert state["readyExplorers"] == state["explorers"], f"{path}: explorers whose script did not run: {state}"
    # The kernel-free explorers respond to the keyboard and the mouse (in the same visit:
    # loading a chapter is most of a page's time here).
    _exercise_explorers(page, path)
    # At a laptop's width no code or output block is cut (last: it unfolds the folded cells).
    cut = _cut_blocks(page, path)
    page.close()
    assert not visit.problems, "\n".join(visit.problems)
    assert not cut, f"{len(cut)} blocks cut or too narrow:\n" + "\n".join(cut)


# Each block a reader reads sideways: a code block (a cell's source or one in the text),
# what a cell prints, and each cell's output area (pictures, widgets, explorers). Folded
# cells are unfolded first, as a reader who opens them sees them. ``holds`` is how many
# characters of the block's monospace font fit a line of a code block.
_BLOCKS = """n => {
  document.querySelectorAll('.bd-article details').forEach(d => { d.open = true; });
  const cells = [...document.querySelectorAll('.bd-article .cell')];
  return [...document.querySelectorAll('.bd-article pre, .bd-article .cell_output')].map(e => {
    const cell = e.closest('.cell');
    const kind = e.matches('.cell_output') ? 'output area' : e.closest('.cell_output') ? 'printed output'
               : cell ? 'source' : 'code block in the text';
    const lines = e.innerText.split('\\n');
    const longest = lines.reduce((a, b) => (b.length > a.length ? b : a), '');
    let holds = null;
    if (e.tagName === 'PRE') {
      const probe = document.createElement('span');
      probe.style.whiteSpace = 'pre';
      probe.textContent = 'x'.repeat(n);
      e.appendChild(probe);
      const style = getComputedStyle(e), char = probe.getBoundingClientRect().width / n;
      probe.remove();
      holds = Math.floor((e.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight)) / char);
    }
    return {block: (cell ? `code cell ${cells.indexOf(cell) + 1}: ` : '') + kind, kind, holds,
            scroll: e.scrollWidth, client: e.clientWidth, longest};
  });
}"""


def _cut_blocks(page, path: str) -> list[str]:
    """Each block that is cut at a laptop's width, and each cell source that holds less than a code line.

    A block is cut when its content is wider than its box (``scrollWidth`` > ``clientWidth``):
    the reader would scroll sideways. ``assets/book.css`` sets the column and the code font,
    and printed lines wrap, so a block that is cut is a code block with a line too long for it.
    """
    page.evaluate("document.fonts.ready.then(() => true)")
    problems = []
    for width in WINDOWS:
        page.set_viewport_size({"width": width, "height": 900})
        for b in page.evaluate(_BLOCKS, CODE_LINE):
            where = f"{path} at {width} px, {b['block']}"
            if b["scroll"] > b["client"]:
                problems.append(
                    f"{where}: {b['scroll']} px of content in a {b['client']} px box; its longest line "
                    f"({len(b['longest'])} characters): {b['longest'][:120]!r}"
                )
            if b["kind"] == "source" and b["holds"] < CODE_LINE:
                problems.append(f"{where}: holds {b['holds']} characters a line, fewer than {CODE_LINE}")
    return problems


def _wait_for_explorers(page, path: str, timeout_ms: int = 60_000) -> None:
    """Wait until every explorer of the page has been built by its script.

    On a busy machine the pages' scripts can run well after the load event; counting the
    explorers before then found none. The page's source says how many there are; each one's
    script marks it ``data-ready`` when it has drawn itself.
    """
    expected = (SITE / path).read_text().count('class="attn-explorer"')
    page.wait_for_function(
        "n => document.querySelectorAll('.attn-explorer[data-ready]').length >= n", arg=expected, timeout=timeout_ms
    )


def _temperature_responds(page, explorer, tau) -> bool:
    """Move the temperature to an end of its range, head by head and layer by layer, until the map changes.

    One key press (Home: the sharpest end, or End from there) moves the slider as far as it
    goes: the largest change the control can make, at one redraw of the map. A trained
    head can put all of every row's weight on one key (chapter 16's baseline, whose
    logits grow past 100, does): no temperature changes a one-hot map, so the test looks
    for a head where the control has something to show.
    """
    sliders = [explorer.locator(f'input[data-control="{name}"]') for name in ("head", "layer")]
    steps = [int(s.get_attribute("max")) + 1 if s.count() else 1 for s in sliders]
    for _ in range(steps[1]):
        for _ in range(steps[0]):
            snapshot, value = _picture(explorer), tau.input_value()
            tau.focus()
            page.keyboard.press("End" if value == tau.get_attribute("min") else "Home")
            if _picture(explorer) != snapshot:
                # Put the temperature back where it was (the mask checks that follow compare from there).
                tau.evaluate("(e, v) => { e.value = v; e.dispatchEvent(new Event('input')); }", value)
                return True
            if sliders[0].count():
                sliders[0].focus()
                page.keyboard.press("ArrowRight")
        if sliders[1].count():
            sliders[1].focus()
            page.keyboard.press("ArrowRight")
    return False


def _picture(explorer) -> str:
    """What the reader sees: the fill of every cell and the length of every bar."""
    return explorer.evaluate(
        "e => [...e.querySelectorAll('rect[data-cell], rect[data-bar]')]"
        ".map(r => r.getAttribute('fill') + ':' + r.getAttribute('width')).join('|')"
    )


def _exercise_explorers(page, path: str) -> None:
    """Every explorer of the page: the query slider, the temperature, each mask and the log box change its picture."""
    explorers = page.locator(".attn-explorer")
    for i in range(explorers.count()):
        explorer = explorers.nth(i)
        explorer.scroll_into_view_if_needed()
        assert (
            explorer.locator(".attnx-fallback").first.is_hidden()
            if explorer.locator(".attnx-fallback").count()
            else True
        )
        before_state, before = explorer.get_attribute("data-state"), _picture(explorer)
        # Keyboard: move the query slider one step.
        query = explorer.locator('input[data-control="query"]')
        query.focus()
        page.keyboard.press("ArrowRight" if query.input_value() != query.get_attribute("max") else "ArrowLeft")
        after_state, after = explorer.get_attribute("data-state"), _picture(explorer)
        assert after_state != before_state and after != before, f"{path} explorer {i}: the query slider did nothing"
        # Keyboard: the temperature changes the colours of the map. A trained head can put
        # all of each row's weight on one key (no temperature changes a one-hot map), so the
        # test looks for a head where it has something to show.
        tau = explorer.locator('input[data-control="tau"]')
        if tau.count():
            assert _temperature_responds(page, explorer, tau), (
                f"{path} explorer {i}: the temperature slider did nothing on any head"
            )
        # Mouse: each mask toggle, then the log-scale box, changes the picture.
        for box in explorer.locator('input[type="checkbox"]').all():
            snapshot = _picture(explorer)
            box.click()
            assert _picture(explorer) != snapshot, (
                f"{path} explorer {i}: {box.get_attribute('data-control')} did nothing"
            )
        # The viewport, as a reader scrolled to the explorer sees it (a screenshot of the
        # element itself took 2-3 s: most explorers are taller than the viewport).
        page.screenshot(path=str(SHOTS / f"{path.replace('/', '_')}.explorer{i}.png"))


def test_explorer_degrades_to_a_picture_without_scripts(browser, server):
    """With JavaScript off the explorer shows its static picture, not a blank area."""
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(server) else route.abort())
    page.goto(server + "book/01_self_attention.html")
    fallback = page.locator(".attn-explorer .attnx-fallback").first
    assert fallback.is_visible()
    assert page.evaluate("img => img.naturalWidth", fallback.element_handle()) > 100
    context.close()


def test_chapter_one_shows_widget_math_and_explorer(browser, server):
    """Guard against vacuous passes above: chapter 1 has each kind of content."""
    visit = Visit(browser, server, "book/01_self_attention.html")
    counts = visit.page.evaluate(
        """() => [document.querySelectorAll('.widget-subarea .jupyter-widgets, .widget-subarea .lm-Widget').length,
                  document.querySelectorAll('mjx-container').length,
                  document.querySelectorAll('.attn-explorer[data-ready] rect[data-cell]').length,
                  document.querySelectorAll('a.colab-badge img').length,
                  document.querySelectorAll(
                      '.dropdown-launch-buttons a, a[href*="colab.research.google.com"]').length]"""
    )
    visit.page.close()
    widgets, math, cells, badge, launch = counts
    assert widgets > 0 and math > 0 and cells == 36 and badge == 1 and launch >= 2, counts


def _step_through_layers(page, explorer, layer, steps: int, what: str) -> None:
    """Press → on the layer slider ``steps`` times; each press must change the explorer's picture."""
    layer.focus()
    for i in range(steps):
        before = _picture(explorer)
        page.keyboard.press("ArrowRight")
        assert _picture(explorer) != before, f"{what} {i + 1} changed nothing"


def test_chapter_17_compares_four_trained_maps(browser, server):
    """Chapter 17's explorer: four layers (softmax, linear, DeltaNet, Gated DeltaNet), no temperature slider."""
    path = "book/17_linear_attention.html"
    _require(SITE.joinpath(path).exists(), f"{path} is not built: run `make book`")
    visit = Visit(browser, server, path)
    page = visit.page
    explorer = page.locator(".attn-explorer").first
    explorer.scroll_into_view_if_needed()
    assert explorer.locator('input[data-control="tau"]').count() == 0  # |M| of the delta rule is not a softmax
    layer = explorer.locator('input[data-control="layer"]')
    assert layer.get_attribute("max") == "3", "expected 4 layers: softmax, linear, DeltaNet, Gated DeltaNet"
    _step_through_layers(page, explorer, layer, 3, f"{path}: moving to map")
    page.close()
    assert not visit.problems, "\n".join(visit.problems)


def test_chapter_17_hybrid_explorer_steps_through_its_four_layers(browser, server):
    """Chapter 17's second explorer: the trained 3:1 hybrid, three Gated DeltaNet layers then attention, 4 heads."""
    path = "book/17_linear_attention.html"
    _require(SITE.joinpath(path).exists(), f"{path} is not built: run `make book`")
    visit = Visit(browser, server, path)
    page = visit.page
    assert page.locator(".attn-explorer").count() == 2, "expected the recall explorer and the hybrid's"
    explorer = page.locator(".attn-explorer").nth(1)
    explorer.scroll_into_view_if_needed()
    layer = explorer.locator('input[data-control="layer"]')
    assert layer.get_attribute("max") == "3", "expected 4 layers: 3 Gated DeltaNet, 1 attention"
    assert "hybrid" in explorer.inner_text()
    _step_through_layers(page, explorer, layer, 3, f"{path}: moving to the hybrid's layer")
    page.close()
    assert not visit.problems, "\n".join(visit.problems)


def test_chapter_18_toggles_the_learned_selection(browser, server):
    """Chapter 18's explorer: main attention and indexer scores, with the causal and top-2 masks to toggle."""
    path = "book/18_learned_sparse_attention.html"
    _require(SITE.joinpath(path).exists(), f"{path} is not built: run `make book`")
    visit = Visit(browser, server, path)
    page = visit.page
    explorer = page.locator(".attn-explorer").first
    explorer.scroll_into_view_if_needed()
    layer = explorer.locator('input[data-control="layer"]')
    assert layer.get_attribute("max") == "1", "expected 2 layers: main attention, lightning indexer"
    names = [b.get_attribute("data-control") for b in explorer.locator('input[type="checkbox"]').all()]
    assert names == ["mask:causal", "mask:top-2 selected", "log"], names
    # Turning the selection off shows the dense attention: the picture changes; on again, it comes back.
    top2 = explorer.locator('input[data-control="mask:top-2 selected"]')
    before = _picture(explorer)
    top2.click()
    dense = _picture(explorer)
    assert dense != before, f"{path}: turning the top-2 selection off changed nothing"
    top2.click()
    assert _picture(explorer) == before, f"{path}: turning the top-2 selection back on did not restore the map"
    layer.focus()
    page.keyboard.press("ArrowRight")
    assert _picture(explorer) != before, f"{path}: moving to the indexer's scores changed nothing"
    page.close()
    assert not visit.problems, "\n".join(visit.problems)


def test_chapter_19_shows_each_characters_expert_by_layer(browser, server):
    """Chapter 19's explorer: characters x experts (router probabilities), 2 layers, no temperature slider."""
    path = "book/19_mixture_of_experts.html"
    _require(SITE.joinpath(path).exists(), f"{path} is not built: run `make book`")
    visit = Visit(browser, server, path)
    page = visit.page
    explorer = page.locator(".attn-explorer").first
    explorer.scroll_into_view_if_needed()
    assert explorer.locator('input[data-control="tau"]').count() == 0  # router probabilities, not a temperature
    layer = explorer.locator('input[data-control="layer"]')
    assert layer.get_attribute("max") == "1", "expected 2 layers of routing"
    query = explorer.locator('input[data-control="query"]')
    assert query.get_attribute("max") == "31", "expected 32 characters"
    # Labelled for what it shows (row_label="character", col_label="expert"), not query/key.
    assert explorer.locator(".attnx-col-title").text_content() == "expert"
    assert explorer.locator(".attnx-row-title").text_content() == "character"
    assert query.locator("xpath=..").text_content().strip().startswith("character")
    before = _picture(explorer)
    layer.focus()
    page.keyboard.press("ArrowRight")
    assert _picture(explorer) != before, f"{path}: moving to layer 1 changed nothing"
    query.focus()
    moved = _picture(explorer)
    page.keyboard.press("ArrowRight")
    assert _picture(explorer) != moved, f"{path}: moving to the next character changed nothing"
    page.close()
    assert not visit.problems, "\n".join(visit.problems)
