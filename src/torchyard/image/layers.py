"""The lock's packages in a few image layers, the heavy and slow-moving first, each keyed by its pins alone.

Every pinned package goes into exactly one group, by its normalized name, first match wins (`GROUPS`; the rule
and why are docs/concepts/flow.md's): `torch` and what it loads at run time, `pytorch` (the deployment stack
built against one torch), `numeric`, then `rest`. Each group is its own requirements file in the context
(`layers/<group>.txt`: its pin lines with their hashes, without uv's `# via` comments, which name dependents in
other groups), installed as one layer: a change outside a group never rebuilds its layer. The image's label
and history say which layers a runner holds, and their sizes.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from docker.models.images import Image

from torchyard.lock.lockfile import read_header
from torchyard.names import BACKEND_DISTRIBUTIONS

# (group, the name patterns it takes), in install order; `rest` takes what no pattern matches.
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "torch",
        (
            r"torch",
            r"triton",
            r"pytorch-triton(-.+)?",
            r"nvidia-.+",
            r"cuda-.+",
            r"tensorrt(-.+)?",
            # Intel's XPU runtime, as PyTorch's XPU wheels pull it in.
            r"intel-.+",
            r"dpcpp-cpp-rt",
            r"impi-rt",
            r"mkl",
            r"onemkl-.+",
            r"oneccl(-.+)?",
            r"tbb",
            r"tcmlib",
            r"umf",
        ),
    ),
    # torch and TensorRT, which backends name too, are the group above's: the first match wins.
    ("pytorch", (*map(re.escape, BACKEND_DISTRIBUTIONS), r"torchvision", r"torchaudio")),
    (
        "numeric",
        (
            r"numpy",
            r"scipy",
            r"pandas",
            r"scikit-learn",
            r"sympy",
            r"mpmath",
            r"networkx",
            r"pillow",
            r"opencv(-contrib)?-python(-headless)?",
            r"numba",
            r"llvmlite",
        ),
    ),
    ("rest", ()),
)
GROUP_NAMES = tuple(name for name, _ in GROUPS)
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*==")
LAYERS_LABEL = "dev.torchyard.layers"
# A dependency layer's step in an image's history (`docker history`), and its group.
LAYER_HISTORY = re.compile(r"install-layer\.sh (\w+)(?: # buildkit)?$")


def normalize(name: str) -> str:
    """PEP 503's normalized name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def group_of(name: str) -> str:
    """The group a package goes into (see the module docstring)."""
    normalized = normalize(name)
    for group, patterns in GROUPS:
        if any(re.fullmatch(pattern, normalized) for pattern in patterns):
            return group
    return "rest"


@dataclass(frozen=True)
class Layer:
    """One group of the lock: its name, its packages (`name==version`) and its requirements file."""

    name: str
    pins: tuple[str, ...]
    text: str
    key: str = ""  # what decides the layer (`keyed`): equal keys, equal layers on one engine or registry

    @property
    def path(self) -> str:
        """Its path in the build context."""
        return f"layers/{self.name}.txt"


HASH_LINE = re.compile(r"\s+--hash=sha256:[0-9a-f]{64}(?:\s*\\)?")


def _blocks(body: str) -> list[list[str]]:
    r"""The lock body's requirement blocks: a pin line and its `--hash` lines, comments dropped. Nothing else
    passes: the body reaches uv as requirements files, where a line uv does not join to the one before (no `\`
    there) is an option of its own (`--find-links`, `--extra-index-url`), an index the trusted matrix never
    named; a pull request recomputes the body's digest as easily as it writes the line."""
    blocks: list[list[str]] = []
    for line in body.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if line[0].isspace():
            if not blocks:
                raise ValueError(f"a continuation line before any requirement: {line!r}")
            if HASH_LINE.fullmatch(line) is None:
                raise ValueError(f"a continuation line that is not a sha256 hash: {line!r}")
            if not blocks[-1][-1].rstrip().endswith("\\"):
                raise ValueError(f"a line after the end of its requirement (no \\ before it): {line!r}")
            blocks[-1].append(line)
        else:
            if re.search(r"\s-", line.rstrip().removesuffix("\\")):
                raise ValueError(f"an option on a requirement's line: {line!r}")
            blocks.append([line])
    for block in blocks:
        if block[-1].rstrip().endswith("\\"):
            raise ValueError(f"a requirement whose last line continues into the next: {block[-1]!r}")
    return blocks


