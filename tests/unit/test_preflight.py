"""Before a build: the engine's disk holds what the build writes, estimated from the entry's last image."""

from __future__ import annotations

from collections.abc import Mapping

from torchyard.image.layers import LAYERS_LABEL, Layer, image_keys
from torchyard.image.preflight import kept_groups, needs_more_than_free, rebuilt_bytes


def test_a_build_needs_its_last_image_size_and_a_margin() -> None:
    assert needs_more_than_free(6 << 30, 7 << 30)
    assert not needs_more_than_free(6 << 30, 9 << 30)
    assert not needs_more_than_free(0, 0)  # nothing to estimate from


# The engine's history, newest first, of an image whose four groups came from install-layer.sh.
HISTORY = [
    {"CreatedBy": "LABEL org.opencontainers.image.title=...", "Size": 0},
    {"CreatedBy": "RUN /bin/sh -c pip install project", "Size": 300},
    {"CreatedBy": "COPY lock.txt", "Size": 10},
    {"CreatedBy": "RUN |3 ... bash /opt/torchyard/install-layer.sh rest", "Size": 2_000},
    {"CreatedBy": "RUN |3 ... bash /opt/torchyard/install-layer.sh numeric", "Size": 40_000},
    {"CreatedBy": "RUN |3 ... bash /opt/torchyard/install-layer.sh torch", "Size": 5_000_000},
    {"CreatedBy": "base", "Size": 100_000},
]


def test_a_rebuild_that_keeps_the_dependency_layers_needs_only_what_lies_above_them() -> None:
    size = sum(int(str(layer["Size"])) for layer in HISTORY)
    assert rebuilt_bytes(HISTORY, size, ["torch", "numeric", "rest"]) == 310
    assert rebuilt_bytes(HISTORY, size, ["torch"]) == 42_310
    assert rebuilt_bytes(HISTORY, size, []) == size  # a new torch group: the whole image again
    assert rebuilt_bytes(HISTORY, size, ["pytorch"]) == size  # a group the history lacks: assume nothing


GROUPS = [Layer("torch", ("torch==2.14.1",), "", "a" * 16), Layer("rest", ("numpy==2.3.0",), "", "b" * 16)]


def test_a_build_takes_the_groups_up_to_the_first_whose_key_differs() -> None:
    def labelled(value: str) -> Mapping[str, str]:
        return image_keys({LAYERS_LABEL: value})

    assert kept_groups(GROUPS, labelled(f"torch={'a' * 16} rest={'b' * 16}")) == ["torch", "rest"]
    assert kept_groups(GROUPS, labelled(f"torch={'a' * 16} rest={'c' * 16}")) == ["torch"]
    # Keys chain: a matching key above a new one is another layer.
    assert kept_groups(GROUPS, labelled(f"torch={'c' * 16} rest={'b' * 16}")) == []
    assert kept_groups(GROUPS, labelled("")) == []
    assert kept_groups(GROUPS, image_keys(None)) == []  # an image without labels
    assert kept_groups(GROUPS, labelled("torch=not-a-key")) == []  # a label is not trusted input
