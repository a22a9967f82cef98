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
    """The test files that may hold a module's tests: tests/test_<subpackage>_<module>.py, the module's
    path with its dots as underscores (ops/backends/flash: test_ops_backends_flash.py). The config's
    modules share test_config.py (an exercise module has its own: its ANSWERS table is held to the
    standard by test_teach_exercises_standard.py). A Hugging Face family (hf/families/<family>.py)
    may share test_hf_families.py: most families are LLaMA with a hook or two, tested by one tiny
    model's logits and generation against Hugging Face's, and a file each would hold little more
    than that; a family with more to test (its own experts, layer kinds, refusals) has
    test_hf_families_<family>.py."""
    rel = path.relative_to(PACKAGE).with_suffix("")
    candidates = [TESTS / f"test_{'_'.join(rel.parts)}.py"]
    if rel.parts[0] == "config":
        candidates.append(TESTS / "test_config.py")
    if rel.parts[:2] == ("hf", "families"):
        candidates.append(TESTS / "test_hf_families.py")
    return candidates


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


# The floors of the package, lowest first: a module may import from its own subpackage and
# from lower floors only. Subpackages on one floor do not import each other.
RANK = {
    "checks": 0,
    "ops": 1,
    "positions": 1,
    "caches": 1,
    "modules": 1,
    "layers": 2,
    "parallel": 2,
    "config": 3,
    "model": 4,
    "hf": 5,
    "serving": 5,
    "teach": 6,
    "": 7,  # attn_core/__init__.py: the public names
}


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    parts = rel.parent.parts if rel.name == "__init__.py" else rel.with_suffix("").parts
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every attn_core import in one file, relative or absolute, at any depth."""
    here = _module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                target = ".".join(base + ([node.module] if node.module else []))
            elif (node.module or "").startswith("attn_core"):
                target = node.module[len("attn_core") :].lstrip(".")
            else:
                continue
            for alias in node.names:  # `from . import presets` imports a module
                sub = f"{target}.{alias.name}" if target else alias.name
                found.append((node.lineno, sub if sub in _ALL else target))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name[len("attn_core.") :]) for a in node.names if a.name.startswith("attn_core.")]
    return found


_ALL = {_module_name(p) for p in MODULES}


def _floor(module: str) -> str:
    return module.split(".")[0] if module else ""


@pytest.mark.parametrize("path", MODULES, ids=_dotted)
def test_imports_go_down_the_floors(path):
    here = _floor(_module_name(path))
    upward = [
        f"line {line}: {target or 'attn_core'} ({_floor(target) or '__init__'}, floor {RANK[_floor(target)]})"
        for line, target in _imports(path)
        if _floor(target) != here and RANK[_floor(target)] >= RANK[here]
    ]
    assert upward == [], f"{_dotted(path)} (floor {RANK[here]}) imports from its floor or above: {upward}"


def test_no_import_cycles():
    graph = {_module_name(p): {t for _, t in _imports(p) if t in _ALL} for p in MODULES}
    # A package imports its own __init__ when one of its modules is imported: that edge is not a cycle.
    for module, targets in graph.items():
        targets.discard("")
        targets.difference_update(m for m in list(targets) if module.startswith(m + ".") or module == m)
    cycles, state = [], {}

    def visit(module, stack):
        state[module] = "open"
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                cycles.append(" -> ".join(stack[stack.index(target) :] + [target]))
            elif target not in state:
                visit(target, stack + [target])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == [], f"import cycles: {cycles}"


DOTTED_REF = re.compile(r"\battn_core(?:\.[A-Za-z_]\w*)+")
ROOT = PACKAGE.parent


def _resolves(ref: str) -> bool:
    """Whether ``attn_core.a.b.c`` names a module or an attribute reached from one."""
    import importlib

    parts = ref.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def _texts():
    for path in MODULES:
        yield _dotted(path), path.read_text()
    for name in ("README.md", "CONTRIBUTING.md"):
        yield name, (ROOT / name).read_text()
    for nb in sorted((ROOT / "book").glob("*.ipynb")):
        import json

        yield nb.name, "\n".join("".join(c["source"]) for c in json.loads(nb.read_text())["cells"])


def test_dotted_references_name_what_exists():
    # The map in docstrings, the README, CONTRIBUTING and the chapters drifts when modules move;
    # a dotted path that no longer resolves is caught here. Error messages name a class by its
    # short path (``attn_core.GatedDeltaNetCache``): a capitalised name right under attn_core is
    # read as such a name, not as a path.
    stale = set()
    for where, text in _texts():
        for match in DOTTED_REF.finditer(text):
            ref = match.group(0)
            if ref.endswith((".py", ".js")) or (ref.count(".") == 1 and ref.split(".")[1][0].isupper()):
                continue
            if not _resolves(ref):
                stale.add(f"{where}: {ref}")
    assert sorted(stale) == []
