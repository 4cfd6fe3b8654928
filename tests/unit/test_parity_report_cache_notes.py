"""The report's notes list each case the artifact cache was not used for, apart from the results: one the key
code could not key (torchyard's fault, named) and one that opts out, never as a failure of the case."""

from __future__ import annotations

from pathlib import Path

from torchyard.inimage.report import write_reports

FAULT = (
    "torchyard's key code failed, a fault of torchyard's, not the model's: TypeError: 'Handle' object is not "
    "iterable (at torchyard/inimage/evaluation/cache/keys.py:262)"
)


def _passed(case: str, cache: str, why: str) -> dict[str, object]:
    return {"case": case, "backend": "export", "suite": "parity", "outcome": "passed", "reason": "", "cache": cache,
            "cache_why": why}  # fmt: skip


def test_uncached_cases_are_notes_not_failures(tmp_path: Path) -> None:
    records = [_passed("aligner", "unkeyable", FAULT), _passed("decoder", "off", "case 'decoder' sets cache=False")]
    text = write_reports(tmp_path, records, {"accelerator": "cpu"}, {})["markdown"].read_text()
    assert f"- artifact cache not used for `aligner` (export): {FAULT}\n" in text
    assert "- artifact cache not used for `decoder` (export): case 'decoder' sets cache=False\n" in text
    assert "FAIL" not in text
