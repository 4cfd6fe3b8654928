"""The tree's promises: the in-image side imports nothing of the host side, shared modules are stdlib only,
and every subpackage says in one line what it owns."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from torchyard import contract
from torchyard.image.context import INIMAGE_MODULES, inimage_files
from torchyard.image.plan import dockerfile

PACKAGE = Path(__file__).parents[2] / "src" / "torchyard"
# The modules the image ships beside the in-image side, which it may import: all but `cases.py`, adopters'
# facade over the in-image side itself.
SHARED_FILES = [module for module in INIMAGE_MODULES if module.endswith(".py") and module != "cases.py"]
SHARED = {"torchyard"} | {
    "torchyard." + module.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    for module in SHARED_FILES
    if module != "__init__.py"
}


def imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
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


def test_the_image_gets_exactly_the_inimage_side() -> None:
    shipped = {name for name, _ in inimage_files()}
    assert "torchyard/inimage/suites/test_parity.py" in shipped
    assert "torchyard/inimage/parity/tolerances.toml" in shipped
    top_level = {name.split("/")[1] for name in shipped}
    assert top_level == {module.split("/")[0] for module in INIMAGE_MODULES}


def test_dockerfile_ships_in_the_package_and_makes_the_contract_paths() -> None:
    text = dockerfile().decode()
    for path in (contract.IMAGE_REPORTS, contract.IMAGE_CACHE, contract.IMAGE_PROJECT):
        assert path in text
    assert "echo /opt/torchyard/inimage >" in text  # IMAGE_SUITES lies under this path entry
    assert contract.IMAGE_SUITES.startswith("/opt/torchyard/inimage/torchyard/inimage/")


@pytest.mark.parametrize(
    "package", sorted(path.parent for path in PACKAGE.rglob("__init__.py") if "suites" not in path.parts)
)
def test_every_subpackage_says_what_it_owns(package: Path) -> None:
    docstring = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8")))
    assert docstring, f"{package.relative_to(PACKAGE.parent)} has no docstring"
