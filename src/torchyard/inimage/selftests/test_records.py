"""A replay is proven by what ran (issue 69): each kept verdict holds the record of what its evaluation read, and a
change to any of it is a miss, while a case beside that read none of it still replays; what cannot be recorded
is never kept; and a planted stale verdict is caught by the cache's own audit.

A small project of its own, in two processes as two runs would be: one keeps every verdict; one after the
changes a static walk of the source does not see (each such case evaluated again, the untouched one replayed),
with kept verdicts forged on disk to say pass for a case that fails."""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from torchyard.inimage.evaluation.cache.record import _on_path, recording
from torchyard.names import AUDIT_EVERY

pytestmark = pytest.mark.harness("parity")

MODELS = '''
import importlib, json, os, shutil
from pathlib import Path

import torch

HERE = Path(__file__).parent
_TABLE = {}


def table():
    """A module-level cache, filled by the first call: a later case reads no file."""
    if "scale" not in _TABLE:
        _TABLE["scale"] = json.loads((HERE / "scale.json").read_text())["scale"]
    return _TABLE["scale"]


def inputs(generator):
    return (torch.randn(2, 4, generator=generator),)


class Base(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)


class Plain(Base):
    def forward(self, x):
        return self.linear(x)


class ComputedImport(Base):
    def forward(self, x):
        return importlib.import_module("mypkg." + "kern" + "els").fast(self.linear(x))


class RelativeImport(Base):
    def forward(self, x):
        from . import helpers
        return helpers.twice(self.linear(x))


class Cached(Base):
    def forward(self, x):
        return self.linear(x) * table()


class Saved(Base):
    def forward(self, x):
        return self.linear(x) + torch.load(HERE / "bias.pt")


class Arrays(Base):
    def forward(self, x):
        import numpy as np  # where the stack has it

        return self.linear(x) + torch.from_numpy(np.load(HERE / "shift.npy")).float()


class Config(Base):
    def forward(self, x):
        import yaml  # where the stack has it

        return self.linear(x) * yaml.safe_load((HERE / "config.yaml").read_text())["gain"]


class Variable(Base):
    def forward(self, x):
        return self.linear(x) * float(os.environ.get("MYPKG_GAIN", "1"))


class DependencyReads(Base):
    def forward(self, x):
        return self.linear(x) * (shutil.get_terminal_size().columns / 80)  # COLUMNS, read by the standard library


class Registered(Base):
    def forward(self, x):
        from . import ops  # registers mypkg::scale on first use
        return torch.ops.mypkg.scale(self.linear(x))


class Listed(Base):
    def forward(self, x):
        return self.linear(x) * len(os.listdir(HERE / "shards"))


class Wrong(Base):
    def forward(self, x):  # off by 1 % where it computes in float32: fails on every backend
        return self.linear(x) * (1.01 if x.dtype == torch.float32 else 1.0)


class Shell(Base):
    def forward(self, x):
        subprocess = importlib.import_module("subprocess")
        subprocess.run(["true"], check=True)
        return self.linear(x)


class Inner(Base):
    def forward(self, x):
        return x * 2


class ByComputedName(Base):
    def forward(self, x):  # a model of this file the key's walk never reaches, called by a computed name
        return globals()["In" + "ner"].forward(self, self.linear(x))


def load(name):
    """A loader every case shares, reading each case's own file: no case carries another's."""
    return float((HERE / name).read_text())


class LoadsA(Base):
    def forward(self, x):
        return self.linear(x) * load("a.txt")


class LoadsB(Base):
    def forward(self, x):
        return self.linear(x) * load("b.txt")


class Threaded(Base):
    def forward(self, x):
        import concurrent.futures

        helper = importlib.import_module("mypkg.thread" + "ed_helper")  # in a thread the window starts
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(helper.scaled, self.linear(x)).result()


class Forks(Base):
    def forward(self, x):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        return self.linear(x)


class RelativeToFolder(Base):
    def forward(self, x):
        folder = os.open(HERE / "shards", os.O_RDONLY)
        try:
            os.close(os.open("a", os.O_RDONLY, dir_fd=folder))
        finally:
            os.close(folder)
        return self.linear(x)
'''

