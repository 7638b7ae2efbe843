"""The whole package in layers: config < core < nn < the torch-surface modules < torch's device modules
(cuda, accelerator, backends, multiprocessing) < utils < distributed <
launch < tg's top-level __init__. Every import of a tg module (inside functions too, not under `if
TYPE_CHECKING:`) points down or within its own package, no two modules import each other (directly or
round a longer loop), and no module imports a private (`_name`) from another package. tg/core's own
order is tests/core/test_import_layers.py's.

One kind of upward import is allowed, and only inside a module's `__getattr__`: a torch path to a name
that lives higher (`tg.nn.parallel.DistributedDataParallel`, torch.nn.parallel's path, is the
distributed layer's), loaded on first use so that the lower package loads none of the higher one."""
from __future__ import annotations

import ast
import pathlib

import tg

ORDER = [["tg.config"], ["tg.core"], ["tg.nn"],
         ["tg.amp", "tg.optim", "tg.serialization", "tg.namespace", "tg.linalg",
          "tg.profiler"],                                                              # torch's surface
         ["tg.cuda", "tg.accelerator", "tg.backends", "tg.multiprocessing"],          # torch's device modules
         ["tg.utils"], ["tg.distributed"], ["tg.launch"], ["tg"]]
LAYER = {p: i for i, ps in enumerate(ORDER) for p in ps}
ROOT = pathlib.Path(tg.__file__).parent


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in ROOT.rglob("*.py")}


def package(module: str) -> str:
    """The ORDER entry a module belongs to (the longest that prefixes it)."""
    return max((p for p in LAYER if module == p or module.startswith(p + ".")), key=len, default="tg")


def imports(path: pathlib.Path) -> list[tuple[str, str, bool]]:
    """(module imported, name imported from it or "", inside a module-level __getattr__) for every tg
    import in the file, except under `if TYPE_CHECKING:`."""
    found: list[tuple[str, str, bool]] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for n in node.orelse:
                visit(n, lazy)
            return
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "tg":
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.append((sub, "", lazy) if sub in MODULES else (node.module or "", alias.name, lazy))
        elif isinstance(node, ast.Import):
            found.extend((a.name, "", lazy) for a in node.names if a.name.split(".")[0] == "tg")
        for child in ast.iter_child_nodes(node):
            visit(child, lazy or (isinstance(node, ast.FunctionDef) and node.name == "__getattr__"))
    visit(ast.parse(path.read_text()), False)
    return found


EDGES = {m: imports(p) for m, p in MODULES.items()}


def test_every_import_points_down_or_stays_in_its_package():
    upward = []
    for me, found in EDGES.items():
        for dep, _, lazy in found:
            a, b = package(me), package(dep)
            if a != b and LAYER[b] >= LAYER[a] and not lazy:
                upward.append(f"{me} ({a}, layer {LAYER[a]}) imports {dep} ({b}, layer {LAYER[b]})")
    assert upward == []


def test_no_module_imports_a_private_name_of_another_package():
    private = [f"{me}: from {dep} import {name}" for me, found in EDGES.items() for dep, name, _ in found
               if name.startswith("_") and not name.startswith("__") and package(me) != package(dep)]
    assert private == []


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                connect(w)
            low[v] = min(low[v], low[w] if w in stack else low[v])
        if low[v] == index[v]:
            comp = stack[stack.index(v):]
            del stack[stack.index(v):]
            if len(comp) > 1:
                out.append(sorted(comp))
    for v in sorted(edges):
        if v not in index:
            connect(v)
    return out


def test_no_import_cycles():
    edges = {me: {dep if dep in MODULES else dep.rpartition(".")[0] for dep, _, _ in found} - {me}
             for me, found in EDGES.items()}
    edges = {me: {d for d in deps if d in MODULES} for me, deps in edges.items()}
    assert cycles(edges) == []


def test_the_checks_see_what_they_check(tmp_path):
    """The walk finds imports inside functions and marks those in __getattr__, and skips TYPE_CHECKING
    ones; the cycle finder finds a loop of three; every module has a layer."""
    f = tmp_path / "x.py"
    f.write_text("from typing import TYPE_CHECKING\n"
                 "if TYPE_CHECKING:\n    from tg.core.device import Buffer\n"
                 "def g():\n    from tg.core import tensor\n"
                 "def __getattr__(name):\n    from tg.distributed.ddp import _world\n")
    assert imports(f) == [("tg.core.tensor", "", False), ("tg.distributed.ddp", "_world", True)]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "d": {"a"}}) == []
    assert all(package(m) in LAYER for m in MODULES)
    lazy = [(m, dep) for m, found in EDGES.items() for dep, _, is_lazy in found if is_lazy]
    assert ("tg.nn.parallel", "tg.distributed.parallel") in lazy
