"""The standard every exercise check is held to (CONTRIBUTING.md, "Exercises"), for every check.

Each module ``attn_core/teach/exercises/<name>.py`` has its test module
``tests/test_teach_exercises_<name>.py``, which holds the table ``ANSWERS``: for each of the
module's checks, ``(right, wrong)``, a list of right answers (at least one) and a list of
``(answer, words)`` pairs, the typical mistakes (at least two), each with words its verdict
must print (what is wrong, in the check's own terms). An entry may instead be a string: the
reason its check cannot run here (Triton missing), which skips it. Here, for every check:

* each right answer returns ``True`` and prints one line, ``[...] correct: ...``, and the check
  leaves the global random state as it found it;
* each wrong answer returns ``False`` and prints one line, ``[...] not yet: ...``, with its words;
* a function that raises, and one that returns ``None``, return ``False`` and print a verdict:
  a check never raises on a wrong answer (a notebook keeps running).

``test_every_check_has_answers`` fails when a module defines a check without an entry, so a
new check cannot be added without its right and wrong answers.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest
import torch

import attn_core.teach.exercises as exercises

TESTS = Path(__file__).parent


def _checks() -> dict[str, object]:
    """Every ``check_*`` function the exercise modules define, by ``<module>.<name>``."""
    found = {}
    for info in pkgutil.iter_modules(exercises.__path__):
        if info.name.startswith("_"):  # _common: the helpers the checks share
            continue
        module = importlib.import_module(f"{exercises.__name__}.{info.name}")
        for name, fn in vars(module).items():
            if name.startswith("check_") and inspect.isfunction(fn) and fn.__module__ == module.__name__:
                found[f"{info.name}.{name}"] = fn
    return found


def _key(check) -> str:
    return f"{check.__module__.rsplit('.', 1)[-1]}.{check.__name__}"


def _answers() -> dict[str, object]:
    """The entries of every test module's ``ANSWERS`` table, by the same key as :func:`_checks`."""
    table = {}
    for path in sorted(TESTS.glob("test_teach_exercises_*.py")):
        if path.stem == Path(__file__).stem:
            continue
        for check, entry in getattr(importlib.import_module(path.stem), "ANSWERS", {}).items():
            assert _key(check) not in table, f"{_key(check)} has two entries"
            table[_key(check)] = entry
    return table


CHECKS = _checks()
ANSWERS = _answers()


def _entry(key: str):
    entry = ANSWERS.get(key)
    if entry is None:
        pytest.fail(f"{key} has no entry in the ANSWERS table of its test module")
    if isinstance(entry, str):
        pytest.skip(entry)
    return entry


def _one_verdict(out: str, verdict: str) -> None:
    lines = out.splitlines()
    assert len(lines) == 1, f"expected one verdict line, got {len(lines)}:\n{out}"
    assert lines[0].startswith("[") and f"] {verdict}" in lines[0], out


def test_every_check_has_answers():
    missing = sorted(set(CHECKS) - set(ANSWERS))
    assert not missing, f"checks without right and wrong answers in their test module's ANSWERS: {missing}"
    assert not set(ANSWERS) - set(CHECKS), f"entries for checks that do not exist: {set(ANSWERS) - set(CHECKS)}"


def test_the_table_finds_the_checks():
    # The discovery itself can fail: at least the chapters' modules and their checks.
    assert len(CHECKS) >= 70 and "ch01.check_self_score" in CHECKS and "ch21.check_dq_kernel" in CHECKS


@pytest.mark.parametrize("key", sorted(CHECKS))
def test_entry_lists_a_right_answer_and_two_wrong_ones(key):
    right, wrong = _entry(key)
    assert len(right) >= 1, f"{key}: no right answer"
    assert len(wrong) >= 2, f"{key}: fewer than two wrong answers"
    for _, words in wrong:
        assert isinstance(words, str) and words.strip(), f"{key}: each wrong answer names the words of its verdict"


@pytest.mark.parametrize("key", sorted(CHECKS))
def test_passes_each_right_answer_and_keeps_the_random_state(key, capsys):
    right, _ = _entry(key)
    torch.manual_seed(0)
    want = torch.rand(3)
    torch.manual_seed(0)
    for i, answer in enumerate(right):
        assert CHECKS[key](answer) is True, f"{key}: right answer {i} failed:\n{capsys.readouterr().out}"
        _one_verdict(capsys.readouterr().out, "correct")
    # the notebook's seeded cells after the check draw what they drew without it
    assert torch.equal(torch.rand(3), want), f"{key} moved the global random state"


@pytest.mark.parametrize("key", sorted(CHECKS))
def test_fails_each_wrong_answer_saying_why(key, capsys):
    _, wrong = _entry(key)
    for i, (answer, words) in enumerate(wrong):
        assert CHECKS[key](answer) is False, f"{key}: wrong answer {i} ({words!r}) passed"
        out = capsys.readouterr().out
        _one_verdict(out, "not yet")
        assert words in out, f"{key}: wrong answer {i}: {words!r} not in the verdict {out!r}"


def _raises(*args, **kwargs):
    raise NotImplementedError


def _returns_none(*args, **kwargs):
    return None


@pytest.mark.parametrize("key", sorted(CHECKS))
def test_never_raises_on_a_broken_answer(key, capsys):
    _entry(key)  # skipped with its check where the check cannot run
    assert CHECKS[key](_raises) is False
    out = capsys.readouterr().out
    _one_verdict(out, "not yet")
    assert CHECKS[key](_returns_none) is False
    _one_verdict(capsys.readouterr().out, "not yet")
