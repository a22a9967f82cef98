"""Printing the library's own source on a page: the lines that matter, fitted to the column.

The chapters show the code they teach from the package itself (so that the page cannot
drift from what runs), but a module's lines are up to 120 characters wide and a book's
column holds 88. :func:`show_source` picks the lines between two markers and fits each one
without changing what it means: a trailing comment moves onto its own line above, a long
comment or docstring is rewrapped, a long statement is broken after a comma (or before an
``and``/``or``/``if``/``else``) inside its brackets, and a long string inside brackets
becomes two adjacent literals. A line with nowhere safe to break stays long (the page wraps
it). The fitted code parses to the same program, docstrings aside.
"""

from __future__ import annotations

import inspect
import re
import textwrap

__all__ = ["fit_line", "format_source", "show_source"]

_STRING = re.compile(r"""(?P<q>["'])(?:\\.|(?!(?P=q)).)*(?P=q)""")  # one-line literal


def _code_and_comment(line: str) -> tuple[str, str]:
    """Split a line into its code and its trailing ``# comment`` (a '#' in a string is code)."""
    masked = _STRING.sub(lambda m: "x" * len(m.group()), line)
    at = masked.find("#")
    return (line, "") if at < 0 else (line[:at].rstrip(), line[at:])


def _depth_change(code: str) -> int:
    """How many brackets a line of code leaves open (strings and its comment ignored)."""
    masked = _STRING.sub("", _code_and_comment(code)[0])
    return sum(masked.count(c) for c in "([{") - sum(masked.count(c) for c in ")]}")


def _breaks(code: str, depth: int = 0) -> list[int]:
    """Where a line of code may break without a backslash: inside brackets, outside strings.

    Just after each ``", "``, and just before each ``and``/``or``/``if``/``else``/``for``;
    ``depth`` is the number of brackets left open by the lines above.
    """
    masked = _STRING.sub(lambda m: "x" * len(m.group()), code)
    found = []
    for i, ch in enumerate(masked):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if depth > 0 and masked.startswith(", ", i):
            found.append(i + 1)
        elif depth > 0 and any(masked.startswith(f" {w} ", i) for w in ("and", "or", "if", "else", "for")):
            found.append(i)
    return found


def fit_line(line: str, width: int = 88, *, depth: int = 0) -> list[str]:
    """One source line as lines of at most ``width`` characters, with the same meaning.

    Args:
        line: A line of Python (without its newline), indented as in its block.
        width: The column width to fit.
        depth: How many brackets the lines above left open (a line inside a call may
            break anywhere a comma separates its arguments).

    Returns:
        The fitted lines. A line with nowhere safe to break (no bracket open, no comment)
        stays long: changing the code to fit would show the reader something that does
        not run.
    """
    if width < 20:
        raise ValueError(f"width={width} is too narrow to fit code into (at least 20)")
    if len(line) <= width:
        return [line]
    indent = line[: len(line) - len(line.lstrip())]
    code, comment = _code_and_comment(line)
    if comment and code.strip():  # the comment goes above the code it describes
        return fit_line(indent + comment, width) + fit_line(code, width, depth=depth)
    if comment:  # a comment alone: rewrap it, keeping its "# "
        text = comment.lstrip("#").strip()
        return textwrap.wrap(text, width, initial_indent=indent + "# ", subsequent_indent=indent + "# ")
    body = code.strip()
    if len(body) > 6 and body[:3] in ('"""', "'''") and body.endswith(body[:3]):  # a one-line docstring
        wrapped = textwrap.wrap(body[3:-3], width - 3, initial_indent=indent + body[:3], subsequent_indent=indent)
        return [*wrapped[:-1], wrapped[-1] + body[:3]]
    hang = indent + "    "
    rows = []
    while len(code) > width:
        fitting = [b for b in _breaks(code, depth) if len(hang) < b < width]
        if fitting:
            rows.append(code[: fitting[-1]].rstrip())
            depth += _depth_change(rows[-1])
            code = hang + code[fitting[-1] :].lstrip()
            continue
        split = _split_string(code, width, depth, hang)
        if split is not None:  # adjacent literals concatenate: "ab" "cd" == "abcd"
            rows.append(split[0])
            depth += _depth_change(rows[-1])
            code = split[1]
            continue
        wrapped = _parenthesized(code) if depth == 0 else None
        if wrapped is not None and any(len(hang) < b < width for b in _breaks(wrapped)):
            code = wrapped  # x = (a if b else c) is the same program as x = a if b else c
            continue
        break  # nothing safe to do: leave it long (the page wraps it) rather than change it
    return [*rows, code]


