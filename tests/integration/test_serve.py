"""Local wheel folders and file:// indexes are served on loopback for builds (nothing copied in)."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.unit.test_lock import simple_index
from torchyard.image.serve import served
from torchyard.lock.standins import write_wheel
from torchyard.matrix.machine import Source

pytestmark = pytest.mark.integration


def test_folders_and_file_indexes_are_served_and_urls_left_alone(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheel = write_wheel(wheels, "app", "1.0")
    index = simple_index(wheels, tmp_path / "index")
    sources = [
        Source("pypi", "index", "https://pypi.org/simple"),
        Source("local", "index", index),
        Source("folder", "find-links", str(wheels)),
    ]
    with served(sources) as (reachable, host_network):
        assert host_network
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
