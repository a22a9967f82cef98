"""The lessons run with this CPU's own kernels, each notebook as Colab runs it.

Run with the Colab-like environment's Python (``make lessons`` does it): ipywidgets 7.7,
CPU torch, no attn_core installed. Every notebook is copied alone into an empty folder
outside the checkout, its set-up cell installs attn_core from a wheel of this checkout
(``ATTN_CORE_INSTALL``) instead of the repository URL, and ``pytest --nbval`` compares
every output with the committed one. So one run is both the lessons' native-kernels run
and the check that each chapter runs top to bottom in Colab, alone, with Colab's
versions; the other two lessons runs (forced kernels, perturbed) use the book's own
environment. Like Colab's runtime, each notebook runs alone on the machine (``make lessons``
runs them one at a time) with torch's threads at their default.

Colab's matplotlib is older than the book's, and draws the explorers' static fallback
pictures (PNG, embedded in their HTML) with other bytes; ``nbval_sanitize_colab.cfg``
masks those bytes and the sizes printed from them, in this run only.

Usage: ``python tests/colab/run_lessons.py [pytest options]``. Prints a table of each
notebook's run time and writes it to ``_build/colab_timings.md``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))
SANITIZE = (ROOT / "tests" / "nbval_sanitize.cfg", HERE / "nbval_sanitize_colab.cfg")


def build_wheel(out: Path) -> Path:
    """A wheel of this checkout, built offline (no build isolation) from a copy of the package.

    setuptools writes ``build/`` and ``*.egg-info`` next to the sources; building from a
    copy keeps the checkout clean. The book's environment builds it (it has setuptools;
    the Colab-like one need not).
    """
    src = out / "src"
    shutil.copytree(ROOT / "attn_core", src / "attn_core", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    builder = ROOT / ".venv" / "bin" / "python"
    pip = [str(builder if builder.exists() else sys.executable), "-m", "pip", "wheel", "-q"]
    subprocess.run([*pip, "--no-deps", "--no-build-isolation", "-w", str(out), str(src)], check=True)
    return next(out.glob("attn_core-*.whl"))


def _check_environment(work: Path) -> None:
    import ipywidgets

    if not ipywidgets.__version__.startswith("7.7"):
        sys.exit(f"not Colab-like: ipywidgets {ipywidgets.__version__} (run with .venv-colab's Python)")
    empty = work / "empty"
    empty.mkdir()
    fresh = subprocess.run(
        [sys.executable, "-c", "import attn_core"], cwd=empty, env={**os.environ, "PYTHONPATH": ""}, capture_output=True
    )
    if fresh.returncode == 0:
        sys.exit("not Colab-like: attn_core imports before any set-up cell installs it")


def _table(times: Path) -> str:
    rows = sorted(line for f in times.glob("*.rows") for line in f.read_text().splitlines())
    header = "| notebook | seconds (Colab-like, 2 CPUs, one at a time) |\n|---|---:|\n"
    return header + "".join(row + "\n" for row in rows)


def main(args: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="attn-colab-") as tmp:
        work = Path(tmp)
        _check_environment(work)
        wheel = build_wheel(work / "wheel")
        for notebook in NOTEBOOKS:
            content = work / "notebooks" / notebook.stem / "content"
            content.mkdir(parents=True)
            shutil.copy(notebook, content / notebook.name)
        sanitize = work / "sanitize.cfg"
        sanitize.write_text("\n".join(p.read_text() for p in SANITIZE))
        times = work / "times"
        times.mkdir()
        os.environ.update(
            ATTN_CORE_INSTALL=str(wheel),
            PIP_NO_DEPS="1",  # dependencies are Colab's own (test_colab_like checks a plain install)
            # SmolLM2 (the appendix on a real LLM): the set-up cell finds the file that make
            # setup fetched and converted, instead of downloading it as it does in Colab.
            ATTN_CORE_MODELS=str(ROOT / ".models"),
            ATTN_CORE_COLAB_TIMES=str(times),
            PYTHONPATH=str(HERE),  # pytest's workers import the plugin colab_nbval from here
        )
        command = [sys.executable, "-m", "pytest", "--nbval", str(work / "notebooks"), "-p", "colab_nbval"]
        command += ["--nbval-sanitize-with", str(sanitize), "-p", "no:cacheprovider", *args]
        code = subprocess.run(command, cwd=work).returncode
        table = _table(times)
    (ROOT / "_build").mkdir(exist_ok=True)
    (ROOT / "_build" / "colab_timings.md").write_text(table)
    print(table, end="")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
