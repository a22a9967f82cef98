"""Tests for attn_core.teach.reporting: fetching ``transformers`` names for a parity cell, or saying why not."""

from __future__ import annotations

from transformers import LlamaConfig, LlamaForCausalLM

from attn_core.teach.reporting import transformers_names


def test_transformers_names_finds_them():
    assert transformers_names("LlamaConfig", "LlamaForCausalLM") == (LlamaConfig, LlamaForCausalLM)


def test_transformers_names_says_why_not(capsys):
    assert transformers_names("NoSuchModelForCausalLM") is None
    out = capsys.readouterr().out
    assert out.startswith("skipped: transformers ") and "has no NoSuchModelForCausalLM" in out
    # One missing name is enough to skip, and the message names only the missing one.
    assert transformers_names("LlamaConfig", "NoSuchConfig") is None
    assert "has no NoSuchConfig in transformers" in capsys.readouterr().out
    assert transformers_names("x", module="transformers_not_installed_anywhere") is None
    assert "transformers_not_installed_anywhere cannot be imported" in capsys.readouterr().out
