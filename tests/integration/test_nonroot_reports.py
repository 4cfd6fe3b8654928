"""A runner that is not root (in the `docker` group): the container runs as the runner's user, so the run owns
what it writes in its staging folder and can make a folder there unlistable (0300) while it writes into it by
name. A helper's route (issue 70, round four): the count skipped that folder (60 MiB counted as 0), the hand-back
and the stage's removal failed, and every later run's sweep raised on the stage left behind. As that user: the
hidden folder is over any bound, the stage is emptied and removed, and a later sweep fails nothing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

NOBODY = 65534

AS_THE_RUNNER = """
import json, os, sys
from pathlib import Path

from torchyard.run.handback import HandBackError, hand_back
from torchyard.run.staging import holding, make_stage, remove_stage, staging_root, sweep_stages
from torchyard.util.folders import folder_bytes

base, uid = Path(sys.argv[1]), int(sys.argv[2])
os.setgroups([])
os.setgid(uid)
os.setuid(uid)
root = staging_root(str(base))
said = {}
left = make_stage(root / "torchyard-cpu-left", None)  # a dead run's, with the same hidden folder
for stage in (make_stage(root / "torchyard-cpu-run", None), left):
    hidden = stage / "h"
    hidden.mkdir()
    (hidden / "big").write_bytes(b"x" * (8 << 20))
    hidden.chmod(0o300)  # writable and searchable, not listable
    (hidden / "more").write_bytes(b"y" * (1 << 20))  # still written by name
stage = root / "torchyard-cpu-run"
said["counted"] = folder_bytes(stage)
try:
    with holding(stage):
        hand_back(stage, uid, uid, limit_bytes=1 << 20)
    said["handed"] = "whole"
except HandBackError as error:
    said["handed"] = str(error)
remove_stage(stage)
said["stage_left"] = stage.exists()
said["swept"] = sweep_stages(root, alive=set())
said["left_left"] = left.exists()
print(json.dumps(said))
"""


@pytest.mark.skipif(os.getuid() != 0, reason="becoming another user needs root")
def test_a_folder_the_run_hides_on_a_runner_that_is_not_root_is_over_its_bound_and_removed() -> None:
    base = Path(tempfile.mkdtemp(prefix="torchyard-nonroot-"))  # pytest's own folder is root's alone
    try:
        os.chown(base, NOBODY, NOBODY)
        done = subprocess.run(
            [sys.executable, "-c", AS_THE_RUNNER, str(base), str(NOBODY)],
            capture_output=True, text=True, check=False, timeout=120, cwd="/",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        said = json.loads(done.stdout.strip().splitlines()[-1])
        assert said["counted"] == sys.maxsize, said  # what the count cannot read is over any bound
        assert said["handed"] != "whole", said
        assert not said["stage_left"], said
        assert said["swept"] == ["torchyard-cpu-left"] and not said["left_left"], (said, done.stderr)
    finally:
        for folder in base.rglob("*"):
            if folder.is_dir() and not folder.is_symlink():
                folder.chmod(0o700)
        shutil.rmtree(base)