_STATEMENT = re.compile(r"^(\s*(?:return |[\w.\[\], ]+ = ))(.+)$")


def _parenthesized(code: str) -> str | None:
    """``x = expr`` or ``return expr`` with ``expr`` in parentheses, so that it can break."""
    m = _STATEMENT.match(code)
    if m is None or m.group(2).startswith("(") and _depth_change(m.group(2)) == 0 and m.group(2).endswith(")"):
        return None
    if _depth_change(m.group(2)) != 0 or m.group(2).rstrip().endswith(":"):
        return None
    return f"{m.group(1)}({m.group(2)})"


def _split_string(code: str, width: int, depth: int, hang: str) -> tuple[str, str] | None:
    """Break ``code`` inside a string literal that crosses ``width`` and sits inside brackets.

    The literal becomes two adjacent literals (the second with the same prefix, ``f`` or
    ``r``), split after a space and never inside an f-string's ``{...}``; None when no such
    place exists.
    """
    masked = _STRING.sub(lambda m: "x" * len(m.group()), code)
    for m in _STRING.finditer(code):
        if not m.start() < width - 2 < m.end():
            continue
        open_brackets = depth + sum(masked[: m.start()].count(c) for c in "([{")
        if open_brackets - sum(masked[: m.start()].count(c) for c in ")]}") <= 0:
            return None
        prefix = re.search(r"[A-Za-z]*$", code[: m.start()]).group()
        quote, body = m.group()[0], m.group()[1:-1]
        room = width - 1 - (m.start() + 1)  # characters of the body the first line can hold
        spaces = [i + 1 for i, ch in enumerate(body[:room]) if ch == " "]
        spaces = [i for i in spaces if body[:i].count("{") == body[:i].count("}") and 0 < i < len(body)]
        if not spaces or len(hang) + len(prefix) + 2 >= width:
            return None
        at = spaces[-1]
        first = code[: m.start()] + quote + body[:at] + quote
        second = hang + prefix + quote + body[at:] + quote + code[m.end() :]
        return first, second
    return None


def _rewrap(run: list[str], prefix: str, width: int) -> list[str]:
    """A run of prose lines (a comment's or a docstring's) rewrapped as one paragraph."""
    text = " ".join(line.strip()[len(prefix.strip()) :].strip() for line in run)
    indent = run[0][: len(run[0]) - len(run[0].lstrip())]
    return textwrap.wrap(text, width, initial_indent=indent + prefix, subsequent_indent=indent + prefix)


_ITEM = re.compile(r"^\s*(?:[\w*][\w*.]*(?: \([^)]*\))?:(?:\s|$)|[-*] )")  # "x: ...", "Args:", "- ..."


def _doc_paragraphs(doc: list[str]) -> list[list[str]]:
    """A docstring's lines cut into paragraphs: an item or a sentence run, with its deeper continuations."""
    paragraphs: list[list[str]] = []
    for line in doc:
        indent = len(line) - len(line.lstrip())
        if paragraphs and line.strip() and paragraphs[-1][0].strip():
            first = paragraphs[-1][0]
            first_indent = len(first) - len(first.lstrip())
            continues = indent > first_indent or (indent == first_indent and not _ITEM.match(line))
            if continues and not first.strip().endswith(":"):
                paragraphs[-1].append(line)
                continue
        paragraphs.append([line])
    return paragraphs


