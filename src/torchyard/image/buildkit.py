"""BuildKit's plain output, read: the line that says why a build failed, and which dependency layers it
took from a cache."""

from __future__ import annotations

import re

from torchyard.errors import CommandError
from torchyard.image.plan import BuildPlan
from torchyard.matrix.schema import Entry
from torchyard.util import proc
from torchyard.util.proc import cause

UNREACHABLE = re.compile(r"no such host|dial tcp|connection refused|i/o timeout|TLS handshake|server misbehaving")
STEP_MESSAGE = re.compile(r"^(?:#\d+ \d+\.\d+ )?((?:vendor guard|image check|system packages): .*)$", re.MULTILINE)
MISSING = re.compile(r"manifest unknown|not found|pull access denied|repository does not exist")
# A dependency layer's step (`#15 [image  7/17] RUN ... install-layer.sh numeric`); `#15 CACHED` means no
# wheel of that group was downloaded or installed.
LAYER_STEP = re.compile(r"^(#\d+) \[[^\]]*\] RUN .*install-layer\.sh (\w+)\s*$", re.MULTILINE)
# A layer pulled from the registry's cache (BuildKit names the blob it fetches).
PULLING = re.compile(r"^#\d+ pulling sha256:", re.MULTILINE)


# uv's summaries inside a step (`#9 41.2 Installed 85 packages in 2.31s`): a long install's progress.
UV_SUMMARY = re.compile(r"^#\d+ \d+\.\d+ (?:Resolved|Prepared|Installed|Uninstalled|Audited) \d+ packages? ")
STEP = re.compile(r"^#(\d+) ")


class StepLines:
    """What a build shows as it runs (a `proc.Tee` filter): each step's first line, its end (DONE, CACHED,
    ERROR), uv's summaries and whatever BuildKit prints outside a step. The rest (each command's output, each
    blob's progress) stays in the tail a failure reads; a failing step's own lines are shown when it fails."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def __call__(self, line: str) -> bool:
        step = STEP.match(line)
        if step is None:
            return bool(line.strip())
        first = step[1] not in self.seen
        self.seen.add(step[1])
        end = line[step.end() :].startswith(("DONE", "CACHED", "ERROR"))
        return first or end or UV_SUMMARY.match(line) is not None


def failed_step_output(output: str) -> str:
    """Every line the failing step printed, as BuildKit printed them ("" where no step failed)."""
    failed = re.findall(r"^#(\d+) ERROR:", output, re.MULTILINE)
    if not failed:
        return ""
    return "".join(line for line in output.splitlines(keepends=True) if line.startswith(f"#{failed[-1]} "))


def failed_step_line(output: str) -> str:
    """The last line the failing step printed (`#12 0.085 useradd: UID 1000 is not unique`), which says more
    than BuildKit's own `executor failed running [<the whole command>]`."""
    failed = re.findall(r"^#(\d+) ERROR:", output, re.MULTILINE)
    if not failed:
        return ""
    printed = re.findall(rf"^#{failed[-1]} \d+\.\d+ (.*\S.*)$", output, re.MULTILINE)
    return proc.redact(printed[-1].strip())[:400] if printed else ""


def failed_step_header(output: str) -> str:
    """What the failing step is (`[internal] load metadata for ...`, `[dependencies 3/10] RUN ...`): the first
    line BuildKit printed for the step its last ERROR names; "" where none did."""
    failed = re.findall(r"^#(\d+) ERROR:", output, re.MULTILINE)
    if not failed:
        return ""
    found = re.search(rf"^#{failed[-1]} (?!\d+\.\d+ )(?!ERROR:)(.*\S.*)$", output, re.MULTILINE)
    return found[1] if found else ""


def explain_build_failure(entry: Entry, plan: BuildPlan, error: CommandError) -> str:
    """One line, cause first, with what to do; the build's own output is above it."""
    output = error.output
    # The guard's, the image check's or the system packages' own output line (BuildKit prefixes it with its
    # step and time) says what and why; the step's echoed command names them too, and is not that line.
    guard = STEP_MESSAGE.search(output)
    if guard:
        return f"entry {entry.name!r}: the image build failed: {guard[1]}"
    header = failed_step_header(output)
    # The base is to blame only where the failing step is its own (its metadata, its FROM): a RUN step that
    # failed printing "not found" (a command missing, status 127) is that step's.
    base_step = plan.base_image in output and (
        "load metadata for" in header or "FROM" in header
        if header
        else ("load metadata for" in output or "FROM" in output)
    )
    if base_step and UNREACHABLE.search(output):
        return (
            f"entry {entry.name!r}: cannot pull base image {plan.base_image}: the registry is unreachable "
            f"({cause(output)}); make a local base with `nox -s base-image` and set "
            f"TORCHYARD_BASE_IMAGES={entry.accelerator.name}=torchyard/base:bookworm, or configure a registry "
            "mirror (`registry-mirrors` in /etc/docker/daemon.json)"
        )
    if base_step and MISSING.search(output):
        return (
            f"entry {entry.name!r}: base image {plan.base_image} is not in its registry ({cause(output)}); "
            "check the digest in matrix.toml (`nox -s refresh` moves it) or TORCHYARD_BASE_IMAGES"
        )
    why = failed_step_line(output) or cause(output) or f"exit status {error.returncode}"
    return f"entry {entry.name!r}: the image build failed: {why}"


def layer_steps(output: str) -> dict[str, bool]:
    """Per dependency group that the output shows: whether its layer was CACHED."""
    return {
        group: re.search(rf"(?m)^{re.escape(step)} CACHED$", output) is not None
        for step, group in LAYER_STEP.findall(output)
    }


def pulled_layers(output: str) -> bool:
    """Whether the build took any layer from the registry's cache."""
    return PULLING.search(output) is not None
