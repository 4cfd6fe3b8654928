"""upload-artifact's stand-in: act's artifact server, through the routes it serves for the runner's artifact
API (create a container, PUT each file under `<name>/`, PATCH to finalize). Standard library only."""

from __future__ import annotations

import json
import os
import sys
import urllib.parse
import urllib.request
from pathlib import Path


def request(method: str, url: str, body: bytes, content_type: str) -> bytes:
    headers = {"Authorization": f"Bearer {os.environ['ACTIONS_RUNTIME_TOKEN']}", "Content-Type": content_type}
    with urllib.request.urlopen(urllib.request.Request(url, data=body, method=method, headers=headers)) as answer:
        return bytes(answer.read())


def found(paths: list[Path]) -> tuple[Path, list[Path]]:
    """The files to upload and the folder their names are relative to (the one folder, a file's own folder,
    or the folders' common ancestor, as the real action roots them)."""
    files = sorted({f for p in paths for f in ([p] if p.is_file() else (q for q in p.rglob("*") if q.is_file()))})
    if len(paths) == 1 and paths[0].is_dir():
        root = paths[0]
    else:
        root = Path(os.path.commonpath([p.parent if p.is_file() else p for p in paths])) if paths else Path()
    return root, files


def main() -> int:
    name = os.environ["INPUT_NAME"]
    raw = [line.strip() for line in os.environ["INPUT_PATH"].splitlines() if line.strip()]
    workspace = Path(os.environ.get("GITHUB_WORKSPACE", "."))
    paths = [workspace / p for p in raw if (workspace / p).exists()]
    root, files = found(paths)
    if not files:
        message = f"No files were found with the provided path: {' '.join(raw)}. No artifacts will be uploaded."
        mode = os.environ.get("INPUT_IF_NO_FILES_FOUND", "warn")
        if mode == "error":
            print(f"::error::{message}")
            return 1
        print(f"::warning::{message}" if mode == "warn" else message)
        return 0
    base = f"{os.environ['ACTIONS_RUNTIME_URL']}_apis/pipelines/workflows/{os.environ['GITHUB_RUN_ID']}/artifacts"
    created = json.loads(
        request("POST", base, json.dumps({"Type": "actions_storage", "Name": name}).encode(), "application/json")
    )
    container = created["fileContainerResourceUrl"]
    size = 0
    for file in files:
        data = file.read_bytes()
        size += len(data)
        item = urllib.parse.quote(f"{name}/{file.relative_to(root).as_posix()}")
        request("PUT", f"{container}?itemPath={item}", data, "application/octet-stream")
    finalize = f"{base}?artifactName={urllib.parse.quote(name)}"
    request("PATCH", finalize, json.dumps({"Size": size}).encode(), "application/json")
    print(f"artifact {name}: {len(files)} files, {size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
