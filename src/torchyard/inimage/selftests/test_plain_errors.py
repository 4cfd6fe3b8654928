"""torchyard makes no failure plain Python would not, and places a failure where its user can act (issue 71): a
library's logging bug is printed and the run goes on; an error raised in torch or the standard library is placed
at the project's line that led there; a network error says the run has none and what to do."""

from __future__ import annotations

import importlib
import logging
import sys
import urllib.error
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from _pytest.logging import LogCaptureHandler

from torchyard.inimage.cases import Case
from torchyard.inimage.evaluation.errors import describe_error
from torchyard.inimage.evaluation.harness import evaluate
from torchyard.inimage.selftests.planted import TOLERANCES

pytestmark = pytest.mark.harness

FORGOT = """
import torch


class Joiner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.backbone(x) * self.num_channels  # the attribute its factory forgot
"""


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    """A project module of its own (not torchyard's, not a release), importable for the test."""
    (tmp_path / "detr_like.py").write_text(FORGOT)
    sys.path.insert(0, str(tmp_path))
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("detr_like", None)


def test_a_librarys_logging_bug_is_printed_and_the_run_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    """The fence on pytest's log capture: its handler's error handling is logging's own."""
    assert LogCaptureHandler.handleError is logging.Handler.handleError
    with caplog.at_level(logging.INFO):
        logging.getLogger("torch._export.serde").info("%s and %s", "one argument")  # noqa: PLE1206 (the bug)


def test_an_error_raised_in_torch_is_placed_at_the_projects_line(project: Path, tmp_path: Path) -> None:
    joiner = importlib.import_module("detr_like").Joiner
    case = Case("joiner", joiner, lambda g: (torch.randn(2, 4, generator=g),))
    result = evaluate(case, "eager", device=torch.device("cpu"), dtype=torch.float32, tolerances=TOLERANCES,
                      workdir=tmp_path / "work")  # fmt: skip
    assert "'Joiner' object has no attribute 'num_channels' (at detr_like.py:11; raised at module.py:" in result.reason


def test_a_network_error_says_the_run_has_none() -> None:
    try:
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")
    except urllib.error.URLError as error:
        said = describe_error(error)
    assert said.startswith("URLError: <urlopen error [Errno -3] Temporary failure in name resolution>"), said
    assert "the run has no network" in said and "pretrained weights off" in said
    assert "no network" not in describe_error(ValueError("a plain error"))
