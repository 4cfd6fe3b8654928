"""The policy: camera frame and joint state in, a chunk of actions and a gripper command out."""

from __future__ import annotations

import json
from importlib.resources import files

import torch
from torch import nn


def load_normalization() -> dict[str, list[float]]:
    """The state statistics, shipped as package data."""
    data: dict[str, list[float]] = json.loads(files("robopolicy").joinpath("normalization.json").read_text())
    return data


class Policy(nn.Module):
    """`forward(observation)` with `observation = {"camera": uint8 (B, H, W, 3), "state": (B, 6)}`."""

    state_mean: torch.Tensor
    state_std: torch.Tensor

    def __init__(self, chunk: int = 4) -> None:
        super().__init__()
        stats = load_normalization()
        self.register_buffer("state_mean", torch.tensor(stats["state_mean"]))
        self.register_buffer("state_std", torch.tensor(stats["state_std"]))
        self.vision = nn.Sequential(
            nn.Conv2d(3, 16, kernel_size=5, stride=2), nn.GELU(), nn.Conv2d(16, 32, kernel_size=3, stride=2),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )  # fmt: skip
        self.trunk = nn.Sequential(nn.Linear(32 + 6, 64), nn.GELU(), nn.Linear(64, 64))
        self.actions = nn.Linear(64, chunk * 6)
        self.gripper = nn.Linear(64, 1)
        self.chunk = chunk

    def forward(self, observation: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        # The commonest preprocessing there is: HWC uint8 to CHW float32 in [0, 1].
        frame = observation["camera"].permute(0, 3, 1, 2).float() / 255
        state = (observation["state"] - self.state_mean) / self.state_std
        hidden = self.trunk(torch.cat([self.vision(frame), state], dim=-1))
        actions = self.actions(hidden).reshape(-1, self.chunk, 6)
        return {"actions": torch.tanh(actions), "gripper": torch.sigmoid(self.gripper(hidden))}
