"""What the code knows, the prose may not contradict: the families ``from_hf`` converts or refuses.

The chapters print such lists from the code (``SUPPORTED_MODEL_TYPES``, ``NOT_CONVERTED``);
this test reads every chapter's prose (markdown cells and ``book/*.md``) for sentences that
say the library converts, supports or refuses a named family, and checks each against the
registry in :mod:`attn_core.hf.families`. It is how "chapter 19 says gpt-oss is refused"
(it converts) is caught the day the registry changes.

A clause (split at ``;``, "but", "while", "whereas") that names a family and says it
converts must name a supported family; one that says the library refuses it (or does not
convert it) must name a family the registry does not convert.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from attn_core.hf.families import NOT_CONVERTED, SUPPORTED_MODEL_TYPES

BOOK = Path(__file__).resolve().parents[1] / "book"
PAGES = sorted(BOOK.glob("*.ipynb")) + sorted(BOOK.glob("*.md"))

# How the prose names each model type (the model_type itself, in backticks, also counts).
NAMES = {
    "llama": [r"LLaMA(?![- ]?[34])", r"Llama (?:2|3(?:\.\d)?)\b"],
    "llama4_text": [r"Llama[- ]4"],
    "mistral": [r"Mistral(?! Small)"],
    "mixtral": [r"Mixtral"],
    "qwen2": [r"Qwen2(?![.-]?\d)"],
    "qwen3": [r"Qwen3(?![-‑]?(?:MoE|Next|\.\d))"],
    "qwen3_moe": [r"Qwen3[-‑]MoE"],
    "qwen3_next": [r"Qwen3[-‑]Next"],
    "deepseek_v3": [r"DeepSeek[-‑]V3(?!\.\d)"],
    "deepseek_v32": [r"DeepSeek[-‑]V3\.2"],
    "deepseek_v4": [r"DeepSeek[-‑]V4"],
    "gemma2": [r"Gemma[- ]?2"],
    "gemma3_text": [r"Gemma[- ]?3(?!n)"],
    "gemma3n_text": [r"Gemma[- ]?3n"],
    "gpt_oss": [r"gpt[-‑]oss"],
    "granite": [r"Granite"],
    "phi3": [r"Phi[-‑]?3"],
    "cohere2": [r"Cohere ?2", r"Command R7B"],
    "glm4_moe": [r"GLM[-‑]4(?:\.5)?(?:[-‑]MoE)?"],
    "smollm3": [r"SmolLM3"],
    "olmo2": [r"OLMo[- ]?2"],
    "olmo3": [r"OLMo[- ]?3"],
    "kimi_linear": [r"Kimi[- ]Linear"],
    "minimax": [r"MiniMax"],
}
PATTERNS = {
    model_type: re.compile("|".join([rf"`{model_type}`", *names]), re.I if model_type == "gpt_oss" else 0)
    for model_type, names in NAMES.items()
}
ABOUT_CONVERTING = re.compile(r"\bconvert(?:s|ed|ing)?\b|\bfrom_hf\b|\brefus(?:es|ed|al)\b|\bsupported\b")
REFUSAL = re.compile(
    r"\brefus(?:es|ed|al)\b|unsupported|not (?:yet )?supported"
    r"|(?:does not|doesn't|cannot|can't|won't|not) (?:yet )?convert"
)
CLAUSE = re.compile(r";|\bbut\b|\bwhile\b|\bwhereas\b|(?<=[.!?])\s")


def _prose(path: Path) -> list[tuple[str, str]]:
    """(where, text) for each markdown cell of a notebook, or the whole of a markdown page."""
    if path.suffix == ".md":
        return [(path.name, path.read_text())]
    cells = json.loads(path.read_text())["cells"]
    return [
        (f"{path.name} cell {i}", "".join(c["source"])) for i, c in enumerate(cells) if c["cell_type"] == "markdown"
    ]


def _claims(text: str):
    """(model_type, refused?, clause) for each clause about converting that names a family."""
    text = re.sub(r"\s+", " ", text)
    for sentence in re.split(r"(?<=[.!?])\s", text):
        if not ABOUT_CONVERTING.search(sentence):
            continue
        for clause in CLAUSE.split(sentence):
            if not ABOUT_CONVERTING.search(clause):
                continue
            for model_type, pattern in PATTERNS.items():
                if pattern.search(clause):
                    yield model_type, bool(REFUSAL.search(clause)), clause.strip()


def test_every_named_family_is_known():
    # NAMES must cover the registry, so that a new family's prose is checked too.
    assert set(SUPPORTED_MODEL_TYPES) | set(NOT_CONVERTED) <= set(NAMES)


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.stem)
def test_prose_agrees_with_the_registry(path):
    wrong = []
    for where, text in _prose(path):
        for model_type, refused, clause in _claims(text):
            if refused and model_type in SUPPORTED_MODEL_TYPES:
                wrong.append(f"{where}: says {model_type} is refused, but from_hf converts it: {clause!r}")
            if not refused and model_type not in SUPPORTED_MODEL_TYPES:
                wrong.append(f"{where}: says {model_type} converts, but from_hf refuses it: {clause!r}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("`attn_core.convert` refuses gpt-oss.", [("gpt_oss", True)]),
        ("The library converts Llama 3 and Qwen3-Next.", [("llama", False), ("qwen3_next", False)]),
        ("It converts Mixtral, but refuses DeepSeek-V4.", [("mixtral", False), ("deepseek_v4", True)]),
        ("Gemma 2 uses soft-capping.", []),
    ],
)
def test_claims_are_read(text, expected):
    assert [(t, r) for t, r, _ in _claims(text)] == expected
