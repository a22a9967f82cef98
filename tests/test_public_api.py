"""attn_core's top level: the names a model-builder uses, grouped by module, nothing shadowing a module."""

from __future__ import annotations

import inspect
import pkgutil
from pathlib import Path

import attn_core

INIT = Path(attn_core.__file__)


def test_all_is_short_and_every_name_resolves():
    assert len(attn_core.__all__) <= 40, len(attn_core.__all__)
    assert len(set(attn_core.__all__)) == len(attn_core.__all__)
    for name in attn_core.__all__:
        assert getattr(attn_core, name) is not None, name


def test_no_public_top_level_name_beyond_all():
    # What else a notebook needs is imported from its module; the top level holds __all__,
    # the modules themselves and __version__.
    modules = {m.name for m in pkgutil.iter_modules(attn_core.__path__)}
    public = {n for n in vars(attn_core) if not n.startswith("_")}
    assert public - set(attn_core.__all__) - modules == set()


def test_no_function_or_class_shadows_a_module():
    modules = {m.name for m in pkgutil.iter_modules(attn_core.__path__)}
    for name in modules:
        value = getattr(attn_core, name, None)
        assert value is None or inspect.ismodule(value), f"attn_core.{name} is {value!r}, not the module {name}.py"
    for name in ("attention", "generate", "train"):
        assert name not in modules and callable(getattr(attn_core, name))


def test_init_is_grouped_by_module_without_late_imports():
    source = INIT.read_text()
    assert "noqa: E402" not in source
    after_all = source[source.index("__all__ = [") :]
    assert "import " not in after_all
