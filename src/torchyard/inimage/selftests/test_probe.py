"""The probe stops a run whose device is not what its entry claims, saying why; an unlocked run lists what it has."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
import torch

from torchyard.inimage.selftests.whole_runs import REPORTS, whole_run
from torchyard.inimage.start.probe import ProbeError, check_device, check_kernel, unlocked_environment

pytestmark = pytest.mark.harness


@(
    pytest.mark.skip(reason="this machine has a CUDA device: the missing-device path cannot be shown here")
    if torch.cuda.is_available()
    else whole_run(
        "--torchyard-accelerator",
        "cuda",
        REPORTS,
        test_never="def test_never():\n    raise AssertionError('must not run')\n",
    )
)
def test_cuda_entry_without_a_cuda_device_fails_before_testing(beside: pytest.RunResult) -> None:
    result = beside
    assert result.ret == 3
    result.stderr.fnmatch_lines(["*torchyard probe: entry targets CUDA but *"])
    assert "must not run" not in result.stdout.str()


def test_an_mps_entry_off_apple_silicon_fails_closed() -> None:
    if torch.backends.mps.is_available():
        pytest.skip("this machine has an MPS device: the missing-device path cannot be shown here")
    with pytest.raises(ProbeError, match=r"entry targets MPS but no MPS device is available .* MPS needs macOS"):
        check_device("mps")


def test_a_cuda_entry_without_a_usable_device_gives_torchs_own_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    """is_available() only says False; torch's init() says why (here: a build without CUDA, the nearest this
    machine has to a driver too old for the build), and the probe passes that on."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device: the missing-device path cannot be shown here")
    monkeypatch.setattr(torch.version, "cuda", torch.version.cuda or "13.0")
    monkeypatch.setattr(torch.version, "hip", None)
    with pytest.raises(ProbeError) as caught:
        check_device("cuda")
    message = str(caught.value)
    assert message.startswith("entry targets CUDA but no CUDA device is usable (torch ")
    assert "; torch says: " in message and "(`torchyard doctor`)" in message


def test_a_device_whose_first_kernel_fails_is_named_with_the_builds_targets(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ROCm build without the GPU's gfx target is 'available' and fails at its first kernel."""

    def no_kernel(*args: object, **kwargs: object) -> torch.Tensor:
        raise RuntimeError("HIP error: invalid device function\nmore detail")

    monkeypatch.setattr(torch, "ones", no_kernel)
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: ["gfx90a", "gfx942"])
    with pytest.raises(ProbeError) as caught:
        check_kernel(torch.device("cuda"), "torch 2.9.1 is a ROCm/HIP 7.2 build")
    assert str(caught.value) == (
        "a first kernel on cuda failed (torch 2.9.1 is a ROCm/HIP 7.2 build): RuntimeError: HIP error: invalid "
        "device function; this build's GPU targets: gfx90a gfx942"
    )


def test_an_unlocked_manifest_lists_every_package_and_the_lock_differences(tmp_path: Path) -> None:
    lock = tmp_path / "lock.txt"
    lock.write_text(
        f"torch=={version('torch')} \\\n    --hash=sha256:00\nnot-installed-here==1.0 \\\n    --hash=sha256:11\n"
    )
    info = unlocked_environment(lock)
    assert info["environment"] == "unlocked: this environment"
    packages = {package["name"]: package for package in info["packages"]}
    assert packages["torch"]["version"] == version("torch") and packages["pytest"]["origin"]
    assert "not-installed-here: not installed (lock: 1.0)" in info["lock_differences"]
    assert not any(line.startswith("torch:") for line in info["lock_differences"])
    assert unlocked_environment("")["lock_differences"] == ["no lockfile to compare with"]


def test_an_image_without_numpy_imports_torch_without_its_warning_in_every_process_of_the_run() -> None:
    """torch warns as it is imported where numpy is missing; the entry point keeps that out of the run's output,
    in its own process and in those it starts (xdist's workers)."""
    hide = "import sys; sys.modules['numpy'] = None; "  # numpy not importable, as where it is not installed
    without_numpy = hide + "import torch"
    child = f"import subprocess; subprocess.run([sys.executable, '-c', {without_numpy!r}], check=True)"

    # Not the filter this run's own entry point set (a run of torchyard's inherits it): each process says.
    env = {name: value for name, value in os.environ.items() if name != "PYTHONWARNINGS"}

    def said(code: str) -> str:
        run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        return run.stderr

    if "Failed to initialize NumPy" not in said(without_numpy):  # the premise
        pytest.skip("this torch imports without numpy and says nothing")
    # The entry point imports torch itself, after its filter; its child writes to the same stderr.
    assert "Failed to initialize NumPy" not in said(hide + f"import torchyard.inimage.__main__; {child}")
