"""The lock's groups: every pin in exactly one layer, by the documented rule, each keyed by its own pins."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from torchyard.image.layers import (
    GROUP_NAMES,
    LAYERS_LABEL,
    Layer,
    group_of,
    image_keys,
    kept_groups,
    keyed,
    keys_label,
    read_keys_label,
    rebuilt_bytes,
    split_lock,
)
from torchyard.names import BACKEND_DISTRIBUTIONS

LOCKS = Path(__file__).parents[2] / "lockfiles"


def _pins(text: str) -> list[str]:
    return [line.split()[0] for line in text.splitlines() if line[:1].isalnum()]


@pytest.mark.parametrize("lock", sorted(LOCKS.glob("*.txt")), ids=lambda path: path.stem)
def test_the_groups_divide_the_lock(lock: Path) -> None:
    text = lock.read_text()
    layers = split_lock(text)
    assert tuple(layer.name for layer in layers) == GROUP_NAMES
    grouped = [pin for layer in layers for pin in layer.pins]
    assert sorted(grouped) == sorted(_pins(text.partition("# torchyard-inputs: ")[2].partition("\n")[2]))
    assert len(set(grouped)) == len(grouped)  # no package installed twice
    for layer in layers:
        assert _pins(layer.text) == list(layer.pins)
        assert "# via" not in layer.text  # dependents' names would tie the group to other groups' pins
        assert all(line.startswith("    --hash=sha256:") for line in layer.text.splitlines() if line[:1] == " ")


def test_the_cpu_lock_puts_torch_and_its_runtime_first() -> None:
    layers = {layer.name: layer for layer in split_lock((LOCKS / "cpu.txt").read_text())}
    assert {"torch==2.14.1", "triton==3.8.0", "nvidia-cudnn-cu13==9.24.0.43"} <= set(layers["torch"].pins)
    assert set(layers["pytorch"].pins) == {"executorch==1.5.1", "torchao==0.18.0"}
    assert {"numpy==2.4.6", "scipy==1.17.1", "sympy==1.14.0"} <= set(layers["numeric"].pins)
    assert any(pin.startswith("pytest==") for pin in layers["rest"].pins)


@pytest.mark.parametrize(
    ("name", "group"),
    [
        ("torch", "torch"),
        ("Torch", "torch"),
        ("pytorch_triton_rocm", "torch"),
        ("tensorrt-cu13-libs", "torch"),
        ("intel-sycl-rt", "torch"),
        ("torch-tensorrt", "pytorch"),
        ("torch_tensorrt", "pytorch"),
        ("ExecuTorch", "pytorch"),
        ("scikit_learn", "numeric"),
        ("opencv-python-headless", "numeric"),
        ("torchmetrics", "rest"),
        ("pytest", "rest"),
    ],
)
def test_a_package_goes_to_its_group_by_its_normalized_name(name: str, group: str) -> None:
    assert group_of(name) == group


@pytest.mark.parametrize("name", BACKEND_DISTRIBUTIONS)
def test_every_backends_distribution_goes_with_torch_or_the_deployment_stack(name: str) -> None:
    assert group_of(name) == ("torch" if name in ("torch", "tensorrt") else "pytorch")


LOCK = """\
# torchyard-inputs: {}
pytest==9.1.1 \\
    --hash=sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa
    # via -r requirements
six==1.17.0 \\
    --hash=sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb
    # via
    #   torch
torch==2.14.1 \\
    --hash=sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc \\
    --hash=sha256:dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd
    # via executorch
"""


def test_a_layer_key_changes_only_with_its_group_or_an_earlier_one() -> None:
    first = keyed(split_lock(LOCK), "below")
    bumped = keyed(split_lock(LOCK.replace("six==1.17.0", "six==1.16.0")), "below")
    moved = keyed(split_lock(LOCK.replace("c" * 64, "e" * 64)), "below")
    rebased = keyed(split_lock(LOCK), "another base")
    assert first[0].text == f"torch==2.14.1 \\\n    --hash=sha256:{'c' * 64} \\\n    --hash=sha256:{'d' * 64}\n"
    assert [a.key == b.key for a, b in zip(first, bumped, strict=True)] == [True, True, True, False]
    assert [a.key == b.key for a, b in zip(first, moved, strict=True)] == [False, False, False, False]
    assert not {layer.key for layer in first} & {layer.key for layer in rebased}
    # uv's `# via` comments name dependents: a change there moves no key.
    assert keyed(split_lock(LOCK.replace("#   torch", "#   torch\n    #   executorch")), "below") == first


def test_the_keys_label_reads_back_and_ignores_what_is_malformed() -> None:
    layers = keyed(split_lock(LOCK), "below")
    label = keys_label(layers)
    assert label.split()[0].startswith("torch=") and "pytorch=" not in label  # empty groups have no layer
    assert read_keys_label(label) == {layer.name: layer.key for layer in layers if layer.pins}
    assert read_keys_label("torch=xyz rest rest=0123456789abcdef0 other=0123456789abcdef") == {}


def test_a_line_that_is_not_a_pin_is_refused() -> None:
    with pytest.raises(ValueError, match=r"not a pinned requirement: 'git\+https://example\.org/x'"):
        split_lock("git+https://example.org/x\n")


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


GROUPS = [Layer("torch", ("torch==2.14.1",), "", "a" * 64), Layer("rest", ("numpy==2.3.0",), "", "b" * 64)]


def test_a_build_takes_the_groups_up_to_the_first_whose_key_differs() -> None:
    def labelled(value: str) -> Mapping[str, str]:
        return image_keys({LAYERS_LABEL: value})

    assert kept_groups(GROUPS, labelled(f"torch={'a' * 64} rest={'b' * 64}")) == ["torch", "rest"]
    assert kept_groups(GROUPS, labelled(f"torch={'a' * 64} rest={'c' * 64}")) == ["torch"]
    # Keys chain: a matching key above a new one is another layer.
    assert kept_groups(GROUPS, labelled(f"torch={'c' * 64} rest={'b' * 64}")) == []
    assert kept_groups(GROUPS, labelled("")) == []
    assert kept_groups(GROUPS, image_keys(None)) == []  # an image without labels
    assert kept_groups(GROUPS, labelled("torch=not-a-key")) == []  # a label is not trusted input


HASH = "    --hash=sha256:" + "a" * 64


@pytest.mark.parametrize(
    "body",
    [
        f"evil==1.0 \\\n{HASH}\n    --find-links /tmp/wheels\n",  # an option uv would read as a line of its own
        f"evil==1.0 \\\n{HASH}\n    --extra-index-url https://evil.example/simple\n",
        f"evil==1.0 --find-links /tmp/wheels \\\n{HASH}\n",  # an option on the pin's own line
        f"evil==1.0 \\\n{HASH} \\\n",  # the last hash continues into whatever follows
        f"evil==1.0 \\\n{HASH}\n{HASH}\n",  # a hash after the requirement ended
    ],
)
def test_a_lock_line_that_is_not_a_pin_or_its_hash_is_refused(body: str) -> None:
    """Review of round three: split_lock copied every indented line into the layer's requirements file, where
    one not joined by a `\\` to the line before is an option of uv's: an index the trusted matrix never named."""
    with pytest.raises(ValueError, match=r"continuation line|option on a requirement|continues into|after the end"):
        split_lock(body)
