"""Inductor's remembered cache keys (`evaluation.cache.inductor_keys`): recalled only while the files they digest are
unchanged, computed again otherwise, and what inductor then uses."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
import torch

from torchyard import contract
from torchyard.inimage.evaluation.cache import inductor_keys
from torchyard.inimage.evaluation.cache.inductor_keys import STORE, fingerprint, recall, remember, settable
from torchyard.inimage.evaluation.evaluations import Evaluations
from torchyard.inimage.plugin.first_use import selected_backends

pytestmark = pytest.mark.harness


class Counting:
    """A key's computation that says how often it ran."""

    def __init__(self, value: str = "key-1") -> None:
        self.value, self.calls = value, 0

    def __call__(self) -> str:
        self.calls += 1
        return self.value


@pytest.fixture
def package(tmp_path: Path) -> Path:
    root = tmp_path / "pkg"
    (root / "_C").mkdir(parents=True)
    (root / "__init__.py").write_text("x = 1\n")
    (root / "_C" / "libpkg.so").write_bytes(b"\0" * 64)
    return root


def test_a_key_is_computed_once_and_recalled_while_its_files_are_unchanged(tmp_path: Path, package: Path) -> None:
    store, compute = tmp_path / STORE, Counting()
    assert recall(store, "pkg_key", package, compute) == ("key-1", "computed")
    assert recall(store, "pkg_key", package, compute) == ("key-1", "stored")
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"bytecode")  # not what a key digests
    assert recall(store, "pkg_key", package, compute) == ("key-1", "stored")
    assert compute.calls == 1


@pytest.mark.parametrize("change", ["content", "modified-time", "new-file", "removed-file"])
def test_a_changed_file_computes_the_key_again(tmp_path: Path, package: Path, change: str) -> None:
    store, compute = tmp_path / STORE, Counting()
    recall(store, "pkg_key", package, compute)
    library = package / "_C" / "libpkg.so"
    if change == "content":
        library.write_bytes(b"\1" * 65)
    elif change == "modified-time":  # same size, same bytes, edited in place
        status = library.stat()
        os.utime(library, ns=(status.st_atime_ns, status.st_mtime_ns + 1))
    elif change == "new-file":
        (package / "_C" / "extra.py").write_text("")
    else:
        library.unlink()
    compute.value = "key-2"
    assert recall(store, "pkg_key", package, compute) == ("key-2", "computed")
    assert recall(store, "pkg_key", package, compute) == ("key-2", "stored")
    assert compute.calls == 2


@pytest.mark.parametrize(
    "planted",
    ["{not json", "[]", '{"pkg_key": "bare"}', '{"pkg_key": {"fingerprint": "0", "value": "stale"}}'],
    ids=["not-json", "not-a-map", "not-an-entry", "another-fingerprint"],
)
def test_a_store_that_does_not_hold_the_key_is_computed_and_replaced(
    tmp_path: Path, package: Path, planted: str
) -> None:
    store, compute = tmp_path / STORE, Counting()
    store.write_text(planted)
    assert recall(store, "pkg_key", package, compute) == ("key-1", "computed")
    assert json.loads(store.read_text())["pkg_key"] == {"fingerprint": fingerprint(package), "value": "key-1"}


def test_a_value_that_matches_with_a_wrong_type_is_not_used(tmp_path: Path, package: Path) -> None:
    store = tmp_path / STORE
    store.write_text(json.dumps({"pkg_key": {"fingerprint": fingerprint(package), "value": 7}}))
    assert recall(store, "pkg_key", package, Counting()) == ("key-1", "computed")


def test_concurrent_writers_leave_a_whole_store(tmp_path: Path, package: Path) -> None:
    store = tmp_path / STORE
    threads = [
        threading.Thread(target=recall, args=(store, f"key_{index}", package, Counting(f"value-{index}")))
        for index in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    entries = json.loads(store.read_text())  # whole: one writer's map, never two interleaved
    assert entries and all(entry["fingerprint"] == fingerprint(package) for entry in entries.values())


def test_a_stored_key_is_the_one_inductor_uses(tmp_path: Path) -> None:
    """The wiring: a key recalled from the store is what torch's inductor then keys its caches on."""
    from torch._inductor import codecache

    root, key = inductor_keys._package_root("triton"), settable("triton_key")
    if root is None or key is None:  # no Triton, or a torch that does not let its key be set (2.11)
        assert remember(tmp_path) == {"triton_key": "absent"}
        assert not (tmp_path / STORE).exists()
        return
    own = key()  # this run's (recalled or computed), put back below
    (tmp_path / STORE).write_text(json.dumps({"triton_key": {"fingerprint": fingerprint(root), "value": "planted"}}))
    key.clear()
    try:
        assert remember(tmp_path) == {"triton_key": "stored"}
        assert codecache.triton_key() == "planted"
    finally:
        key.clear()
        key.set(own)


@pytest.mark.harness(this_run=True)  # what this run selected and wrote: no other run proves it
def test_each_suite_that_compiles_counts_as_selecting_inductor(request: pytest.FixtureRequest) -> None:
    """What decides the first-use imports and the remembered keys: a run of the compile or the parity suite
    alone selects inductor, by the parameters those suites take."""
    for suite in ("test_compile.py", "test_parity.py"):
        # "-inductor": the inductor parameter (or a compile mode of it) after the case's id, not aotinductor.
        items = [item for item in request.session.items if item.path.name == suite and "-inductor" in item.name]
        if items:
            assert selected_backends(items) == {"inductor"}, suite


@pytest.mark.harness(this_run=True)  # what this run selected and wrote: no other run proves it
def test_the_run_remembers_inductor_keys_in_the_entry_cache(
    request: pytest.FixtureRequest, evaluations: Evaluations
) -> None:
    if "inductor" not in selected_backends(request.session.items):
        pytest.skip("no inductor test is selected in this run: nothing compiles, nothing is remembered")
    root = inductor_keys._package_root("triton")
    if root is None:
        pytest.skip("Triton is not installed here: torch has no Triton key to compute")
    if settable("triton_key") is None:
        pytest.skip(f"torch {torch.__version__} does not let a caller set its triton_key: nothing is remembered")
    store = contract.cache_root(os.environ, evaluations.settings.report_dir) / STORE
    assert json.loads(store.read_text())["triton_key"]["fingerprint"] == fingerprint(root)
