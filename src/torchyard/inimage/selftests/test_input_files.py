"""A case's inputs from files: the batches load as declared, never as code, and a failing result names the
batch (random inputs pass where the batch the model really sees does not)."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

import pytest
import torch

from torchyard.inimage.cases import Call, Case
from torchyard.inimage.cases.files import InputFileError, InputFiles
from torchyard.inimage.evaluation.backends import BackendRun
from torchyard.inimage.evaluation.trees import leaves
from torchyard.inimage.selftests.planted import on_cpu

pytestmark = pytest.mark.harness

SHAPES = {"observation.camera": (torch.uint8, (None, 4, 4, 3)), "observation.state": (torch.float32, (None, 6))}


class Policy(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = torch.nn.Linear(4 * 4 * 3 + 6, 2)

    def forward(self, observation: dict[str, torch.Tensor]) -> torch.Tensor:
        camera = observation["camera"].flatten(1).to(observation["state"].dtype) / 255
        actions: torch.Tensor = self.head(torch.cat([camera, observation["state"]], dim=1))
        return actions


def random_observation(generator: torch.Generator) -> Call:
    camera = torch.randint(0, 8, (2, 4, 4, 3), generator=generator, dtype=torch.uint8)  # dark: 0 to 7
    return Call(kwargs={"observation": {"camera": camera, "state": torch.randn(2, 6, generator=generator)}})


def saved_batch(folder: Path, name: str, *, brightness: int, batch: int = 3) -> Path:
    generator = torch.Generator().manual_seed(brightness)
    camera = torch.randint(brightness, brightness + 8, (batch, 4, 4, 3), generator=generator, dtype=torch.uint8)
    path = folder / name
    torch.save({"observation": {"camera": camera, "state": torch.randn(batch, 6, generator=generator)}}, path)
    return path


def wrong_on_bright_images(case: Case, module: torch.nn.Module, calls: list[Call], device: torch.device,
                           workdir: Path) -> BackendRun:  # fmt: skip
    """A lowering that is right on dark random images and off on bright real ones (rf-detr#1233's shape)."""
    outputs = []
    with torch.no_grad():
        for call in calls:
            output = module(*call.args, **call.kwargs)
            bright = bool(call.kwargs["observation"]["camera"].float().mean() > 64)
            outputs.append(leaves(output * 1.01 if bright else output))
    return BackendRun(outputs, 0.0, 0.0)


def test_a_failing_result_names_the_batch_from_the_file(tmp_path: Path) -> None:
    files = InputFiles([saved_batch(tmp_path, "dusk.pt", brightness=8),
                        saved_batch(tmp_path, "noon.pt", brightness=200)], SHAPES)  # fmt: skip
    beside = Case("policy", Policy, random_observation, input_files=files)
    assert [len(call.kwargs["observation"]["state"]) for call in beside.calls()] == [2, 3, 3]
    result = on_cpu(beside, wrong_on_bright_images, tmp_path / "run")
    assert result.status == "failed"
    assert result.reason.startswith("batch noon.pt, output: scaled max error 0.01")
    assert "dusk.pt" not in result.reason and "random" not in result.reason
    alone = Case("policy", Policy, input_files=InputFiles([tmp_path / "dusk.pt"], SHAPES))
    assert on_cpu(alone, wrong_on_bright_images, tmp_path / "alone").status == "passed"
    # Random inputs alone never see what the lowering gets wrong: the reason files are there.
    assert on_cpu(Case("policy", Policy, random_observation), wrong_on_bright_images, tmp_path / "r").status == "passed"


class Payload:
    """What a pickle may run when it is loaded (here: create `ran`): `weights_only` must never get this far."""

    def __init__(self, ran: Path) -> None:
        self.ran = ran

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (str(self.ran), "w"))


def test_a_file_is_loaded_as_tensors_only_never_run(tmp_path: Path) -> None:
    path = tmp_path / "payload.pt"
    ran = tmp_path / "payload-ran"
    torch.save({"observation": {"camera": Payload(ran)}}, path)
    with pytest.raises(InputFileError, match=r"payload\.pt: not a batch of tensors \(UnpicklingError"):
        InputFiles([path], SHAPES).batches()
    assert not ran.exists()


@pytest.mark.parametrize(
    ("saved", "said"),
    [
        ({"observation": {"camera": torch.zeros(1, 4, 4, 3)}}, "'observation.camera' is torch.float32 (1, 4, 4, 3); "
         "declared torch.uint8 (None, 4, 4, 3)"),
        ({"observation": {"camera": torch.zeros(1, 4, 4, dtype=torch.uint8)}}, "is torch.uint8 (1, 4, 4)"),
        ({"observation": {"camera": torch.zeros(1, 4, 4, 3, dtype=torch.uint8)}}, "declared inputs missing: "
         "observation.state"),
        ({"observation": {"camera": torch.zeros(1, 4, 4, 3, dtype=torch.uint8), "state": torch.zeros(1, 6),
                          "depth": torch.zeros(1)}}, "input 'observation.depth' is not declared"),
        (torch.zeros(3), "holds a Tensor; a batch is a tuple, list or dict"),
    ],
)  # fmt: skip
def test_a_batch_that_is_not_as_declared_is_one_line(tmp_path: Path, saved: object, said: str) -> None:
    path = tmp_path / "batch.pt"
    torch.save(saved, path)
    with pytest.raises(InputFileError, match=r"batch\.pt: ") as caught:
        InputFiles([path], SHAPES).batches()
    assert said in str(caught.value)


def test_a_file_over_the_bound_is_not_read(tmp_path: Path) -> None:
    path = saved_batch(tmp_path, "big.pt", brightness=0, batch=64)
    with pytest.raises(InputFileError, match=r"big\.pt: [0-9]+ bytes, over the bound of 1024"):
        InputFiles([path], SHAPES, max_bytes=1024).batches()
    with pytest.raises(InputFileError, match=r"absent\.pt: cannot be read"):
        InputFiles([tmp_path / "absent.pt"], SHAPES).batches()


def test_a_case_that_cannot_make_its_inputs_fails_every_backend_with_the_files_line(tmp_path: Path) -> None:
    (tmp_path / "bad.pt").write_bytes(b"not a torch file")
    case = Case("policy", Policy, input_files=InputFiles([tmp_path / "bad.pt"], SHAPES))
    result = on_cpu(case, wrong_on_bright_images, tmp_path / "run")
    assert result.status == "error" and "the case's inputs cannot be made" in result.reason
    assert "bad.pt: not a batch of tensors" in result.reason


def test_safetensors_names_nest_as_keyword_inputs(tmp_path: Path) -> None:
    path = tmp_path / "batch.safetensors"
    if importlib.util.find_spec("safetensors") is None:  # the stack has no safetensors: one line says so
        path.write_bytes(b"{}")
        with pytest.raises(InputFileError, match="safetensors is not installed: add it to the entry's requirements"):
            InputFiles([path], SHAPES).batches()
        return
    save_file = importlib.import_module("safetensors.torch").save_file
    save_file({"observation.camera": torch.zeros(2, 4, 4, 3, dtype=torch.uint8),
               "observation.state": torch.ones(2, 6)}, str(path))  # fmt: skip
    (batch,) = InputFiles([path], SHAPES).batches()
    assert set(batch["observation"]) == {"camera", "state"} and batch["observation"]["state"].sum() == 12


def test_a_case_needs_some_inputs() -> None:
    with pytest.raises(ValueError, match="needs make_inputs, input_files, or both"):
        Case("policy", Policy)
