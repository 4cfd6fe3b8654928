"""Debian's chromium, headless, driven by selenium through Debian's chromedriver: for the pages torchyard
makes (the docs site, the compatibility report). Screenshots go to `$TORCHYARD_DOCS_SCREENSHOTS` when set."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"  # Debian's chromium, chromium-driver


@contextmanager
def chromium() -> Iterator[webdriver.Chrome]:
    for path in (CHROMIUM, CHROMEDRIVER):
        assert Path(path).exists(), f"{path} is missing: apt-get install chromium chromium-driver"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    # --no-sandbox: chromium refuses to run as root with its sandbox, and CI runs as root; it reads only
    # pages this checkout made, from loopback or a file.
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1000"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def screenshot(driver: webdriver.Chrome, name: str, fallback: Path) -> None:
    folder = Path(os.environ.get("TORCHYARD_DOCS_SCREENSHOTS", fallback))
    folder.mkdir(parents=True, exist_ok=True)
    assert driver.save_screenshot(str(folder / f"{name}.png"))


def errors_logged(driver: webdriver.Chrome) -> list[str]:
    entries: list[dict[str, str]] = driver.get_log("browser")  # type: ignore[no-untyped-call]  # selenium's own hint
    return [entry["message"] for entry in entries if entry["level"] == "SEVERE"]


def open_page(driver: webdriver.Chrome, url: str) -> None:
    driver.get(url)
    WebDriverWait(driver, 30).until(lambda d: d.execute_script("return document.readyState") == "complete")
