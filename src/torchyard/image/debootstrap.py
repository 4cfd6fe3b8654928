"""A local Debian base image made with debootstrap and `docker import`, for machines with no registry.

Point an entry at it per machine (`TORCHYARD_BASE_IMAGES=cpu=torchyard/base:bookworm`); matrix.toml
keeps its digest-pinned public base for everyone else.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from torchyard.host.engine import DockerCli
from torchyard.util import proc

# The releases a base can be made of, with the Python their apt has (an entry's `python` must be it).
DEBIAN_SUITES = {"bookworm": "3.11", "trixie": "3.13"}


def base_tag(suite: str) -> str:
    """The tag a base of `suite` gets unless another is named."""
    return f"torchyard/base:{suite}"


DEFAULT_TAG = base_tag("bookworm")
PACKAGES = ("python3", "python3-venv", "ca-certificates")


def debootstrap_args(target: Path, suite: str, mirror: str) -> tuple[str, ...]:
    return ("debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", suite, str(target), mirror)


def bootstrap_base(
    cli: DockerCli,
    *,
    tag: str = DEFAULT_TAG,
    suite: str = "bookworm",
    mirror: str = "http://deb.debian.org/debian",
    runner: proc.Runner = proc.run,
    env: Mapping[str, str] = os.environ,
) -> str:
    """Bootstrap `suite` into a scratch folder, import it as `tag`; returns the new image's ID."""
    with tempfile.TemporaryDirectory(prefix="torchyard-base-") as scratch:
        rootfs, archive = Path(scratch) / "rootfs", Path(scratch) / "rootfs.tar"
        print(f"[1/3] debootstrap {suite} (minbase + {', '.join(PACKAGES)})", file=sys.stderr, flush=True)
        runner(debootstrap_args(rootfs, suite, mirror), hint="install it: `sudo apt-get install debootstrap`", env=env)
        print("[2/3] packing the root filesystem", file=sys.stderr, flush=True)
        runner(("tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(archive), "."), env=env)
        print(f"[3/3] docker import as {tag}", file=sys.stderr, flush=True)
        imported = runner((cli.path, "import", str(archive), tag), capture=True, env=env)
    return imported.stdout.strip()
