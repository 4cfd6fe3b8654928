"""Each suite's pass rule (its module's `passes`), outcome by outcome."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from torchyard.inimage.evaluation.harness import Result, Status
from torchyard.inimage.suites import test_aot, test_compile, test_export, test_parity, test_runtime, test_train
from torchyard.names import SuiteName

pytestmark = pytest.mark.harness

RULES: dict[str, Callable[[Result], bool]] = {
    module.pytestmark.name: module.passes
    for module in (test_export, test_compile, test_runtime, test_aot, test_parity, test_train)
}


def passes(suite: SuiteName, result: Result) -> bool:
    """`result`'s verdict by the rule `suite`'s module writes."""
    return RULES[suite](result)


def _result(status: Status, *, shapes: bool = True, artifact: str | None = None, backend: str = "export") -> Result:
    size = Path(artifact).stat().st_size if artifact else 0  # as the harness measures it after the run
    return Result("case", backend, "float32", status, shapes_match=shapes, artifact=artifact, artifact_bytes=size)


def test_each_suites_pass_rule(tmp_path: Path) -> None:
    """The rules the suites apply, outcome by outcome."""
    program, empty = tmp_path / "program.pte", tmp_path / "empty.pte"
    program.write_bytes(b"program")
    empty.write_bytes(b"")
    assert passes("parity", _result("passed"))
    assert not passes("parity", _result("failed")) and not passes("parity", _result("error", shapes=False))
    assert not passes("parity", _result("skipped"))
    assert passes("compile", _result("passed")) and passes("compile", _result("failed"))  # values are parity's
    assert not passes("compile", _result("failed", shapes=False)) and not passes("compile", _result("error"))
    # a call that ran no compiled graph (dynamo ran the frame eagerly) is not the compiled module running
    eagerly = Result("case", "inductor", "float32", "failed", shapes_match=True, not_compiled="call 2 ran eagerly")
    assert not passes("compile", eagerly) and not passes("parity", eagerly)
    assert passes("export", _result("failed", artifact=str(program)))
    assert not passes("export", _result("passed")) and not passes("export", _result("passed", artifact=str(empty)))
    assert not passes("export", _result("passed", shapes=False, artifact=str(program)))
    assert passes("runtime", _result("passed", backend="tensorrt"))  # its engine stays in memory
    assert not passes("runtime", _result("passed", backend="executorch-xnnpack"))
    assert not passes("runtime", _result("passed", backend="vulkan"))  # only TensorRT runs from memory
    assert passes("runtime", _result("failed", backend="executorch-xnnpack", artifact=str(program)))
    assert not passes("runtime", _result("skipped", backend="tensorrt"))
    assert passes("aot", _result("failed", backend="aotinductor", artifact=str(program)))  # values are parity's
    assert not passes("aot", _result("passed", backend="aotinductor"))  # no package on disk: not what it tests
    assert not passes("aot", _result("passed", backend="aotinductor", artifact=str(empty)))
    assert not passes("aot", _result("passed", shapes=False, backend="aotinductor", artifact=str(program)))
