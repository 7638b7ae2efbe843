"""docs/ARCHITECTURE.md names real code. The convention it follows:

- Paths: every `tg/...`, `tests/...`, `scripts/...`, `docs/...` or `configs/...` in the text (backticked
  or not) exists; a `*` in one is a glob that must match. Relative Markdown links resolve from docs/.
- Dotted names: every backticked token made only of dotted identifiers (`gemm.find`, `Tensor.backward`,
  `tg.amp.GradScaler`; a trailing `(...)` is dropped) must resolve. Its longest leading run of parts
  that names exactly one tg module is that module: a full name (`tg.core.lazy`) or the last parts of
  one (`lazy`, `nn.optim`; an ambiguous tail such as `optim` fails). Else its first part must be a
  class, function or assignment defined at the top of exactly one tg module (`CPUDevice.usable`). The
  rest is read with getattr, so class attributes resolve and instance attributes do not. Tokens whose
  first part is a foreign module (`os`, `sys`, `np`, `torch`) and file names (`reductions.c`) are not
  names. Backticked single words (`Run`, `fuse_rows`) are not checked.
- Knobs: every backticked `TG_*` (or `DEBUG`), with or without `=value`, is a knob in tg/config.py.
- Every module in tg/ is listed, by its full path; the map is at most MAX_LINES lines.
"""
import ast
import importlib
import pathlib
import re

import pytest

from tg import config

ROOT = pathlib.Path(__file__).resolve().parent.parent
MAP = ROOT / "docs" / "ARCHITECTURE.md"
MAX_LINES = 320
FOREIGN = {"os", "sys", "np", "numpy", "torch", "ctypes", "threading", "functools"}
FILE_SUFFIXES = (".py", ".c", ".h", ".md", ".yaml", ".json", ".toml", ".so", ".txt")

PATH = re.compile(r"(?<![\w./*-])((?:tg|tests|scripts|docs|configs)/[\w./*-]*)")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
TICKED = re.compile(r"`([^`\n]+)`")
DOTTED = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+$")
KNOB = re.compile(r"^(TG_[A-Z0-9_]+|DEBUG)(?:=\S*)?$")


def text() -> str:
    return MAP.read_text()


def tg_modules() -> dict[str, pathlib.Path]:
    """Dotted name -> file of every module under tg/ (a package by its own name)."""
    found = {}
    for path in sorted((ROOT / "tg").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = tg_modules()


def top_level_names() -> dict[str, list[str]]:
    """Name -> the tg modules that define it at their top level (class, function or assignment)."""
    where: dict[str, list[str]] = {}
    for module, path in MODULES.items():
        for node in ast.parse(path.read_text()).body:
            names = []
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names = [node.target.id]
            for name in names:
                where.setdefault(name, []).append(module)
    return where


DEFINED = top_level_names()


def modules_named(dotted: str) -> list[str]:
    """The tg modules whose full name is dotted or ends with it at a dot."""
    return [m for m in MODULES if m == dotted or m.endswith("." + dotted)]


def resolve(token: str) -> str | None:
    """None when token names real code, else why not."""
    parts = token.split(".")
    for k in range(len(parts), 0, -1):
        found = modules_named(".".join(parts[:k]))
        if len(found) > 1:
            return f"{'.'.join(parts[:k])!r} could be any of {', '.join(found)}: name more of its path"
        if found:
            obj, rest = importlib.import_module(found[0]), parts[k:]
            break
    else:
        homes = DEFINED.get(parts[0], [])
        if len(homes) != 1:
            return f"{parts[0]!r} is no tg module and is defined in {len(homes)} tg modules, not one"
        obj, rest = getattr(importlib.import_module(homes[0]), parts[0]), parts[1:]
    for i, attr in enumerate(rest):
        if not hasattr(obj, attr):
            return f"{'.'.join(parts[:len(parts) - len(rest) + i])} has no attribute {attr!r}"
        obj = getattr(obj, attr)
    return None


def checked_names(doc: str) -> list[str]:
    names = []
    for raw in TICKED.findall(doc):
        token = re.sub(r"\(.*\)$", "", raw.strip())
        if not DOTTED.match(token) or token.endswith(FILE_SUFFIXES) or token.split(".")[0] in FOREIGN:
            continue
        names.append(token)
    return names


def test_cited_paths_exist():
    doc = text()
    missing = []
    for cited in sorted(set(PATH.findall(doc))):
        cited = cited.rstrip(".,")
        if "*" in cited:
            if not list(ROOT.glob(cited)):
                missing.append(cited)
        elif not (ROOT / cited).exists():
            missing.append(cited)
    for target in LINK.findall(doc):
        if "://" not in target and not (MAP.parent / target).exists():
            missing.append(f"link {target}")
    assert missing == []


def test_dotted_names_resolve():
    names = checked_names(text())
    assert len(names) > 100, "the map should name the code it describes"
    wrong = {name: why for name in sorted(set(names)) if (why := resolve(name)) is not None}
    assert wrong == {}


def test_knobs_exist():
    knobs = {m.group(1) for raw in TICKED.findall(text()) if (m := KNOB.match(raw.strip()))}
    assert sorted(knobs - set(config.KNOBS)) == []


def test_every_module_is_listed():
    doc = text()
    assert [str(p.relative_to(ROOT)) for p in MODULES.values() if str(p.relative_to(ROOT)) not in doc] == []


def test_map_is_short():
    assert len(text().splitlines()) <= MAX_LINES


@pytest.mark.parametrize("token, ok", [
    ("gemm.find", True), ("nn.optim.Optimizer.step", True), ("tg.amp.GradScaler", True),
    ("Tensor._post_backward_hooks", True), ("gemm.no_such_name", False), ("optim.SGD", False),
    ("ShapeTracker._move", False), ("NoSuchClass.attr", False),
])
def test_the_resolver(token, ok):
    assert (resolve(token) is None) is ok
