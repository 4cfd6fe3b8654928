"""The project's files a case depends on, so a change to one model moves that model's results only.

A case's walk (`keys.code_reach`) names the project modules and models its code reaches. Each such module
counts by its file (all but the bodies of the models in it the case does not reach), with every project module
it imports, transitively (its `import` statements as written, and the modules its globals hold; a package only
imported counts by its `__init__.py`, without what that imports): a helper two imports away or a default taken
from a module constant moves the key though the walk never named it.
The modules that define the case itself (its factory, inputs, loss) count by the walk alone, so one file of
many cases is not every case's dependency.
Every loaded project module counts for every case by what of it runs on import or can act beyond the models
it defines (`shared_parts`: all but its models' bodies, its undecorated functions its top-level code never
names, and the statements that make cases), so a kernel registered, a flag set or torch patched on import
moves every key while a change inside one model does not; a module whose functions sit in a released
distribution's namespace (a patch of torch) counts whole for every case (`patches`).

"Project" is what `keys.released` does not pin: code neither of the standard library, of torchyard, nor of a
distribution installed from an index.
"""

from __future__ import annotations

import ast
import copy
import functools
import hashlib
import sys
import types
from collections.abc import Collection, Iterable
from pathlib import Path

import torch

import torchyard
from torchyard.inimage.evaluation.cache.keys import released

TORCHYARD = Path(torchyard.__file__).resolve().parent


def _file(name: str) -> Path | None:
    """The source file of loaded module `name` where it is the project's, else None."""
    module = sys.modules.get(name)
    if not isinstance(module, types.ModuleType) or name.split(".", maxsplit=1)[0] in sys.stdlib_module_names:
        return None
    where = vars(module).get("__file__")  # the module's own, never its `__getattr__`'s answer
    if not isinstance(where, str) or not where.endswith(".py"):
        return None
    path = Path(where).resolve()
    if path.is_relative_to(TORCHYARD) or released(name) is not None:
        return None
    return path


@functools.cache
def _digest(path: Path) -> str:
    """Once a process: the run keys the files as it first read them."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return "unreadable"


def _imported(name: str) -> set[str]:
    """The loaded modules that module `name` imports: by its statements (relative ones resolved, names taken
    from a package that are its submodules), and by the modules and the code its globals hold."""
    module = sys.modules[name]
    path = _file(name)
    found: set[str] = set()
    package = name if vars(module).get("__path__") is not None else name.rpartition(".")[0]
    tree = _syntax(path) if path else None
    named: set[str] = set()  # every name the module's source binds or reads
    for node in ast.walk(tree) if tree else ():
        if isinstance(node, ast.Name):
            named.add(node.id)
        elif isinstance(node, ast.alias):
            named.add(node.asname or node.name.partition(".")[0])
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join([*parts[: len(parts) - node.level + 1], *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    for key, value in list(vars(module).items()):
        if key not in named and _installed_by_compiler(key, value):
            continue
        if issubclass(type(value), types.ModuleType):
            # a package's submodules are set on it by whatever imported them: only its statements count
            if not value.__name__.startswith(f"{name}."):
                found.add(value.__name__)
        elif issubclass(type(value), type) or type(value) is types.FunctionType:
            found.add(str(_module_of(value) or ""))
    return {item for item in found if item in sys.modules}


def _installed_by_compiler(name: str, value: object) -> bool:
    """A global torch.compile put in a module it compiled, named as dynamo names them (`__import_<module>` for a
    module a compiled frame reads, `__compiled_fn_<n>`, `__resume_at_<n>` for its code): what another case
    compiled in this worker, never what the module imports. Only where the module's source never names it."""
    if issubclass(type(value), types.ModuleType):
        return name == "__import_" + str(getattr(value, "__name__", "")).replace(".", "_dot_")
    return name.startswith(("__compiled_fn_", "__resume_at_", "__builtins_dict_"))


