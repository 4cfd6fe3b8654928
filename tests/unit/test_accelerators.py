"""The exact `docker run` device flags per accelerator, and what doctor reports missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchyard.accelerators import ACCELERATORS, HostFacts
from torchyard.accelerators.cuda import selected_gpus
from torchyard.host.facts import cdi_devices, engine_cdi, gpu_vendors
from torchyard.names import ACCELERATOR_NAMES

HOST = HostFacts(
    group_ids={"video": 44, "render": 993},
    device_nodes=frozenset({"/dev/kfd", "/dev/dri"}),
    docker_runtimes=frozenset({"runc", "nvidia"}),
)
CDI_ON = HostFacts(cdi_enabled=True, cdi_devices=frozenset({"nvidia.com/gpu=all", "nvidia.com/gpu=0"}))
RUNTIME = ("-e", "NVIDIA_DRIVER_CAPABILITIES=compute,utility", "-e", "NVIDIA_TF32_OVERRIDE=0", "--shm-size", "16g")


def test_every_accelerator_has_a_module() -> None:
    assert tuple(ACCELERATORS) == ACCELERATOR_NAMES
    for name, module in ACCELERATORS.items():
        assert name == module.NAME


def test_cpu_has_no_device_flags() -> None:
    assert ACCELERATORS["cpu"].docker_run_args(HOST, {"CUDA_VISIBLE_DEVICES": "1"}) == ()
    assert ACCELERATORS["cpu"].host_problems(HostFacts(), {}) == ()


def test_cuda_uses_cdi_only_when_the_engine_has_it_on() -> None:
    cuda = ACCELERATORS["cuda"]
    assert cuda.docker_run_args(HOST, {}) == ("--gpus", "all", *RUNTIME)
    assert cuda.docker_run_args(CDI_ON, {}) == ("--device", "nvidia.com/gpu=all", *RUNTIME)
    # nvidia-container-toolkit 1.18 writes /var/run/cdi/nvidia.yaml by itself; an engine with CDI off
    # ("could not select device driver cdi") is asked through --gpus instead.
    spec_only = HostFacts(cdi_enabled=False, cdi_devices=CDI_ON.cdi_devices, nvidia_hook=True)
    assert cuda.docker_run_args(spec_only, {}) == ("--gpus", "all", *RUNTIME)
    assert cuda.host_problems(spec_only, {}) == ()


def test_cuda_gpu_selection_becomes_the_device_request() -> None:
    cuda = ACCELERATORS["cuda"]
    assert cuda.docker_run_args(HOST, {"CUDA_VISIBLE_DEVICES": "1"}) == ("--gpus", '"device=1"', *RUNTIME)
    assert cuda.docker_run_args(HOST, {"CUDA_VISIBLE_DEVICES": "4, 5"}) == ("--gpus", '"device=4,5"', *RUNTIME)
    assert cuda.docker_run_args(CDI_ON, {"CUDA_VISIBLE_DEVICES": "4,5"}) == (
        "--device", "nvidia.com/gpu=4", "--device", "nvidia.com/gpu=5", *RUNTIME,
    )  # fmt: skip
    # The toolkit's own variable wins over CUDA's; "all" selects nothing in particular.
    env = {"NVIDIA_VISIBLE_DEVICES": "GPU-8f1c2d3e", "CUDA_VISIBLE_DEVICES": "0"}
    assert cuda.docker_run_args(HOST, env)[:2] == ("--gpus", '"device=GPU-8f1c2d3e"')
    assert selected_gpus({"NVIDIA_VISIBLE_DEVICES": "all", "CUDA_VISIBLE_DEVICES": "2"}) == (
        "CUDA_VISIBLE_DEVICES",
        ("2",),
    )
    # Never copied in: inside, the selected GPUs are numbered from 0.
    args = cuda.docker_run_args(HOST, {"CUDA_VISIBLE_DEVICES": "1", "NVIDIA_VISIBLE_DEVICES": "1"})
    assert "CUDA_VISIBLE_DEVICES" not in " ".join(args) and "NVIDIA_VISIBLE_DEVICES" not in " ".join(args)


@pytest.mark.parametrize(
    ("env", "problem"),
    [
        ({"CUDA_VISIBLE_DEVICES": ""}, "CUDA_VISIBLE_DEVICES='' gives this job no GPU"),
        ({"NVIDIA_VISIBLE_DEVICES": "void"}, "NVIDIA_VISIBLE_DEVICES='void' gives this job no GPU"),
        ({"CUDA_VISIBLE_DEVICES": "0,$(id)"}, "CUDA_VISIBLE_DEVICES: '$(id)' is not a GPU index"),
    ],
)
def test_cuda_selection_that_names_no_gpu_is_a_problem(env: dict[str, str], problem: str) -> None:
    (found,) = ACCELERATORS["cuda"].host_problems(HOST, env)
    assert found.startswith(problem)


def test_cuda_runtime_problems_name_the_fix() -> None:
    cuda = ACCELERATORS["cuda"]
    assert cuda.host_problems(HOST, {}) == ()
    assert cuda.host_problems(CDI_ON, {}) == ()
    (problem,) = cuda.host_problems(HostFacts(), {})
    assert "nvidia-ctk cdi generate" in problem
    (problem,) = cuda.host_problems(HostFacts(cdi_devices=CDI_ON.cdi_devices), {})
    assert problem.startswith("NVIDIA's CDI spec is installed but the engine has CDI off")
    assert '"features": {"cdi": true}' in problem


def test_gpu_entries_check_the_vendor_before_saying_ready() -> None:
    nvidia_only = HostFacts(
        group_ids=HOST.group_ids, device_nodes=HOST.device_nodes, nvidia_hook=True, gpu_vendors=frozenset({"0x10de"})
    )
    assert ACCELERATORS["cuda"].host_problems(nvidia_only, {}) == ()
    (xpu,) = ACCELERATORS["xpu"].host_problems(nvidia_only, {})
    assert xpu.startswith(
        "no Intel GPU on this host (PCI vendor 0x8086; display and accelerator devices found: NVIDIA)"
    )
    assert ACCELERATORS["rocm"].host_problems(nvidia_only, {})[0].startswith("no AMD GPU on this host")
    # Unknown (no sysfs to read): the device nodes decide, as before.
    assert ACCELERATORS["xpu"].host_problems(HOST, {}) == ()


def test_rocm_devices_and_groups_by_host_id_without_loosening_the_seal() -> None:
    assert ACCELERATORS["rocm"].docker_run_args(HOST, {"HIP_VISIBLE_DEVICES": "1"}) == (
        "--device", "/dev/kfd",
        "--device", "/dev/dri",
        "--group-add", "44",
        "--group-add", "993",
        "--shm-size", "16g",
        "-e", "HIP_VISIBLE_DEVICES",
    )  # fmt: skip
    problems = ACCELERATORS["rocm"].host_problems(HostFacts(), {})
    assert [problem.split(":")[0] for problem in problems] == [
        "no /dev/kfd",
        "no /dev/dri",
        "no 'video' group on the host",
        "no 'render' group on the host",
    ]


def test_xpu_dri_and_render_group() -> None:
    assert ACCELERATORS["xpu"].docker_run_args(HOST, {"ZE_AFFINITY_MASK": "0.0", "HOME": "/root"}) == (
        "--device", "/dev/dri", "--group-add", "993", "--shm-size", "16g", "-e", "ZE_AFFINITY_MASK",
    )  # fmt: skip
    assert ACCELERATORS["xpu"].host_problems(HOST, {}) == ()


def test_image_checks_name_what_each_accelerator_needs() -> None:
    assert ACCELERATORS["cuda"].IMAGE_CHECKS == (
        "gcc",
        "python-headers",
        "torch-companions",
        "torch-cuda",
        "triton-ptxas",
    )
    assert ACCELERATORS["rocm"].IMAGE_CHECKS[-2:] == ("torch-hip", "rocm-runtime")
    assert ACCELERATORS["xpu"].IMAGE_CHECKS[-3:] == ("level-zero-loader", "level-zero-driver", "level-zero-headers")


def _pci(root: Path, name: str, pci_class: str, vendor: str) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "class").write_text(pci_class + "\n")
    (root / name / "vendor").write_text(vendor + "\n")


def test_gpu_vendors_read_display_and_accelerator_classes(tmp_path: Path) -> None:
    _pci(tmp_path, "0000:00:00.0", "0x060000", "0x8086")  # Intel host bridge: not a GPU
    _pci(tmp_path, "0000:01:00.0", "0x030200", "0x10DE")  # NVIDIA 3D controller (H100, H200)
    _pci(tmp_path, "0000:02:00.0", "0x120000", "0x1002")  # AMD Instinct: processing accelerator
    assert gpu_vendors(tmp_path) == frozenset({"0x10de", "0x1002"})
    assert gpu_vendors(tmp_path / "absent") is None


NVIDIA_SPEC = """\
cdiVersion: 0.5.0
containerEdits:
  env:
  - NVIDIA_VISIBLE_DEVICES=void
  hooks:
  - hookName: createContainer
    path: /usr/bin/nvidia-cdi-hook
devices:
- containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
  name: "0"
- containerEdits:
    deviceNodes:
    - path: /dev/nvidia1
  name: "1"
- name: all
kind: nvidia.com/gpu
"""


def test_cdi_devices_come_from_the_engine_when_it_has_cdi_on(tmp_path: Path) -> None:
    (tmp_path / "nvidia.yaml").write_text(NVIDIA_SPEC)
    expected = {"nvidia.com/gpu=0", "nvidia.com/gpu=1", "nvidia.com/gpu=all"}
    assert cdi_devices([str(tmp_path)]) == expected
    assert engine_cdi({"CDISpecDirs": [str(tmp_path)]}) == (True, frozenset(expected))
    discovered = {"CDISpecDirs": [str(tmp_path)], "DiscoveredDevices": [{"Source": "cdi", "ID": "nvidia.com/gpu=all"}]}
    assert engine_cdi(discovered) == (True, frozenset({"nvidia.com/gpu=all"}))
    assert engine_cdi({"ServerVersion": "20.10.24"})[0] is False  # no CDISpecDirs: CDI is off
    assert engine_cdi({"CDISpecDirs": []})[0] is False
