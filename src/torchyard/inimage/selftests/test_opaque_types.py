"""Inputs and outputs torchyard cannot see into are refused before anything runs, in one line naming the type and
the fix (issue 71: a detection repository's `NestedTensor` became four of torchyard's own faults blamed on the
model); registered as a pytree node, the same type is compared leaf by leaf and passes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils import _pytree as pytree

from torchyard.inimage.cases import Call, Case
from torchyard.inimage.evaluation.harness import evaluate
from torchyard.inimage.evaluation.training import make_train_reference
from torchyard.inimage.selftests.planted import TOLERANCES
from torchyard.inimage.start.probe import CPU

pytestmark = pytest.mark.harness


class NestedTensor:
    """DETR's: a batch of images and its padding mask, in one object."""

    def __init__(self, tensors: torch.Tensor, mask: torch.Tensor) -> None:
        self.tensors, self.mask = tensors, mask


class Registered(NestedTensor):
    """The same, registered as a pytree node as the docs show."""


pytree.register_pytree_node(
    Registered,
    lambda nested: ([nested.tensors, nested.mask], None),
    lambda children, _: Registered(*children),
    serialized_type_name=f"{__name__}.Registered",  # what torch.export.save writes of it
    flatten_with_keys_fn=lambda nested: (
        [(pytree.GetAttrKey("tensors"), nested.tensors), (pytree.GetAttrKey("mask"), nested.mask)],
        None,
    ),
)


class Backbone(torch.nn.Module):
    def __init__(self, wraps: bool = False) -> None:
        super().__init__()
        self.conv, self.wraps = torch.nn.Conv2d(3, 4, 3, padding=1), wraps

    def forward(self, samples: NestedTensor) -> torch.Tensor | NestedTensor:
        features = self.conv(samples.tensors) * ~samples.mask[:, None]
        return type(samples)(features, samples.mask) if self.wraps else features


def _case(kind: type[NestedTensor], *, wraps: bool = False) -> Case:
    def inputs(generator: torch.Generator) -> Call:
        mask = torch.zeros(2, 8, 8, dtype=torch.bool)
        mask[1, :, 6:] = True
        return Call((kind(torch.randn(2, 3, 8, 8, generator=generator), mask),), {})

    return Case(f"nested_{kind.__name__.lower()}_{wraps}", lambda: Backbone(wraps), inputs)


def test_an_input_pytree_cannot_see_into_is_refused_in_one_line_naming_the_fix(tmp_path: Path) -> None:
    result = evaluate(_case(NestedTensor), "eager", device=CPU, dtype=torch.float32, tolerances=TOLERANCES,
                      workdir=tmp_path)  # fmt: skip
    assert result.status == "error"
    assert result.reason == (
        f"reference: the case's input [0] is a {__name__}.NestedTensor, whose tensors (tensors, mask) torch's "
        "pytree cannot see into: register the class as a pytree node (torch.utils._pytree.register_pytree_node, "
        'or make it a dataclass; docs/how-to/own-cases.md, "Inputs and outputs of your own types")'
    ), result.reason
    step = make_train_reference(_case(NestedTensor), "sgd", device=CPU, dtype=torch.float32)
    assert step.reference.error.startswith("the case's input [0] is a"), step.reference.error


def test_an_output_pytree_cannot_see_into_is_refused_and_a_registered_type_passes(tmp_path: Path) -> None:
    def evaluated(case: Case) -> tuple[str, str]:
        result = evaluate(case, "export", device=CPU, dtype=torch.float32, tolerances=TOLERANCES,
                          workdir=tmp_path / case.name)  # fmt: skip
        return result.status, result.reason

    assert evaluated(_case(Registered, wraps=True)) == ("passed", "")  # in and out, leaf by leaf
    unwrapping = Case("unwrapping", Unwraps, lambda g: (torch.randn(2, 3, 8, 8, generator=g),))
    status, reason = evaluated(unwrapping)
    assert status == "error" and reason.startswith("reference: the model's output is a "), reason
    assert "NestedTensor, whose tensors (tensors, mask)" in reason


class Unwraps(torch.nn.Module):
    """Takes a plain tensor, returns a `NestedTensor` of it and its mask."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> NestedTensor:
        return NestedTensor(self.conv(x), torch.zeros(x.shape[0], *x.shape[2:], dtype=torch.bool))