def closure(
    reached: Iterable[str],
    by_walk: Iterable[str] = (),
    models: Iterable[str] = (),
    universe: Collection[str] | None = None,
) -> list[tuple[str, str]]:
    """The project files behind `reached` (module names) and what they import, by path and digest of each file
    but the bodies of the models in it the case does not reach (`models`: the classes it reaches, as
    `module:qualname`), so that a change to one model of a file of several (whisper's encoder and decoder)
    moves only the cases that reach it. The modules in `by_walk` (the case's own) are keyed by the walk and
    neither counted nor followed. A package only imported (`from pkg import sub`, `from pkg.sub import x`)
    counts by its `__init__.py` without what that imports: a package's `__init__` that imports every model of
    the package would make each model every case's. What a module imports is followed only into `universe` (the
    project modules collection loaded) where it is given: a module another case's model imported later, in one
    worker and not another, would move the key from run to run (smp's encoders, imported as each is built)."""
    kept_models = set(models)
    reached = set(reached)
    skip = set(by_walk)
    todo = list(reached)
    seen: set[str] = set()
    files: dict[str, str] = {}
    while todo:
        name = todo.pop()
        if name in seen or name in skip:
            continue
        seen.add(name)
        path = _file(name)
        if path is None:
            continue
        files[str(path)] = _without_models(name, path, kept_models)
        if name in reached or vars(sys.modules[name]).get("__path__") is None:
            todo += [item for item in _imported(name) if universe is None or item in universe]
    return sorted(files.items())


def files_of(modules: Iterable[str]) -> set[str]:
    """The project files of loaded `modules` (those neither torchyard's nor released)."""
    return {str(path) for name in modules if (path := _file(name)) is not None}


def _module_of(obj: type | types.FunctionType) -> object:
    """Where a class or function was defined, read as stored (a class's dict, a function's slot)."""
    return vars(obj).get("__module__") if isinstance(obj, type) else obj.__module__


def patches() -> list[str]:
    """Project modules whose functions or classes sit in a released or standard module's namespace, or in one of
    its classes (`torch.nn.functional.gelu = mine`, `torch.nn.Linear.forward = mine`): they change what every
    case computes."""
    found: set[str] = set()
    known: dict[str, bool] = {}  # module name -> is the project's: thousands of objects name few modules

    def project(obj: object) -> None:
        # by `type()`, never `isinstance`, which asks a foreign object's `__class__` (a deprecation shim warns)
        if not (issubclass(type(obj), type) or type(obj) is types.FunctionType):
            return
        owner = _module_of(obj)  # type: ignore[arg-type]
        if isinstance(owner, str):
            if owner not in known:
                known[owner] = _file(owner) is not None
            if known[owner]:
                found.add(owner)

    for name, module in list(sys.modules.items()):
        if not issubclass(type(module), types.ModuleType) or name.startswith("torchyard"):
            continue
        if name not in known:
            known[name] = _file(name) is not None
        if known[name]:
            continue
        try:
            namespace = dict(vars(module))
        except TypeError:
            continue
        for value in namespace.values():
            project(value)
            if issubclass(type(value), type) and vars(value).get("__module__") == name:  # the module's own class
                for member in list(vars(value).values()):
                    project(member.__func__ if type(member) in (staticmethod, classmethod) else member)
    return sorted(found)


def _model_class(module: types.ModuleType, name: str) -> bool:
    value = vars(module).get(name)
    return (
        issubclass(type(value), type)
        and vars(value).get("__module__") == module.__name__
        and issubclass(value, torch.nn.Module)  # type: ignore[arg-type]
    )


def _builds_cases(node: ast.stmt) -> bool:
    """A statement that makes `Case` objects (`CASES = [Case(...), ...]`): each case is keyed by its own walk."""
    return any(
        isinstance(call, ast.Call)
        and ((isinstance(call.func, ast.Name) and call.func.id == "Case") or
             (isinstance(call.func, ast.Attribute) and call.func.attr == "Case"))
        for call in ast.walk(node)
    )  # fmt: skip


