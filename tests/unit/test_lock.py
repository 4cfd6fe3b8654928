"""Lockfiles with real uv against a local folder of tiny wheels the tests build: no network."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from torchyard.errors import ImageBuildError, LockError, StaleLockError
from torchyard.lock.check import lock_freshness, require_fresh
from torchyard.lock.inputs import LockInputs, compile_args, requirements_in, uv_environment
from torchyard.lock.install import sync_args
from torchyard.lock.lockfile import body_digest, lock_path, read_header, render_lockfile
from torchyard.lock.resolve import lock_entry, unreachable_index, uv_version
from torchyard.lock.standins import write_wheel
from torchyard.matrix import Entry, parse_plan
from torchyard.matrix.machine import Source, index_args

MATRIX = """\
exclude-newer = 2026-11-01T00:00:00Z
[indexes]
pypi = "https://unreachable.invalid/simple"
[accelerators.cpu]
base-image = "debian:bookworm-slim@sha256:{digest}"
indexes = ["pypi"]
runs-on = ["ubuntu-24.04"]
[accelerators.rocm]
base-image = "rocm/pytorch:x@sha256:{digest}"
indexes = ["pypi"]
runs-on = ["self-hosted"]
[accelerators.rocm.vendor]
torch = "2.13.0"
numpy = "*"
[[entry]]
name = "app"
accelerator = "cpu"
python = "3.11"
requirements = {requirements}
[[entry]]
name = "vendored"
accelerator = "rocm"
python = "3.11"
requirements = {vendored}
"""


def make_plan(requirements: str = '["app"]', vendored: str = '["needs-torch"]') -> tuple[Entry, Entry]:
    text = MATRIX.format(digest="0" * 64, requirements=requirements, vendored=vendored)
    app, vendored_entry = parse_plan(text, Path("matrix.toml")).entries
    return app, vendored_entry


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("wheels")
    write_wheel(folder, "app", "1.0", requires=["lib>=1"])
    write_wheel(folder, "lib", "1.0", files={"lib/__init__.py": b"VERSION = 1\n"})
    write_wheel(folder, "lib", "2.0", files={"lib/__init__.py": b"VERSION = 2\n"})
    write_wheel(folder, "torch", "2.13.0", requires=["vendor-only-dep"])
    write_wheel(folder, "torch", "2.14.0", requires=["vendor-only-dep"])
    write_wheel(folder, "vendor-only-dep", "1.0")
    write_wheel(folder, "numpy", "2.0.0")
    write_wheel(folder, "needs-torch", "1.0", requires=["torch>=2.13", "numpy"])
    write_wheel(folder, "needs-new-torch", "1.0", requires=["torch>=2.14"])
    return folder


@pytest.fixture
def mirrors(wheels: Path) -> dict[str, Source]:
    return {"pypi": Source("pypi", "find-links", str(wheels))}


def packages(path: Path) -> list[str]:
    return [line.split(" ")[0] for line in path.read_text().splitlines() if line[:1].isalnum()]


def test_compile_args_name_every_input() -> None:
    app, vendored = make_plan()
    sources = (Source("pypi", "index", "https://mirror.example/simple"), Source("x", "find-links", "/wheels"))
    args = compile_args(
        LockInputs.of(vendored, "0.13.9"), sources, Path("/out/lock.txt"), excludes=Path("/e.txt"), interpreter="/py"
    )
    assert args == (
        "uv", "pip", "compile", "requirements.in",
        "--generate-hashes", "--no-header", "--no-config",
        "--python", "/py",
        "--python-version", "3.11",
        "--python-platform", "x86_64-manylinux_2_28",
        "--index-strategy", "first-index",
        "--exclude-newer", "2026-11-01T00:00:00Z",
        "--output-file", "/out/lock.txt",
        "--default-index", "https://mirror.example/simple",
        "--find-links", "/wheels",
        "--excludes", "/e.txt",
        "--no-emit-package", "torch",
        "--no-emit-package", "numpy",
    )  # fmt: skip
    only_folder = compile_args(
        LockInputs.of(app, "0.13.9"),
        (Source("pypi", "find-links", "/w"),),
        Path("/l"),
        excludes=None,
        interpreter="/py",
    )
    assert only_folder[-3:] == ("--no-index", "--find-links", "/w")


def test_the_indexes_are_asked_in_matrix_order() -> None:
    # uv takes `--index` flags first, in order, and `--default-index` last: with first-index, a package comes
    # from the first index in matrix.toml that has it (torch from PyTorch's CPU index, not PyPI's CUDA build).
    sources = (
        Source("pytorch-cpu", "index", "https://download.pytorch.org/whl/cpu"),
        Source("extra", "index", "https://extra.example/simple"),
        Source("pypi", "index", "https://pypi.org/simple"),
    )
    assert index_args(sources) == [
        "--index", "https://download.pytorch.org/whl/cpu",
        "--index", "https://extra.example/simple",
        "--default-index", "https://pypi.org/simple",
    ]  # fmt: skip
    assert index_args(sources[2:]) == ["--default-index", "https://pypi.org/simple"]


# Fields the header records without passing them to uv: the entry's name (it names the file) and uv's
# version (the resolver itself). Every other field must change what uv is asked.
RECORD_ONLY = {"entry", "uv"}


def test_every_lock_input_reaches_the_digest_and_uv() -> None:
    """One definition: changing any field changes the recorded digest and, unless it is record-only,
    uv's arguments or requirements.in. A new resolution-affecting field that is not wired fails here."""
    _, vendored = make_plan()
    inputs = LockInputs.of(vendored, "0.13.9")
    sources = (Source("pypi", "index", "https://pypi.example/simple"),)

    def asked(candidate: LockInputs) -> tuple[tuple[str, ...], str, dict[str, str], tuple[str, ...]]:
        urls = [f"file:///standin/{name}" for name, _ in candidate.pinned_vendor()]
        args = compile_args(candidate, sources, Path("/o"), excludes=None, interpreter="/py")
        # what the excludes file handed to uv (`--excludes`) lists
        return args, requirements_in(candidate, urls), uv_environment(candidate), candidate.excluded()

    changed_values: dict[str, Any] = {
        "entry": "other",
        "requirements": ("something-else",),
        "indexes": (("pypi", "https://other.example/simple"),),
        "index_strategy": "unsafe-best-match",
        "python": "3.13",
        "platform": "aarch64-apple-darwin",
        "exclude_newer": "2027-01-01T00:00:00Z",
        "vendor": (("torch", "9.9.9"),),
        "uv": "9.9.9",
        "project": ("mypkg-dep>=1",),
        "deployment_target": "14.0",
        "binary_only": True,
        "exclude": ("triton",),
    }
    assert set(changed_values) == {field.name for field in dataclasses.fields(LockInputs)}
    for name, value in changed_values.items():
        changed = dataclasses.replace(inputs, **{name: value})
        assert changed.digest() != inputs.digest(), name
        if name not in RECORD_ONLY and name != "indexes":  # indexes reach uv through the machine's sources
            assert asked(changed) != asked(inputs), name
    assert set(inputs.record()) == {name.replace("_", "-") for name in changed_values} - {
        "project",
        "deployment-target",
        "binary-only",
        "exclude",
    }  # recorded only where set, so other entries' locks keep their digests


