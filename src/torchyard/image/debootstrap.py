"""A local Debian base image made with mmdebstrap (or debootstrap) and `docker import`, for machines with no
registry. mmdebstrap, where installed, writes the archive itself in one apt run: about half debootstrap's time
(benchmarks/README.md); debootstrap, everywhere Debian is, is the fallback.

Point an entry at it per machine (`TORCHYARD_BASE_IMAGES=cpu=torchyard/base:bookworm`); matrix.toml
keeps its digest-pinned public base for everyone else.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping
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


def mmdebstrap_args(archive: Path, suite: str, mirror: str) -> tuple[str, ...]:
    """The same root filesystem as `debootstrap_args`, written straight to a tar archive."""
    return ("mmdebstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", suite, str(archive), mirror)


def bootstrap_base(
    cli: DockerCli,
    *,
    tag: str = DEFAULT_TAG,
    suite: str = "bookworm",
    mirror: str = "http://deb.debian.org/debian",
    runner: proc.Runner = proc.run,
    env: Mapping[str, str] = os.environ,
    which: Callable[[str], str | None] = shutil.which,
) -> str:
    """Bootstrap `suite` into a scratch folder, import it as `tag`; returns the new image's ID."""
    with tempfile.TemporaryDirectory(prefix="torchyard-base-") as scratch:
        rootfs, archive = Path(scratch) / "rootfs", Path(scratch) / "rootfs.tar"
        what = f"{suite} (minbase + {', '.join(PACKAGES)})"
        if which("mmdebstrap"):
            print(f"[1/2] mmdebstrap {what}", file=sys.stderr, flush=True)
            runner(mmdebstrap_args(archive, suite, mirror), env=env)
        else:
            print(f"[1/2] debootstrap {what}", file=sys.stderr, flush=True)
            hint = "install mmdebstrap (faster) or debootstrap: `sudo apt-get install mmdebstrap`"
            runner(debootstrap_args(rootfs, suite, mirror), hint=hint, env=env)
            runner(("tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(archive), "."), env=env)
        print(f"[2/2] docker import as {tag}", file=sys.stderr, flush=True)
        imported = runner((cli.path, "import", str(archive), tag), capture=True, env=env)
    return imported.stdout.strip()
