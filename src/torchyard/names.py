"""The vocabulary both sides of the container boundary share: accelerators and their torch device,
suites, precisions and their dtypes, parity backends. Stdlib only: the in-image side imports it too."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

AcceleratorName = Literal["cpu", "cuda", "rocm", "xpu", "mps"]
ACCELERATOR_NAMES: tuple[AcceleratorName, ...] = get_args(AcceleratorName)


@dataclass(frozen=True)
class DeviceFacts:
    """What both sides know of an accelerator's device: the host's accelerator module selects the job's devices
    by `visible` (and `aliases`), the in-image side pins each worker to one by it, and keys lowered programs by
    the device's model as `named_by` names it."""

    torch_type: str  # the `torch.device` type it targets: HIP masquerades as CUDA inside torch
    # The variable that selects devices inside the container, read before torch initializes the device (None:
    # the accelerator has one device, or none to choose).
    visible: str | None
    # Variables the same runtime reads as that selection: a worker picks from them where `visible` is unset.
    aliases: tuple[str, ...]
    # What names the device's model in a key: "processor" (the CPU's model name), or the torch module whose
    # `get_device_name` answers (`torch.cuda`, `torch.xpu`).
    named_by: str


DEVICE_FACTS: dict[AcceleratorName, DeviceFacts] = {
    "cpu": DeviceFacts("cpu", None, (), "processor"),
    "cuda": DeviceFacts("cuda", "CUDA_VISIBLE_DEVICES", (), "cuda"),
    # HIP takes CUDA_VISIBLE_DEVICES as an alias of HIP_VISIBLE_DEVICES, which wins where both are set.
    "rocm": DeviceFacts("cuda", "HIP_VISIBLE_DEVICES", ("CUDA_VISIBLE_DEVICES",), "cuda"),
    "xpu": DeviceFacts("xpu", "ZE_AFFINITY_MASK", (), "xpu"),
    "mps": DeviceFacts("mps", None, (), "processor"),  # Apple's GPU is part of the chip the processor names
}
TORCH_DEVICES: dict[AcceleratorName, str] = {name: facts.torch_type for name, facts in DEVICE_FACTS.items()}

# Accelerators no container reaches: their entries run natively, in a venv made from their own lock.
NATIVE_ACCELERATORS: frozenset[AcceleratorName] = frozenset({"mps"})

SuiteName = Literal["export", "compile", "runtime", "parity", "train", "aot", "ops"]
SUITE_NAMES: tuple[SuiteName, ...] = get_args(SuiteName)
# Suites an entry runs only where its `suites` lists them (their backends join parity only then): each costs
# a compile per case that no other suite shares (AOTInductor's C++ build), or per operator sample (ops).
OPT_IN_SUITES: frozenset[SuiteName] = frozenset({"aot", "ops"})
# The ops suite's operators: a few dozen across families ("quick"), every one the image's torch has ("all"),
# or op_db names; and its samples per operator. Defaults an entry takes where it says nothing.
OPS_QUICK, OPS_ALL = "quick", "all"
OPS_OPERATORS_DEFAULT = OPS_QUICK
OPS_SAMPLES_DEFAULT = 2
# What a change can change against a baseline run, per case and backend (`reports.compare`); an entry's
# `fail-on-change` names the kinds that fail its run.
ChangeKind = Literal[
    "outcome", "error", "graph-breaks", "recompilations", "delegation", "program-size", "lowering-time", "latency"
]
CHANGE_KINDS: tuple[ChangeKind, ...] = get_args(ChangeKind)

# The longest localization may take for one failing result (seconds; an entry's `localize-timeout`).
LOCALIZE_SECONDS_DEFAULT = 60
# The suites whose rule judges that a program runs with eager's output shapes, not its values (parity's to judge).
SHAPE_SUITES: frozenset[SuiteName] = frozenset({"export", "compile", "runtime", "aot"})
# What an entry without `suites` runs.
DEFAULT_SUITES: tuple[SuiteName, ...] = tuple(suite for suite in SUITE_NAMES if suite not in OPT_IN_SUITES)
# Suites that lower programs for inference: through the artifact cache, localized where they fail (a train
# step is compiled afresh and bisected). Their self-tests run where a run has one of them.
LOWERING_SUITES: tuple[SuiteName, ...] = tuple(suite for suite in SUITE_NAMES if suite != "train")
# The harness's own self-tests: always run, never count towards a suite having passed.
HARNESS = "harness"
# The marker torchyard puts on an adopter project's own tests, run beside the suites.
PROJECT = "project"

Precision = Literal["fp32", "bf16", "fp16"]
PRECISIONS: tuple[Precision, ...] = get_args(Precision)
# The torch dtype name (`torch.<name>`) each precision computes in; tolerance keys use these names.
PRECISION_DTYPES: dict[Precision, str] = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}

BackendName = Literal[
    "eager", "export", "inductor", "aotinductor", "executorch-portable", "executorch-xnnpack", "tensorrt"
]
BACKEND_NAMES: tuple[BackendName, ...] = get_args(BackendName)


@dataclass(frozen=True)
class BackendFacts:
    """What both sides know of a backend (the host checks tolerance keys, orders report columns, groups image
    layers and shows versions by these); its module in `torchyard.inimage.evaluation.backends` knows the rest."""

    suite: SuiteName  # the suite that reports it (eager is the baseline every suite shares; parity reports it)
    # The distributions that version its programs, the one a report names first. Each is imported as its name
    # with `_` for `-`, and the environment manifest records it under that name too.
    distributions: tuple[str, ...]


BACKEND_FACTS: dict[BackendName, BackendFacts] = {
    "eager": BackendFacts("parity", ("torch",)),
    "export": BackendFacts("export", ("torch",)),
    "inductor": BackendFacts("compile", ("torch",)),
    "aotinductor": BackendFacts("aot", ("torch",)),
    "executorch-portable": BackendFacts("runtime", ("executorch", "torchao")),
    "executorch-xnnpack": BackendFacts("runtime", ("executorch", "torchao")),
    "tensorrt": BackendFacts("runtime", ("torch-tensorrt", "tensorrt")),
}
BACKEND_SUITES: dict[BackendName, SuiteName] = {name: facts.suite for name, facts in BACKEND_FACTS.items()}
# Every backend's distributions, each once, in the backends' order.
BACKEND_DISTRIBUTIONS: tuple[str, ...] = tuple(
    dict.fromkeys(name for facts in BACKEND_FACTS.values() for name in facts.distributions)
)


def module_name(distribution: str) -> str:
    """`torch-tensorrt` -> `torch_tensorrt`: its import name, and its key in the environment manifest."""
    return distribution.replace("-", "_")


# The train suite's backends: one optimizer step, eager or with forward and backward compiled (a compile mode
# after a colon, as for inductor), with SGD (momentum) or AdamW.
TrainBackendName = Literal["train-eager-sgd", "train-eager-adamw", "train-inductor-sgd", "train-inductor-adamw"]
TRAIN_BACKENDS: tuple[TrainBackendName, ...] = get_args(TrainBackendName)
# Timed optimizer steps after the compared one: their median is a train backend's step time.
TRAIN_TIMED_STEPS = 5
# A trusted run evaluates a kept verdict again at this replay of it, to audit the result cache (then it counts
# anew): every kept verdict is evaluated again within that many trusted runs that replay it.
AUDIT_EVERY = 16

CompileMode = Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]
COMPILE_MODES: tuple[CompileMode, ...] = get_args(CompileMode)

# How a failure by the noise rule alone says so in its reason (`metrics.compare_values`): the report counts them.
NOISE_MISS = "(the noise rule:"
