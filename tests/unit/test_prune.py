"""What `torchyard prune` removes, decided without Docker; and the free-disk rule before a build."""

from __future__ import annotations

import dataclasses

from torchyard.commands.prune import ContainerFacts, ImageFacts, _size, in_scope, plan_prune

ROBOT, NANO = "robot-0123abcd4567", "nanogpt-89ab01234567"


def image(name: str, entry: str, created: str, *, tagged: bool = True, project: str = ROBOT) -> ImageFacts:
    tag = f"torchyard/{project}/{entry}:{name}" if project else f"torchyard/{entry}:{name}"
    return ImageFacts(f"sha256:{name}", entry, project, created, 6 << 30, (tag,) if tagged else ())


def test_keeps_the_newest_per_project_and_entry_and_what_containers_use() -> None:
    images = [
        image("a1", "cpu", "2026-11-01"),
        image("a2", "cpu", "2026-11-02"),
        image("a3", "cpu", "2026-11-03"),
        image("n1", "cpu", "2026-10-01", project=NANO),
        image("r1", "rocm", "2026-09-01"),
        image("r0", "rocm", "2026-08-01"),
        image("dangling", "cpu", "2026-11-04", tagged=False),
    ]
    containers = [
        ContainerFacts("c1", "torchyard-cpu-1", "sha256:a1", running=True),
        ContainerFacts("c2", "torchyard-cpu-2", "sha256:a2", running=False),
    ]
    volumes = {f"torchyard-cache-{ROBOT}-cpu": (ROBOT, "cpu"), f"torchyard-cache-{ROBOT}-gone": (ROBOT, "gone")}
    plan = plan_prune(images, containers, volumes, keep=1, in_use=frozenset({"sha256:r0"}))
    assert [c.name for c in plan.containers] == ["torchyard-cpu-2"]
    # a3 is the newest of robot's cpu images, n1 of nanogpt's, r1 of rocm's; a1 runs, r0 is used elsewhere.
    assert sorted(i.id.removeprefix("sha256:") for i in plan.images) == ["a2", "dangling"]
    assert plan.volumes == (f"torchyard-cache-{ROBOT}-gone",)


def test_a_container_running_past_its_deadline_goes_and_one_within_it_stays() -> None:
    """A run killed outright whose container's own bound was stopped (SIGSTOP on its `timeout`): prune removes
    it once its deadline label has passed, and frees the image it held."""
    containers = [
        ContainerFacts("c1", "torchyard-cpu-1", "sha256:a1", running=True, ends_at=1_000),
        ContainerFacts("c2", "torchyard-cpu-2", "sha256:a2", running=True, ends_at=3_000),
        ContainerFacts("c3", "torchyard-cpu-3", "sha256:a3", running=True),
    ]
    plan = plan_prune([], containers, {}, keep=1, now=2_000)
    assert [c.name for c in plan.containers] == ["torchyard-cpu-1"]
    # Issue 70: one whose run is known gone (its staging folder unheld) goes at once, within its deadline too.
    gone = ContainerFacts("c4", "torchyard-cpu-4", "sha256:a4", running=True, ends_at=3_000, abandoned=True)
    plan = plan_prune([], [*containers, gone], {}, keep=1, now=2_000)
    assert [c.name for c in plan.containers] == ["torchyard-cpu-1", "torchyard-cpu-4"]


def test_two_projects_entries_of_one_name_are_kept_and_removed_apart() -> None:
    """Two adopters' `cpu` on one runner: each keeps its newest, and its cache while it has an image left."""
    images = [
        image("r1", "cpu", "2026-11-01"),
        image("r2", "cpu", "2026-11-05"),
        image("n1", "cpu", "2026-11-02", project=NANO),
        image("n2", "cpu", "2026-11-03", project=NANO),
        image("n3", "cpu", "2026-11-04", project=NANO),
    ]
    volumes = {f"torchyard-cache-{ROBOT}-cpu": (ROBOT, "cpu"), f"torchyard-cache-{NANO}-cpu": (NANO, "cpu")}
    plan = plan_prune(images, [], volumes, keep=1)
    assert sorted(i.id.removeprefix("sha256:") for i in plan.images) == ["n1", "n2", "r1"]
    assert plan.volumes == ()
    # With robot's images gone (used by nothing), its cache goes; nanogpt's stays with nanogpt's image.
    plan = plan_prune([image("n3", "cpu", "2026-11-04", project=NANO)], [], volumes, keep=1)
    assert plan.volumes == (f"torchyard-cache-{ROBOT}-cpu",)


def test_an_image_from_before_per_project_names_goes_unless_a_container_uses_it() -> None:
    images = [image("old", "cpu", "2026-12-01", project=""), image("used", "cpu", "2026-12-02", project="")]
    images.append(image("new", "cpu", "2026-11-01"))
    plan = plan_prune(images, [], {}, keep=2, in_use=frozenset({"sha256:used"}))
    assert [i.id for i in plan.images] == ["sha256:old"]


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
    volume = f"torchyard-cache-{ROBOT}-cpu"
    plan = plan_prune([image("a1", "cpu", "1")], [], {volume: (ROBOT, "cpu")}, keep=0)
    assert [i.id for i in plan.images] == ["sha256:a1"] and plan.volumes == (volume,)


