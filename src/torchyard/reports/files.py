"""A run's JSON report read as data from other people's code: size-limited, and a broken or foreign file is
one line, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from torchyard.contract import MAX_REPORT_BYTES as MAX_BYTES
from torchyard.errors import UsageError


def read_json(path: Path, kind: str) -> Any:
    """`path`'s JSON, or one line naming it as not a torchyard `kind` (parity.json, ops.json)."""
    try:
        if path.stat().st_size > MAX_BYTES:
            raise UsageError(f"report: {path}: larger than {MAX_BYTES >> 20} MiB; not a torchyard {kind}")
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise UsageError(f"report: {path}: not a readable {kind} ({error.__class__.__name__})") from None