def _fit_paragraph(paragraph: list[str], width: int) -> list[str]:
    """One docstring paragraph, rewrapped as a whole when one of its lines is too long."""
    if all(len(line) <= width for line in paragraph):
        return paragraph
    first = paragraph[0]
    indent = first[: len(first) - len(first.lstrip())]
    rest = paragraph[1:]
    hang = rest[0][: len(rest[0]) - len(rest[0].lstrip())] if rest else indent
    text = " ".join(line.strip() for line in paragraph)
    return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=hang)


def _fit_block(lines: list[str], width: int) -> list[str]:
    """Fit a block of source lines: prose (comments, docstrings) rewrapped by paragraph, code by line.

    A run of comment lines at one indent, or a docstring's paragraph (an item of an
    ``Args:`` list with its continuation lines, or a run of sentences), is rewrapped as a
    whole only when one of its lines is too long, so that short, deliberate line breaks
    stay. Code lines go through :func:`fit_line`.
    """
    shown, i, depth = [], 0, 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        quote = stripped[:3]
        if quote in ('"""', "'''") and stripped.count(quote) == 1:  # a docstring over several lines
            j = next((k for k in range(i + 1, len(lines)) if quote in lines[k]), len(lines) - 1)
            for paragraph in _doc_paragraphs(lines[i : j + 1]):
                shown += _fit_paragraph(paragraph, width)
            i = j + 1
            continue
        if stripped.startswith("#"):
            indent = line[: len(line) - len(line.lstrip())]
            j = i + 1
            while j < len(lines) and lines[j].startswith(indent + "#"):
                j += 1
            run = lines[i:j]
            shown += run if all(len(r) <= width for r in run) else _rewrap(run, "# ", width)
            i = j
            continue
        shown += fit_line(line, width, depth=depth)
        depth = max(0, depth + _depth_change(line))
        i += 1
    return shown


def format_source(
    obj: object,
    first: str | None = None,
    last: str | None = None,
    *,
    skip: tuple[str, ...] = (),
    width: int = 88,
) -> str:
    """The source of ``obj``, or the stretch of it between two markers, fitted to ``width``.

    Args:
        obj: A function, method or class of the package.
        first: Start at the first line that contains this text (default: the first line).
        last: End at the first line from ``first`` on that contains this text (default: the
            last line).
        skip: Leave out every line that contains one of these texts (a docstring's lines,
            branches that serve other chapters), and a blank line that follows one.
        width: The column width: every printed line is at most this long.

    Returns:
        A header naming the object and its lines in its file, then the chosen lines.

    Raises:
        ValueError: If a marker is not in the source (naming the marker and the object).
    """
    lines, start_line = inspect.getsourcelines(obj)
    lines = [line.rstrip("\n") for line in lines]
    name = f"{obj.__module__}.{getattr(obj, '__qualname__', obj)}"
    start = 0
    if first is not None:
        start = next((i for i, line in enumerate(lines) if first in line), None)
        if start is None:
            raise ValueError(f"first={first!r} is not in the source of {name}")
    stop = len(lines) - 1
    if last is not None:
        stop = next((i for i in range(start, len(lines)) if last in lines[i]), None)
        if stop is None:
            raise ValueError(f"last={last!r} is not in the source of {name} after {first!r}")
    chosen, dropped = [], False
    for line in lines[start : stop + 1]:
        if any(s in line for s in skip):
            dropped = True
        elif line.strip() or not (dropped or not chosen):  # no blank line left by a skip
            chosen.append(line)
            dropped = False
    shown = _fit_block(textwrap.dedent("\n".join(chosen)).split("\n"), width)
    where = f"lines {start_line + start}-{start_line + stop}"
    return "\n".join(fit_line(f"# {name} ({where})", width) + shown)


def show_source(obj: object, first: str | None = None, last: str | None = None, **options) -> None:
    """Print :func:`format_source` (same arguments): the page's view of the package's code."""
    print(format_source(obj, first, last, **options))
