"""The exact `docker run` device flags per accelerator, and what doctor reports missing."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from torchyard.accelerators import ACCELERATORS, HostFacts
from torchyard.accelerators.cuda import selected_gpus
from torchyard.accelerators.protocol import NO_NVIDIA_DEVICES
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
    assert ACCELERATORS["cpu"].docker_run_args(HOST, {"CUDA_VISIBLE_DEVICES": "1"}) == NO_NVIDIA_DEVICES
    assert ACCELERATORS["cpu"].host_problems(HostFacts(), {}) == ()


def test_every_entry_but_cudas_tells_nvidias_runtime_it_gets_no_gpu() -> None:
    """A runner whose engine runs NVIDIA's runtime by default hands a container every GPU its environment
    names: every accelerator but cuda names none, last among its flags."""
    for name, module in ACCELERATORS.items():
        flags = module.docker_run_args(HOST, {})
        if name == "cuda":
            assert "NVIDIA_VISIBLE_DEVICES=void" not in flags
        else:
            assert flags[-2:] == NO_NVIDIA_DEVICES, name


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


def test_gpu_entries_check_the_vendor_before_saying_ready(tmp_path: Path) -> None:
    nvidia_only = HostFacts(
        group_ids=HOST.group_ids, device_nodes=HOST.device_nodes, nvidia_hook=True, gpu_vendors=frozenset({"0x10de"})
    )
    assert ACCELERATORS["cuda"].host_problems(nvidia_only, {}) == ()
    (xpu,) = ACCELERATORS["xpu"].host_problems(nvidia_only, {})
    assert xpu.startswith(
        "no Intel GPU on this host (PCI vendor 0x8086; display and accelerator devices found: NVIDIA)"
    )
    assert ACCELERATORS["rocm"].host_problems(nvidia_only, {})[0].startswith("no AMD GPU on this host")
    # Unknown (no PCI bus to read): the device nodes and the render nodes decide.
    assert ACCELERATORS["xpu"].host_problems(xpu_host(tmp_path), {}) == ()


def fake_kfd(sysfs: Path, gpus: dict[int, tuple[int, int]]) -> Path:
    """KFD's topology under `sysfs`: node 0 a CPU, then a GPU per node number: (render minor, unique_id)."""
    nodes = sysfs / "class/kfd/kfd/topology/nodes"
    for number, (gpu_id, properties) in {0: ("0", "cpu_cores_count 64\nsimd_count 0\n")}.items():
        (nodes / str(number)).mkdir(parents=True)
        (nodes / str(number) / "gpu_id").write_text(gpu_id)
        (nodes / str(number) / "properties").write_text(properties)
    for number, (minor, unique) in gpus.items():
        node = nodes / str(number)
        node.mkdir(parents=True)
        (node / "gpu_id").write_text(str(4000 + number))
        (node / "properties").write_text(f"simd_count 304\ndrm_render_minor {minor}\nunique_id {unique}\n")
    return sysfs


def fake_drm(sysfs: Path, nodes: dict[int, tuple[str, str]]) -> Path:
    """`class/drm/renderD<minor>` under `sysfs`, each linked to its PCI device (address, vendor)."""
    for minor, (address, vendor) in nodes.items():
        device = sysfs / "devices/pci0000:00" / address
        device.mkdir(parents=True)
        (device / "vendor").write_text(vendor)
        node = sysfs / "class/drm" / f"renderD{minor}"
        node.mkdir(parents=True)
        (node / "device").symlink_to(device)
    return sysfs


def rocm_host(tmp_path: Path) -> HostFacts:
    # four GPUs in KFD's order (nodes 1-4), their render minors not in that order
    sysfs = fake_kfd(tmp_path, {1: (129, 0x1111), 2: (128, 0x2222), 3: (131, 0x3333), 4: (130, 0x4444)})
    return dataclasses.replace(HOST, sysfs=sysfs)


ROCM_REST = ("--group-add", "44", "--group-add", "993", "--shm-size", "16g", *NO_NVIDIA_DEVICES)


