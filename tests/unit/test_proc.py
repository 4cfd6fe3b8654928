from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import version
from pathlib import Path

import pytest

from torchyard.cli import main
from torchyard.errors import CommandError, CommandNotFoundError, LockError
from torchyard.lock.resolve import lock_entry
from torchyard.matrix import load_plan
from torchyard.matrix.machine import Source
from torchyard.util.proc import executable, own_uv, redact, run


def test_missing_executable_is_a_typed_error() -> None:
    with pytest.raises(CommandNotFoundError, match="no-such-tool-xyz: command not found; install it"):
        run(["no-such-tool-xyz"], hint="install it")


def test_uv_is_torchyards_own_whatever_path_holds(tmp_path: Path) -> None:
    """The pinned uv package's binary, beside this interpreter, never a uv found on PATH."""
    (tmp_path / "uv").write_text("#!/bin/sh\necho uv 0.0.1\n")
    (tmp_path / "uv").chmod(0o755)
    assert executable("uv", str(tmp_path)) == own_uv()
    assert Path(own_uv()).parent == Path(sys.executable).parent
    assert executable("sh", str(tmp_path)) is None  # the others are looked up on PATH as given


def test_uv_missing_from_torchyards_environment_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> str:
        raise FileNotFoundError("Could not find the uv binary in any of the following locations:\n - /x\n")

    monkeypatch.setattr("uv.find_uv_bin", missing)
    with pytest.raises(CommandNotFoundError, match=r"^uv: the `uv` package torchyard depends on has no binary"):
        run(["uv", "--version"])


def test_uv_not_installed_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """An in-place run's interpreter may lack the uv package: only what runs uv needs it, and says so."""
    monkeypatch.setitem(sys.modules, "uv", None)  # import uv raises ImportError
    with pytest.raises(CommandNotFoundError, match=r"^uv: the `uv` package torchyard depends on has no binary"):
        run(["uv", "--version"])


@pytest.mark.real_subprocess
def test_a_different_uv_first_on_path_is_not_run(tmp_path: Path) -> None:
    (tmp_path / "uv").write_text("#!/bin/sh\necho uv 0.0.1\nexit 3\n")
    (tmp_path / "uv").chmod(0o755)
    result = run(["uv", "--version"], env={"PATH": str(tmp_path)}, capture=True)
    assert result.stdout.split()[:2] == ["uv", version("uv")]


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


SECRET_URL = "https://alice:s3cr3t-pass@mirror.example/simple?token=abcdef123"


def test_redact_removes_userinfo_query_tokens_and_secret_environment_values() -> None:
    text = f"--default-index {SECRET_URL} and ghp_0123456789 in an error"
    redacted = redact(text, {"GITHUB_TOKEN": "ghp_0123456789", "HOME": "/root"})
    assert redacted == "--default-index https://***@mirror.example/simple?token=*** and *** in an error"


@pytest.mark.real_subprocess
def test_the_echo_and_the_error_never_show_a_secret(capsys: pytest.CaptureFixture[str]) -> None:
    """The seam: `+ cmd` is redacted, and the error line says the cause, never the command."""
    script = f"import sys; sys.stderr.write('error: cannot reach {SECRET_URL}\\n'); sys.exit(2)"
    with pytest.raises(CommandError) as caught:
        run([sys.executable, "-c", script, "--index-url", SECRET_URL], capture=True)
    err = capsys.readouterr().err
    assert "s3cr3t" not in err and "abcdef123" not in err and "+ " in err
    assert str(caught.value) == (
        f"{Path(sys.executable).name} failed with exit status 2: "
        "error: cannot reach https://***@mirror.example/simple?token=***"
    )


@pytest.mark.real_subprocess
def test_tee_shows_output_redacted_and_keeps_its_tail(capsys: pytest.CaptureFixture[str]) -> None:
    script = f"print('step 1'); print('ERROR: failed to fetch {SECRET_URL}'); raise SystemExit(1)"
    with pytest.raises(CommandError, match=r"failed with exit status 1: ERROR: failed to fetch https://\*\*\*@"):
        run([sys.executable, "-c", script], tee=True)
    assert "s3cr3t" not in capsys.readouterr().err


def test_cli_errors_are_redacted(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHYARD_MIRRORS", "pypi=ftp://bob:hunter2hunter2@mirror.example/simple")
    monkeypatch.setenv("TORCHYARD_MACHINE_FILE", "/nonexistent/machine.toml")
    monkeypatch.setattr("torchyard.commands.lock.uv_version", lambda runner: "0.13.9")
    status = main(["lock", "--matrix", str(Path(__file__).parents[2] / "matrix.toml"), "cpu"])
    err = capsys.readouterr().err
    assert status == 2 and "hunter2" not in err
    assert "ftp://***@mirror.example/simple" in err


def test_a_failed_lock_never_shows_the_mirror_password(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def uv(args: Sequence[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        if list(args)[:2] == ["uv", "--version"]:
            return subprocess.CompletedProcess(args, 0, "uv 0.13.9\n", "")
        output = f"  \N{MULTIPLICATION SIGN} Failed to fetch: `{SECRET_URL}/torch/`\n  hint: check the index\n"
        raise CommandError("uv failed with exit status 1", 1, output)

    entry = load_plan(Path(__file__).parents[2] / "matrix.toml").entry("cpu")
    mirrors = {"pypi": Source("pypi", "index", SECRET_URL)}
    with pytest.raises(LockError) as caught:
        lock_entry(entry, tmp_path, mirrors, runner=uv)
    assert "s3cr3t" not in str(caught.value) and "s3cr3t" not in capsys.readouterr().err
    assert "https://***@mirror.example" in str(caught.value)


def test_the_unit_guard_refuses_every_way_to_start_a_process() -> None:
    """The autouse guard (conftest.py) stops subprocess, multiprocessing and the os module's own starts."""
    import multiprocessing
    import os

    starts: list[Callable[[], object]] = [
        lambda: subprocess.run(["true"], check=False),
        lambda: multiprocessing.get_context("spawn").Process(target=print).start(),
        lambda: multiprocessing.get_context("fork").Process(target=print).start(),
        lambda: os.system("true"),
        os.fork,
        lambda: os.posix_spawn("/bin/true", ["true"], {}),
    ]
    for start in starts:
        with pytest.raises(AssertionError, match="unit test started a real subprocess"):
            start()


@pytest.mark.real_subprocess
def test_a_tee_filter_shows_its_lines_and_the_error_reads_them_all(capsys: pytest.CaptureFixture[str]) -> None:
    script = "print('#1 [step] RUN x'); print('#1 0.1 noise'); print('#1 ERROR: it broke'); raise SystemExit(3)"
    with pytest.raises(CommandError) as raised:
        run([sys.executable, "-c", script], tee=lambda line: "noise" not in line)
    shown = capsys.readouterr().err.splitlines()[1:]  # after the command's own line
    assert shown == ["#1 [step] RUN x", "#1 ERROR: it broke"]
    assert "#1 0.1 noise" in raised.value.output
