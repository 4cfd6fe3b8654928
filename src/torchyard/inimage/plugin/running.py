"""The test a run is in, written to its reports folder as each test starts (`contract.RUNNING`) and removed when
the session ends: a backend's runtime that segfaults or aborts ends the process before any report is written,
and the host then names the test it died in."""

from __future__ import annotations

import contextlib
from pathlib import Path

from torchyard import contract


class Running:
    """Registered on the controller (a worker's crash under xdist ends its worker only, and xdist says so)."""

    def __init__(self, report_dir: Path) -> None:
        self.path = report_dir / contract.RUNNING

    def pytest_runtest_logstart(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        with contextlib.suppress(OSError):  # a folder it cannot write: the host names no test
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(nodeid + "\n", encoding="utf-8")

    def pytest_sessionfinish(self) -> None:
        self.path.unlink(missing_ok=True)
