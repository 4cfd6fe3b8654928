"""The project's files a case depends on, so a change to one model moves that model's results only.

A case's walk (`keys.code_reach`) names the project modules and models its code reaches. Each such module
counts by its file (all but the methods' bodies of the models in it the case does not reach), with every project module
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
    """A digest of module `name`'s file but the bodies of the methods of the models it defines that are not in
    `kept`. What runs as the class is made stays (its values, and each method's decorators, defaults and
    annotations): a model the case reaches reads another's by a computed name (`globals()[...]`) with none of
    that model's code running, so no record would see it change."""
    tree = _syntax(path)
    if tree is None:
        return _digest(path)
    module = sys.modules[name]
    stripped = copy.deepcopy(tree)
    for statement in stripped.body:
        if not isinstance(statement, ast.ClassDef) or f"{name}:{statement.name}" in kept:
            continue
        if _model_class(module, statement.name):  # a method that runs is the record's (`Record.beyond`)
            for part in statement.body:
                if isinstance(part, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    part.body = [ast.Pass()]
    return hashlib.sha256(ast.dump(stripped).encode()).hexdigest()


# Functions called by their name alone, though no code names them: a conftest's or plugin's pytest hooks, and a
# module's own `__getattr__` and `__dir__` (PEP 562), which Python calls for any name the module lacks.
HOOKS = ("pytest_", "__getattr__", "__dir__")


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
    """An import from one module that is inert (`_inert`), whose every name only the statements that make cases use
    (a new case's model): the case's walk keys what it imports; an import of a module that acts stays, in its
    order."""
    if not isinstance(statement, ast.ImportFrom) or statement.level or statement.module is None:
        return False
    bound = [alias.asname or alias.name for alias in statement.names]
    path = _file(statement.module)
    return (
        "*" not in bound and all(name in for_cases for name in bound)
        and path is not None and _inert(statement.module, path)
    )  # fmt: skip


# Decorators a model's method may carry where the module's own global of that name is the builtin.
PLAIN_DECORATORS = {"property": property, "staticmethod": staticmethod, "classmethod": classmethod}
PLAIN_NODES = (ast.Constant, ast.Name, ast.Attribute, ast.Subscript, ast.Tuple, ast.List, ast.Load, ast.UnaryOp,
               ast.USub, ast.UAdd)  # fmt: skip


def _plain_value(node: ast.expr | None) -> bool:
    """An expression that calls nothing of its own: constants, names and attributes (of released code: an inert
    module imports nothing else), subscripts and tuples of them (a default, an annotation, a base)."""
    return node is None or all(isinstance(part, PLAIN_NODES) for part in ast.walk(node))


def _released_import(statement: ast.Import | ast.ImportFrom) -> bool:
    """An import of released modules only (no star): what it runs on import is keyed by their versions."""
    if isinstance(statement, ast.ImportFrom):
        if statement.level or statement.module is None or any(alias.name == "*" for alias in statement.names):
            return False
        names = [statement.module, *(f"{statement.module}.{alias.name}" for alias in statement.names)]
    else:
        names = [alias.name for alias in statement.names]
    return all(_file(name) is None and name.split(".")[0] in sys.modules for name in names)


def _plain_function(statement: ast.FunctionDef | ast.AsyncFunctionDef, module: types.ModuleType, method: bool) -> bool:
    """Undecorated (a model's method: `property` and the like, where the module's global is the builtin), and its
    defaults and annotations call nothing; a pytest hook or a module `__getattr__` runs by its name alone."""
    arguments = statement.args
    evaluated = [*arguments.defaults, *arguments.kw_defaults, statement.returns]
    evaluated += [a.annotation for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)]
    evaluated += [a.annotation for a in (arguments.vararg, arguments.kwarg) if a is not None]
    decorators_plain = all(method and _builtin_decorator(d, module) for d in statement.decorator_list)
    return decorators_plain and all(map(_plain_value, evaluated)) and (method or not statement.name.startswith(HOOKS))


def _builtin_decorator(node: ast.expr, module: types.ModuleType) -> bool:
    """`@property` and the like, where the module binds no name of its own over the builtin."""
    if not isinstance(node, ast.Name) or node.id not in PLAIN_DECORATORS:
        return False
    return vars(module).get(node.id, PLAIN_DECORATORS[node.id]) is PLAIN_DECORATORS[node.id]


