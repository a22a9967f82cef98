"""A pytest plugin for nbval: every notebook in a Colab-like runtime of its own.

Loaded by ``run_lessons.py`` (``-p colab_nbval``) in every xdist worker. Each notebook lies
alone in ``<root>/<stem>/content/``, nbval starts its kernel there, and this plugin gives
that kernel, before it starts, an install target of its own: the set-up cell's
``pip install`` goes into ``<root>/<stem>/site`` (``PIP_TARGET``, on the kernel's
``PYTHONPATH``), so no notebook sees another's ``attn_core``. The wheel to install, the
models folder and ``PIP_NO_DEPS`` are set once by ``run_lessons.py`` for every kernel.

When a notebook's last cell has run, the plugin checks that its set-up cell installed
``attn_core`` and that the notebook ran in under ``LIMIT_S`` seconds, and writes the
worker's run times to ``$ATTN_CORE_COLAB_TIMES/<worker>.rows`` for the table that
``run_lessons.py`` prints.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

#: Most seconds a notebook may take, kernel start and attn_core install included (the
#: book's target is under 40 s; 60 s at most on a quiet machine; twice that on a busy one).
LIMIT_S = 120.0
_started: dict[Path, float] = {}
_times: dict[str, float] = {}


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


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After the last cell, once nbval has stopped the kernel: what the run must have done."""
    notebook = _notebook(item)
    if nextitem is not None and _notebook(nextitem) == notebook:
        return
    seconds = time.perf_counter() - _started[notebook]
    _times[notebook.name] = seconds
    site = notebook.parent.parent / "site"
    if not (site / "attn_core").is_dir():
        raise AssertionError(f"{notebook.name}: the set-up cell did not install attn_core into {site}")
    if seconds >= LIMIT_S:
        raise AssertionError(f"{notebook.name} took {seconds:.0f} s (limit {LIMIT_S:.0f} s)")


def pytest_sessionfinish(session: pytest.Session) -> None:
    folder = os.environ.get("ATTN_CORE_COLAB_TIMES")
    if not folder or not _times:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    rows = "".join(f"| {name} | {sec:.1f} |\n" for name, sec in sorted(_times.items()))
    Path(folder, f"{worker}.rows").write_text(rows)
