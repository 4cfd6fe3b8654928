"""robopolicy's own tests: they run in torchyard's image beside torchyard's suites."""

import torch
from robopolicy import Policy, load_normalization


def test_package_data_is_installed() -> None:
    assert len(load_normalization()["state_mean"]) == 6


def test_actions_are_bounded() -> None:
    observation = {
        "camera": torch.randint(0, 256, (3, 32, 32, 3), dtype=torch.uint8),
        "state": torch.randn(3, 6),
    }
    with torch.no_grad():
        output = Policy().eval()(observation)
    assert output["actions"].shape == (3, 4, 6)
    assert float(output["actions"].abs().max()) <= 1.0
    assert output["gripper"].shape == (3, 1)
