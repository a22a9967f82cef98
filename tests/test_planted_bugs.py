"""tools/planted_bugs.py: each bug's text is found exactly once where it is planted, so a refactor that
moves or rewrites the line fails here instead of turning the bug into a no-op."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("planted_bugs", ROOT / "tools" / "planted_bugs.py")
planted_bugs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(planted_bugs)


@pytest.mark.parametrize("name", sorted(planted_bugs.BUGS))
def test_each_bug_plants(name, tmp_path):
    file, old, new, _ = planted_bugs.BUGS[name]
    target = planted_bugs.plant(name, tmp_path)
    planted = (target / "attn_core" / file).read_text()
    assert planted.count(new) == 1 and planted.count(old) == 0
    assert (ROOT / "attn_core" / file).read_text().count(old) == 1  # the checkout is untouched
