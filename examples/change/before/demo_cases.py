"""Three models of a policy's head, as a project's cases module before a change."""

import torch

from torchyard.cases import Case


class Head(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.proj(x))


class Scores(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.proj(x), dim=-1)


class Gate(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.proj(x)) * x


def batch(g: torch.Generator) -> tuple[torch.Tensor]:
    return (torch.randn(8, 32, generator=g),)


CASES = [Case("head", Head, batch), Case("scores", Scores, batch), Case("gate", Gate, batch)]
