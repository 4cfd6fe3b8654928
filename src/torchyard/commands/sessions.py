"""`torchyard nox ...`: the project's nox sessions, run by the nox installed with torchyard.

A noxfile that says `import torchyard.nox` needs nox and torchyard in one environment. A tool install
(`uv tool install torchyard`, `pipx install torchyard`) gives torchyard an environment of its own, with
nox in it (a dependency) but only `torchyard` on PATH; a nox from elsewhere cannot import torchyard.
So `torchyard nox -s test-cpu` is `nox -s test-cpu` run by this interpreter: the same arguments, the
same sessions, and each session's `torchyard` is this one.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from torchyard.util import proc


def nox_args(args: Sequence[str]) -> list[str]:
    """`-P`: the working folder (a checkout) is not put first on sys.path, so no `nox/` committed there is
    imported in nox's place (nox itself puts the noxfile's folder on the path, for the noxfile's imports)."""
    return [sys.executable, "-P", "-m", "nox", *args]


def run_nox(args: Sequence[str], *, runner: proc.Runner = proc.run) -> int:
    """Run nox with `args` from torchyard's environment; its exit status is the command's."""
    return runner(nox_args(args), check=False).returncode
