"""Serve local wheel folders and file:// indexes over loopback HTTP for the length of a build.

A folder mounted into a build would need a named build context (buildx only); served on 127.0.0.1 and
reached with `--network host`, it works with every builder, and nothing of it lands in a layer.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlparse

from torchyard.matrix.machine import Source


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def _folder_and_path(source: Source) -> tuple[Path, str] | None:
    """What to serve for a source that only this machine can read, and the path under it to use."""
    if source.kind == "find-links":
        return Path(source.location), ""
    parsed = urlparse(source.location)
    if parsed.scheme == "file":
        index = Path(parsed.path)
        return index.parent, index.name  # a PEP 503 tree links upwards (../../files/...)
    return None


@contextmanager
def served(sources: Sequence[Source]) -> Iterator[tuple[list[Source], bool]]:
    """The sources as a container on the host network sees them, and whether any needed serving."""
    servers: list[ThreadingHTTPServer] = []
    translated: list[Source] = []
    try:
        for source in sources:
            local = _folder_and_path(source)
            if local is None:
                translated.append(source)
                continue
            folder, path = local
            handler = functools.partial(_QuietHandler, directory=str(folder))
            server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            servers.append(server)
            url = f"http://127.0.0.1:{server.server_address[1]}/{path}".rstrip("/")
            translated.append(Source(source.name, source.kind, url if source.kind == "index" else url + "/"))
        yield translated, bool(servers)
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
