"""Print the built site's size and fail if it exceeds the 50 MB target (the book must stay small to ship offline)."""

from __future__ import annotations

import sys
from pathlib import Path

LIMIT_MB = 50.0


def main(site: str) -> int:
    root = Path(site)
    files = [p for p in root.rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files) / 1e6
    pages = len(list(root.rglob("*.html")))
    print(f"built site {root}: {len(files)} files, {pages} HTML pages, {size:.1f} MB (limit {LIMIT_MB:.0f} MB)")
    return 0 if size <= LIMIT_MB else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "_build/html"))
