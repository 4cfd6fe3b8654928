"""A failure is evaluated once more: one that passes then is called flaky, with both outcomes, and still fails;
an error, a failure that fails again and a known failure are left as they are."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from torchyard.inimage.cases import KnownFailure
from torchyard.inimage.cases.builtin import CASES
from torchyard.inimage.evaluation.evaluations import again_on_failure
from torchyard.inimage.evaluation.harness import Result

pytestmark = pytest.mark.harness

MLP = next(case for case in CASES if case.name == "mlp")
MISSED = "output: scaled max error 0.00075 > 0.0001"
KNOWN = dataclasses.replace(MLP, known_failures={"inductor": KnownFailure("planted", computes=MLP.make_module)})


def evaluations(*outcomes: str) -> tuple[list[Path], object]:
    """An `evaluated` that gives these statuses in turn, and the folders it was asked to work in."""
    asked: list[Path] = []
    left = list(outcomes)

    def evaluated(workdir: Path) -> Result:
        asked.append(workdir)
        status = left.pop(0)
        return Result("mlp", "inductor", "float32", status, MISSED if status == "failed" else "")  # type: ignore[arg-type]

    return asked, evaluated


def test_a_failure_that_passes_when_evaluated_again_is_flaky_and_still_fails(tmp_path: Path) -> None:
    asked, evaluated = evaluations("passed")
    first = Result("mlp", "inductor", "float32", "failed", MISSED)
    result = again_on_failure(MLP, first, evaluated, tmp_path)  # type: ignore[arg-type]
    assert result.status == "failed" and result.flaky.startswith(f"flaky: it failed ({MISSED}), then passed")
    assert result.reason == f"{MISSED} [flaky: it passed when evaluated again]"
    assert asked == [tmp_path / "mlp" / "again"]  # its own folder: the first evaluation's files stay


@pytest.mark.parametrize(
    ("first", "again", "subject"),
    [
        ("failed", "failed", MLP),  # wrong both times: plainly failed
        ("error", None, MLP),  # an error is the backend's: not evaluated again
        ("passed", None, MLP),
        (
            "failed",
            None,
            dataclasses.replace(MLP, known_failures={"inductor": KnownFailure("planted", computes=MLP.make_module)}),
        ),
    ],
)
def test_anything_else_is_left_as_it_was(tmp_path: Path, first: str, again: str | None, subject: object) -> None:
    asked, evaluated = evaluations(*([again] if again else []))
    result = Result("mlp", "inductor", "float32", first, MISSED if first == "failed" else "")  # type: ignore[arg-type]
    assert again_on_failure(subject, result, evaluated, tmp_path) is result  # type: ignore[arg-type]
    assert result.flaky == "" and "[flaky" not in result.reason
    assert len(asked) == (1 if again else 0)
