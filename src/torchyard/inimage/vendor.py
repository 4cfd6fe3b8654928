"""Record the vendor packages a base image ships, and verify they are still those bytes.

`record` runs at image build time before anything is installed around the vendor packages;
`verify` runs after the install (failing the build) and again in the probe when a container starts.
Stdlib only, so it runs with the base image's own Python before torchyard's dependencies exist.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

RECORD_FORMAT = 1


def _files(dist: metadata.Distribution) -> list[Path]:
    return sorted(Path(str(dist.locate_file(item))) for item in dist.files or ())


def files_digest(dist: metadata.Distribution, *, deep: bool) -> str:
    """sha256 over every installed file: its bytes when `deep`, else its path and size (fast)."""
    digest = hashlib.sha256()
    for path in _files(dist):
        digest.update(str(path).encode() + b"\0")
        if not path.is_file():
            digest.update(b"<absent>")
        elif deep:
            with path.open("rb") as stream:
                for chunk in iter(lambda: stream.read(1 << 20), b""):
                    digest.update(chunk)
        else:
            digest.update(str(path.stat().st_size).encode())
        digest.update(b"\0")
    return "sha256:" + digest.hexdigest()


def record(names: Sequence[str]) -> dict[str, Any]:
    """Name, exact version and file digests of each vendor package; a missing one is an error."""
    packages = []
    for name in names:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise SystemExit(f"vendor package {name!r} is not installed in the base image") from None
        packages.append(
            {
                "name": name,
                "version": dist.version,
                "files": len(dist.files or ()),
                "digest": files_digest(dist, deep=True),
                "quick-digest": files_digest(dist, deep=False),
            }
        )
    return {"format": RECORD_FORMAT, "packages": packages}


def verify(saved: dict[str, Any], *, deep: bool) -> list[str]:
    """One line per vendor package that is gone or was replaced: name, vendor version, what is there now."""
    problems = []
    for package in saved.get("packages", []):
        name, version = package["name"], package["version"]
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            problems.append(f"vendor package {name} {version} was removed")
            continue
        if dist.version != version:
            problems.append(f"vendor package {name} {version} was replaced by {name} {dist.version}")
            continue
        key = "digest" if deep else "quick-digest"
        if files_digest(dist, deep=deep) != package[key]:
            problems.append(f"vendor package {name} {version}: its installed files changed (same version, other bytes)")
    return problems


def override_pins(saved: dict[str, Any]) -> str:
    """`uv pip install --override` lines that hold every vendor package at the recorded version."""
    return "".join(f"{package['name']}=={package['version']}\n" for package in saved["packages"])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torchyard.inimage.vendor")
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("record", help="record vendor packages into a JSON file")
    make.add_argument("record_file", type=Path)
    make.add_argument("--overrides", type=Path, required=True, help="write uv override pins here")
    make.add_argument("names", nargs="+")
    check = commands.add_parser("verify", help="fail if a recorded vendor package changed")
    check.add_argument("record_file", type=Path)
    check.add_argument("--quick", action="store_true", help="sizes instead of bytes (container start)")
    args = parser.parse_args(argv)
    if args.command == "record":
        saved = record(args.names)
        args.record_file.write_text(json.dumps(saved, indent=2) + "\n")
        args.overrides.write_text(override_pins(saved))
        for package in saved["packages"]:
            print(f"vendor: {package['name']}=={package['version']} ({package['files']} files) {package['digest']}")
        return 0
    problems = verify(json.loads(args.record_file.read_text()), deep=not args.quick)
    for problem in problems:
        print(f"vendor guard: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
