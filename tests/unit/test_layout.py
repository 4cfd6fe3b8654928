"""The tree's promises: the in-image side imports nothing of the host side, shared modules are stdlib only,
and every subpackage says in one line what it owns."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from torchyard import contract
from torchyard.contract import INIMAGE_MODULES
from torchyard.image.context import inimage_files
from torchyard.image.plan import dockerfile
from torchyard.inimage import TEST_DIRS

PACKAGE = Path(__file__).parents[2] / "src" / "torchyard"
# The modules the image ships beside the in-image side, which it may import: all but `cases.py`, adopters'
# facade over the in-image side itself.
SHARED_FILES = [module for module in INIMAGE_MODULES if module.endswith(".py") and module != "cases.py"]
SHARED = {"torchyard"} | {
    "torchyard." + module.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    for module in SHARED_FILES
    if module != "__init__.py"
}


def imports(path: Path, *, submodules: bool = False) -> set[str]:
    """The absolute imports in `path`; with `submodules`, `from a import b` adds `a.b` too (b may be a module)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            if submodules:
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def inimage_sources() -> list[Path]:
    return sorted((PACKAGE / "inimage").rglob("*.py"))


@pytest.mark.parametrize("path", inimage_sources(), ids=lambda path: str(path.relative_to(PACKAGE)))
def test_inimage_side_imports_only_itself_and_the_shared_modules(path: Path) -> None:
    torchyard = {name for name in imports(path) if name.split(".")[0] == "torchyard"}
    outside = {name for name in torchyard if not name.startswith("torchyard.inimage") and name not in SHARED}
    assert not outside, f"{path.name} imports the host side: {sorted(outside)}"


@pytest.mark.parametrize("module", SHARED_FILES)
def test_shared_modules_are_stdlib_only(module: str) -> None:
    for name in imports(PACKAGE / module):
        top = name.split(".")[0]
        assert top in sys.stdlib_module_names or name in SHARED or top == "__future__", f"{module} imports {name}"


def module_file(name: str) -> Path:
    """The file of module `torchyard....` in the source tree."""
    path = PACKAGE.joinpath(*name.split(".")[1:])
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def needed_by_the_inimage_side() -> set[Path]:
    """Every file under inimage/, and every torchyard module those import, transitively, with the package
    `__init__.py` files above each: found by reading the sources, not from the list the image is built from."""
    needed = {path for path in (PACKAGE / "inimage").rglob("*") if path.is_file() and "__pycache__" not in path.parts}
    pending = [path for path in needed if path.suffix == ".py"]
    while pending:
        for name in imports(pending.pop(), submodules=True):
            path = module_file(name)
            if name.split(".")[0] != "torchyard" or not path.is_file():
                continue  # not torchyard's, or a name imported from a module rather than a module
            packages = [folder / "__init__.py" for folder in path.parents if PACKAGE in (folder, *folder.parents)]
            for item in (path, *packages):
                if item not in needed:
                    needed.add(item)
                    pending.append(item)
    return needed | {PACKAGE / "__init__.py"}


def test_the_image_gets_exactly_the_inimage_side() -> None:
    shipped = {name for name, _ in inimage_files()}
    # `torchyard.cases` is adopters' facade over the in-image side: their case modules import it.
    expected = needed_by_the_inimage_side() | {PACKAGE / "cases.py"}
    assert shipped == {f"torchyard/{path.relative_to(PACKAGE).as_posix()}" for path in expected}


def test_dockerfile_ships_in_the_package_and_makes_the_contract_paths() -> None:
    text = dockerfile().decode()
    for path in (contract.IMAGE_REPORTS, contract.IMAGE_CACHE, contract.IMAGE_PROJECT):
        assert path in text
    assert "echo /opt/torchyard/inimage >" in text  # IMAGE_INIMAGE lies under this path entry
    assert contract.IMAGE_INIMAGE == "/opt/torchyard/inimage/torchyard/inimage"
    assert tuple(folder.name for folder in TEST_DIRS) == contract.TEST_FOLDERS


@pytest.mark.parametrize(
    "package", sorted(path.parent for path in PACKAGE.rglob("__init__.py") if "suites" not in path.parts)
)
def test_every_subpackage_says_what_it_owns(package: Path) -> None:
    docstring = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8")))
    assert docstring, f"{package.relative_to(PACKAGE.parent)} has no docstring"


def test_no_source_file_is_ignored_by_git() -> None:
    """A pattern for an output folder (`reports/`) must not hide a package of the same name from commits."""
    import pathspec

    root = PACKAGE.parents[1]
    spec = pathspec.GitIgnoreSpec.from_lines((root / ".gitignore").read_text().splitlines())
    sources = [path.relative_to(root).as_posix() for path in (root / "src").rglob("*") if path.is_file()]
    ignored = [name for name in sources if spec.match_file(name) and "__pycache__" not in name]
    assert not ignored, f".gitignore hides sources from commits: {ignored}"


# The host side's stages, in the order the data flows: a stage may import an earlier one, never a later one.
STAGES = ("matrix", "lock", "image", "run", "reports")


@pytest.mark.parametrize("stage", STAGES)
def test_no_stage_imports_a_later_one(stage: str) -> None:
    """Issue 72: image/wheel.py imported run/handback (for `folder_bytes`, now in util/folders.py): the one arrow
    back up the house. Each stage's modules import the stages before it, and none after."""
    later = {f"torchyard.{name}" for name in STAGES[STAGES.index(stage) + 1 :]}
    for path in sorted((PACKAGE / stage).rglob("*.py")):
        found = {name for name in imports(path) if any(name == s or name.startswith(s + ".") for s in later)}
        assert not found, f"{path.relative_to(PACKAGE)} imports a later stage: {sorted(found)}"
