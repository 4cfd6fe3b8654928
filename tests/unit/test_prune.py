"""What `torchyard prune` removes, decided without Docker; and the free-disk rule before a build."""

from __future__ import annotations

import dataclasses

from torchyard.commands.prune import ContainerFacts, ImageFacts, _size, plan_prune


def image(name: str, entry: str, created: str, *, tagged: bool = True, project: str = "") -> ImageFacts:
    return ImageFacts(
        f"sha256:{name}", entry, project, created, 6 << 30, (f"torchyard/{entry}:{name}",) if tagged else ()
    )


def test_keeps_the_newest_per_entry_and_project_and_what_containers_use() -> None:
    images = [
        image("a1", "cpu", "2026-11-01"),
        image("a2", "cpu", "2026-11-02"),
        image("a3", "cpu", "2026-11-03"),
        image("p1", "cpu", "2026-10-01", project="robopolicy"),
        image("r1", "rocm", "2026-09-01"),
        image("r0", "rocm", "2026-08-01"),
        image("dangling", "cpu", "2026-11-04", tagged=False),
    ]
    containers = [
        ContainerFacts("c1", "torchyard-cpu-1", "sha256:a1", running=True),
        ContainerFacts("c2", "torchyard-cpu-2", "sha256:a2", running=False),
    ]
    volumes = {"torchyard-inductor-cpu": "cpu", "torchyard-inductor-gone": "gone"}
    plan = plan_prune(images, containers, volumes, keep=1, in_use=frozenset({"sha256:r0"}))
    assert [c.name for c in plan.containers] == ["torchyard-cpu-2"]
    # a3 is the newest cpu image, p1 the newest of the project's, r1 of rocm's; a1 runs, r0 is used elsewhere.
    assert sorted(i.id.removeprefix("sha256:") for i in plan.images) == ["a2", "dangling"]
    assert plan.volumes == ("torchyard-inductor-gone",)


def test_a_dependency_image_goes_with_the_last_image_that_holds_its_layers() -> None:
    def held(name: str, created: str, key: str) -> ImageFacts:
        return dataclasses.replace(image(name, "cpu", created), keys=frozenset({"k0", key}))

    def dependency(key: str) -> ImageFacts:
        return ImageFacts(
            f"sha256:d-{key}", "", "", "2026-11-01", 5 << 30, (f"torchyard/dependencies:{key}",), dependency=key
        )

    images = [held("a1", "2026-11-01", "old"), held("a2", "2026-11-02", "new"), dependency("old"), dependency("new")]
    plan = plan_prune(images, [], {}, keep=1)
    assert sorted(i.id for i in plan.images) == ["sha256:a1", "sha256:d-old"]
    assert plan_prune(images, [], {}, keep=1, in_use=frozenset({"sha256:d-old"})).images == (images[0],)


def test_keep_zero_removes_every_image_nobody_uses_and_their_volumes() -> None:
    plan = plan_prune([image("a1", "cpu", "1")], [], {"torchyard-inductor-cpu": "cpu"}, keep=0)
    assert [i.id for i in plan.images] == ["sha256:a1"] and plan.volumes == ("torchyard-inductor-cpu",)


def test_an_untrusted_runs_volume_is_always_pruned_and_the_trusted_scope_kept() -> None:
    trusted, left = "torchyard-cache-0123abcd4567-cpu", "torchyard-cache-0123abcd4567-cpu-untrusted-1a2b3c4d"
    plan = plan_prune([image("a1", "cpu", "1")], [], {trusted: "cpu", left: "cpu"}, keep=1, untrusted=frozenset({left}))
    assert plan.volumes == (left,)


def test_an_image_is_shown_with_the_part_only_it_holds() -> None:
    shared = ImageFacts("sha256:a", "cpu", "", "2026-11-01", 6_460_000_000, ("torchyard/cpu:a",), own=41_000_000)
    assert _size(shared) == "6.46 GB (41 MB its own)"
    assert _size(dataclasses.replace(shared, own=-1)) == "6.46 GB"  # the engine did not count it
