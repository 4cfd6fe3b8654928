"""The command blocks of README.md and the guides in docs/, each either run by a test or marked as needing
hardware this project's machines lack.

A fenced `bash` block is a command block. The line above it says which it is:

    <!-- runs: ID -->      a test, or .ci/run, runs this block verbatim (`block("ID")` hands it the text)
    <!-- needs: WHAT -->   it needs WHAT (a GPU, a Mac, an index), which this project's machines lack

The same ID may mark the same block in several pages. `python3 -m tests.docblocks ID` prints the block (for
.ci/run, which runs it with `eval`). Stdlib only: .ci/run calls it before any venv exists.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The generated reference holds no command blocks; it is written by docs/generate.py.
GENERATED = ROOT / "docs" / "reference"
MARKER = re.compile(r"<!-- (?P<kind>runs|needs): (?P<value>.+?) -->")
FENCE = re.compile(r"^```(?P<info>\S*)\s*$")
COMMAND_LANGUAGES = ("bash", "sh", "shell", "console")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, from 1
    language: str
    marker: tuple[str, str] | None  # (kind, value) from the line above, if any
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def pages() -> list[Path]:
    return [
        ROOT / "README.md",
        *sorted(path for path in (ROOT / "docs").rglob("*.md") if GENERATED not in path.parents),
    ]


def blocks(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    found, number = [], 0
    while number < len(lines):
        opening = FENCE.match(lines[number])
        if opening is None:
            number += 1
            continue
        end = next(index for index in range(number + 1, len(lines)) if lines[index].startswith("```"))
        above = MARKER.fullmatch(lines[number - 1].strip()) if number else None
        marker = (above["kind"], above["value"]) if above else None
        text = "\n".join(lines[number + 1 : end]) + "\n"
        found.append(Block(path, number + 1, opening["info"], marker, text))
        number = end + 1
    return found


def command_blocks() -> list[Block]:
    return [block for path in pages() for block in blocks(path) if block.language in COMMAND_LANGUAGES]


def block(identifier: str, found: list[Block] | None = None) -> str:
    """The text of the command block marked `runs: identifier` (the same wherever it appears)."""
    texts = {b.text for b in (command_blocks() if found is None else found) if b.marker == ("runs", identifier)}
    if len(texts) != 1:
        raise LookupError(f"{len(texts)} different command blocks are marked `runs: {identifier}`")
    return texts.pop()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python3 -m tests.docblocks ID")
    try:
        sys.stdout.write(block(sys.argv[1]))
    except LookupError as error:
        sys.exit(f"tests.docblocks: {error}")
