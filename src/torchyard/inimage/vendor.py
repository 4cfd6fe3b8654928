"""Record the vendor packages a base image ships, and verify they are still those bytes.

`record` runs at image build time before anything is installed around the vendor packages;
`verify` runs after the install (failing the build) and again in the probe when a container starts.
Stdlib only, so it runs with the base image's own Python before torchyard's dependencies exist.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
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


def _location(dist: metadata.Distribution) -> str:
    return str(Path(str(dist.locate_file(""))).resolve())


def _modules(dist: metadata.Distribution) -> list[str]:
    """Top-level import names the distribution provides (from its RECORD)."""
    names = set()
    for item in dist.files or ():
        top = item.parts[0]
        if top.endswith((".dist-info", ".data")) or top in {"..", "__pycache__"} or top.endswith(".pth"):
            continue
        names.add(top.removesuffix(".py") if len(item.parts) == 1 else top)
    return sorted(name for name in names if name.isidentifier())


def _shadowed(module: str, location: str) -> str | None:
    """Where `import module` would come from, when that is not the vendor's folder."""
    spec = importlib.util.find_spec(module)
    origin = spec.origin if spec is not None and spec.origin else None
    if origin is None or origin in {"built-in", "frozen"}:
        return None
    return None if str(Path(origin).resolve()).startswith(location + "/") else origin


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
                "location": _location(dist),
                "modules": _modules(dist),
            }
        )
    return {"format": RECORD_FORMAT, "packages": packages}


def verify(saved: dict[str, Any], *, deep: bool) -> list[str]:
    """One line per vendor package that is gone, replaced or shadowed: name, vendor version, what is there.

    Run it with the interpreter the suites use (the venv's): a package installed into the venv replaces
    the base's for that interpreter even though the base's files are untouched.
    """
    problems = []
    for package in saved.get("packages", []):
        name, version = package["name"], package["version"]
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            problems.append(f"vendor package {name} {version} was removed")
            continue
        if dist.version != version:
            where = _location(dist)
            problems.append(f"vendor package {name} {version} was replaced by {name} {dist.version} at {where}")
            continue
        shadows = [(module, _shadowed(module, package["location"])) for module in package.get("modules", [])]
        shadow = next(((module, origin) for module, origin in shadows if origin), None)
        if shadow is not None:
            problems.append(f"vendor package {name} {version}: `import {shadow[0]}` now loads {shadow[1]}")
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