# Read when the module is imported, before any window: a data file, a variable (issue 69: reads before the window).
AT_IMPORT = """
from pathlib import Path

import torch

SCALE = float((Path(__file__).parent / "at_import.txt").read_text())


class AtImport(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.linear(x) * SCALE
"""
VARIABLE_AT_IMPORT = AT_IMPORT.replace(
    'float((Path(__file__).parent / "at_import.txt").read_text())',
    'float(__import__("os").environ.get("MYPKG_AT_IMPORT", "1"))',
)


def hidden(read: str, factor: str = "NS.s") -> str:
    """A model module whose factor a static walk cannot see: what `read` binds to S is kept in a namespace (the
    walk counts a standard-library object by its class) and used by forward as `factor`."""
    return (
        "import os, pkgutil, threading, types\nfrom pathlib import Path\n\nimport torch\n\n"
        f"HERE = Path(__file__).parent\nS = 1.0\n{read}\nNS = types.SimpleNamespace(s=S)\ndel S\n\n\n"
        "class M(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.linear = torch.nn.Linear(4, 4)\n\n"
        f"    def forward(self, x):\n        return self.linear(x) * ({factor})\n"
    )


# A helper's attack on the record of reads at import (each replayed over its change): a read relative to the working
# folder, through a loader's `get_data`, in a thread the module's body waits for, through `os.environb`, the
# environment's own mapping or `os.getenvb`, a data file under a folder named `__pycache__`, a value re-exported
# by a subpackage's `__init__`, and a file's existence alone.
ATTACKED = {
    "mypkg/rel_cwd.py": hidden('S = float(open("cwd_data.txt").read())'),
    "mypkg/get_data.py": hidden('S = float(pkgutil.get_data("mypkg", "gd.txt"))'),
    "mypkg/thread_at_import.py": hidden(
        '_box = []\n_t = threading.Thread(target=lambda: _box.append(float((HERE / "th.txt").read_text())))\n'
        "_t.start()\n_t.join()\nS = _box[0]"
    ),
    "mypkg/environb.py": hidden('S = float(os.environb.get(b"MYPKG_B", b"1"))'),
    "mypkg/environ_data.py": hidden('S = float(os.environ._data.get(b"MYPKG_D", b"1"))'),
    "mypkg/getenvb_forward.py": hidden("", 'float(os.getenvb(b"MYPKG_BF", b"1"))'),
    "mypkg/pycache_data.py": hidden("", 'float((HERE / "data" / "__pycache__" / "pc.txt").read_text())'),
    "mypkg/sub/__init__.py": "from .inner import S\n",
    "mypkg/sub/inner.py": 'from pathlib import Path\n\nS = float((Path(__file__).parent / "in.txt").read_text())\n',
    "mypkg/reexported.py": hidden("from .sub import S"),
    "mypkg/exists_at_import.py": hidden('S = 2.0 if os.path.exists(HERE / "flag_i") else 1.0'),
    "mypkg/exists_forward.py": hidden("", '2.0 if os.path.exists(HERE / "flag_f") else 1.0'),
}
ATTACKED_DATA = {
    "cwd_data.txt": "1.0", "mypkg/gd.txt": "1.0", "mypkg/th.txt": "1.0", "mypkg/data/__pycache__/pc.txt": "1.0",
    "mypkg/sub/in.txt": "1.0",
}  # fmt: skip
ATTACKED_CHANGES = {
    "rel_cwd": ("cwd_data.txt", "3.0"), "get_data": ("mypkg/gd.txt", "3.0"),
    "thread_at_import": ("mypkg/th.txt", "3.0"), "pycache_data": ("mypkg/data/__pycache__/pc.txt", "3.0"),
    "reexported": ("mypkg/sub/in.txt", "3.0"), "exists_at_import": ("mypkg/flag_i", ""),
    "exists_forward": ("mypkg/flag_f", ""),
}  # fmt: skip
ATTACKED_VARIABLES = {"environb": "MYPKG_B", "environ_data": "MYPKG_D", "getenvb_forward": "MYPKG_BF"}

