"""Operators, opt in (`suites = [..., "ops"]`): the running torch's OpInfo samples through every backend the entry
has, against float64, held to the stack's expectations file (`torchyard.inimage.ops`). A test per operator name:
it fails on any outcome that differs from the file, naming the operator, the sample and the backend."""

from __future__ import annotations

import importlib.util
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from torchyard.inimage.evaluation.evaluations import artifact_cache
from torchyard.inimage.ops.expectations import stack_identity
from torchyard.inimage.ops.options import ops_options
from torchyard.inimage.ops.session import OpsSession, entry_backends, selection
from torchyard.inimage.start.precision import DTYPES
from torchyard.inimage.start.probe import torch_device
from torchyard.inimage.start.settings import RUN_SETTINGS

pytestmark = pytest.mark.ops


# torch's OpInfo database imports `expecttest` (torch.testing._internal.common_utils), which torch does not
# depend on: without it every operator would fail alike, so the run has one test that says so instead.
NO_OP_DB = (
    ""
    if importlib.util.find_spec("expecttest") is not None
    else 'PyTorch\'s OpInfo samples import `expecttest`, which this environment lacks: add "expecttest" to the '
    "entry's requirements"
)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "operator_name" in metafunc.fixturenames and NO_OP_DB:
        metafunc.parametrize("operator_name", [pytest.param("", id="op_db")])
    elif "operator_name" in metafunc.fixturenames:
        options = ops_options(metafunc.config)
        chosen = selection(options.operators)
        if chosen is None:  # every OpInfo: the names come from op_db itself
            from torch.testing._internal.common_methods_invocations import op_db

            chosen = tuple(dict.fromkeys(str(info.name) for info in op_db))
        metafunc.parametrize("operator_name", options.sharded(chosen))


@pytest.fixture(scope="session")
def ops_session(request: pytest.FixtureRequest) -> Iterator[OpsSession]:
    settings = request.config.stash[RUN_SETTINGS]
    device = torch_device(settings.accelerator)
    backends, _ = entry_backends(device, settings.suites)
    with tempfile.TemporaryDirectory(prefix="torchyard-ops-") as scratch:
        session = OpsSession(
            ops_options(request.config),
            device=device,
            dtype=DTYPES[settings.precision],
            identity=stack_identity(settings.accelerator, settings.precision),
            tolerances=settings.tolerances,
            backends=backends,
            report_dir=settings.report_dir,
            workdir=Path(scratch),
            cache=artifact_cache(settings),
        )
        yield session
        for path in session.finish():
            print(f"\ntorchyard ops: wrote {path}")


def test_operator(operator_name: str, ops_session: OpsSession) -> None:
    if NO_OP_DB:
        pytest.fail(f"the ops suite: {NO_OP_DB}", pytrace=False)
    differences, set_aside = ops_session.run(operator_name)
    if ops_session.options.collect:
        return
    if differences:
        pytest.fail(f"{operator_name}: differs from {ops_session.path.name}:\n" + "\n".join(differences), pytrace=False)
    if set_aside:
        pytest.skip(f"set aside: {set_aside}")
