from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

import pytest

from torchyard.util.atomic import replace_atomically, write_atomically


@pytest.mark.parametrize("durable", [True, False])
def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path, durable: bool) -> None:
    target = tmp_path / "entry.json"
    target.write_text("old")

    def half_then_fail(stream: BinaryIO) -> None:
        stream.write(b"new, half of it")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        replace_atomically(target, half_then_fail, durable=durable)
    assert target.read_text() == "old"
    assert [path.name for path in tmp_path.iterdir()] == ["entry.json"]


def test_the_writers_value_comes_back_and_the_text_is_whole(tmp_path: Path) -> None:
    target = tmp_path / "a.bin"
    assert replace_atomically(target, lambda stream: stream.write(b"12345"), durable=False) == 5
    assert target.read_bytes() == b"12345"
    write_atomically(tmp_path / "new" / "b.txt", "héllo\n")  # its folder made, UTF-8
    assert (tmp_path / "new" / "b.txt").read_bytes() == "héllo\n".encode()


def test_a_new_file_gets_the_usual_mode_and_a_replaced_one_keeps_its_own(tmp_path: Path) -> None:
    """`torchyard init`'s matrix.toml, noxfile.py and workflow are the project's files, not private ones."""
    umask = os.umask(0o022)
    try:
        write_atomically(tmp_path / "new.toml", "x")
        assert stat.S_IMODE((tmp_path / "new.toml").stat().st_mode) == 0o644
        (tmp_path / "script").write_text("y")
        (tmp_path / "script").chmod(0o755)
        write_atomically(tmp_path / "script", "z")
        assert stat.S_IMODE((tmp_path / "script").stat().st_mode) == 0o755
    finally:
        os.umask(umask)
