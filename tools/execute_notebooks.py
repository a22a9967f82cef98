"""Execute chapter notebooks in place, the way their committed outputs are made.

    python tools/execute_notebooks.py book/01_self_attention.ipynb [more.ipynb ...]

Each notebook runs top to bottom in a fresh kernel with the book's working directory,
the widget state is stored (the static book renders widgets from it), and the wall
time is printed: each chapter must run in under 40 s on a 2-core CPU (CONTRIBUTING.md).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

TIMEOUT_S = 300


def execute(path: Path) -> float:
    nb = nbformat.read(path, as_version=4)
    # The settings `make lessons` checks them under (see the Makefile).
    os.environ.setdefault("PYTHONHASHSEED", "0")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")
    client = NotebookClient(
        nb,
        timeout=TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        store_widget_state=True,
        record_timing=False,
    )
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    for cell in nb.cells:  # keep diffs quiet: no per-run metadata
        cell.metadata.pop("execution", None)
    nbformat.write(nb, path)
    return seconds


def main(paths: list[str]) -> None:
    for p in paths:
        seconds = execute(Path(p))
        print(f"{p}: executed in {seconds:.1f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