# A second review's routes (each replayed over its change before): a file's existence through `os.access`, the
# size of a listed entry (`DirEntry.stat`), a folder named as inductor's own, a module the project adds where an
# import failed, a read only export's tracing makes, a link retargeted, a link's own text, a file's executable
# bit, a SQLite database, and a loader whose cache the first of two cases filled (the second reads nothing).
OPTIONAL = "def OPTIONAL():\n    try:\n        import mypkg.optional_plugin\n    except ImportError:\n"
OPTIONAL += "        return False\n    return True\n\n\nHERE = "
LRU = "@__import__('functools').cache\ndef TABLE():\n    return float((HERE / 'lru.txt').read_text())\n\n\nHERE = "
ROUTES = {
    "mypkg/access_flag.py": hidden("", '2.0 if os.access(HERE / "acc_flag", os.F_OK) else 1.0'),
    "mypkg/entry_size.py": hidden("", 'float(next(os.scandir(HERE / "sized")).stat().st_size + 1)'),
    "mypkg/inductor_named.py": hidden("", 'float((HERE / "torchinductor_cfg" / "g.txt").read_text())'),
    "mypkg/optional_module.py": hidden(
        "", "__import__('mypkg.optional_plugin').optional_plugin.S if OPTIONAL() else 1.0"
    ).replace("HERE = ", OPTIONAL),
    "mypkg/export_only.py": hidden(
        "", 'float((HERE / "exp.txt").read_text()) if torch.compiler.is_exporting() else 1.0'
    ),
    "mypkg/link_retarget.py": hidden("", 'float((HERE / "linked.txt").read_text())'),
    "mypkg/link_text.py": hidden("", 'float(os.readlink(HERE / "val_link"))'),
    "mypkg/mode_bit.py": hidden("", '2.0 if os.stat(HERE / "tool.sh").st_mode & 0o100 else 1.0'),
    "mypkg/database.py": hidden(
        "", '__import__("sqlite3").connect(HERE / "g.db").execute("select g from t").fetchone()[0]'
    ),
    "mypkg/lru.py": hidden("", "TABLE()").replace("HERE = ", LRU) + "\n\nclass Second(M):\n    pass\n",
}
ROUTE_DATA = {
    "mypkg/sized/a": "", "mypkg/torchinductor_cfg/g.txt": "1.0", "mypkg/exp.txt": "1.0", "mypkg/lk1.txt": "1.0",
    "mypkg/lk3.txt": "3.0", "mypkg/tool.sh": "", "mypkg/lru.txt": "1.0",
}  # fmt: skip
ROUTE_CHANGES = {
    "access_flag": ("mypkg/acc_flag", ""), "entry_size": ("mypkg/sized/a", "xxx"),
    "inductor_named": ("mypkg/torchinductor_cfg/g.txt", "3.0"),
    "optional_module": ("mypkg/optional_plugin.py", "S = 3.0\n"), "export_only": ("mypkg/exp.txt", "3.0"),
    "lru": ("mypkg/lru.txt", "3.0"),
}  # fmt: skip
ROUTE_CASES = {
    **{name: f"{name}.M" for name in ROUTE_CHANGES}, "export_only": "export_only.M@export",
    "lru_second": "lru.Second", "link_retarget": "link_retarget.M", "link_text": "link_text.M",
    "mode_bit": "mode_bit.M", "database": "database.M",
}  # fmt: skip
# Code outside every case: a conftest's hook and a module a conftest imports read a file each (every case's)
CONFTEST = {
    "conftest.py": "from pathlib import Path\n\nimport mypkg.by_conftest\n\n\ndef pytest_sessionstart(session):\n"
    "    Path(__file__).with_name('hook.txt').read_text()\n",
    "hook.txt": "1.0",
    "mypkg/by_conftest.py": "from pathlib import Path\n\nS = Path(__file__).with_name('by_conftest.txt').read_text()\n",
    "mypkg/by_conftest.txt": "1.0",
}