def split_lock(lock_text: str) -> tuple[Layer, ...]:
    """The lock's requirement blocks, grouped (every group, in install order; a group may be empty)."""
    _, body = read_header(lock_text)
    grouped: dict[str, list[list[str]]] = {name: [] for name in GROUP_NAMES}
    for block in _blocks(body):
        match = PIN.match(block[0])
        if match is None:
            raise ValueError(f"not a pinned requirement: {block[0]!r}")
        grouped[group_of(match[1])].append(block)
    layers = []
    for name in GROUP_NAMES:
        blocks = grouped[name]
        text = "".join("\n".join(block) + "\n" for block in blocks)
        pins = tuple(block[0].split()[0].rstrip("\\").strip() for block in blocks)
        layers.append(Layer(name, pins, text))
    return tuple(layers)


def keyed(layers: Sequence[Layer], below: str) -> tuple[Layer, ...]:
    """Each layer with its key: a digest of `below` (what decides the image below the first group: base,
    build arguments, the Dockerfile and the installer) and of its own group's file and every earlier one's,
    as the builder's cache decides it. Labelled on the image, the keys say which layers a runner has."""
    digest = hashlib.sha256(below.encode())
    result = []
    for layer in layers:
        digest.update(b"\0" + layer.name.encode() + b"\0" + layer.text.encode())
        result.append(replace(layer, key=digest.hexdigest()))
    return tuple(result)


def keys_label(layers: Sequence[Layer]) -> str:
    """The image label's value: `group=key` per non-empty group, in install order."""
    return " ".join(f"{layer.name}={layer.key}" for layer in layers if layer.pins)


def read_keys_label(value: str) -> Mapping[str, str]:
    """`keys_label`'s value read back (anything malformed is skipped: labels are not trusted input)."""
    pairs = (item.partition("=") for item in value.split())
    return {name: key for name, sep, key in pairs if sep and name in GROUP_NAMES and re.fullmatch(r"[0-9a-f]{64}", key)}


def image_keys(labels: Mapping[str, str] | None) -> Mapping[str, str]:
    """An image's dependency layers by group and key, read from its labels (none where it has no such label)."""
    return read_keys_label((labels or {}).get(LAYERS_LABEL, ""))


def stack_of(labels: Mapping[str, str] | None) -> str:
    """The key of an image's last dependency group, which covers every group and what lies below them (base,
    build arguments, installer): entries whose images share it run on one stack. Empty without the label."""
    keys = list(image_keys(labels).values())
    return keys[-1] if keys else ""


def history_layers(history: Sequence[Mapping[str, object]]) -> list[tuple[str | None, int]]:
    """Each layer of an image's history (the engine's, newest first): its dependency group (None for any
    other layer) and its size."""
    layers = []
    for item in history:
        match = LAYER_HISTORY.search(str(item.get("CreatedBy", "")))
        layers.append((match[1] if match else None, int(str(item.get("Size", 0)) or 0)))
    return layers


def layer_sizes(history: Sequence[Mapping[str, object]]) -> dict[str, int]:
    """Each dependency layer's size, from the image's history."""
    return {group: size for group, size in history_layers(history) if group is not None}


def rebuilt_bytes(history: Sequence[Mapping[str, object]], size: int, kept: Sequence[str]) -> int:
    """What a new build of an entry writes, estimated from an image it shares layers with: the bytes of that
    image's layers above the last dependency group the new build keeps (`kept`: the groups, in install order,
    whose keys match; their layers are reused), or the whole image when it keeps none."""
    if not kept:
        return size
    above = 0
    for group, layer_size in history_layers(history):
        if group == kept[-1]:
            return above
        above += layer_size
    return size  # the group's layer is not in the history: reuse cannot be assumed


def kept_groups(groups: Sequence[Layer], had: Mapping[str, str]) -> list[str]:
    """The dependency groups (in install order) a build of `groups` takes from an image whose layers are `had`
    (`image_keys`): those up to the first whose key differs (keys chain, so a layer above it is new too)."""
    return [layer.name for layer in itertools.takewhile(lambda layer: had.get(layer.name) == layer.key, groups)]


def added_bytes(layers: Sequence[Layer], last: Image, others: Sequence[Image]) -> int:
    """What a build of `layers` adds to the image on the engine it shares the most layers with: the entry's
    `last` image, or any of `others` built on the same dependency layers (a second entry on the first one's
    lock adds only its source layers)."""
    groups = [layer for layer in layers if layer.pins]
    need = rebuilt_bytes(last.history(), _size(last), kept_groups(groups, image_keys(last.labels)))
    for image in others:
        kept = kept_groups(groups, image_keys(image.labels))
        if kept and image.id != last.id:
            need = min(need, rebuilt_bytes(image.history(), _size(image), kept))
    return need


def _size(image: Image) -> int:
    return int(image.attrs.get("Size", 0))
