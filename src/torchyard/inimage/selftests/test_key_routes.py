"""A pull request's routes around the key's leaving out modules that only bind names (an attacker's review of
issue 69's change): each edit changes what a case's model computes at import, through a module no case's walk
reaches, and each must move the case's key."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import torch

from torchyard.inimage.evaluation.cache import project_code, results
from torchyard.inimage.start.probe import CPU

pytestmark = pytest.mark.harness

GELU, F = torch.nn.functional.gelu, "torch.nn.functional.gelu"
MODEL = (
    "import torch\nclass Model(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
    f"        self.l = torch.nn.Linear(4, 4)\n    def forward(self, x):\n        return {F}(self.l(x))\n"
)
CASES = (
    "import torch\n{imports}\nfrom torchyard.cases import Case\ndef inputs(g):\n"
    "    return (torch.randn(2, 4, generator=g),)\nCASES = [Case('m', {model}, inputs)]\n"
)
STANDARD = CASES.format(imports="from yard.model import Model\nimport yard.extra", model="Model")
SWAP = "import torch\ndef {0}(f):\n    " + F + " = torch.{0}\n    return f\n"
# file -> text; XX is relu before the edit, tanh after (YY the other way round)
ROUTES = {
    "if_name_ne": {"extra": f"import torch\nif __name__ != '__main__':\n    {F} = torch.XX\n"},
    "if_name_eq_call": {
        "extra": "import torch\nif __name__ == setattr(torch.nn.functional, 'gelu', torch.XX):\n    pass\n"
    },
    "class_annotation": {"extra": "import torch\nclass C:\n    a: setattr(torch.nn.functional, 'gelu', torch.XX)\n"},
    "property_rebound": {
        "tools": SWAP.format("relu") + SWAP.format("tanh"),
        "extra": "from yard.tools import XX as property\nclass C:\n    @property\n    def a(self):\n        return 1\n",
    },
    "attr_setter": {
        "t_relu": SWAP.format("setter").replace("torch.setter", "torch.relu"),
        "t_tanh": SWAP.format("setter").replace("torch.setter", "torch.tanh"),
        "extra": "import yard.t_relu, yard.t_tanh\nfrom yard import t_XX as t\nclass C:\n    @t.setter\n"
        "    def a(self):\n        return 1\n",
    },
    "default_property": {
        "tools": f"import torch\nclass T:\n    @property\n    def relu(self):\n        {F} = torch.relu\n"
        f"    @property\n    def tanh(self):\n        {F} = torch.tanh\nt = T()\n",
        "extra": "from yard import tools\ndef f(x=tools.t.XX):\n    return x\n",
    },
    "mro_entries": {
        "tools": f"import torch\nclass M:\n    def __init__(self, a):\n        self.a = a\n"
        f"    def __mro_entries__(self, bases):\n        {F} = getattr(torch, self.a)\n        return (object,)\n"
        "relu, tanh = M('relu'), M('tanh')\n",
        "extra": "from yard import tools\nclass C(tools.XX):\n    pass\n",
    },
    "enum_init": {
        "extra": f"import enum, torch\nclass A(enum.Enum):\n    G = 'XX'\n    def __init__(self, n):\n"
        f"        {F} = getattr(torch, n)\n"
    },
    "init_subclass_body": {
        "reg": f"import torch\nclass Reg:\n    def __init_subclass__(cls):\n        {F} = torch.XX\n",
        "extra": "from yard.reg import Reg\nclass Made(Reg):\n    pass\n",
    },
    "subclass_shadowed": {
        "reg": f"import torch\nclass Reg:\n    def __init_subclass__(cls):\n        {F} = getattr(torch, cls.A)\n",
        "plain": "class Made:\n    pass\n",
        "extra": "from yard.reg import Reg\nclass Made(Reg):\n    A = 'XX'\nfrom yard.plain import Made\n",
    },
    "metaclass_body": {
        "meta": f"import torch\nclass Meta(type):\n    def __new__(m, *a):\n        {F} = torch.XX\n"
        "        return super().__new__(m, *a)\n",
        "extra": "from yard.meta import Meta\nclass Made(metaclass=Meta):\n    pass\n",
    },
    "set_name_body": {
        "desc": f"import torch\nclass D:\n    def __set_name__(self, o, n):\n        {F} = torch.XX\n",
        "extra": "from yard.desc import D\nclass C:\n    a = D()\n",
    },
    "star_import": {
        "extra": "from yard.tools import *\nclass C:\n    @property\n    def a(self):\n        return 1\n",
        "tools": "import torch\n# XX\n",
    },
    "cases_import_order": {
        "extra": "",
        "p_relu": f"import torch\n{F} = torch.relu\n",
        "p_tanh": f"import torch\n{F} = torch.tanh\n",
        "cases": CASES.format(
            imports="import yard.p_YY\nimport yard.p_XX\nimport yard.model", model="yard.model.Model"
        ),
    },
    "module_default": {
        "extra": "import torch\ndef f(x=setattr(torch.nn.functional, 'gelu', torch.XX)):\n    return x\n"
    },
    "module_getattr": {"extra": f"import torch\ndef __getattr__(name):\n    {F} = torch.XX\n"},
}


def _key_and_output(root: Path, files: dict[str, str]) -> tuple[str | None, torch.Tensor]:
    """The case's key as a new run makes it, and what its model computes there."""
    for name in [name for name in sys.modules if name.split(".")[0] == "yard"]:
        del sys.modules[name]
    project_code._digest.cache_clear()
    project_code._syntax.cache_clear()
    results.COLLECTED.clear()
    torch.nn.functional.gelu = GELU
    for name, text in {"__init__": "", "model": MODEL, "cases": STANDARD, **files}.items():
        (root / "yard" / f"{name}.py").write_text(text)
    (case,) = importlib.import_module("yard.cases").CASES
    module = case.make_module()
    if "__getattr__" in files.get("extra", ""):
        vars(sys.modules["yard.extra"])["__getattr__"]("anything")  # as `from yard.extra import anything` would
    torch.manual_seed(0)
    return results.ResultCache(root / "verdicts").key(case, "eager", CPU), module(torch.linspace(-3, 3, 8).view(2, 4))


@pytest.mark.parametrize("route", list(ROUTES))
def test_an_edit_that_changes_what_runs_on_import_moves_the_key(
    route: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(results, "COLLECTED", {})
    monkeypatch.setattr(torch.nn.functional, "gelu", GELU)
    (tmp_path / "yard").mkdir()

    def edited(first: str, second: str) -> dict[str, str]:
        return {name: text.replace("XX", first).replace("YY", second) for name, text in ROUTES[route].items()}

    after = edited("tanh", "relu")
    if route == "star_import":  # the edit: a function named as the builtin the importer's methods use
        after["tools"] = SWAP.format("tanh").replace("def tanh", "def property")
    before_key, before = _key_and_output(tmp_path, edited("relu", "tanh"))
    after_key, changed = _key_and_output(tmp_path, after)
    assert not torch.equal(before, changed), "the edit must change what the model computes"
    assert before_key is not None and after_key != before_key
