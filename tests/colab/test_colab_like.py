"""The Colab-like environment itself: installing attn_core there upgrades nothing.

Run with the Colab-like environment's Python (``make colab`` does it): ipywidgets 7.7,
CPU torch, no attn_core installed. The notebooks themselves run in that environment in
the lessons' native-kernels run (``run_lessons.py``, called by ``make lessons``): each
alone in an empty folder, its set-up cell installing attn_core from a wheel of this
checkout, every output compared with the committed one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from run_lessons import build_wheel


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    import ipywidgets

    assert ipywidgets.__version__.startswith("7.7"), f"not Colab-like: ipywidgets {ipywidgets.__version__}"
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def test_installing_attn_core_upgrades_nothing(wheel: Path, tmp_path: Path):
    """The set-up cell's plain `pip install` in a Colab-like environment installs attn_core alone.

    A dry run with pip's installation report: nothing is installed, and the report lists
    what a real install would change.
    """
    report = tmp_path / "report.json"
    subprocess.run(
        [sys.executable, "-m", "pip", "-q", "install", "--dry-run", "--report", str(report), str(wheel)],
        check=True,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    planned = sorted(item["metadata"]["name"] for item in json.loads(report.read_text())["install"])
    assert planned == ["attn_core"], f"installing attn_core would also install or upgrade {planned}"
