from __future__ import annotations

import subprocess
import sys

import pytest

from torchyard.errors import CommandError, CommandNotFoundError
from torchyard.util.proc import run


def test_missing_executable_is_a_typed_error() -> None:
    with pytest.raises(CommandNotFoundError, match="no-such-tool-xyz: command not found; install it"):
        run(["no-such-tool-xyz"], hint="install it")


@pytest.mark.real_subprocess
def test_failure_names_the_command_and_status(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(CommandError) as caught:
        run([sys.executable, "-c", "import sys; sys.stderr.write('boom'); sys.exit(3)"], capture=True)
    assert caught.value.returncode == 3
    assert caught.value.output == "boom"
    assert "exit status 3" in str(caught.value)
    assert capsys.readouterr().err.startswith("+ ")


@pytest.mark.real_subprocess
def test_success_returns_output() -> None:
    result = run([sys.executable, "-c", "print('hi')"], capture=True)
    assert result.stdout == "hi\n"
    assert isinstance(result, subprocess.CompletedProcess)
