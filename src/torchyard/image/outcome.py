"""What a build or a reuse made (`Built`): where the image and each dependency layer came from, and the
tables that say so."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from torchyard.image.buildkit import layer_steps, pulled_layers
from torchyard.image.layers import Layer, layer_sizes
from torchyard.util.markdown import markdown_table

Origin = Literal["local", "pulled", "cache", "cold", "dependencies"]
ORIGIN_WORDS: dict[Origin, str] = {
    "local": "found on this runner",
    "pulled": "pulled from the registry",
    "cache": "built from cache",
    "cold": "built cold",
    "dependencies": "built on the trusted dependency image",
}
LayerHow = Literal["reused", "pulled", "built"]
IMAGE_HEADERS = ("entry", "image", "size", "seconds", "image came from")
LAYER_HEADERS = ("entry", "dependency layer", "packages", "size", "layer")


@dataclass(frozen=True)
class Transfer:
    """What one pull or push moved: the layers and their bytes as the engine's progress counts them (a pull's
    compressed, as the registry sends them; a push's uncompressed, the layers' sizes on disk)."""

    reference: str
    layers: int
    bytes: int


@dataclass(frozen=True)
class LayerOutcome:
    """One dependency layer of a build: its group, how many packages, its size and where it came from."""

    group: str
    packages: int
    size_bytes: int
    how: LayerHow


@dataclass(frozen=True)
class Built:
    entry: str
    tag: str
    size_bytes: int
    seconds: float
    origin: Origin
    pushed: tuple[Transfer, ...] = ()
    pulled: Transfer | None = None
    layers: tuple[LayerOutcome, ...] = ()
    alias: str = ""  # the entry's alias this image also carries (published with its tag)

    @property
    def reused(self) -> bool:
        return self.origin in {"local", "pulled"}


def how_built(output: str) -> Origin:
    """Whether any dependency layer came from a cache, local or the registry's ("cache"), or every one was
    built ("cold"), read from BuildKit's plain output."""
    return "cache" if any(layer_steps(output).values()) else "cold"


def layer_outcomes(
    layers: Sequence[Layer],
    output: str,
    history: Sequence[Mapping[str, object]],
    local_keys: frozenset[str],
    *,
    stood_on: bool = False,
) -> tuple[LayerOutcome, ...]:
    """Per non-empty group: built (its step ran), reused (cached, and this runner had it: an image of its
    carries its key, or nothing came from the registry; or the build stood on a dependency image) or
    pulled (cached from the registry's layers)."""
    steps = layer_steps(output)
    sizes = layer_sizes(history)
    from_registry = pulled_layers(output)
    outcomes = []
    for layer in layers:
        if not layer.pins:
            continue
        how: LayerHow = "reused" if stood_on else "built"
        if steps.get(layer.name, False):
            how = "reused" if layer.key in local_keys or not from_registry else "pulled"
        outcomes.append(LayerOutcome(layer.name, len(layer.pins), sizes.get(layer.name, 0), how))
    return tuple(outcomes)


def build_summary(rows: Sequence[Built]) -> list[tuple[str, str, str, str, str]]:
    """Per entry: its image, size, seconds and where the image came from (a miss says built cold or from cache)."""
    table = []
    for row in rows:
        origin = ORIGIN_WORDS[row.origin]
        if row.pulled is not None:
            origin += f" ({row.pulled.bytes / 1e6:.0f} MB in {row.pulled.layers} layers)"
        if row.pushed:
            origin += ", pushed"
        table.append((row.entry, row.tag, f"{row.size_bytes / 1e9:.2f} GB", f"{row.seconds:.1f}", origin))
    return table


def layers_summary(rows: Sequence[Built]) -> list[tuple[str, str, str, str, str]]:
    """Per built image and dependency layer: its group, packages, size, and whether it was reused, pulled or
    built (an image found or pulled whole has no rows: every layer came with it)."""
    return [
        (row.entry, layer.group, str(layer.packages), f"{layer.size_bytes / 1e6:.1f} MB", layer.how)
        for row in rows
        for layer in row.layers
    ]


def images_markdown(rows: Sequence[Built]) -> str:
    """The images' table, and their dependency layers' where any was built."""
    text = markdown_table(IMAGE_HEADERS, build_summary(rows))
    layers = layers_summary(rows)
    return f"{text}\n{markdown_table(LAYER_HEADERS, layers)}" if layers else text