def plant_routes(root: Path) -> None:
    """What the routes' files cannot say as text: a link, a link's own text, a mode, a database."""
    (root / "mypkg/linked.txt").symlink_to("lk1.txt")
    (root / "mypkg/val_link").symlink_to("1.0")
    (root / "mypkg/tool.sh").chmod(0o644)
    with contextlib.closing(sqlite3.connect(root / "mypkg/g.db")) as db, db:
        db.execute("create table t (g real)")
        db.execute("insert into t values (1.0)")


def change_routes(root: Path) -> None:
    (root / "mypkg/linked.txt").unlink()
    (root / "mypkg/linked.txt").symlink_to("lk3.txt")
    (root / "mypkg/val_link").unlink()
    (root / "mypkg/val_link").symlink_to("3.0")
    (root / "mypkg/tool.sh").chmod(0o755)
    with contextlib.closing(sqlite3.connect(root / "mypkg/g.db")) as db, db:
        db.execute("update t set g = 3.0")


FILES = {
    **ATTACKED,
    **ATTACKED_DATA,
    **ROUTES,
    **ROUTE_DATA,
    **CONFTEST,
    "mypkg/__init__.py": "",
    "mypkg/at_import.py": AT_IMPORT,
    "mypkg/at_import.txt": "1.0",
    "mypkg/variable_at_import.py": VARIABLE_AT_IMPORT,
    "mypkg/models.py": MODELS,
    "mypkg/kernels.py": "def fast(x):\n    return x * 2\n",
    "mypkg/helpers.py": "def twice(x):\n    return x * 2\n",
    "mypkg/scale.json": '{"scale": 1.5}',
    "mypkg/config.yaml": "gain: 2\n",
    "mypkg/shards/a": "",
    "mypkg/a.txt": "1.0",
    "mypkg/b.txt": "1.0",
    "mypkg/threaded_helper.py": "def scaled(x):\n    return x * 2\n",
    "mypkg/ops.py": textwrap.dedent(
        """
        import torch

        @torch.library.custom_op("mypkg::scale", mutates_args=())
        def scale(x: torch.Tensor) -> torch.Tensor:
            return x * 2
        """
    ),
}
HAS = {name for name in ("numpy", "yaml") if importlib.util.find_spec(name) is not None}  # the stack's own
# Each change a walk of the source misses, by the case that must be evaluated again after it (a file's new text).
CHANGES = {
    "computed_import": ("mypkg/kernels.py", "def fast(x):\n    return x * 3\n"),
    "relative_import": ("mypkg/helpers.py", "def twice(x):\n    return x * 3\n"),
    "cached_first": ("mypkg/scale.json", '{"scale": 2.5}'),
    "registered": ("mypkg/ops.py", FILES["mypkg/ops.py"].replace("x * 2", "x * 3")),
    "listed": ("mypkg/shards/b", ""),
    "loads_a": ("mypkg/a.txt", "2.0"),
    "threaded": ("mypkg/threaded_helper.py", "def scaled(x):\n    return x * 3\n"),
    "at_import": ("mypkg/at_import.txt", "2.0"),
    **ATTACKED_CHANGES,
    **ROUTE_CHANGES,
    **({"config": ("mypkg/config.yaml", "gain: 3\n")} if "yaml" in HAS else {}),
}
# Every case: the two of one cached table share it (the second reads no file: the first filled the cache).
CASES = {
    "plain": "Plain", "computed_import": "ComputedImport", "relative_import": "RelativeImport",
    "cached_first": "Cached", "cached_second": "Cached", "saved": "Saved", "variable": "Variable",
    "dependency_reads": "DependencyReads", "registered": "Registered", "listed": "Listed", "shell": "Shell",
    "loads_a": "LoadsA", "loads_b": "LoadsB", "threaded": "Threaded", "forks": "Forks",
    "relative_to_folder": "RelativeToFolder", "by_computed_name": "ByComputedName",
    "at_import": "at_import.AtImport", "variable_at_import": "variable_at_import.AtImport",
    **{name: f"{name}.M" for name in [*ATTACKED_CHANGES, *ATTACKED_VARIABLES]},
    **ROUTE_CASES,
    **({"arrays": "Arrays"} if "numpy" in HAS else {}), **({"config": "Config"} if "yaml" in HAS else {}),
}  # fmt: skip