@pytest.mark.real_subprocess
def test_lock_then_check_fresh_and_relock_is_byte_identical(tmp_path: Path, mirrors: dict[str, Source]) -> None:
    app, _ = make_plan()
    path = lock_entry(app, tmp_path, mirrors)
    assert path == lock_path(tmp_path, app)
    assert packages(path) == ["app==1.0", "lib==2.0"]
    assert "--hash=sha256:" in path.read_text()
    first = path.read_bytes()
    assert lock_freshness(app, tmp_path, uv_version()).status == "fresh"
    lock_entry(app, tmp_path, mirrors)
    assert path.read_bytes() == first


@pytest.mark.real_subprocess
def test_a_lock_made_through_a_mirror_says_so_in_its_file_and_its_check(
    tmp_path: Path, mirrors: dict[str, Source], capsys: pytest.CaptureFixture[str]
) -> None:
    """Here pypi is a wheel folder: the pins are the folder's, which the lockfile names (the index, never the
    folder) and `lock --check` repeats; the terminal shows where the mirror is."""
    app, _ = make_plan()
    path = lock_entry(app, tmp_path, mirrors)
    header, body = read_header(path.read_text())
    assert header["made-through-mirrors"] == '["pypi"]' and mirrors["pypi"].location not in path.read_text()
    said = capsys.readouterr().err
    assert f"entry 'app': locked through this machine's mirrors (pypi={mirrors['pypi'].location}): " in said
    freshness = lock_freshness(app, tmp_path, uv_version())
    assert freshness.status == "fresh" and freshness.detail.endswith(
        "(made through mirrors of pypi: their files, not the index's)"
    )
    made = path.read_text()
    # The line is covered by the body digest: a pull request that drops it passes a mirror's pins off as the index's.
    path.write_text("".join(line for line in made.splitlines(keepends=True) if "made-through" not in line))
    assert lock_freshness(app, tmp_path, uv_version()).detail == (
        "edited by hand: the body does not match its recorded digest"
    )
    # With the digest recomputed, a line of anything but this entry's index names is still refused.
    for forged in ('["pypi <img src=x onerror=alert(1)>"]', '["not-an-index"]', "[]", "pypi", '{"pypi": 1}'):
        text = made.replace(header["body-digest"], body_digest(body, forged)).replace('["pypi"]', forged)
        path.write_text(text)
        freshness = lock_freshness(app, tmp_path, uv_version())
        assert (freshness.status, freshness.detail) == (
            "stale",
            "its made-through-mirrors line is not one torchyard writes",
        ), forged
    plain = render_lockfile(app, LockInputs.of(app, uv_version()), body)
    assert "made-through" not in plain and read_header(plain)[1] == body


