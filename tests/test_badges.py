"""Every notebook's Colab badge and set-up cell agree with _config.yml (issue: one setting)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))


def test_badges_and_setup_cells_match_the_config():
    result = subprocess.run(
        [sys.executable, "tools/sync_badges.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, "run `python tools/sync_badges.py`:\n" + result.stdout


def test_badge_links_to_this_notebook_on_the_configured_branch():
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
    slug = cfg["url"].split("github.com/")[1]
    assert NOTEBOOKS
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        title = nb.cells[0].source
        want = f"https://colab.research.google.com/github/{slug}/blob/{cfg['branch']}/book/{path.name}"
        assert want in title, f"{path.name}: badge does not link to {want}"
        setup = next(c for c in nb.cells if c.cell_type == "code")
        assert f'ATTN_CORE_URL = (\n    "git+{cfg["url"]}@{cfg["branch"]}"\n)' in setup.source, path.name
        # Code lines fit the book's column (88 characters), the set-up cell's too.
        assert max(map(len, setup.source.splitlines())) <= 88, path.name
        # Outside Colab the set-up cell prints nothing.
        assert setup.get("outputs", []) == [], f"{path.name}: the set-up cell has outputs"


def test_setup_cell_leaves_torch_and_ipywidgets_alone():
    source = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.path.insert(0, 'tools'); import sync_badges; print(sync_badges.setup_source())",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "--upgrade" not in source and "-U " not in source
    pip_lines = [line for line in source.splitlines() if '"pip", "install"' in line]
    assert pip_lines == ['    pip = [sys.executable, "-m", "pip", "install", "--quiet", source]']
    assert "    subprocess.run(pip, check=True)" in source.splitlines()