RUN = """
import importlib, json, sys
from pathlib import Path

import torch

from torchyard.inimage.evaluation.cache import record

record.start()  # as the plugin starts it, before the project is imported

import conftest  # the project's conftest, as pytest imports it
conftest.pytest_sessionstart(None)  # and its hook, outside any window

from mypkg import models
from torchyard.inimage.cases import Case
from torchyard.inimage.evaluation.evaluations import Evaluations, result_cache
from torchyard.inimage.start.settings import RunSettings
from torchyard.inimage.start.tolerances import load_tolerances

root = Path(sys.argv[1])
settings = RunSettings(
    "cpu", "fp32", root / "reports", load_tolerances(), (), ("parity",), None, {}, cache=root / "cache"
)
evaluations = Evaluations(settings, root / "work", result_cache(settings))
forged = json.loads(sys.argv[3])  # case -> its replays so far: a kept pass forged on disk under its key
out = {}
for name, spec in json.loads(sys.argv[2]).items():
    model, _, backend = spec.partition("@")
    module, _, cls = model.rpartition(".")
    case = Case(name, getattr(importlib.import_module(f"mypkg.{module or 'models'}"), cls), models.inputs)
    if name in forged:
        decides = evaluations._decides(case, ["eager"])
        key = evaluations.kept.key(case, "eager", evaluations.device, kind="inference", **decides)
        plain = json.loads(next((root / "cache" / "verdicts").glob("*.json")).read_text())
        plain["result"]["case"], plain["replays"] = name, forged[name]
        plain["record"] = {"files": {}, "folders": {}, "variables": {}, "unkeepable": ""}  # a forger's own
        (root / "cache" / "verdicts" / f"{key}.json").write_text(json.dumps(plain))
    result = evaluations.result(case, backend or "eager")
    out[name] = [result.status, bool(result.replayed), result.unkeepable, result.audit]
print(json.dumps(out))
"""


