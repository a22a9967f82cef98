"""The package as a map: short modules, no private names across modules, a test file per module.

These hold the rules CONTRIBUTING.md states for where things live, so that a module that
grows past one sitting, or a helper borrowed through a private name, fails here rather
than in review.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import attn_core

PACKAGE = Path(attn_core.__file__).parent
TESTS = Path(__file__).parent
MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)
MAX_LINES = 400


def _dotted(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)


@pytest.mark.parametrize("path", MODULES, ids=_dotted)
def test_module_fits_one_sitting(path):
    n = len(path.read_text().splitlines())
    assert n <= MAX_LINES, f"{_dotted(path)} has {n} lines (at most {MAX_LINES}): split it along its concepts"


def _private_imports(path: Path) -> list[str]:
    """``from <attn_core module> import _name`` statements of one file (relative or absolute)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("attn_core")):
            found += [f"line {node.lineno}: {a.name}" for a in node.names if a.name.startswith("_")]
    return found


@pytest.mark.parametrize("path", MODULES, ids=_dotted)
def test_no_private_name_imported_from_another_module(path):
    if path.name == "__init__.py" and path.parent.name == "exercises":
        pytest.skip("exercises/__init__ gathers the chapters' check modules, which are private to the book")
    assert _private_imports(path) == [], f"{_dotted(path)} imports private names: make them public where they live"


def _test_file_for(path: Path) -> list[Path]:
    """The test files that may hold a module's tests: tests/test_<module>.py, where a module of a
    sub-package is named with its package (measure/timing: test_measure_timing.py) or shares the
    package's file (config/parts: test_config.py)."""
    rel = path.relative_to(PACKAGE).with_suffix("")
    if rel.parts[0] == "exercises":
        return [TESTS / f"test_exercises_{rel.parts[-1]}.py", TESTS / "test_exercises.py"]
    return [TESTS / f"test_{'_'.join(rel.parts)}.py", TESTS / f"test_{rel.parts[0]}.py"]


PUBLIC = [p for p in MODULES if not p.name.startswith("_") and p.name != "__main__.py"]


@pytest.mark.parametrize("path", PUBLIC, ids=_dotted)
def test_every_public_module_has_its_test_file(path):
    candidates = _test_file_for(path)
    assert any(c.is_file() for c in candidates), f"{_dotted(path)} has no test file ({candidates[0].name})"


CHAPTER = re.compile(r"\b[Cc]hapters? \d+|\(ch\. ?\d+\)")


@pytest.mark.parametrize("path", [p for p in MODULES if "exercises" not in p.parts], ids=_dotted)
def test_library_comments_do_not_cite_chapters(path):
    # The library says what a thing is; which chapter uses it is the book's business (and
    # changes when chapters move). The exercise checks are book-side and keep their numbers.
    hits = [f"line {i}" for i, line in enumerate(path.read_text().splitlines(), 1) if CHAPTER.search(line)]
    assert hits == [], f"{_dotted(path)} cites chapter numbers at {hits}"
