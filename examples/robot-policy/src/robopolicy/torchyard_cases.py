"""robopolicy's parity cases for torchyard (registered under the `torchyard.cases` entry point)."""

from __future__ import annotations

from pathlib import Path

import torch

from robopolicy.policy import Policy
from torchyard.cases import Call, Case, InputFiles

# Batches as the robot records them (package data): bright frames, joint states near their limits.
RECORDED = InputFiles(
    sorted((Path(__file__).parent / "recorded").glob("episode_*.pt")),
    shapes={"observation.camera": (torch.uint8, (None, 32, 32, 3)), "observation.state": (torch.float32, (None, 6))},
)


def observation(generator: torch.Generator) -> Call:
    camera = torch.randint(0, 256, (2, 32, 32, 3), generator=generator, dtype=torch.uint8)
    state = torch.randn(2, 6, generator=generator)
    return Call(kwargs={"observation": {"camera": camera, "state": state}})


def behaviour_cloning_loss(outputs: dict[str, torch.Tensor], call: Call) -> torch.Tensor:
    """The policy's training loss, as ACT's: L1 to the demonstrated actions (here: hold still), and binary
    cross-entropy for the gripper (closed where the first joint is past zero)."""
    state = call.kwargs["observation"]["state"]
    demonstrated = torch.zeros_like(outputs["actions"])
    closed = (state[:, :1] > 0).float()
    gripper = outputs["gripper"].float().clamp(1e-6, 1 - 1e-6)
    # Written out: torch's binary_cross_entropy refuses to run under autocast, where bf16 training computes.
    cross_entropy = -(closed * gripper.log() + (1 - closed) * (1 - gripper).log()).mean()
    return torch.nn.functional.l1_loss(outputs["actions"].float(), demonstrated.float()) + cross_entropy


CASES = [
    Case(
        "robopolicy",
        Policy,
        observation,
        loss=behaviour_cloning_loss,
        description="robopolicy.Policy: dict observation in, dict out; trains with its own loss",
    ),
    Case(
        "robopolicy_recorded",
        Policy,
        observation,
        input_files=RECORDED,
        train=False,
        description="the random batch, then the recorded ones: a failing result names its batch",
    ),
    Case(
        "robopolicy_chunk8",
        lambda: Policy(chunk=8),
        observation,
        backends=("eager", "export", "inductor", "executorch-xnnpack"),
        description="a longer action chunk, on the backends it ships with",
    ),
]
