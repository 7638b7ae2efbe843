"""tg/core imports one way: each module imports only modules of layers below its own, at the top of
the file or inside a function alike (imports for type checking only do not count). A new module
must be placed in LAYERS. Device kinds are found by file name at run time (Device's registry), so
runtime/ops_*.py sit above device.py and nothing below imports them."""
import ast
import pathlib

import tg

LAYERS = [
    ["tg.core.trace"],
    [
        "tg.core",
        "tg.core.codegen",
        "tg.core.runtime",
        "tg.core.dtype",
        "tg.core.ops",
        "tg.core.symbolic",
        "tg.core.capture",
    ],
    ["tg.core.autocast"],
    ["tg.core.shape"],
    ["tg.core.lazy"],
    ["tg.core.kernel"],
    ["tg.core.composite"],
    ["tg.core.schedule"],
    ["tg.core.codegen.uops", "tg.core.codegen.heuristics"],
    ["tg.core.codegen.linearizer"],
    ["tg.core.codegen.renderer"],
    ["tg.core.codegen.gemm", "tg.core.codegen.rows"],
    ["tg.core.codegen.nests"],
    ["tg.core.codegen.bf16", "tg.core.codegen.mma"],
    ["tg.core.lower_cache"],
    ["tg.core.compiler", "tg.core.device"],
    ["tg.core.codegen.search"],
    ["tg.core.codegen.cpu"],
    [
        "tg.core.runtime.ops_cpu",
        "tg.core.runtime.ops_cl",
        "tg.core.runtime.ops_cuda",
        "tg.core.runtime.ops_numpy",
        "tg.core.runtime.ops_null",
    ],
    ["tg.core.realize", "tg.core.function"],
    ["tg.core.random", "tg.core.autograd", "tg.core.indexing"],
    ["tg.core.fused"],
    ["tg.core.mixin.base"],
    ["tg.core.mixin.elementwise", "tg.core.mixin.math", "tg.core.mixin.movement", "tg.core.mixin.indexing",
     "tg.core.mixin.reduce", "tg.core.mixin.nn"],
    ["tg.core.mixin"],
    ["tg.core.tensor"],
    ["tg.core.jit", "tg.core.checkpoint", "tg.core.host"],
]
CORE = pathlib.Path(tg.__file__).parent / "core"


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(CORE.parent.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def core_imports(path: pathlib.Path) -> set[str]:
    """The tg.core modules a file imports anywhere in it, except under `if TYPE_CHECKING:`."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for n in node.orelse:
                visit(n)
            return
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:     # `from tg.core import realize` imports the module tg.core.realize
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in LAYER_OF else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)
    visit(ast.parse(path.read_text()))
    return {m for m in found if m.startswith("tg.core")}


LAYER_OF = {m: i for i, layer in enumerate(LAYERS) for m in layer}


def test_every_core_module_has_a_layer():
    modules = {module_name(p) for p in CORE.rglob("*.py")}
    assert sorted(modules - set(LAYER_OF)) == [], "place new tg/core modules in LAYERS"
    assert sorted(set(LAYER_OF) - modules) == []


def test_core_imports_point_down():
    upward = []
    for path in sorted(CORE.rglob("*.py")):
        me = module_name(path)
        for dep in sorted(core_imports(path)):
            if LAYER_OF[dep] >= LAYER_OF[me]:
                upward.append(f"{me} (layer {LAYER_OF[me]}) imports {dep} (layer {LAYER_OF[dep]})")
    assert upward == []


def test_the_checker_sees_imports_inside_functions(tmp_path):
    f = tmp_path / "x.py"
    f.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tg.core.device import Buffer\n"
        "def g():\n    from tg.core import realize\n    import tg.core.tensor\n"
    )
    assert core_imports(f) == {"tg.core.realize", "tg.core.tensor"}
