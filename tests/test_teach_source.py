"""attn_core.teach.source: the package's code on a page, fitted to the column without changing it."""

from __future__ import annotations

import ast
import inspect
import textwrap

import pytest

from attn_core import MultiHeadAttention
from attn_core.ops.backends.explicit import explicit_attention
from attn_core.teach.source import fit_line, format_source, show_source


def _program(code: str) -> str:
    """The AST of ``code`` with every docstring blanked (rewrapping a docstring is allowed)."""
    tree = ast.parse(textwrap.dedent(code))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                body[0].value.value = ""
    return ast.dump(tree)


@pytest.mark.parametrize("obj", [explicit_attention, MultiHeadAttention.forward, MultiHeadAttention])
@pytest.mark.parametrize("width", [88, 72])
def test_fitted_source_is_the_same_program_within_the_width(obj, width):
    text = format_source(obj, width=width)
    header, *lines = text.split("\n")
    assert header.startswith(f"# {obj.__module__}.{obj.__qualname__} (lines ")
    assert _program("\n".join(lines)) == _program(inspect.getsource(obj))
    assert max(map(len, lines)) <= width, [line for line in lines if len(line) > width]


def test_markers_choose_a_stretch_and_name_its_lines():
    text = format_source(explicit_attention, "if groups > 1:", "flatten back")
    lines = text.split("\n")
    assert lines[1] == "if groups > 1:" and "flatten back" in lines[-1]
    first = inspect.getsourcelines(explicit_attention)[1]
    source = inspect.getsource(explicit_attention).split("\n")
    start = first + next(i for i, line in enumerate(source) if "if groups > 1:" in line)
    assert f"(lines {start}-{start + len(lines) - 2})" in lines[0]


def test_skip_leaves_lines_out():
    text = format_source(explicit_attention, "if groups > 1:", "return out, weights", skip=("groups",))
    assert "groups" not in "\n".join(text.split("\n")[2:])


def test_fit_line_moves_a_comment_rewraps_prose_and_breaks_inside_brackets():
    code = "    total = compute(alpha, beta)  # " + "why " * 30
    fitted = fit_line(code, 60)
    assert fitted[-1] == "    total = compute(alpha, beta)" and all(f.startswith("    # ") for f in fitted[:-1])
    call = "result = some_function(" + ", ".join(f"argument_{i}" for i in range(12)) + ")"
    fitted = fit_line(call, 50)
    assert all(len(f) <= 50 for f in fitted) and _program("\n".join(fitted)) == _program(call)
    doc = '    """' + "word " * 30 + '"""'
    assert all(len(f) <= 50 for f in fit_line(doc, 50))


def test_a_long_string_in_brackets_becomes_two_literals_with_the_same_value():
    code = 'raise ValueError(f"the width {width} is too narrow for these heads, which need at least {need} columns")'
    fitted = fit_line(code, 60)
    assert all(len(f) <= 60 for f in fitted)
    width, need = 3, 7
    pieces = "\n".join(fitted).replace("raise ValueError", "message = ")
    scope = {"width": width, "need": need}
    exec(pieces, scope)
    assert scope["message"] == f"the width {width} is too narrow for these heads, which need at least {need} columns"


def test_a_line_with_nowhere_safe_to_break_stays_as_it_is():
    code = "x = alpha_beta_gamma_delta_epsilon_zeta_eta_theta_iota_kappa_lambda_mu_nu_xi_omicron"
    assert fit_line(code, 40) == [code]


def test_show_source_prints_what_format_source_returns(capsys):
    show_source(explicit_attention, "if groups > 1:", "flatten back")
    assert capsys.readouterr().out.strip() == format_source(explicit_attention, "if groups > 1:", "flatten back")


def test_bad_input():
    with pytest.raises(ValueError, match="first='no such line'.*explicit_attention"):
        format_source(explicit_attention, "no such line")
    with pytest.raises(ValueError, match="last='no such line'"):
        format_source(explicit_attention, "if groups > 1:", "no such line")
    with pytest.raises(ValueError, match="width=10"):
        fit_line("x = 1 + 2 + 3 + 4 + 5", 10)
    with pytest.raises(TypeError):
        format_source(42)


def test_a_docstring_is_rewrapped_by_paragraph_and_a_skip_leaves_no_blank_line():
    from attn_core.ops.shapes import split_heads
    from attn_core.teach import heads

    lines = format_source(heads.induction_score, width=72).split("\n")
    assert max(map(len, lines)) <= 72
    assert not any(len(line.split()) == 1 and line.strip().isalpha() for line in lines)  # no lone word
    shown = format_source(split_heads, skip=('"""', "Shapes:", "``")).split("\n")
    assert shown[1].startswith("def split_heads") and shown[2].strip(), shown[:3]