@functools.cache
def _syntax(path: Path) -> ast.Module | None:
    """The file's syntax tree as the run first read it (once a process); None where it cannot be read."""
    try:
        return ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return None


def _without_models(name: str, path: Path, kept: set[str]) -> str:
    """A digest of module `name`'s file but the bodies of the models it defines that are not in `kept`."""
    tree = _syntax(path)
    if tree is None:
        return _digest(path)
    module = sys.modules[name]
    stripped = copy.deepcopy(tree)
    for statement in stripped.body:
        if not isinstance(statement, ast.ClassDef) or f"{name}:{statement.name}" in kept:
            continue
        if _model_class(module, statement.name):
            statement.body = [ast.Pass()]
    return hashlib.sha256(ast.dump(stripped).encode()).hexdigest()


# Functions pytest calls by their name alone (a conftest's or plugin's hooks): named, though no code names them.
HOOKS = ("pytest_",)


def _top_level_part(name: str, path: Path) -> str:
    """What of module `name` runs on import or can act beyond the models it defines, as a digest of its syntax
    tree: everything but the bodies of its models (`nn.Module` subclasses: the cases that reach one key it),
    of its functions that are undecorated and never named by the module's top-level code (called, passed to a
    registration, assigned over torch's, or a pytest hook pytest calls by its name), and the statements that make
    cases; a function named by those alone (a
    case's factory or inputs) is left out whole, so a new case with a factory of its own moves no other key."""
    parsed = _syntax(path)
    if parsed is None:
        return "unreadable"
    tree = copy.deepcopy(parsed)
    module = sys.modules[name]
    named: set[str] = set()
    by_cases: set[str] = set()
    for statement in tree.body:
        if not isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found = {node.id for node in ast.walk(statement) if isinstance(node, ast.Name)}
            (by_cases if _builds_cases(statement) else named).update(found)
    kept: list[ast.stmt] = []
    for statement in tree.body:
        if _builds_cases(statement) or _imports_for_cases(statement, by_cases - named):
            continue
        hook = isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef) and statement.name.startswith(HOOKS)
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef) and not statement.decorator_list and not hook:
            if statement.name in by_cases - named:  # a case's own factory: its walk keys it
                continue
            if statement.name not in named:
                statement.body = [ast.Pass()]
        elif isinstance(statement, ast.ClassDef) and _model_class(module, statement.name):
            statement.body = [ast.Pass()]
        kept.append(statement)
    tree.body = kept
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()


def _imports_for_cases(statement: ast.stmt, for_cases: set[str]) -> bool:
    """An import whose every name only the statements that make cases use (a new case's model): the case's walk
    keys what it imports, and the module it loads counts by its own top-level part where that can act."""
    if not isinstance(statement, ast.Import | ast.ImportFrom):
        return False
    bound = [alias.asname or alias.name.split(".")[0] for alias in statement.names]
    return "*" not in bound and all(name in for_cases for name in bound)


# Decorators of a method that only wrap it where it is defined: nothing runs beyond the class.
PLAIN_DECORATORS = frozenset({"property", "staticmethod", "classmethod", "abstractmethod", "setter"})
CONSTANTS = (ast.Constant, ast.Tuple, ast.List, ast.Set, ast.Dict, ast.UnaryOp, ast.BinOp, ast.Load, ast.USub,
             ast.UAdd, ast.operator)  # fmt: skip


def _plain_value(node: ast.expr | None, *, names: bool = True) -> bool:
    """A value whose evaluation calls nothing: constants, and containers of them; names and attributes too where
    `names` (a class body's name could hold a descriptor whose `__set_name__` runs)."""
    allowed = (*CONSTANTS, ast.Name, ast.Attribute) if names else CONSTANTS
    return node is None or all(isinstance(part, allowed) for part in ast.walk(node))


def _plain_decorator(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id in PLAIN_DECORATORS) or (
        isinstance(node, ast.Attribute) and node.attr in PLAIN_DECORATORS
    )


