"""action-download-artifact's stand-in: one artifact of an earlier run, as GitHub's runs API would find it, from
the runs `nox -s workflows` recorded (`ACT_RECORDED_RUNS`: a JSON line per finished run, newest last, with the
folder act's artifact server kept its artifacts in). Standard library only."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path


def matches(run: dict[str, str]) -> bool:
    wanted = {
        "repository": os.environ["GITHUB_REPOSITORY"],
        "branch": os.environ.get("INPUT_BRANCH", ""),
        "event": os.environ.get("INPUT_EVENT", ""),
    }
    workflow = os.environ.get("INPUT_WORKFLOW", "")
    if workflow:
        wanted["workflow"] = Path(workflow).name
    else:
        wanted["name"] = os.environ["GITHUB_WORKFLOW"]  # the current workflow
    conclusion = os.environ.get("INPUT_WORKFLOW_CONCLUSION", "success")
    if conclusion not in ("", "completed"):
        wanted["conclusion"] = conclusion
    return all(not value or run.get(key) == value for key, value in wanted.items())


def main() -> int:
    name = os.environ["INPUT_NAME"]
    recorded = Path(os.environ.get("ACT_RECORDED_RUNS", "/nonexistent"))
    runs = [json.loads(line) for line in recorded.read_text().splitlines()] if recorded.is_file() else []
    candidates = [run for run in reversed(runs) if matches(run)]
    if os.environ.get("INPUT_SEARCH_ARTIFACTS") != "true":
        candidates = candidates[:1]
    folders = (Path(run["artifacts"]) / name for run in candidates)
    found = next((folder for folder in folders if folder.is_dir()), None)
    with Path(os.environ["GITHUB_OUTPUT"]).open("a") as output:
        output.write(f"found_artifact={'true' if found else 'false'}\n")
    if found is None:
        message = f"no artifact {name} in the matching runs ({len(candidates)} of {len(runs)} recorded)"
        choice = os.environ.get("INPUT_IF_NO_ARTIFACT_FOUND", "fail")
        if choice == "fail":
            print(f"::error::{message}")
            return 1
        if choice == "warn":
            print(f"::warning::{message}")
        return 0
    dest = Path(os.environ.get("GITHUB_WORKSPACE", ".")) / os.environ.get("INPUT_PATH", "./")
    shutil.copytree(found, dest, dirs_exist_ok=True)
    print(f"artifact {name} of an earlier run into {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
