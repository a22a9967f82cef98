"""Do the lessons catch a broken attn_core? Plant known bugs and count the chapters that fail.

    python tools/planted_bugs.py            # every bug below
    python tools/planted_bugs.py rope_sign  # one of them

Each bug is planted in a scratch copy of ``attn_core`` (the checkout is not touched),
which the notebook kernels import first (``PYTHONPATH``); then every lesson is
re-executed and compared with its committed outputs by ``pytest --nbval``, exactly as
``make lessons`` does. A lesson is a test only if a wrong ``attn_core`` fails it: the
table printed at the end says, per bug, which chapters failed.

Each bug is a literal replacement in one file; the script refuses to run if the text to
replace is not found exactly once (so a refactor cannot silently turn a bug into a no-op).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# name: (file in attn_core, text, replacement, what it breaks)
BUGS = {
    "scale_1_over_d": (
        "ops/backends/call.py",
        "self.scale = None if scale is None else float(scale)",
        "self.scale = 1.0 / q.shape[-1] if scale is None else float(scale)",
        "the default scale is 1/D instead of 1/sqrt(D)",
    ),
    "rope_sign": (
        "positions/rope.py",
        "cos, sin = angles.cos(), angles.sin()",
        "cos, sin = angles.cos(), (-angles).sin()",
        "RoPE rotates by -theta",
    ),
    "cache_offset": (
        "layers/multihead.py",
        "past = 0 if kv_cache is None else kv_cache.offset",
        "past = 0",
        "cached decoding restarts positions (RoPE, query temperature, band masks) at 0",
    ),
}


def plant(name: str, workdir: Path) -> Path:
    """Copy attn_core into ``workdir`` with bug ``name`` planted; return the folder to put on PYTHONPATH."""
    file, old, new, _ = BUGS[name]
    target = workdir / name
    shutil.copytree(ROOT / "attn_core", target / "attn_core", ignore=shutil.ignore_patterns("__pycache__"))
    path = target / "attn_core" / file
    text = path.read_text()
    if text.count(old) != 1:
        raise SystemExit(f"bug {name!r}: expected the text once in attn_core/{file}, found {text.count(old)} times")
    path.write_text(text.replace(old, new))
    return target


def failing_chapters(pythonpath: Path) -> dict[str, int]:
    """Run the lessons against the attn_core in ``pythonpath``; failed cells per notebook."""
    env = {
        **os.environ,
        "PYTHONPATH": str(pythonpath),
        "PYTHONHASHSEED": "0",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    # The planted copy lives outside the checkout, so it would not find the checkout's
    # .models folder (SmolLM2): point it there, or every bug would "fail" the LLM appendix.
    if "ATTN_CORE_MODELS" not in env and (ROOT / ".models").is_dir():
        env["ATTN_CORE_MODELS"] = str(ROOT / ".models")
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "--nbval",
        "book",
        "--nbval-sanitize-with",
        "tests/nbval_sanitize.cfg",
        "-q",
        "-n",
        "2",
        "--dist",
        "loadscope",
        "-p",
        "no:cacheprovider",
        "-rf",
    ]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True).stdout
    fails: dict[str, int] = {}
    for m in re.finditer(r"^FAILED book/(\S+?)\.ipynb::", out, re.M):
        fails[m.group(1)] = fails.get(m.group(1), 0) + 1
    return fails


def main(names: list[str]) -> None:
    unknown = sorted(set(names) - set(BUGS))
    if unknown:
        raise SystemExit(f"unknown bug(s) {unknown}; choose from {sorted(BUGS)}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names or list(BUGS):
            fails = failing_chapters(plant(name, Path(tmp)))
            chapters = ", ".join(f"{nb} ({n})" for nb, n in sorted(fails.items())) or "none"
            rows.append(f"| {name} | {BUGS[name][3]} | {len(fails)} | {chapters} |")
            print(rows[-1], flush=True)
    print("\n| bug | what it breaks | chapters failing | chapters (failed cells) |\n|---|---|---:|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main(sys.argv[1:])
