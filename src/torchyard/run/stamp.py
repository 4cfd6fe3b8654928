"""What the host knows of a run, written over what the container (or a pull request's conftest) wrote.

The reports come from the code under test: a conftest can rewrite env.json or parity.md after torchyard's
plugin and call an untrusted run trusted. Once the reports are handed back, the host sets the run's trust,
entry and image in env.json and in parity.json's environment, puts its own first line on parity.md and sets
the trust its title names; an untrusted run's parity.md follows that line as a code block (`as_text`), so
nothing the container wrote renders as anything, a line that looks like the host's included.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping
from pathlib import Path

from torchyard import contract
from torchyard.run.handback import HandBackError, empty_folder, read_report
from torchyard.util.atomic import write_atomically

HOST_LINE = "> **torchyard (host)**:"
_TITLE_TRUST = re.compile(r"\b(?:un)?trusted run\b", re.IGNORECASE)


def _claims_the_host(line: str) -> bool:
    """A line that reads as the host's own once case, width and spacing are set aside."""
    folded = "".join(unicodedata.normalize("NFKC", line).casefold().split())
    return "torchyard(host)" in folded


def _stamped_json(text: str | None, facts: Mapping[str, str], key: str | None) -> str:
    try:
        data = json.loads(text) if text is not None else {}
    except ValueError:
        data = {}
    if not isinstance(data, dict):
        data = {}
    if key is None:
        data.update(facts)
    else:
        inner = data.get(key)
        data[key] = {**(inner if isinstance(inner, dict) else {}), **facts}
    return json.dumps(data, indent=2, default=str) + "\n"


def host_line(facts: Mapping[str, str]) -> str:
    return f"{HOST_LINE} entry `{facts['entry']}`, image `{facts['image']}`, **{facts['trust']}** run\n"


def stamp_reports(folder: Path, facts: Mapping[str, str]) -> None:
    """Stamp `facts` (trust, entry, image) into the handed-back reports in `folder`; the files are replaced
    by rename, so a link the container left in their place is never written through. Fails closed: whatever
    the container's files make the stamp do (a folder where a report goes, JSON nested past the recursion
    limit), the folder is emptied and the run fails in one line, so no forged line survives a stamp."""
    try:
        _stamp(folder, facts)
    except Exception as error:  # every way the stamp can stop is the container's doing
        empty_folder(folder)
        raise HandBackError(
            f"entry {facts['entry']!r}: the reports could not be stamped with the run's trust "
            f"({type(error).__name__}): the reports are left empty"
        ) from None


def _stamp(folder: Path, facts: Mapping[str, str]) -> None:
    environment = read_report(folder / contract.ENVIRONMENT_JSON)
    write_atomically(folder / contract.ENVIRONMENT_JSON, _stamped_json(environment, facts, None))
    parity = read_report(folder / contract.PARITY_JSON)
    if parity is not None:
        write_atomically(folder / contract.PARITY_JSON, _stamped_json(parity, facts, "environment"))
    markdown = read_report(folder / contract.PARITY_MARKDOWN) or ""
    kept = [line for line in markdown.splitlines(keepends=True) if not _claims_the_host(line)]
    titles = [index for index, line in enumerate(kept) if line.startswith("#")][:1]
    for index in titles:
        kept[index] = _TITLE_TRUST.sub(f"{facts['trust']} run", kept[index])
    body = "".join(kept) if facts["trust"] == "trusted" else as_text("".join(kept))
    write_atomically(folder / contract.PARITY_MARKDOWN, host_line(facts) + "\n" + body)


UNTRUSTED_TEXT = "What follows is the run's own report, shown as text: code of the pull request's wrote it.\n\n"


def as_text(markdown: str) -> str:
    """An untrusted run's Markdown as a code block, which nothing inside can close (its fence is longer than
    any run of backticks there) and GitHub renders as text: no line of it can look like the host's, however
    it is spelled (entities, zero-width characters, comments, HTML)."""
    longest = max((len(run) for run in re.findall(r"`+|~+", markdown)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{UNTRUSTED_TEXT}{fence}text\n{markdown.rstrip(chr(10))}\n{fence}\n"