def test_a_mirrored_index_of_any_name_matrix_toml_allows_reads_back_fresh(tmp_path: Path) -> None:
    """An index name is any TOML key (a `+`, a comma): the line torchyard writes for it is one its check takes."""
    text = MATRIX.format(digest="0" * 64, requirements='["app"]', vendored='["x"]')
    text = text.replace('pypi = "https', '"py+p,i" = "https').replace('indexes = ["pypi"]', 'indexes = ["py+p,i"]')
    app = parse_plan(text, Path("matrix.toml")).entries[0]
    body = "app==1.0 --hash=sha256:" + "a" * 64 + "\n"
    lock_path(tmp_path, app).write_text(render_lockfile(app, LockInputs.of(app, "0.9.0"), body, ["py+p,i"]))
    freshness = lock_freshness(app, tmp_path, "0.9.0")
    assert freshness.status == "fresh"
    assert freshness.detail.endswith("(made through mirrors of py+p,i: their files, not the index's)")


@pytest.mark.real_subprocess
def test_changed_input_is_stale_and_names_it(tmp_path: Path, mirrors: dict[str, Source]) -> None:
    app, _ = make_plan()
    lock_entry(app, tmp_path, mirrors)
    changed, _ = make_plan(requirements='["app", "lib<2"]')
    result = lock_freshness(changed, tmp_path, uv_version())
    assert (result.status, result.detail) == ("stale", "inputs changed: requirements")
    assert lock_freshness(app, tmp_path, "0.0.1").detail == "inputs changed: uv"


def test_missing_lock_says_which_index_and_what_to_run(tmp_path: Path) -> None:
    app, _ = make_plan()
    result = lock_freshness(app, tmp_path, "0.13.9")
    assert result.status == "missing"
    assert result.detail == (
        "run `nox -s lock -- app` (or `torchyard lock app`) on a machine that reaches pypi"
        " (https://unreachable.invalid/simple)"
    )


def test_a_stale_lock_stops_a_build_naming_the_command_that_remakes_it(tmp_path: Path) -> None:
    app, _ = make_plan()
    (tmp_path / "app.txt").write_text("app==1.0\n")  # not made by the lock session
    with pytest.raises(StaleLockError) as caught:
        require_fresh(app, tmp_path, "0.13.9")
    assert str(caught.value) == (
        "entry 'app': lock is stale (no torchyard header: not made by the lock session):"
        " `nox -s lock -- app` (or `torchyard lock app`)"
    )


