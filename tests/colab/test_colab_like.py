"""Every chapter, run as Colab runs it: alone, top to bottom, with Colab's versions.

Run with the Colab-like environment's Python (``make colab`` does it): ipywidgets 7.7,
CPU torch, no attn_core installed. Each notebook is copied alone into an empty folder
and executed with nbclient; its set-up cell installs attn_core from a wheel of this
checkout (``ATTN_CORE_INSTALL``) instead of the repository URL.

Notebooks run two at a time (``pytest -n 2``), so each gets its own install target: the
set-up cell's ``pip install`` goes into a fresh folder of that notebook's own (``PIP_TARGET``,
on the kernel's ``PYTHONPATH``; dependencies are Colab's, so ``PIP_NO_DEPS``), and no
notebook sees another's attn_core. That the wheel installs into a Colab-like environment
without upgrading anything Colab ships is checked once, by
``test_installing_attn_core_upgrades_nothing`` (a dry run).

The session prints a table of run times (kept in README.md) and writes it to
``_build/colab_timings.md`` (one file per worker, merged by ``make colab``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))
TIMES: dict[str, float] = {}
TARGET_S = 60.0


def _pip(*args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "-q", *args], check=True, env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    )


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """A wheel of this checkout, built once per worker, offline (no build isolation)."""
    import ipywidgets

    assert ipywidgets.__version__.startswith("7.7"), f"not Colab-like: ipywidgets {ipywidgets.__version__}"
    out = tmp_path_factory.mktemp("wheel")
    # Build from a copy of the package: setuptools writes build/ and *.egg-info next to the
    # sources, and two workers building in the checkout at once would trip over each other.
    src = tmp_path_factory.mktemp("src")
    shutil.copytree(ROOT / "attn_core", src / "attn_core", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    builder = ROOT / ".venv" / "bin" / "python"  # has setuptools; this environment need not
    subprocess.run(
        [
            str(builder if builder.exists() else sys.executable),
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(src),
        ],
        check=True,
    )
    yield next(out.glob("attn_core-*.whl"))
    _report()


def _report() -> None:
    """Write this worker's run times; ``make colab`` merges the workers' rows into one table."""
    if not TIMES:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    rows = "".join(f"| {name} | {sec:.1f} |\n" for name, sec in sorted(TIMES.items()))
    (ROOT / "_build").mkdir(exist_ok=True)
    (ROOT / "_build" / f"colab_timings.{worker}.rows").write_text(rows)


def test_installing_attn_core_upgrades_nothing(wheel: Path, tmp_path: Path):
    """The set-up cell's plain `pip install` in a Colab-like environment installs attn_core alone.

    A dry run with pip's installation report: nothing is installed (other workers are
    running notebooks meanwhile), and the report lists what a real install would change.
    """
    report = tmp_path / "report.json"
    _pip("install", "--dry-run", "--report", str(report), str(wheel))
    planned = sorted(item["metadata"]["name"] for item in json.loads(report.read_text())["install"])
    assert planned == ["attn_core"], f"installing attn_core would also install or upgrade {planned}"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_alone_in_colab_like_env(notebook: Path, wheel: Path, tmp_path: Path):
    work = tmp_path / "content"
    work.mkdir()
    fresh = subprocess.run([sys.executable, "-c", "import attn_core"], cwd=work, capture_output=True)
    assert fresh.returncode != 0, "a fresh runtime has no attn_core until the set-up cell installs it"
    shutil.copy(notebook, work / notebook.name)
    nb = nbformat.read(work / notebook.name, as_version=4)
    site = tmp_path / "site"  # this notebook's own install target (see the module docstring)
    site.mkdir()
    env = {"ATTN_CORE_INSTALL": str(wheel), "PIP_TARGET": str(site), "PIP_NO_DEPS": "1", "PYTHONPATH": str(site)}
    # SmolLM2 (the appendix on a real LLM): the set-up cell finds the file make setup fetched
    # and converted, instead of downloading it as it does in Colab.
    env["ATTN_CORE_MODELS"] = str(ROOT / ".models")
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the kernel inherits them (each pytest worker is its own process)
    client = NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(work)}}, store_widget_state=True
    )
    start = time.perf_counter()
    try:
        client.execute()
    finally:
        TIMES[notebook.name] = time.perf_counter() - start
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert (site / "attn_core").is_dir(), "the set-up cell installed attn_core"
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    # Widgets were created by ipywidgets 7.7: their stored models use its protocol (1.5.0).
    state = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    versions = {m["model_module_version"] for m in state.values() if m["model_module"] == "@jupyter-widgets/controls"}
    assert versions <= {"1.5.0"}, versions
    views = [
        o
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if "application/vnd.jupyter.widget-view+json" in o.get("data", {})
    ]
    if views:
        assert versions == {"1.5.0"}, json.dumps(views[0]["data"])[:200]
    assert TIMES[notebook.name] < TARGET_S * 2, f"{notebook.name} took {TIMES[notebook.name]:.0f} s"