def run(root: Path, cases: dict[str, str], forged: dict[str, int] | None = None, **env: str) -> dict[str, list[object]]:
    """One run of `cases`, in a process of its own, as a run of the suites would be; `forged`: the cases whose
    kept verdict is forged (a pass, with its count of replays) before they are looked up."""
    variables = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), *sys.path]), **env}
    done = subprocess.run(
        [sys.executable, "-c", RUN, str(root), json.dumps(cases), json.dumps(forged or {})],
        capture_output=True, text=True, env=variables, check=False, timeout=300, cwd=root,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    found: dict[str, list[object]] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def test_a_change_the_key_cannot_see_is_seen_by_the_record_and_a_stale_verdict_by_the_audit(tmp_path: Path) -> None:
    for name, text in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    import torch

    plant_routes(tmp_path)
    torch.save(torch.zeros(4), tmp_path / "mypkg/bias.pt")
    if "numpy" in HAS:
        import numpy as np

        np.save(tmp_path / "mypkg/shift.npy", np.zeros(4))

    first = run(tmp_path, CASES, COLUMNS="80")
    assert all(status == "passed" and not replayed for status, replayed, _, _ in first.values()), first
    unkeepable = {"shell": "subprocess", "forks": "forks a process", "relative_to_folder": "relative to a folder"}
    for name, why in unkeepable.items():
        assert why in str(first[name][2]), (name, first[name])
    assert not any(first[name][2] for name in CASES if name not in unkeepable)
    # What code outside every case reads (a conftest's hook, a module a conftest imports) is every case's
    kept = [json.loads(path.read_text()) for path in (tmp_path / "cache" / "verdicts").glob("*.json")]
    (plain,) = [verdict["record"]["files"] for verdict in kept if verdict["result"]["case"] == "plain"]
    assert {str(tmp_path / "hook.txt"), str(tmp_path / "mypkg/by_conftest.txt")} <= set(plain), plain
    # What only export's tracing reads is in that result's own record (the backend's window), not only in a
    # listing of its folder that any other change to the folder would also move
    (exported,) = [verdict["record"]["files"] for verdict in kept if verdict["result"]["case"] == "export_only"]
    assert str(tmp_path / "mypkg/exp.txt") in exported, sorted(exported)

    for name, text in CHANGES.values():
        (tmp_path / name).write_text(text)
    change_routes(tmp_path)
    models = tmp_path / "mypkg/models.py"  # a model of the file that no case's walk reaches
    models.write_text(models.read_text().replace("        return x * 2\n", "        return x * 3\n", 1))
    torch.save(torch.ones(4), tmp_path / "mypkg/bias.pt")
    if "numpy" in HAS:
        np.save(tmp_path / "mypkg/shift.npy", np.ones(4))
    # Beside them, a kept pass forged on disk for a case that fails: replayed until its turn in the audit (the
    # first), caught at its turn (the second).
    forged = {"wrong": 0, "wrong_at_its_audit": AUDIT_EVERY - 1}
    again = run(
        tmp_path,
        {**CASES, **dict.fromkeys(forged, "Wrong")},
        forged,
        COLUMNS="120",
        MYPKG_GAIN="2",
        MYPKG_AT_IMPORT="2",
        **dict.fromkeys(ATTACKED_VARIABLES.values(), "3"),
    )
    changed = {*CHANGES, "cached_second", "saved", "variable", "dependency_reads", *unkeepable, "wrong_at_its_audit"}
    changed |= {"variable_at_import", *ATTACKED_VARIABLES}
    changed.add("by_computed_name")
    # the loader's file read a.txt for loads_a: a case whose code shares that file carries what it read (a cache
    # such as lru_second's hides the read from the case that uses it)
    changed |= {"loads_b", "lru_second", "link_retarget", "link_text", "mode_bit", "database"}
    changed |= {"arrays"} & set(CASES)
    # a verdict whose turn in the audit's rotation came (its key's spread count) is evaluated again and the same
    evaluated = {name for name, (_, replayed, _, audit) in again.items() if not replayed and audit != "same"}
    assert evaluated == changed, (sorted(evaluated ^ changed), again)
    assert again["wrong"][:2] == ["passed", True]  # what a forged verdict does until the audit comes to it
    status, _, _, audit = again["wrong_at_its_audit"]
    assert status == "failed" and str(audit).startswith("differs: kept as passed"), audit


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to build a native library with")
def test_a_native_library_of_the_project_makes_its_results_unkeepable(tmp_path: Path) -> None:
    """Code in a shared object the project built (loaded before any case runs) is not seen by the record: a
    window while it is loaded from the project's folder on the path is unkeepable, saying which; once that folder
    is off the path, it is no project's."""
    with recording() as before:  # what the run's own project loads, if any, is said the same before and after
        pass
    (tmp_path / "scale.c").write_text("double gain(void) { return 2.0; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", "_scale.so", "scale.c"], cwd=tmp_path, check=True)
    sys.path.insert(0, str(tmp_path))
    try:
        library = ctypes.CDLL(str(tmp_path / "_scale.so"))
        library.gain.restype = ctypes.c_double
        with recording() as recorded:
            assert library.gain() == 2.0
        assert "_scale.so" in recorded[0].unkeepable and "native library of the project" in recorded[0].unkeepable
    finally:
        sys.path.remove(str(tmp_path))
        _on_path.cache_clear()
    with recording() as recorded:
        pass
    assert recorded[0].unkeepable == before[0].unkeepable, recorded[0].unkeepable


def test_a_backends_window_records_the_file_its_project_code_reads_and_no_folder_on_its_way(tmp_path: Path) -> None:
    """A path seen first in a backend's window is resolved to decide whether it is the project's; that resolve
    stats each folder on its way, which is the record's own look: recorded, `/tmp`'s listing made the result
    one that never replays."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "data.txt").write_text("1.0")
    module = tmp_path / "reads_once.py"
    module.write_text("def read(path):\n    with open(path) as stream:\n        return stream.read()\n")
    spec = importlib.util.spec_from_file_location("reads_once", module)
    assert spec is not None and spec.loader is not None
    reads_once = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reads_once)
    with recording(trace=False) as done:
        reads_once.read(str(tmp_path / "a" / "b" / "data.txt"))
    (record,) = done
    assert str(tmp_path / "a" / "b" / "data.txt") in record.files
    assert record.folders == {}, sorted(record.folders)
