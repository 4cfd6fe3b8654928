"""Before a build: the engine's disk holds what the build writes, with a margin."""

from __future__ import annotations

from torchyard.image.preflight import needs_more_than_free


def test_a_build_needs_its_last_image_size_and_a_margin() -> None:
    assert needs_more_than_free(6 << 30, 7 << 30)
    assert not needs_more_than_free(6 << 30, 9 << 30)
    assert not needs_more_than_free(0, 0)  # nothing to estimate from
