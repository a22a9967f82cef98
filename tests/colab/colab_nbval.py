"""A pytest plugin for nbval: every notebook in a Colab-like runtime of its own.

Loaded by ``run_lessons.py`` (``-p colab_nbval``) in every xdist worker. Each notebook lies
alone in ``<root>/<stem>/content/``, nbval starts its kernel there, and this plugin gives
that kernel, before it starts, an install target of its own: the set-up cell's
``pip install`` goes into ``<root>/<stem>/site`` (``PIP_TARGET``, on the kernel's
``PYTHONPATH``), so no notebook sees another's ``attn_core``. The wheel to install, the
models folder and ``PIP_NO_DEPS`` are set once by ``run_lessons.py`` for every kernel.

When a notebook's last cell has run, the plugin asks its kernel which protocol its live
widgets speak (ipywidgets 7.7's is 1.5.0: a notebook that shows widgets must have made
them with Colab's version), then checks that the set-up cell installed ``attn_core`` and
that the notebook ran in under ``LIMIT_S`` seconds, and writes the worker's run times to
``$ATTN_CORE_COLAB_TIMES/<worker>.rows`` for the table that ``run_lessons.py`` prints.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

#: Most seconds a notebook may take, kernel start and attn_core install included (the
#: book's target is under 40 s; 60 s at most on a quiet machine; twice that on a busy one).
LIMIT_S = 120.0
#: The protocol of ipywidgets 7.7's controls (ipywidgets 8 speaks 2.0.0).
COLAB_WIDGETS = "1.5.0"
_started: dict[Path, float] = {}
_times: dict[str, float] = {}
# Run in the kernel after the last cell: the protocol versions of the live controls.
_ASK_WIDGETS = """
import json as _json, sys as _sys
_w = _sys.modules.get("ipywidgets")
_live = [] if _w is None else list(_w.Widget.widgets.values())
print(_json.dumps(sorted({
    x._model_module_version for x in _live if x._model_module == "@jupyter-widgets/controls"
})))
"""


def _notebook(item: pytest.Item) -> Path:
    return item.parent.path


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before the first cell (and so before nbval starts the kernel): this notebook's install target."""
    notebook = _notebook(item)
    if notebook in _started:
        return
    site = notebook.parent.parent / "site"
    site.mkdir(exist_ok=True)
    os.environ["PIP_TARGET"] = str(site)
    os.environ["PYTHONPATH"] = str(site)
    _started[notebook] = time.perf_counter()


def _ask(kernel, code: str, timeout: float = 60.0) -> str:
    """Run ``code`` in nbval's kernel; return what it printed."""
    msg_id = kernel.execute_cell_input(code, allow_stdin=False)
    printed = []
    while True:
        msg = kernel.get_message(stream="iopub", timeout=timeout)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            printed.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            raise AssertionError(f"the widget query failed: {msg['content']['evalue']}")
        elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return "".join(printed)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    """After a notebook's last cell: its widgets' protocol, asked before nbval stops the kernel; then the checks."""
    notebook = _notebook(item)
    if nextitem is not None and _notebook(nextitem) == notebook:
        return (yield)
    try:  # never raise before the yield: nbval would not stop the kernel
        versions = set(json.loads(_ask(item.parent.kernel, _ASK_WIDGETS)))
    except Exception as error:
        versions = {f"(the query failed: {error!r})"}
    result = yield  # nbval stops the kernel
    seconds = time.perf_counter() - _started[notebook]
    _times[notebook.name] = seconds
    site = notebook.parent.parent / "site"
    if not (site / "attn_core").is_dir():
        raise AssertionError(f"{notebook.name}: the set-up cell did not install attn_core into {site}")
    if not versions <= {COLAB_WIDGETS}:
        raise AssertionError(f"{notebook.name}: widgets of another ipywidgets than 7.7: {versions}")
    if '"application/vnd.jupyter.widget-view+json"' in notebook.read_text() and versions != {COLAB_WIDGETS}:
        raise AssertionError(f"{notebook.name} shows widgets, but none of ipywidgets 7.7 is live: {versions}")
    if seconds >= LIMIT_S:
        raise AssertionError(f"{notebook.name} took {seconds:.0f} s (limit {LIMIT_S:.0f} s)")
    return result


def pytest_sessionfinish(session: pytest.Session) -> None:
    folder = os.environ.get("ATTN_CORE_COLAB_TIMES")
    if not folder or not _times:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    rows = "".join(f"| {name} | {sec:.1f} |\n" for name, sec in sorted(_times.items()))
    Path(folder, f"{worker}.rows").write_text(rows)
