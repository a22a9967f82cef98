"""Every chapter, run as Colab runs it: alone, top to bottom, with Colab's versions.

Run with the Colab-like environment's Python (``make colab`` does it): ipywidgets 7.7,
CPU torch, no attn_core installed. Each notebook is copied alone into an empty folder
and executed with nbclient; its set-up cell installs attn_core from a wheel of this
checkout (``ATTN_CORE_INSTALL``) instead of the repository URL. Afterwards attn_core is
uninstalled again, so that the next notebook starts without it too.

The test prints a table of run times (kept in README.md) and writes it to
``_build/colab_timings.md``.
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
    subprocess.run([sys.executable, "-m", "pip", "-q", *args], check=True,
                   env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})


def _uninstall() -> None:
    subprocess.run([sys.executable, "-m", "pip", "uninstall", "-q", "-y", "attn_core"],
                   check=False, capture_output=True)


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """A wheel of this checkout, built once, offline (no build isolation)."""
    import ipywidgets

    assert ipywidgets.__version__.startswith("7.7"), f"not Colab-like: ipywidgets {ipywidgets.__version__}"
    out = tmp_path_factory.mktemp("wheel")
    builder = ROOT / ".venv" / "bin" / "python"  # has setuptools; this environment need not
    subprocess.run([str(builder if builder.exists() else sys.executable), "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(out), str(ROOT)], check=True)
    _uninstall()
    yield next(out.glob("attn_core-*.whl"))
    _uninstall()
    _report()


def _report() -> None:
    if not TIMES:
        return
    lines = ["| notebook | seconds (Colab-like, CPU) |", "|---|---:|"]
    lines += [f"| {name} | {sec:.1f} |" for name, sec in sorted(TIMES.items())]
    table = "\n".join(lines)
    print("\n" + table)
    (ROOT / "_build").mkdir(exist_ok=True)
    (ROOT / "_build" / "colab_timings.md").write_text(table + "\n")


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_alone_in_colab_like_env(notebook: Path, wheel: Path, tmp_path: Path):
    work = tmp_path / "content"
    work.mkdir()
    fresh = subprocess.run([sys.executable, "-c", "import attn_core"], cwd=work, capture_output=True)
    assert fresh.returncode != 0, "a fresh runtime has no attn_core until the set-up cell installs it"
    shutil.copy(notebook, work / notebook.name)
    nb = nbformat.read(work / notebook.name, as_version=4)
    os.environ["ATTN_CORE_INSTALL"] = str(wheel)
    client = NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(work)}}, store_widget_state=True)
    start = time.perf_counter()
    try:
        client.execute()
    finally:
        TIMES[notebook.name] = time.perf_counter() - start
        os.environ.pop("ATTN_CORE_INSTALL", None)
        _uninstall()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    # Widgets were created by ipywidgets 7.7: their stored models use its protocol (1.5.0).
    state = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    versions = {m["model_module_version"] for m in state.values() if m["model_module"] == "@jupyter-widgets/controls"}
    assert versions <= {"1.5.0"}, versions
    views = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
             if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    if views:
        assert versions == {"1.5.0"}, json.dumps(views[0]["data"])[:200]
    assert TIMES[notebook.name] < TARGET_S * 2, f"{notebook.name} took {TIMES[notebook.name]:.0f} s"
