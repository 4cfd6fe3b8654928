"""The exact `docker run` device flags per accelerator, and what doctor reports missing."""

from __future__ import annotations

from torchyard.accelerators import ACCELERATORS, HostFacts
from torchyard.accelerators.protocol import visible_device_args
from torchyard.names import ACCELERATOR_NAMES

HOST = HostFacts(
    group_ids={"video": 44, "render": 993},
    device_nodes=frozenset({"/dev/kfd", "/dev/dri"}),
    docker_runtimes=frozenset({"runc", "nvidia"}),
)


def test_every_accelerator_has_a_module() -> None:
    assert tuple(ACCELERATORS) == ACCELERATOR_NAMES
    for name, module in ACCELERATORS.items():
        assert name == module.NAME


def test_cpu_has_no_device_flags() -> None:
    assert ACCELERATORS["cpu"].docker_run_args(HOST) == ()
    assert ACCELERATORS["cpu"].host_problems(HostFacts()) == ()


def test_cuda_uses_gpus_all_or_cdi() -> None:
    cuda = ACCELERATORS["cuda"]
    assert cuda.docker_run_args(HOST) == ("--gpus", "all", "-e", "NVIDIA_TF32_OVERRIDE=0")
    cdi = HostFacts(cdi_devices=frozenset({"nvidia.com/gpu=all"}))
    assert cuda.docker_run_args(cdi) == ("--device", "nvidia.com/gpu=all", "-e", "NVIDIA_TF32_OVERRIDE=0")
    assert cuda.host_problems(HOST) == ()
    (problem,) = cuda.host_problems(HostFacts())
    assert "nvidia-ctk cdi generate" in problem


def test_rocm_devices_groups_by_host_id_and_seccomp() -> None:
    assert ACCELERATORS["rocm"].docker_run_args(HOST) == (
        "--device", "/dev/kfd",
        "--device", "/dev/dri",
        "--group-add", "44",
        "--group-add", "993",
        "--security-opt", "seccomp=unconfined",
        "--ipc=host",
        "--shm-size", "16g",
    )  # fmt: skip
    problems = ACCELERATORS["rocm"].host_problems(HostFacts())
    assert [problem.split(":")[0] for problem in problems] == [
        "no /dev/kfd",
        "no /dev/dri",
        "no 'video' group on the host",
        "no 'render' group on the host",
    ]


def test_xpu_dri_and_render_group() -> None:
    assert ACCELERATORS["xpu"].docker_run_args(HOST) == (
        "--device",
        "/dev/dri",
        "--group-add",
        "993",
        "--ipc=host",
    )
    assert ACCELERATORS["xpu"].host_problems(HOST) == ()


def test_visible_device_variables_pass_through_by_name() -> None:
    env = {"CUDA_VISIBLE_DEVICES": "1", "HOME": "/root"}
    assert visible_device_args(ACCELERATORS["cuda"].VISIBLE_DEVICE_VARIABLES, env) == (
        "-e",
        "CUDA_VISIBLE_DEVICES",
    )
    assert visible_device_args(ACCELERATORS["xpu"].VISIBLE_DEVICE_VARIABLES, env) == ()
