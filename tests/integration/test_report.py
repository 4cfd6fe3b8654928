"""`torchyard report`'s page in Debian's chromium: the table renders with a column group per run, a header's
click sorts the rows (worst outcome first), and a cell's link opens its metrics and error."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from tests.integration.browser import chromium, errors_logged, open_page, screenshot
from torchyard.util import proc

pytestmark = pytest.mark.integration


def run(folder: Path, outcomes: dict[tuple[str, str], tuple[str, str]], torch: str) -> Path:
    results: list[dict[str, Any]] = [
        {
            "case": case, "backend": backend, "outcome": outcome, "reason": reason, "suite": "parity",
            "dtype": "float32", "reference": "float64 on cpu", "error_message": reason if outcome == "xfailed" else "",
            "comparisons": [{"output": "['action']", "shape": [2, 4], "dtype": "torch.float32", "max_abs_error": 1e-7,
                             "scaled_max_error": 2e-7, "rel_l2_error": 3e-7, "cosine": 1.0, "problem": ""}],
        }
        for (case, backend), (outcome, reason) in outcomes.items()
    ]  # fmt: skip
    folder.mkdir(parents=True)
    environment = {"accelerator": "cpu", "torch": torch, "executorch": "1.5.1"}
    (folder / "parity.json").write_text(
        json.dumps({"environment": environment, "precision": "fp32", "results": results})
    )
    return folder


def test_the_compatibility_page_sorts_and_links_each_cell(tmp_path: Path) -> None:
    current = run(
        tmp_path / "reports-cpu",
        {
            ("mlp", "eager"): ("passed", ""),
            ("mlp", "executorch-portable"): ("passed", ""),
            ("rotary", "eager"): ("passed", ""),
            ("rotary", "executorch-portable"): ("xfailed", "SpecViolationError: mismatched dtypes (known)"),
            ("zeta", "eager"): ("passed", ""),
            ("zeta", "executorch-portable"): ("failed", "output ['action']: relative L2 error 0.002 > 1e-05"),
        },
        torch="2.14.1",
    )
    older = run(tmp_path / "reports-cpu-2.11", {("mlp", "eager"): ("passed", "")}, torch="2.11.0")
    page = tmp_path / "compat.html"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc.run(["torchyard", "report", str(current), str(older), "--html", str(page)], env=env, capture=True)

    with chromium() as browser:
        open_page(browser, page.as_uri())
        groups = [cell.text for cell in browser.find_elements(By.CSS_SELECTOR, "#compat thead tr:first-child th")]
        assert groups == ["case", "cpu", "cpu-2.11"]

        def first_column() -> list[str]:
            return [row.text for row in browser.find_elements(By.CSS_SELECTOR, "#compat tbody td.case")]

        assert first_column() == ["mlp", "rotary", "zeta"]
        portable = browser.find_element(By.XPATH, "//th[text()='executorch-portable']")
        portable.click()  # worst first: failed, then the known failure, then passed
        assert first_column() == ["zeta", "rotary", "mlp"]
        portable.click()
        assert first_column() == ["mlp", "rotary", "zeta"]
        screenshot(browser, "report", tmp_path)

        cell = browser.find_element(By.CSS_SELECTOR, "#compat tbody td.failed a")
        cell.click()
        detail = browser.find_element(By.CSS_SELECTOR, "section.detail:target")
        assert detail.is_displayed()
        assert "zeta on executorch-portable, cpu" in detail.text and "relative L2 error 0.002" in detail.text
        assert "3e-07" in detail.text  # the metrics
        assert errors_logged(browser) == []
