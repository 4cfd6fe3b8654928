"""The built image's checks, run in a sealed container before the image is tagged.

The vendor guard and the image check import what the lock and the project's wheel installed (a package's
`.pth` file runs at every interpreter start), so they never run in a build step: this engine's BuildKit
gives every RUN the network (its built-in frontend has no `RUN --network=none`), and a step runs as root
beside the secrets. Instead the image is built untagged and checked here, as a test
container runs: no network, no capability, a read-only root, the unprivileged user, limits and a deadline.
Both checks only read, so Python runs isolated (`-I`); site hooks stay on, as the vendor packages are found
through a `.pth` file.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence

from torchyard.errors import CommandError, ImageBuildError
from torchyard.seal import Helper, run_sealed, sealed_run
from torchyard.util import proc

PYTHON = "/opt/torchyard/venv/bin/python"
CHECK_SCRIPT = (
    f"{PYTHON} -I /opt/torchyard/vendor.py verify /opt/torchyard/vendor.json; "
    f'{PYTHON} -I -m torchyard.inimage.checks.image "$@"'
)
CHECK_LINE = re.compile(r"^((?:vendor guard|image check): .*)$", re.MULTILINE)


def image_check_helper(image: str, *, name: str, user: str, checks: Sequence[str]) -> Helper:
    """The vendor guard and the accelerator's image checks in the built `image`, as a helper container."""
    return Helper(f"{name}-check", user, image, ("/bin/bash", "-e", "-c", CHECK_SCRIPT, "check", *checks))


def image_check_args(image: str, *, name: str, user: str, checks: Sequence[str]) -> tuple[str, ...]:
    """`docker run` of the image check, sealed."""
    return sealed_run(image_check_helper(image, name=name, user=user, checks=checks))


def check_image(
    entry: str, image: str, checks: Sequence[str], *, name: str, user: str, docker_path: str,
    runner: proc.Runner, env: Mapping[str, str],
) -> None:  # fmt: skip
    """Run the checks; a failure is one line naming the entry and the check's own words."""
    try:
        helper = image_check_helper(image, name=name, user=user, checks=checks)
        run_sealed(helper, docker_path=docker_path, runner=runner, env=env, capture=True)
    except CommandError as error:
        sys.stderr.write(error.output)  # the check's own account, as the build log showed it before
        found = CHECK_LINE.findall(error.output)
        why = found[-1] if found else str(error)
        raise ImageBuildError(f"entry {entry!r}: the image build failed: {why}") from None
