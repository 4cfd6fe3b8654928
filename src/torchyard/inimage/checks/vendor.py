"""Record the vendor packages a base image ships, and verify they are still those bytes.

`record` runs at image build time before anything is installed around the vendor packages, with the
base's own interpreter (the one its PATH finds: system, a venv such as AMD's /opt/venv, or a conda env);
`venv` then makes the venv the suites run in, seeing the vendor packages exactly where that interpreter
sees them; `verify` runs after the install (failing the build) and again in the probe when a container
starts. Stdlib only, so it runs with the base image's own Python before torchyard's dependencies exist.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import site
import subprocess
import sys
import venv
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


class RecordError(Exception):
    """The base does not have what matrix.toml says it ships."""


def record(names: Sequence[str]) -> dict[str, Any]:
    """Name, exact version and file digests of each vendor package, and where this interpreter finds
    packages (its site folders, in order); a missing package is an error."""
    packages = []
    for name in names:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise RecordError(
                f"vendor package {name!r} is not installed for the base's {Path(sys.executable).name} "
                f"({sys.executable}, prefix {sys.prefix}): check [accelerators.<name>.vendor] in matrix.toml "
                "against the base image"
            ) from None
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
    return {
        "format": RECORD_FORMAT,
        "interpreter": sys.executable,
        "site-dirs": [folder for folder in site.getsitepackages() if Path(folder).is_dir()] if packages else [],
        "packages": packages,
    }


VENDOR_PTH = "_torchyard_vendor.pth"


def make_venv(destination: Path, saved: dict[str, Any]) -> list[str]:
    """The suites' venv, from this interpreter's base. With vendor packages it sees the base's site
    folders through a `.pth` file (`site.addsitedir`, so their own `.pth` files apply), after its own
    site-packages: `--system-site-packages` would show the base *interpreter's* folders, not those of the
    venv or conda env the vendor packages live in (python/cpython#95469). Returns the folders added."""
    venv.EnvBuilder(with_pip=True, clear=True).create(destination)
    folders = list(saved.get("site-dirs", [])) if saved.get("packages") else []
    if not folders:
        return []
    python = destination / "bin" / "python"
    query = "import json, site; print(json.dumps(site.getsitepackages()))"
    own = json.loads(subprocess.run([str(python), "-c", query], check=True, capture_output=True, text=True).stdout)
    lines = "".join(f"import site; site.addsitedir({folder!r})\n" for folder in folders)
    (Path(own[0]) / VENDOR_PTH).write_text(lines)
    return folders


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
    parser = argparse.ArgumentParser(prog="python -m torchyard.inimage.checks.vendor")
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("record", help="record vendor packages into a JSON file")
    make.add_argument("record_file", type=Path)
    make.add_argument("--overrides", type=Path, required=True, help="write uv override pins here")
    make.add_argument("names", nargs="*")
    environment = commands.add_parser("venv", help="make the suites' venv, seeing the recorded vendor packages")
    environment.add_argument("destination", type=Path)
    environment.add_argument("--record", type=Path, required=True)
    check = commands.add_parser("verify", help="fail if a recorded vendor package changed")
    check.add_argument("record_file", type=Path)
    check.add_argument("--quick", action="store_true", help="sizes instead of bytes (container start)")
    args = parser.parse_args(argv)
    if args.command == "record":
        try:
            saved = record(args.names)
        except RecordError as error:
            print(f"vendor guard: {error}", file=sys.stderr)
            return 1
        args.record_file.write_text(json.dumps(saved, indent=2) + "\n")
        args.overrides.write_text(override_pins(saved))
        for package in saved["packages"]:
            print(f"vendor: {package['name']}=={package['version']} ({package['files']} files) {package['digest']}")
        return 0
    if args.command == "venv":
        for folder in make_venv(args.destination, json.loads(args.record.read_text())):
            print(f"vendor: the venv sees {folder}")
        return 0
    problems = verify(json.loads(args.record_file.read_text()), deep=not args.quick)
    for problem in problems:
        print(f"vendor guard: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
