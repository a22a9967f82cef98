"""Keep every notebook's Colab badge and set-up cell in sync with _config.yml.

    python tools/sync_badges.py          # rewrite the badge line and the set-up cell
    python tools/sync_badges.py --check  # exit 1 (listing the notebooks) if any disagree

The repository URL and branch are set once, in _config.yml (``repository.url``,
``repository.branch``). The badge links to the notebook in Colab; the set-up cell
installs attn_core from the same repository and branch.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parent.parent
BADGE_PREFIX = '<a class="colab-badge"'
SETUP_MARKER = "# Set-up (the same in every chapter)."
# The badge picture is embedded (a data URI), so the offline book requests nothing.
BADGE_SVG = (
    "data:image/svg+xml;base64,"
    "PHN2ZyB4bWxucz0iaHR0cDovL3d3dy53My5vcmcvMjAwMC9zdmciIHdpZHRoPSIxMTgiIGhlaWdodD0iMjAiPjxyZWN0IHJ4PSIzIiB3aWR0aD0iMTE4IiBoZWlnaHQ9IjIwIiBmaWxsPSIjNTU1Ii8+PHJlY3Qgcng9IjMiIHg9IjUwIiB3aWR0aD0iNjgiIGhlaWdodD0iMjAiIGZpbGw9IiNmOWFiMDAiLz48cmVjdCB4PSI1MCIgd2lkdGg9IjQiIGhlaWdodD0iMjAiIGZpbGw9IiNmOWFiMDAiLz48ZyBmaWxsPSIjZmZmIiBmb250LWZhbWlseT0iVmVyZGFuYSxzYW5zLXNlcmlmIiBmb250LXNpemU9IjExIj48dGV4dCB4PSI3IiB5PSIxNCI+T3BlbiBpbjwvdGV4dD48dGV4dCB4PSI1OCIgeT0iMTQiIGZpbGw9IiMyMjIiPkNvbGFiPC90ZXh0PjwvZz48L3N2Zz4="
)


def repository() -> tuple[str, str]:
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())
    repo = cfg["repository"]
    return repo["url"].rstrip("/"), repo.get("branch", "main")


def badge_line(nb_path: Path) -> str:
    url, branch = repository()
    slug = url.split("github.com/", 1)[1]
    rel = nb_path.resolve().relative_to(ROOT).as_posix()
    # HTML rather than Markdown image syntax: MyST does not parse data URIs in ![..](..).
    return (
        f'{BADGE_PREFIX} href="https://colab.research.google.com/github/{slug}/blob/{branch}/{rel}">'
        f'<img src="{BADGE_SVG}" alt="Open in Colab" width="118" height="20"></a>'
    )


def setup_source() -> str:
    url, branch = repository()
    return f"""{SETUP_MARKER} In Google Colab this installs attn_core
# from the book's repository; torch, ipywidgets and matplotlib are already there and are
# not upgraded (upgrading ipywidgets would force a runtime restart). Elsewhere, and
# under the tests, it does nothing. ATTN_CORE_INSTALL points the install elsewhere.
import os, subprocess, sys

ATTN_CORE_URL = (
    "git+{url}@{branch}"
)
if "google.colab" in sys.modules or os.environ.get("ATTN_CORE_INSTALL"):
    source = os.environ.get("ATTN_CORE_INSTALL") or f"attn_core @ {{ATTN_CORE_URL}}"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", source]
    subprocess.run(pip, check=True)
    if "google.colab" in sys.modules:
        from google.colab import output
        output.enable_custom_widget_manager()"""


def sync(nb_path: Path, check: bool) -> bool:
    """Return True if the notebook was (or, with check, would be) changed."""
    nb = nbformat.read(nb_path, as_version=4)
    changed = False
    first = nb.cells[0]
    if first.cell_type != "markdown" or not first.source.startswith("# "):
        raise SystemExit(f"{nb_path}: the first cell must be the markdown title cell")
    lines = first.source.split("\n")
    want = badge_line(nb_path)
    badge_at = next((i for i, l in enumerate(lines) if l.startswith((BADGE_PREFIX, "[![Open in Colab]"))), None)
    if badge_at is None:
        lines.insert(1, "")
        lines.insert(2, want)
        changed = True
    elif lines[badge_at] != want:
        lines[badge_at] = want
        changed = True
    first.source = "\n".join(lines)
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    want_setup = setup_source()
    if code and nb.cells[code[0]].source.startswith(SETUP_MARKER):
        if nb.cells[code[0]].source != want_setup:
            nb.cells[code[0]].source = want_setup
            changed = True
    else:
        cell = nbformat.v4.new_code_cell(want_setup)
        cell.metadata["tags"] = ["hide-input"]
        nb.cells.insert(1, cell)
        changed = True
    if changed and not check:
        nbformat.write(nb, nb_path)
    return changed


def main(argv: list[str]) -> int:
    check = "--check" in argv
    paths = [Path(a) for a in argv if not a.startswith("--")] or sorted((ROOT / "book").glob("*.ipynb"))
    stale = [p for p in paths if sync(p, check)]
    for p in stale:
        print(f"{'out of sync' if check else 'updated'}: {p}")
    return 1 if (check and stale) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