@pytest.mark.parametrize("linked", ["file", "folder"])
def test_a_linked_lockfile_is_never_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, linked: str) -> None:
    """A pull request commits `lockfiles/app.txt -> /home/runner/.ssh/id_rsa` (or links the folder): the host
    reads neither, and the image plan refuses it in one line."""
    from torchyard.image.plan import _read_lock

    app, _ = make_plan()
    secret = tmp_path / "host" / "app.txt"
    secret.parent.mkdir()
    secret.write_text("a host secret\n")
    monkeypatch.chdir(tmp_path)
    if linked == "file":
        Path("lockfiles").mkdir()
        Path("lockfiles/app.txt").symlink_to(secret)
    else:
        Path("lockfiles").symlink_to(secret.parent)
    result = lock_freshness(app, Path("lockfiles"), "0.13.9")
    assert result.status == "stale" and "is a symbolic link" in result.detail and "a host secret" not in result.detail
    with pytest.raises(ImageBuildError, match=r"is a symbolic link .*the host never reads through one"):
        _read_lock(app, Path("lockfiles"))


@pytest.mark.real_subprocess
def test_hand_edit_fails_check_and_install(tmp_path: Path, mirrors: dict[str, Source], wheels: Path) -> None:
    app, _ = make_plan()
    path = lock_entry(app, tmp_path, mirrors)
    text = path.read_text()
    edited = text.replace("lib==2.0", "lib==1.0")
    path.write_text(edited)
    result = lock_freshness(app, tmp_path, uv_version())
    assert (result.status, result.detail) == ("stale", "edited by hand: the body does not match its recorded digest")
    venv = tmp_path / "venv"
    subprocess.run(["uv", "venv", "--quiet", str(venv)], check=True)
    install = ["uv", "pip", "install", "--python", str(venv), "--require-hashes", "--no-index", "--find-links"]
    refused = subprocess.run([*install, str(wheels), "-r", str(path)], capture_output=True, text=True, check=False)
    assert refused.returncode != 0
    assert "hash" in refused.stderr.lower()
    path.write_text(text)
    subprocess.run([*install, str(wheels), "-r", str(path)], check=True, capture_output=True)


@pytest.mark.real_subprocess
def test_vendor_packages_are_resolved_against_but_not_emitted(tmp_path: Path, mirrors: dict[str, Source]) -> None:
    _, vendored = make_plan()
    path = lock_entry(vendored, tmp_path, mirrors)
    # torch is held at the vendor's 2.13.0 (2.14.0 is newer on the index), and neither it, its own
    # dependency nor the unpinned vendor numpy enters the lock.
    assert packages(path) == ["needs-torch==1.0"]
    fields, _ = read_header(path.read_text())
    assert '"vendor":[["torch","2.13.0"],["numpy","*"]]' in fields["inputs"]


@pytest.mark.real_subprocess
def test_vendor_conflict_fails_naming_the_entry(tmp_path: Path, mirrors: dict[str, Source]) -> None:
    _, vendored = make_plan(vendored='["needs-new-torch"]')
    with pytest.raises(LockError) as caught:
        lock_entry(vendored, tmp_path, mirrors)
    message = str(caught.value)
    assert message.startswith("entry 'vendored': uv could not lock it: ")
    assert "needs-new-torch" in message and "\n" not in message
    assert list(tmp_path.iterdir()) == []


@pytest.mark.real_subprocess
def test_failed_lock_leaves_the_old_file_untouched(tmp_path: Path, mirrors: dict[str, Source]) -> None:
    app, _ = make_plan()
    path = lock_entry(app, tmp_path, mirrors)
    before = path.read_bytes()
    broken, _ = make_plan(requirements='["app", "no-such-package"]')
    with pytest.raises(LockError, match="no-such-package"):
        lock_entry(broken, tmp_path, mirrors)
    assert path.read_bytes() == before
    assert sorted(item.name for item in tmp_path.iterdir()) == ["app.txt"]


@pytest.mark.real_subprocess
def test_unreachable_index_without_mirror_is_one_clear_error(tmp_path: Path) -> None:
    app, _ = make_plan()
    with pytest.raises(LockError, match=r"^entry 'app': uv could not lock it: "):
        lock_entry(app, tmp_path, {}, env={"PATH": os.environ["PATH"], "UV_OFFLINE": "1"})
    assert list(tmp_path.iterdir()) == []


