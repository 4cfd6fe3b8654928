"""Two builds sharing the engine's BuildKit cache: what an untrusted build writes into its uv cache mount
never reaches a trusted build, as torchyard's plan scopes the Dockerfile's cache ids."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from torchyard.host.engine import build_client
from torchyard.image.plan import scoped_dockerfile
from torchyard.trust import Trust
from torchyard.util import proc

pytestmark = pytest.mark.integration


def test_an_untrusted_builds_cache_write_never_reaches_a_trusted_build(local_base: str, tmp_path: Path) -> None:
    cli = build_client()
    planted = f"/root/.cache/uv/planted-{uuid.uuid4().hex}"
    text = (
        f"FROM {local_base}\nARG SCOPE\n"
        f'RUN --mount=type=cache,id=torchyard-uv-trusted,target=/root/.cache/uv echo "from $SCOPE" >> {planted}; '
        f'echo "seen: $(tr "\\n" " " < {planted})"\n'
    )

    def build(scope: Trust) -> str:
        context = tmp_path / scope
        context.mkdir()
        (context / "Dockerfile").write_bytes(scoped_dockerfile(text.encode(), scope))
        args = (*cli.build_command(), "--progress", "plain", "--build-arg", f"SCOPE={scope}", str(context))
        return proc.run(args, env=cli.build_env(os.environ), tee=True).stdout

    assert "seen: from untrusted" in build("untrusted")
    trusted = build("trusted")
    assert "seen: from trusted" in trusted and "from untrusted" not in trusted.split("seen:")[-1]
