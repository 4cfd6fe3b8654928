"""diffusers' building blocks with random weights: a small UNet2DModel, and a scheduler's denoising step."""

from __future__ import annotations

import torch
from diffusers import DDIMScheduler, UNet2DModel
from torch import nn

from torchyard.cases import Call


def unet2d() -> nn.Module:
    """UNet2DModel with an attention block on each side; its output is diffusers' UNet2DOutput."""
    return UNet2DModel(
        sample_size=16, in_channels=3, out_channels=3, layers_per_block=1, block_out_channels=(16, 32),
        down_block_types=("DownBlock2D", "AttnDownBlock2D"), up_block_types=("AttnUpBlock2D", "UpBlock2D"),
        norm_num_groups=8, attention_head_dim=8,
    )  # fmt: skip


def noisy_sample(generator: torch.Generator) -> Call:
    return Call(kwargs={"sample": torch.randn(2, 3, 16, 16, generator=generator), "timestep": torch.tensor([10, 500])})


class DenoisingStep(nn.Module):
    """The UNet's noise prediction, then DDIMScheduler.step at a fixed timestep of a 50-step schedule."""

    def __init__(self) -> None:
        super().__init__()
        self.unet = unet2d()
        self.scheduler = DDIMScheduler(num_train_timesteps=1000)
        self.scheduler.set_timesteps(50)
        self.timestep = int(self.scheduler.timesteps[10])

    def forward(self, sample: torch.Tensor) -> torch.Tensor:
        noise = self.unet(sample, self.timestep).sample
        previous: torch.Tensor = self.scheduler.step(noise, self.timestep, sample, eta=0.0).prev_sample
        return previous


def sample_only(generator: torch.Generator) -> tuple[torch.Tensor]:
    return (torch.randn(2, 3, 16, 16, generator=generator),)
