"""The docs site as a reader gets it: built strictly by MkDocs, served on loopback and opened in Debian's
chromium (headless, driven by selenium through Debian's chromedriver). The home page and a generated reference
page render with Material's navigation, search finds a key in the reference, and the browser logs no error.
The guide's offline check block runs verbatim here.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from tests.docblocks import block
from tests.integration.browser import chromium, errors_logged, open_page, screenshot
from torchyard.util import proc

REPO = Path(__file__).parents[2]

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(folder)], cwd=REPO, env=env)
    return folder


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    with chromium() as driver:
        yield driver


def test_the_home_page_renders_with_its_navigation(browser: webdriver.Chrome, served: str, tmp_path: Path) -> None:
    open_page(browser, served)
    assert browser.title.startswith("torchyard")
    heading = browser.find_element(By.CSS_SELECTOR, "article h1")
    assert heading.text == "torchyard" and heading.is_displayed() and heading.size["width"] > 0
    navigation = browser.find_element(By.CSS_SELECTOR, "nav.md-nav--primary").get_attribute("textContent") or ""
    for section in ("Getting started", "Concepts", "How-to guides", "Reference", "Benchmarks"):
        assert section in navigation
    # Material's stylesheet applied: the header bar is laid out across the page.
    header = browser.find_element(By.CSS_SELECTOR, "header.md-header")
    assert header.is_displayed() and header.size["width"] >= 1000
    screenshot(browser, "home", tmp_path)
    assert errors_logged(browser) == []


def test_a_generated_reference_page_renders_and_search_finds_a_key(
    browser: webdriver.Chrome, served: str, tmp_path: Path
) -> None:
    open_page(browser, served + "reference/matrix/")
    assert browser.find_element(By.CSS_SELECTOR, "article h1").text.startswith("matrix.toml")
    cells = [cell.text for cell in browser.find_elements(By.CSS_SELECTOR, "article table td:first-child code")]
    assert {"exclude-newer", "base-image", "lock-on-runner", "max-rel-l2"} <= set(cells)
    table = browser.find_element(By.CSS_SELECTOR, "article table")
    assert table.is_displayed() and table.size["height"] > 0
    screenshot(browser, "reference-matrix", tmp_path)
    # Search runs in Material's web worker over the built index.
    field = WebDriverWait(browser, 30).until(expected_conditions.element_to_be_clickable((By.NAME, "query")))
    field.click()
    field.send_keys("lock-on-runner")
    # The results list is redrawn as the worker answers: read its text in one script call each time.
    script = "return document.querySelector('.md-search-result__list')?.textContent || ''"
    found = WebDriverWait(browser, 30).until(lambda d: d.execute_script(script) or None)
    assert "matrix.toml" in WebDriverWait(browser, 30).until(
        lambda d: (text := d.execute_script(script)) and "lock-on-runner" in text and text
    ), found
    screenshot(browser, "search", tmp_path)
    assert errors_logged(browser) == []


def test_the_guides_offline_check_runs_verbatim() -> None:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    assert shutil.which("torchyard", path=env["PATH"]), "torchyard is not installed in this environment"
    command = ["bash", "-euo", "pipefail", "-c", block("add-entry-check")]
    completed = proc.run(command, cwd=REPO, env=env, capture=True)
    assert "| cpu " in completed.stdout and "fresh" in completed.stdout + completed.stderr
