"""robopolicy's parity cases for torchyard (registered under the `torchyard.cases` entry point)."""

from __future__ import annotations

import torch

from robopolicy.policy import Policy
from torchyard.cases import Call, Case


def observation(generator: torch.Generator) -> Call:
    camera = torch.randint(0, 256, (2, 32, 32, 3), generator=generator, dtype=torch.uint8)
    state = torch.randn(2, 6, generator=generator)
    return Call(kwargs={"observation": {"camera": camera, "state": state}})


CASES = [
    Case("robopolicy", Policy, observation, description="robopolicy.Policy: dict observation in, dict out"),
    Case(
        "robopolicy_chunk8",
        lambda: Policy(chunk=8),
        observation,
        backends=("eager", "export", "inductor", "executorch-xnnpack"),
        description="a longer action chunk, on the backends it ships with",
    ),
]
