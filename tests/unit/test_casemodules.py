"""An entry's cases modules checked against the project's files before a build."""

from __future__ import annotations

import pytest

from torchyard.errors import ConfigError
from torchyard.image.casemodules import check_case_modules

SRC_LAYOUT = ["pyproject.toml", "src/mypkg/__init__.py", "src/mypkg/cases.py", "src/mypkg/policy/__init__.py"]
FLAT = ["pyproject.toml", "robot/__init__.py", "robot/torchyard_cases.py", "train.py", "model.py"]


@pytest.mark.parametrize(
    ("files", "cases"),
    [
        (SRC_LAYOUT, ["mypkg.cases", "mypkg.cases:QUICK", "mypkg.policy", "mypkg"]),
        (FLAT, ["robot.torchyard_cases:CASES", "model"]),
        (FLAT, ["zoo_extra.cases"]),  # not the project's: a dependency's, the image imports it
        (["ns/sub/cases.py"], ["ns.sub.cases"]),  # a namespace package
    ],
)
def test_the_projects_own_modules_pass(files: list[str], cases: list[str]) -> None:
    check_case_modules("cpu", cases, files)


@pytest.mark.parametrize(
    ("files", "case", "said"),
    [
        (SRC_LAYOUT, "mypkg.casez", "cases module 'mypkg.casez' is not in the project (no src/mypkg/casez.py or "
         "src/mypkg/casez/__init__.py); did you mean 'mypkg.cases'?"),
        (FLAT, "robot.torchyard_case:CASES", "did you mean 'robot.torchyard_cases'?"),
        (FLAT, "robot.nothing_like_it", "(no robot/nothing_like_it.py or robot/nothing_like_it/__init__.py)"),
    ],
)  # fmt: skip
def test_a_misspelled_module_of_the_project_is_one_line_before_any_build(
    files: list[str], case: str, said: str
) -> None:
    with pytest.raises(ConfigError, match=r"^entry 'cpu': cases module") as caught:
        check_case_modules("cpu", ["mypkg.cases", case] if files is SRC_LAYOUT else [case], files)
    assert said in str(caught.value)
