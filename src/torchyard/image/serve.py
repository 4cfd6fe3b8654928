"""Serve local wheel folders and file:// indexes over HTTP for the length of a build.

A folder mounted into a build would need a named build context (buildx only); served over HTTP it works
with every builder, and nothing of it lands in a layer. It is served on the engine's default bridge, which
build steps and containers on the default network reach, so no build needs `--network host` (which would
also give the build the host's loopback services); where the bridge is not an address of this host, it is
served on 127.0.0.1 and only a trusted build may reach it through the host's network.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import docker

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


def bridge_address(networks: Any) -> str | None:
    """The default bridge's gateway when this host can listen on it (`networks`: docker's client.networks)."""
    try:
        config = networks.get("bridge").attrs["IPAM"]["Config"][0]
        # engines that leave the gateway out of the record give the bridge its subnet's first address
        address = str(config.get("Gateway") or next(ipaddress.ip_network(config["Subnet"]).hosts()))
        with socket.socket() as probe:
            probe.bind((address, 0))
    except (docker.errors.DockerException, KeyError, IndexError, TypeError, ValueError, StopIteration, OSError):
        return None
    return address


@contextmanager
def served(sources: Sequence[Source], address: str | None) -> Iterator[tuple[list[Source], bool]]:
    """The sources as a build step sees them, served on `address` (the bridge's gateway) or else on
    loopback, and whether the build needs the host's network to reach them."""
    host = address or "127.0.0.1"
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
            server = ThreadingHTTPServer((host, 0), handler)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            servers.append(server)
            url = f"http://{host}:{server.server_address[1]}/{path}".rstrip("/")
            translated.append(Source(source.name, source.kind, url if source.kind == "index" else url + "/"))
        yield translated, bool(servers) and address is None
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