def _plain_model(statement: ast.ClassDef, module: types.ModuleType) -> bool:
    """A model class (`nn.Module`) of released bases and metaclass, whose body binds methods and constants only:
    making it runs none of the project's code and nothing of its own."""
    value = vars(module).get(statement.name)
    if statement.decorator_list or statement.keywords or not _model_class(module, statement.name):
        return False
    assert isinstance(value, type)
    bases = getattr(value, "__orig_bases__", value.__bases__)
    if not all(isinstance(base, type) and _file(base.__module__) is None for base in bases):
        return False
    if _file(type(value).__module__) is not None or not all(map(_plain_value, statement.bases)):
        return False
    for inner in statement.body:
        if isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef):
            plain = _plain_function(inner, module, method=True)
        elif isinstance(inner, ast.Assign):
            plain = all(isinstance(t, ast.Name) for t in inner.targets) and _constant(inner.value)
        elif isinstance(inner, ast.AnnAssign):
            plain = isinstance(inner.target, ast.Name) and _plain_value(inner.annotation) and _constant(inner.value)
        else:
            plain = isinstance(inner, ast.Pass) or (
                isinstance(inner, ast.Expr) and isinstance(inner.value, ast.Constant)
            )
        if not plain:
            return False
    return True


def _constant(node: ast.expr | None) -> bool:
    return node is None or all(isinstance(part, ast.Constant | ast.Tuple | ast.Load) for part in ast.walk(node))


def _main_block(statement: ast.stmt) -> bool:
    """`if __name__ == "__main__":` with no else: it runs nothing on import."""
    test = statement.test if isinstance(statement, ast.If) else None
    return (
        isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
        and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq) and len(test.comparators) == 1
        and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value == "__main__"
        and isinstance(statement, ast.If) and not statement.orelse
    )  # fmt: skip


def _inert(name: str, path: Path) -> bool:
    """Whether importing module `name` runs nothing but released code and binds names: a docstring, imports of
    released modules, model classes of released bases whose bodies bind methods and constants, undecorated
    functions whose defaults call nothing, a `__main__` block. It cannot act on a case its walk does not reach,
    so it is no case's shared part (a model of it, or a helper, counts where a case's walk reaches it, its file
    with it). Anything else (a constant, a project import, another class, a decorator) makes it count."""
    tree = _syntax(path)
    module = sys.modules.get(name)
    if tree is None or module is None:
        return False
    for index, statement in enumerate(tree.body):
        if isinstance(statement, ast.Import | ast.ImportFrom):
            plain = _released_import(statement)
        elif isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
            plain = _plain_function(statement, module, method=False)
        elif isinstance(statement, ast.ClassDef):
            plain = _plain_model(statement, module)
        elif isinstance(statement, ast.Expr):
            plain = index == 0 and isinstance(statement.value, ast.Constant)  # the docstring
        else:
            plain = _main_block(statement)
        if not plain:
            return False
    return True


def _star_imported(names: Iterable[str]) -> set[str]:
    """The modules `from m import *` in any of `names` takes everything of: what they define acts where it lands
    (a function named `property` there decorates the importer's methods), so none of them is inert."""
    starred = set()
    for name in names:
        path = _file(name)
        tree = _syntax(path) if path is not None else None
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.ImportFrom) and any(alias.name == "*" for alias in node.names):
                package = name if path is not None and path.name == "__init__.py" else name.rpartition(".")[0]
                for _ in range(max(node.level - 1, 0)):
                    package = package.rpartition(".")[0]
                starred.add(".".join(part for part in (package if node.level else "", node.module or "") if part))
    return starred


def shared() -> list[str]:
    """The loaded project modules (every one counts for every case by its top-level part, `shared_parts`), and
    those that patch a released one (counted whole for every case)."""
    return sorted(name for name in list(sys.modules) if _file(name) is not None)


def shared_parts(names: Iterable[str]) -> list[tuple[str, str]]:
    """Each of `names`' files by its top-level part (`_top_level_part`), but those whose import runs only released
    code and binds names (`_inert`): a new module of a new case's model moves no other case's key."""
    names = list(names)
    starred = _star_imported(names)
    found = {}
    for name in names:
        path = _file(name)
        if path is None:
            continue
        if name in starred or not _inert(name, path):
            found[str(path)] = _top_level_part(name, path)
    return sorted(found.items())


def files(names: Iterable[str]) -> list[tuple[str, str]]:
    """The files of the project modules `names`, whole, by path and digest, without what they import."""
    return sorted({str(path): _digest(path) for name in names if (path := _file(name)) is not None}.items())
