"""Route 3 of issue 57: an image pulled from a registry is checked against its plan before it is used."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from torchyard.errors import ImageBuildError
from torchyard.image import registry as image_registry
from torchyard.image.outcome import Transfer
from torchyard.image.plan import BuildPlan
from torchyard.matrix.machine import Registry

from .test_image import PLAN, REPO, make_plan


class Pulled:
    def __init__(self, labels: dict[str, str]) -> None:
        self.labels, self.attrs = labels, {"Size": 1}
        self.tags: list[str] = []

    def tag(self, name: str) -> None:
        self.tags.append(name)


class Images:
    def __init__(self, image: Pulled) -> None:
        self.image = image
        self.removed: list[str] = []

    def get(self, name: str) -> Pulled:
        return self.image

    def remove(self, name: str, force: bool = False) -> None:
        self.removed.append(name)


class Client:
    def __init__(self, image: Pulled) -> None:
        self.images = Images(image)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    shutil.copytree(REPO / "lockfiles", tmp_path / "lockfiles")
    return tmp_path


def _labels(plan: BuildPlan) -> dict[str, str]:
    args = dict(plan.build_args)
    return {label: args.get(arg, "") for label, arg in image_registry.PLAN_LABELS}


def test_a_pulled_image_whose_labels_differ_from_its_plan_is_refused_and_removed(
    tree: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plan = make_plan(tree)
    monkeypatch.setattr(image_registry, "pull", lambda *args: Transfer("r", 1, 1))
    forged = Pulled({**_labels(plan), "dev.torchyard.layers": "torch=0000000000000000"})
    client = Client(forged)
    with pytest.raises(ImageBuildError, match=r"its dev\.torchyard\.layers label differs"):
        image_registry.pull_image(PLAN.entry("cpu"), [plan], client, Registry("127.0.0.1:5000/team"), {})  # type: ignore[arg-type]
    assert forged.tags == [] and client.images.removed
    honest = Pulled(_labels(plan))
    built = image_registry.pull_image(PLAN.entry("cpu"), [plan], Client(honest), Registry("127.0.0.1:5000/team"), {})  # type: ignore[arg-type]
    assert built is not None and plan.tag in honest.tags
