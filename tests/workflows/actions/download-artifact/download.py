"""download-artifact's stand-in: the run's artifacts from act's artifact server (its runner artifact API:
list the run's artifacts, list an artifact's files, fetch each). Standard library only."""

from __future__ import annotations

import fnmatch
import gzip
import json
import os
import sys
import urllib.parse
import urllib.request
from pathlib import Path


def get(url: str) -> tuple[bytes, str]:
    headers = {"Authorization": f"Bearer {os.environ['ACTIONS_RUNTIME_TOKEN']}"}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers)) as answer:
        return bytes(answer.read()), str(answer.headers.get("Content-Encoding", ""))


def main() -> int:
    name, pattern = os.environ.get("INPUT_NAME", ""), os.environ.get("INPUT_PATTERN", "")
    merge = os.environ.get("INPUT_MERGE_MULTIPLE", "false") == "true"
    workspace = Path(os.environ.get("GITHUB_WORKSPACE", "."))
    dest = workspace / os.environ.get("INPUT_PATH", ".")
    base = f"{os.environ['ACTIONS_RUNTIME_URL']}_apis/pipelines/workflows/{os.environ['GITHUB_RUN_ID']}/artifacts"
    try:
        listing = json.loads(get(base)[0]).get("value") or []
    except OSError:
        listing = []  # the server answers an error while the run has no artifact yet
    chosen = [a for a in listing if (a["name"] == name if name else fnmatch.fnmatchcase(a["name"], pattern or "*"))]
    if name and not chosen:
        print(f"::error::Artifact not found: {name}")
        return 1
    for artifact in chosen:
        into = dest if name or merge else dest / artifact["name"]
        query = urllib.parse.quote(artifact["name"])
        items = json.loads(get(f"{artifact['fileContainerResourceUrl']}?itemPath={query}")[0])["value"]
        for item in items:
            data, encoding = get(item["contentLocation"])
            relative = Path(item["path"]).relative_to(artifact["name"])
            target = into / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(gzip.decompress(data) if encoding == "gzip" else data)
        print(f"artifact {artifact['name']}: {len(items)} files into {into}")
    print(f"{len(chosen)} artifacts downloaded")
    return 0


if __name__ == "__main__":
    sys.exit(main())
