"""The stack suites run inside images (or in a venv with `torchyard test --local`); the plugin comes in
with `-p torchyard.inimage.plugin` on the command line (`torchyard.contract.pytest_args`)."""

from pathlib import Path

import pytest

from torchyard.inimage.suites.inner import start_server

pytest_plugins = ["pytester"]


def pytest_collection_finish(session: pytest.Session) -> None:
    """The harness's whole-run tests fork from one server (`inner`): start it as soon as they are
    selected, so that its imports overlap the tests that run before them."""
    if any(Path(str(item.path)).name == "test_harness.py" for item in session.items):
        start_server()
