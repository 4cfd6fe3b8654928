"""The same cases module after a change: a debug print, a reformulated softmax, one unchanged model."""

import torch

from torchyard.cases import Case


class Head(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.proj(x)
        print("head:", y.shape)  # a debug print left in
        return torch.relu(y)


class Scores(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = (self.proj(x) + 64.0) - 64.0  # a reformulation that loses low bits of every logit
        e = torch.exp(z - z.amax(dim=-1, keepdim=True))
        return (e / e.sum(dim=-1, keepdim=True)).cumsum(dim=-1).diff(dim=-1, prepend=torch.zeros_like(e[..., :1]))


class Gate(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.proj(x)) * x


def batch(g: torch.Generator) -> tuple[torch.Tensor]:
    return (torch.randn(8, 32, generator=g),)


CASES = [Case("head", Head, batch), Case("scores", Scores, batch), Case("gate", Gate, batch)]
