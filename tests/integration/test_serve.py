"""Local wheel folders and file:// indexes are served for builds (nothing copied in): on the engine's default
bridge, which build steps reach on their own network, else on loopback for the host's network."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import docker
import pytest

from tests.unit.test_lock import simple_index
from torchyard.image.serve import bridge_address, served
from torchyard.lock.standins import write_wheel
from torchyard.matrix.machine import Source

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("bridge", [False, True], ids=["loopback", "bridge"])
def test_folders_and_file_indexes_are_served_and_urls_left_alone(
    tmp_path: Path, bridge: bool, client: docker.DockerClient
) -> None:
    address = bridge_address(client.networks) if bridge else None
    assert address or not bridge, "this engine's default bridge is an address of this host"
    wheels = tmp_path / "wheels"
    wheel = write_wheel(wheels, "app", "1.0")
    index = simple_index(wheels, tmp_path / "index")
    sources = [
        Source("pypi", "index", "https://pypi.org/simple"),
        Source("local", "index", index),
        Source("folder", "find-links", str(wheels)),
    ]
    with served(sources, address) as (reachable, host_network):
        assert host_network == (not bridge)
        assert reachable[2].location.startswith(f"http://{address or '127.0.0.1'}:")
        assert reachable[0] == sources[0]
        page = urllib.request.urlopen(f"{reachable[1].location}/app/").read().decode()
        link = page.split('href="')[1].split("#")[0]
        served_wheel = urllib.request.urlopen(f"{reachable[1].location}/app/{link}").read()
        assert served_wheel == wheel.read_bytes()
        listing = urllib.request.urlopen(reachable[2].location).read().decode()
        assert wheel.name in listing
    # Stopped: the port refuses at once (a timeout would be an error here, never taken for "stopped").
    with pytest.raises(urllib.error.URLError) as caught:
        urllib.request.urlopen(reachable[2].location, timeout=60)
    assert isinstance(caught.value.reason, ConnectionRefusedError), caught.value.reason
