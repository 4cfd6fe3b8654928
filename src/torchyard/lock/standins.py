"""Stand-in wheels: a minimal, valid wheel (metadata, optional files, a RECORD with hashes).

Used to stand in for a vendor package at lock time (a metadata-only wheel with the vendor's exact
version and no dependencies, so the rest of the tree resolves against that version), and by the tests
to build a local index of tiny packages. Stdlib only.
"""

from __future__ import annotations

import base64
import hashlib
import re
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

# A fixed timestamp keeps the bytes (and so the hash) of a wheel the same on every run.
_EPOCH = (1980, 1, 1, 0, 0, 0)


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def write_wheel(
    directory: Path,
    name: str,
    version: str,
    requires: Sequence[str] = (),
    files: Mapping[str, bytes] | None = None,
) -> Path:
    """Write `<name>-<version>-py3-none-any.whl` into `directory` and return its path."""
    stem = normalize(name).replace("-", "_")
    dist_info = f"{stem}-{version}.dist-info"
    metadata = "".join(
        [
            "Metadata-Version: 2.1\n",
            f"Name: {name}\n",
            f"Version: {version}\n",
            *(f"Requires-Dist: {requirement}\n" for requirement in requires),
        ]
    )
    wheel = "Wheel-Version: 1.0\nGenerator: torchyard\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    contents = {**(files or {}), f"{dist_info}/METADATA": metadata.encode(), f"{dist_info}/WHEEL": wheel.encode()}
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in contents.items())
    record += f"{dist_info}/RECORD,,\n"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{stem}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for member, data in [*contents.items(), (f"{dist_info}/RECORD", record.encode())]:
            info = zipfile.ZipInfo(member, date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return path
