"""Where local wheel folders are served for builds: the engine's default bridge, when this host has it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from torchyard.image.serve import bridge_address


class _Networks:
    def __init__(self, ipam: dict[str, Any]) -> None:
        self._bridge = SimpleNamespace(attrs={"IPAM": ipam})

    def get(self, name: str) -> SimpleNamespace:
        assert name == "bridge"
        return self._bridge


def test_the_bridge_is_its_gateway_or_its_subnets_first_address_when_this_host_can_listen_there() -> None:
    assert bridge_address(_Networks({"Config": [{"Subnet": "127.0.0.0/8"}]})) == "127.0.0.1"  # no Gateway recorded
    assert bridge_address(_Networks({"Config": [{"Subnet": "127.0.0.0/8", "Gateway": "127.0.0.2"}]})) == "127.0.0.2"
    assert bridge_address(_Networks({"Config": [{"Gateway": "192.0.2.1"}]})) is None  # not an address of this host
    assert bridge_address(_Networks({"Config": []})) is None
    assert bridge_address(_Networks({"Config": [{"Subnet": "not a subnet"}]})) is None