def _plain_class(value: object) -> bool:
    """A class whose making runs no project code: its metaclass and every `__init_subclass__` above it are the
    standard library's or a released distribution's (keyed by its version)."""
    if not isinstance(value, type):
        return False
    project = [klass for klass in (type(value), *value.__mro__[1:]) if _file(klass.__module__) is not None]
    return not any(isinstance(klass, type) and "__init_subclass__" in vars(klass) for klass in project) and (
        _file(type(value).__module__) is None
    )


def _plain_statement(statement: ast.stmt, module: types.ModuleType, *, in_class: bool = False) -> bool:
    if isinstance(statement, ast.Import | ast.ImportFrom | ast.Pass):
        return True
    if isinstance(statement, ast.Expr):
        return isinstance(statement.value, ast.Constant)  # a docstring
    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):  # a pytest hook runs by its name alone
        plain = all(in_class and _plain_decorator(decorator) for decorator in statement.decorator_list)
        return plain and (in_class or not statement.name.startswith(HOOKS))
    if isinstance(statement, ast.Assign):
        return all(isinstance(target, ast.Name) for target in statement.targets) and _plain_value(
            statement.value, names=not in_class
        )
    if isinstance(statement, ast.AnnAssign):
        return isinstance(statement.target, ast.Name) and _plain_value(statement.value, names=not in_class)
    if isinstance(statement, ast.ClassDef):
        return (
            not in_class and not statement.decorator_list and not statement.keywords
            and all(_plain_value(base) for base in statement.bases)
            and _plain_class(vars(module).get(statement.name))
            and all(_plain_statement(inner, module, in_class=True) for inner in statement.body)
        )  # fmt: skip
    if isinstance(statement, ast.If) and not in_class:  # `if __name__ == "__main__":` runs nothing on import
        test = statement.test
        return (
            isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
            and not statement.orelse
        )  # fmt: skip
    return False


def _inert(name: str, path: Path) -> bool:
    """Whether importing module `name` only bound names (imports, undecorated functions, classes whose making
    runs no project code, plain constants): it cannot act on a case its walk does not reach, so it is no case's
    shared part; a model of it, a helper or a constant counts where a case's walk reaches it, and the modules it
    imports count by their own parts."""
    tree = _syntax(path)
    module = sys.modules.get(name)
    return (
        tree is not None and module is not None and all(_plain_statement(statement, module) for statement in tree.body)
    )


def _constants_part(path: Path) -> str:
    """The module-level constants of a file that only binds names, as a digest ("" where it has none): a value
    read by a name computed at run time (`getattr(module, name)`) is no walk's, so each counts for every case."""
    tree = _syntax(path)
    constants = [s for s in tree.body if isinstance(s, ast.Assign | ast.AnnAssign)] if tree is not None else []
    if not constants:
        return ""
    return hashlib.sha256(ast.dump(ast.Module(body=constants, type_ignores=[])).encode()).hexdigest()


def shared() -> list[str]:
    """The loaded project modules (every one counts for every case by its top-level part, `shared_parts`), and
    those that patch a released one (counted whole for every case)."""
    return sorted(name for name in list(sys.modules) if _file(name) is not None)


def shared_parts(names: Iterable[str]) -> list[tuple[str, str]]:
    """Each of `names`' files by its top-level part (`_top_level_part`), but those that only bind names
    (`_inert`), by their constants alone where they have any: a new module of a new case's model moves no other
    case's key."""
    found = {}
    for name in names:
        path = _file(name)
        if path is None:
            continue
        part = _constants_part(path) if _inert(name, path) else _top_level_part(name, path)
        if part:
            found[str(path)] = part
    return sorted(found.items())


def files(names: Iterable[str]) -> list[tuple[str, str]]:
    """The files of the project modules `names`, whole, by path and digest, without what they import."""
    return sorted({str(path): _digest(path) for name in names if (path := _file(name)) is not None}.items())