def test_an_untrusted_runs_volume_is_always_pruned_and_the_trusted_scope_kept() -> None:
    trusted, left = f"torchyard-cache-{ROBOT}-cpu", f"torchyard-cache-{ROBOT}-cpu-untrusted-1a2b3c4d"
    volumes = {trusted: (ROBOT, "cpu"), left: (ROBOT, "cpu")}
    plan = plan_prune([image("a1", "cpu", "1")], [], volumes, keep=1, untrusted=frozenset({left}))
    assert plan.volumes == (left,)


def test_an_image_is_shown_with_the_part_only_it_holds() -> None:
    shared = ImageFacts(
        "sha256:a", "cpu", ROBOT, "2026-11-01", 6_460_000_000, (f"torchyard/{ROBOT}/cpu:a",), own=41_000_000
    )
    assert _size(shared) == "6.46 GB (41 MB its own)"
    assert _size(dataclasses.replace(shared, own=-1)) == "6.46 GB"  # the engine did not count it


def test_the_image_the_entrys_alias_names_is_kept_however_old() -> None:
    """A run that came back to an earlier content (a change reverted) used the older image and moved `:latest`
    onto it: the newer image, which nothing uses any more, is the one that goes."""
    reused = dataclasses.replace(
        image("a1", "cpu", "2026-11-01"), tags=(f"torchyard/{ROBOT}/cpu:a1", f"torchyard/{ROBOT}/cpu:latest")
    )
    images = [reused, image("a2", "cpu", "2026-11-02"), image("a3", "cpu", "2026-11-03")]
    assert [i.id for i in plan_prune(images, [], {}, keep=1).images] == ["sha256:a3", "sha256:a2"]
    assert [i.id for i in plan_prune(images, [], {}, keep=2).images] == ["sha256:a2"]
    assert {i.id for i in plan_prune(images, [], {}, keep=0).images} == {i.id for i in images}  # keep 0: all


def test_a_pull_requests_newer_image_never_pushes_out_the_trusted_one() -> None:
    """Both aliases are kept before any other image, the trusted one first: `--keep 1` keeps `:latest`, however
    much newer the untrusted run's image is."""
    trusted = dataclasses.replace(
        image("t1", "cpu", "2026-11-01"), tags=(f"torchyard/{ROBOT}/cpu:t1", f"torchyard/{ROBOT}/cpu:latest")
    )
    untrusted = dataclasses.replace(
        image("u1", "cpu", "2026-11-03"), tags=(f"torchyard/{ROBOT}/cpu:u1", f"torchyard/{ROBOT}/cpu:untrusted")
    )
    images = [trusted, untrusted, image("n1", "cpu", "2026-11-02")]
    assert [i.id for i in plan_prune(images, [], {}, keep=1).images] == ["sha256:u1", "sha256:n1"]
    assert [i.id for i in plan_prune(images, [], {}, keep=2).images] == ["sha256:n1"]


def test_a_prune_of_one_project_touches_nothing_of_another() -> None:
    def held(name: str, created: str, key: str, project: str = ROBOT) -> ImageFacts:
        return dataclasses.replace(image(name, "cpu", created, project=project), keys=frozenset({key}))

    def dependency(key: str) -> ImageFacts:
        return ImageFacts(f"sha256:d-{key}", "", "", "1", 5 << 30, (f"torchyard/dependencies:{key}",), dependency=key)

    images = [
        held("r1", "1", "ours"), held("r2", "2", "shared"),
        held("n1", "1", "shared", NANO), held("n2", "2", "theirs", NANO),
        dependency("ours"), dependency("shared"), dependency("theirs"), dependency("nobodys"),
    ]  # fmt: skip
    containers = [
        ContainerFacts("c1", "torchyard-cpu-1", "sha256:r1", False, (ROBOT, "cpu")),
        ContainerFacts("c2", "torchyard-cpu-2", "sha256:n1", False, (NANO, "cpu")),
    ]
    volumes = {"v-robot": (ROBOT, "cpu"), "v-nano": (NANO, "cpu"), "v-robot-rocm": (ROBOT, "rocm")}
    chosen, their, vols = in_scope(images, containers, volumes, project=ROBOT)
    # Robot's images, and the dependency image only robot's images hold; the shared one and the orphan are not its.
    assert [i.id.removeprefix("sha256:") for i in chosen] == ["r1", "r2", "d-ours"]
    assert [c.id for c in their] == ["c1"] and vols == {"v-robot": (ROBOT, "cpu"), "v-robot-rocm": (ROBOT, "rocm")}
    assert sorted(i.id for i in plan_prune(chosen, their, vols, keep=0).images) == [
        "sha256:d-ours",
        "sha256:r1",
        "sha256:r2",
    ]
    chosen, their, vols = in_scope(images, containers, volumes, entries=["rocm"], project=ROBOT)
    assert (chosen, their, vols) == ([], [], {"v-robot-rocm": (ROBOT, "rocm")})
    assert in_scope(images, containers, volumes) == (images, containers, volumes)  # unscoped: everything