def closed_port() -> int:
    with socket.socket() as probe:  # a port that was free a moment ago: connecting to it is refused
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.real_subprocess
def test_an_index_that_does_not_answer_is_named_with_the_setting_that_points_it_elsewhere(tmp_path: Path) -> None:
    """The index itself does not answer (no mirror): uv's chain of causes becomes the index's name and the fix."""
    port = closed_port()
    text = MATRIX.format(digest="0" * 64, requirements='["app"]', vendored='["x"]')
    text = text.replace("https://unreachable.invalid/simple", f"http://user:secret@127.0.0.1:{port}/simple")
    app = parse_plan(text, Path("matrix.toml")).entries[0]
    with pytest.raises(LockError) as caught:
        lock_entry(app, tmp_path, {}, env={"PATH": os.environ["PATH"], "UV_HTTP_RETRIES": "0"})
    assert str(caught.value) == (
        f"entry 'app': the index 'pypi' (http://***@127.0.0.1:{port}/simple) is not reachable from here: lock "
        'where it is, or point it at a mirror of it with TORCHYARD_MIRRORS="pypi=URL" (docs/how-to/air-gapped.md)'
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.real_subprocess
def test_a_mirror_that_does_not_answer_is_named_as_this_machines_mirror(tmp_path: Path) -> None:
    """Pointing a mirror at a mirror would not help: the line names the machine's setting to mend."""
    port = closed_port()
    closed = {"pypi": Source("pypi", "index", f"http://user:secret@127.0.0.1:{port}/simple")}
    app, _ = make_plan()
    with pytest.raises(LockError) as caught:
        lock_entry(app, tmp_path, closed, env={"PATH": os.environ["PATH"], "UV_HTTP_RETRIES": "0"})
    assert str(caught.value) == (
        f"entry 'app': this machine's mirror of the index 'pypi' (http://***@127.0.0.1:{port}/simple) is not "
        "reachable: mend or drop it in TORCHYARD_MIRRORS or machine.toml's [mirrors] (docs/how-to/air-gapped.md)"
    )
    assert list(tmp_path.iterdir()) == []


def test_an_index_whose_certificate_uv_does_not_trust_is_told_from_one_that_does_not_answer() -> None:
    """uv's chain for a TLS failure holds the same 'error sending request' as a refused connection."""
    output = (
        "error: Failed to fetch: `https://pypi.org/simple/app/`\n  Caused by: Request failed after 3 retries\n"
        "  Caused by: error sending request for url (https://pypi.org/simple/app/)\n"
        "  Caused by: client error (Connect)\n  Caused by: invalid peer certificate: UnknownIssuer\n"
    )
    sources = [Source("pypi", "index", "https://pypi.org/simple")]
    said = unreachable_index(output, sources, [("pypi", "https://pypi.org/simple")])
    assert said == (
        "the index 'pypi' (https://pypi.org/simple) answered with a certificate uv does not trust: UV_NATIVE_TLS=1 "
        "makes uv read this machine's certificate store"
    )
    refused = output.replace("invalid peer certificate: UnknownIssuer", "tcp connect error")
    said = unreachable_index(refused, sources, [("pypi", "https://pypi.org/simple")])
    assert said.startswith("the index 'pypi' (https://pypi.org/simple) is not reachable from here")


def simple_index(wheels: Path, root: Path) -> str:
    """A PEP 503 index over `wheels` (root/simple/<project>/index.html linking ../../files/...)."""
    files = root / "files"
    files.mkdir(parents=True)
    projects: dict[str, list[str]] = {}
    for wheel in sorted(wheels.glob("*.whl")):
        (files / wheel.name).write_bytes(wheel.read_bytes())
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        project = wheel.name.split("-")[0].replace("_", "-").lower()
        projects.setdefault(project, []).append(f'<a href="../../files/{wheel.name}#sha256={digest}">{wheel.name}</a>')
    for project, links in projects.items():
        page = root / "simple" / project / "index.html"
        page.parent.mkdir(parents=True)
        page.write_text("<html><body>" + "".join(links) + "</body></html>")
    return (root / "simple").as_uri()


@pytest.mark.real_subprocess
def test_a_static_pep503_mirror_installs_but_cannot_lock(
    tmp_path: Path, wheels: Path, mirrors: dict[str, Source]
) -> None:
    """A static index has no upload times, so a lock with a cut-off date cannot use it (uv says so);
    installing a lock from it works, every file hash-checked."""
    app, _ = make_plan()
    index = Source("pypi", "index", simple_index(wheels, tmp_path / "index"))
    with pytest.raises(LockError, match="exclude-newer"):
        lock_entry(app, tmp_path / "a", {"pypi": index})
    lockfile = lock_entry(app, tmp_path / "b", mirrors)
    venv = tmp_path / "venv"
    subprocess.run(["uv", "venv", "--quiet", str(venv)], check=True)
    subprocess.run([*sync_args(lockfile, str(venv / "bin" / "python"), [index])], check=True, capture_output=True)
    installed = subprocess.run(["uv", "pip", "list", "--python", str(venv)], capture_output=True, text=True, check=True)
    assert "app" in installed.stdout and "lib" in installed.stdout
    # Compiled at install, as the suites' start-up wants: nothing else in this venv writes bytecode.
    assert list(venv.glob("lib/python*/site-packages/lib/__pycache__/__init__.*.pyc"))


@pytest.mark.real_subprocess
def test_an_offline_sync_checks_a_synced_venv_without_reading_any_index(
    tmp_path: Path, wheels: Path, mirrors: dict[str, Source]
) -> None:
    """`torchyard test --local` syncs a venv that already has its lock offline: uv then reads no index.
    A venv that drifted from its lock, with no wheel in uv's cache, fails offline (and is synced online)."""
    app, _ = make_plan()
    lockfile = lock_entry(app, tmp_path / "lock", mirrors)
    venv = tmp_path / "venv"
    python = str(venv / "bin" / "python")
    env = {**os.environ, "UV_CACHE_DIR": str(tmp_path / "uv-cache")}
    subprocess.run(["uv", "venv", "--quiet", str(venv)], check=True, env=env)
    index = Source("pypi", "index", simple_index(wheels, tmp_path / "index"))
    subprocess.run(sync_args(lockfile, python, [index]), check=True, capture_output=True, env=env)
    gone = Source("pypi", "index", "http://127.0.0.1:9/simple")  # nothing listens: reading it fails
    online = sync_args(lockfile, python, [gone], compile_bytecode=False)
    offline = sync_args(lockfile, python, [gone], compile_bytecode=False, offline=True)

    def status(args: tuple[str, ...], environment: dict[str, str]) -> int:
        return subprocess.run(args, check=False, capture_output=True, env=environment).returncode

    assert status(online, {**env, "UV_HTTP_RETRIES": "0"}) != 0  # online, uv reads the index all the same
    assert status(offline, env) == 0
    subprocess.run(["uv", "pip", "uninstall", "--python", python, "lib"], check=True, capture_output=True, env=env)
    assert status(offline, {**env, "UV_CACHE_DIR": str(tmp_path / "empty-cache")}) != 0


def test_a_lock_made_on_a_self_hosted_runner_resolves_wheels_only() -> None:
    """Route 10 of issue 57: a lock-on-runner entry is resolved on its GPU runner, where uv would build an sdist's
    metadata (running its code); it asks uv for wheels only, and says so in its lock's inputs."""
    app, _ = make_plan()
    hosted = LockInputs.of(app, "0.13.9")
    on_runner = LockInputs.of(dataclasses.replace(app, lock_on_runner=True), "0.13.9")
    sources = (Source("pypi", "index", "https://pypi.org/simple"),)
    args = compile_args(on_runner, sources, Path("/l"), excludes=None, interpreter="/py")
    assert args[-2:] == ("--only-binary", ":all:")
    assert "--only-binary" not in compile_args(hosted, sources, Path("/l"), excludes=None, interpreter="/py")
    assert on_runner.record()["binary-only"] is True and "binary-only" not in hosted.record()
    assert on_runner.digest() != hosted.digest()  # a lock made otherwise is stale
