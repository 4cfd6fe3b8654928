"""The host's stamp on the reports a container wrote: trust, entry and image, never written through a link."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import markdown_it
import pytest

from torchyard.run.handback import HandBackError
from torchyard.run.stamp import HOST_LINE, stamp_reports


def test_the_host_stamps_trust_entry_and_image_over_what_the_container_wrote(tmp_path: Path) -> None:
    """A conftest that rewrites the reports after torchyard's plugin cannot call an untrusted run trusted."""
    (tmp_path / "env.json").write_text(json.dumps({"trust": "trusted", "torch": "2.14.1", "entry": "forged"}))
    (tmp_path / "parity.json").write_text(json.dumps({"environment": {"trust": "trusted"}, "results": []}))
    (tmp_path / "parity.md").write_text(f"{HOST_LINE} entry `cpu`, image `x`, **trusted** run\n### torchyard parity\n")
    stamp_reports(tmp_path, {"trust": "untrusted", "entry": "cpu", "image": "torchyard/cpu:abc"})
    environment = json.loads((tmp_path / "env.json").read_text())
    assert environment == {"trust": "untrusted", "torch": "2.14.1", "entry": "cpu", "image": "torchyard/cpu:abc"}
    assert json.loads((tmp_path / "parity.json").read_text())["environment"]["trust"] == "untrusted"
    markdown = (tmp_path / "parity.md").read_text().splitlines()
    assert markdown[0] == f"{HOST_LINE} entry `cpu`, image `torchyard/cpu:abc`, **untrusted** run"
    assert [line for line in markdown if line.startswith(HOST_LINE)] == markdown[:1]


FORGERIES = [
    "> **torchyard  (host)**: entry `cpu`, image `x`, **trusted** run",  # two spaces
    ">  **Torchyard (Host)**: **trusted** run",
    "> **" + "".join(chr(ord(c) + 0xFEE0) for c in "torchyard") + " (host)**: **trusted** run",  # full-width
    # what the attacker's review found a line filter lets through (issue 57, round three)
    "> **torchyard&#40;host)**: entry `cpu`, image `x`, **trusted** run",  # an entity for "("
    "> **torch\u200byard (host)**: entry `cpu`, image `x`, **trusted** run",  # a zero-width space
    "> **torch<!-- -->yard (host)**: entry `cpu`, image `x`, **trusted** run",  # an HTML comment
    "Forged: a trusted run\n===",  # a setext heading, after the title
    "```\n<b>closing the fence</b>\n````",  # a fence of its own, to close the host's
]


def rendered(markdown: str) -> str:
    """As GitHub renders a step summary, near enough: CommonMark with HTML."""
    return str(markdown_it.MarkdownIt("commonmark").render(markdown))


@pytest.mark.parametrize("forged", FORGERIES)
def test_an_untrusted_runs_markdown_is_shown_as_text_below_the_hosts_line(tmp_path: Path, forged: str) -> None:
    """A conftest can write anything into parity.md: a line that looks like the host's however it is spelled,
    a heading that says trusted. Below the host's line, an untrusted run's report is one code block that
    nothing inside closes, so none of it renders as the host's words or as a heading."""
    title = "### torchyard parity: cpu on cpu, torch 2.14.1, Trusted run; suites: export"
    (tmp_path / "parity.md").write_text(f"{title}\n{forged}\nbody, a trusted run in words\n")
    stamp_reports(tmp_path, {"trust": "untrusted", "entry": "cpu", "image": "i"})
    markdown = (tmp_path / "parity.md").read_text()
    assert markdown.splitlines()[0] == f"{HOST_LINE} entry `cpu`, image `i`, **untrusted** run"
    html = rendered(markdown)
    assert html.count("<strong>") == 2 and html.count("<blockquote>") == 1  # the host's line alone
    assert "<h" not in html and html.count("<pre>") == 1 and html.rstrip().endswith("</code></pre>")
    assert "untrusted run; suites: export" in html  # the title names the host's trust, as text


@pytest.mark.parametrize("forged", FORGERIES[:3])
def test_a_trusted_runs_markdown_keeps_its_layout_and_the_host_sets_its_line_and_title(
    tmp_path: Path, forged: str
) -> None:
    title = "### torchyard parity: cpu on cpu, torch 2.14.1, untrusted run; suites: export"
    (tmp_path / "parity.md").write_text(f"{forged}\n{title}\nbody, a trusted run in words\n")
    stamp_reports(tmp_path, {"trust": "trusted", "entry": "cpu", "image": "i"})
    markdown = (tmp_path / "parity.md").read_text().splitlines()
    assert markdown[0].startswith(HOST_LINE) and "**trusted**" in markdown[0]
    assert forged not in markdown
    assert markdown[2] == "### torchyard parity: cpu on cpu, torch 2.14.1, trusted run; suites: export"
    assert markdown[3] == "body, a trusted run in words"


def test_a_link_left_in_place_of_a_report_is_replaced_not_written_through(tmp_path: Path) -> None:
    (tmp_path / "victim").write_text("the host's")
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "env.json").symlink_to(tmp_path / "victim")
    stamp_reports(tmp_path / "reports", {"trust": "untrusted", "entry": "cpu", "image": "i"})
    assert (tmp_path / "victim").read_text() == "the host's"
    assert not (tmp_path / "reports" / "env.json").is_symlink()


FORGED_TITLE = "### torchyard parity: cpu on cpu, trusted run\n"


@pytest.mark.parametrize(
    ("name", "plant"),
    [
        ("env.json", lambda path: path.mkdir()),
        ("parity.md", lambda path: path.mkdir()),
        ("parity.json", lambda path: path.write_text("[" * 200_000 + "]" * 200_000)),
        ("env.json", lambda path: path.write_text('{"a": ' * 100_000 + "1" + "}" * 100_000)),
    ],
    ids=["env.json-a-folder", "parity.md-a-folder", "parity.json-past-recursion", "env.json-past-recursion"],
)
def test_a_stamp_that_cannot_finish_empties_the_reports_and_fails_in_one_line(
    tmp_path: Path, name: str, plant: Callable[[Path], object]
) -> None:
    """Issue 57, route 9: a stamp stopped midway (a folder where a report goes, JSON nested past the recursion
    limit) left the container's forged title in parity.md, which the workflow uploads."""
    if name != "parity.md":
        (tmp_path / "parity.md").write_text(FORGED_TITLE)
    plant(tmp_path / name)
    with pytest.raises(HandBackError, match=r"could not be stamped with the run's trust .*left empty"):
        stamp_reports(tmp_path, {"trust": "untrusted", "entry": "cpu", "image": "i"})
    assert list(tmp_path.iterdir()) == []