@pytest.mark.parametrize(
    ("env", "minors"),
    [
        ({}, (129, 128, 131, 130)),  # no selection: every GPU is the job's, each by its render node
        ({"HIP_VISIBLE_DEVICES": "1"}, (128,)),
        ({"ROCR_VISIBLE_DEVICES": "2,0"}, (131, 129)),
        ({"ROCR_VISIBLE_DEVICES": "GPU-0000000000003333"}, (131,)),
        ({"ROCR_VISIBLE_DEVICES": "1,2,3", "HIP_VISIBLE_DEVICES": "2"}, (130,)),  # HIP indexes what ROCr left
        ({"CUDA_VISIBLE_DEVICES": "3"}, (130,)),
    ],
)
def test_rocm_gets_the_render_nodes_of_the_jobs_gpus_only(
    tmp_path: Path, env: dict[str, str], minors: tuple[int, ...]
) -> None:
    """Route 6 of issue 57: a ROCm container got all of /dev/dri (every runner's GPUs on a shared box) and the
    selecting variables, which a test can reset. It gets the selected GPUs' render nodes, and no variable."""
    host = rocm_host(tmp_path)
    nodes = tuple(arg for minor in minors for arg in ("--device", f"/dev/dri/renderD{minor}"))
    args = ACCELERATORS["rocm"].docker_run_args(host, env)
    assert args == ("--device", "/dev/kfd", *nodes, *ROCM_REST)
    assert "/dev/dri" not in args and not any(
        arg.startswith(("HIP_VISIBLE", "ROCR_VISIBLE", "CUDA_VISIBLE")) for arg in args
    )
    assert ACCELERATORS["rocm"].host_problems(host, env) == ()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"ROCR_VISIBLE_DEVICES": "4"}, "ROCR_VISIBLE_DEVICES='4': '4' names no GPU of the 4 this host shows (0-3)"),
        ({"HIP_VISIBLE_DEVICES": "GPU-ffff"}, "HIP_VISIBLE_DEVICES='GPU-ffff': 'GPU-ffff' names no GPU of the 4"),
        (
            {"ROCR_VISIBLE_DEVICES": "0", "HIP_VISIBLE_DEVICES": "1"},
            "HIP_VISIBLE_DEVICES='1': '1' names no GPU of the 1",
        ),
        ({"HIP_VISIBLE_DEVICES": ""}, "HIP_VISIBLE_DEVICES='': '' names no GPU"),
    ],
)
def test_a_rocm_selection_this_host_lacks_is_one_line_and_no_gpu(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    host = rocm_host(tmp_path)
    (problem,) = ACCELERATORS["rocm"].host_problems(host, env)
    assert problem.startswith(message)
    assert ACCELERATORS["rocm"].docker_run_args(host, env) == ("--device", "/dev/kfd", *ROCM_REST)


def test_rocm_host_problems() -> None:
    problems = ACCELERATORS["rocm"].host_problems(HostFacts(), {})
    assert [problem.split(":")[0] for problem in problems] == [
        "no /dev/kfd",
        "no /dev/dri",
        "no 'video' group on the host",
        "no 'render' group on the host",
    ]
    (empty,) = ACCELERATORS["rocm"].host_problems(dataclasses.replace(HOST, sysfs=Path("/nonexistent")), {})
    assert empty.startswith("KFD's topology") and empty.endswith("shows no GPU with a render node")


def xpu_host(tmp_path: Path) -> HostFacts:
    # two Intel GPUs and an AMD one; the render minors' order is not the PCI order
    nodes = {128: ("0000:8a:00.0", "0x8086"), 129: ("0000:3a:00.0", "0x8086"), 130: ("0000:05:00.0", "0x1002")}
    return dataclasses.replace(HOST, sysfs=fake_drm(tmp_path, nodes))


@pytest.mark.parametrize(
    ("env", "minors", "mask"),
    [
        ({}, (129, 128), None),
        ({"ZE_AFFINITY_MASK": "1"}, (128,), None),
        ({"ZE_AFFINITY_MASK": "1.1,0"}, (128, 129), "0.1,1"),  # sub-devices, renumbered as the container sees them
        ({"ONEAPI_DEVICE_SELECTOR": "level_zero:0"}, (129,), None),
        ({"ONEAPI_DEVICE_SELECTOR": "level_zero:*"}, (129, 128), None),
        ({"ZE_AFFINITY_MASK": "1,0", "ONEAPI_DEVICE_SELECTOR": "level_zero:0"}, (128,), None),
    ],
)
def test_xpu_gets_the_render_nodes_of_the_jobs_gpus_only(
    tmp_path: Path, env: dict[str, str], minors: tuple[int, ...], mask: str | None
) -> None:
    """Route 6 of issue 57, for Intel: the selected GPUs' render nodes (in Level Zero's PCI order), not /dev/dri."""
    host = xpu_host(tmp_path)
    nodes = tuple(arg for minor in minors for arg in ("--device", f"/dev/dri/renderD{minor}"))
    masked = ("--env", f"ZE_AFFINITY_MASK={mask}") if mask else ()
    assert ACCELERATORS["xpu"].docker_run_args(host, {**env, "HOME": "/root"}) == (
        *nodes, "--group-add", "993", "--shm-size", "16g", *masked, *NO_NVIDIA_DEVICES,
    )  # fmt: skip
    assert ACCELERATORS["xpu"].host_problems(host, env) == ()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"ZE_AFFINITY_MASK": "2"}, "ZE_AFFINITY_MASK='2': '2' names no GPU of the 2 this host shows (0-1)"),
        ({"ONEAPI_DEVICE_SELECTOR": "opencl:0"}, "ONEAPI_DEVICE_SELECTOR='opencl:0': torchyard resolves level_zero"),
        ({"ONEAPI_DEVICE_SELECTOR": "level_zero:5"}, "ONEAPI_DEVICE_SELECTOR='5': '5' names no GPU"),
    ],
)
def test_an_xpu_selection_this_host_lacks_is_one_line_and_no_gpu(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    host = xpu_host(tmp_path)
    (problem,) = ACCELERATORS["xpu"].host_problems(host, env)
    assert problem.startswith(message)
    assert ACCELERATORS["xpu"].docker_run_args(host, env) == (
        "--group-add", "993", "--shm-size", "16g", *NO_NVIDIA_DEVICES,
    )  # fmt: skip


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
