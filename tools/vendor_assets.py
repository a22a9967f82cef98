"""Copy the offline book's web assets out of node_modules into _vendor/ (never committed).

_config.yml lists _vendor in Sphinx's html_static_path, so these files end up under
_build/html/_static/ and the book loads nothing from a CDN. Only the files a page can
request are copied, to keep the site small.
"""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NODE = ROOT / "node_modules"
OUT = ROOT / "_vendor"


def copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        shutil.copytree(src, dst, dirs_exist_ok=True)
    else:
        shutil.copy2(src, dst)


def main() -> None:
    if OUT.exists():
        shutil.rmtree(OUT)
    # require.js: the AMD loader the widget manager's bundle expects.
    copy(NODE / "requirejs" / "require.js", OUT / "require.js")
    # The ipywidgets HTML manager: its AMD bundle and the fonts its CSS points at.
    dist = NODE / "@jupyter-widgets" / "html-manager" / "dist"
    copy(dist / "embed-amd.js", OUT / "widgets" / "embed-amd.js")
    for f in dist.iterdir():
        if f.suffix in {".woff2", ".woff", ".ttf", ".eot", ".svg"}:
            copy(f, OUT / "widgets" / f.name)
    # MathJax 3: the combined TeX + CHTML component and what it loads lazily.
    mj = NODE / "mathjax" / "es5"
    copy(mj / "tex-mml-chtml.js", OUT / "mathjax" / "tex-mml-chtml.js")
    for sub in ("input/tex/extensions", "output/chtml/fonts/woff-v2", "ui", "a11y", "adaptors"):
        copy(mj / sub, OUT / "mathjax" / sub)
    size = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"vendored web assets into {OUT.relative_to(ROOT)}/ ({size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
