"""The CPU's strategy, in one place: what a scheduled kernel becomes on the CPU (`choose`) and the row
groups a schedule is cut into first (`fuse_rows`). runtime/ops_cpu.py wires the device to them.

`choose` decides, in this order:
1. a row group (codegen/rows.py, made by `fuse_rows`) is one function running its kernels block by block;
2. a contraction large enough to block (`gemm.contraction`: matmul in any layout, batched) of
   bfloat16 factors, on a bfloat16 unit the CPU has and that pays (`bf16.unit`), is a packed AMX or
   VDPBF16PS nest (codegen/bf16.py);
3. another contraction is a blocked, packed nest (codegen/nests.py) where the rule or the search
   (`search.choose`, codegen/search.py) says it beats the one-pass kernel;
4. every other kernel is the linearizer's one-pass loop nest (`linearizer.linearize_for`).
TG_NOOPT=1 takes 4 for every kernel and cuts no row groups.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from tg import config
from tg.core.codegen import bf16, gemm, heuristics, nests, rows, search
from tg.core.codegen.linearizer import linearize_for

if TYPE_CHECKING:
    from tg.core.runtime.ops_cpu import CPUDevice


class Choice(NamedTuple):
    """What a kernel becomes: kind is "rows", "bf16", "gemm" or "one-pass"; for the nests, the
    contraction and its parameters (a `heuristics.Params`); a contraction run one-pass carries it too."""
    kind: str
    contraction: Any = None
    params: Any = None


def fuse_rows(dev: CPUDevice, items: list, outs: list) -> list:
    """The schedule with its row groups of CPU kernels as one item each (codegen/rows.py); a kernel that
    is a contraction stays alone (it has a nest of its own)."""
    if config.TG_NOOPT:
        return items
    lanes = dev.vector_bytes // 4
    alone = lambda k: gemm.contraction(k, lanes) is None      # noqa: E731  (a contraction keeps its nest)
    return rows.fuse(items, outs, dev.name, alone, config.TG_CPU_THREADS)


def choose(dev: CPUDevice, kernel: Any) -> Choice:
    """What `kernel` becomes on this CPU (see the module docstring for the order)."""
    if isinstance(kernel, rows.RowGroup):
        return Choice("rows")
    lanes = dev.vector_bytes // 4
    c = None if config.TG_NOOPT else gemm.contraction(kernel, lanes)
    if c is None:
        return Choice("one-pass")
    unit = bf16.unit(c, dev.features, dev.usable)
    if unit is not None:
        return Choice("bf16", c, heuristics.unit_params(c, unit.name, bf16.TILE))

    def one_pass(name: str) -> str:       # what the search times the nests against
        return dev.renderer.render(linearize_for(kernel, dev.renderer.d, **dev.lower_options), name)
    p = search.choose(c, nests.name(c), lanes, dev.renderer, dev.compiler, one_pass)
    return Choice("one-pass", c) if p is None else Choice("gemm", c, p)


def lower(dev: CPUDevice, kernel: Any) -> tuple[str, str, Any]:
    """(name, source, info) of a scheduled kernel or row group, as `choose` decides. A contraction whose
    search is not finished (`search.settled`) is marked provisional in info.extra: not kept on disk."""
    choice = choose(dev, kernel)
    lanes = dev.vector_bytes // 4
    if choice.kind == "rows":
        return rows.render(kernel, dev.renderer, dev.vector_bytes)
    if choice.kind == "bf16":
        return nests.lower(choice.contraction, choice.params, dev.renderer, lanes, bf16.render)
    if choice.kind == "gemm":
        name, src, info = nests.lower(choice.contraction, choice.params, dev.renderer, lanes)
    else:
        info = linearize_for(kernel, dev.renderer.d, **dev.lower_options)
        name, src = info.name, dev.renderer.render(info)
    c = choice.contraction      # a contraction searched (or not) between the nests and the one-pass kernel
    if c is not None and not search.settled(c, lanes, dev.renderer, dev.compiler):
        info.extra["provisional"] = True
    return name, src, info


def nest_by_rule(kernel: Any, renderer: Any, vector_bytes: int) -> tuple[str, str, Any] | None:
    """(name, source, info) of the nest the rules of thumb give a contraction, without a search or a
    bfloat16 unit (what the NULL device renders for the c dialect, so that the nests' C is checked with
    every other kernel's), or None where the rule keeps the one-pass kernel."""
    lanes = vector_bytes // 4
    c = None if config.TG_NOOPT else gemm.contraction(kernel, lanes)
    if c is None:
        return None
    p = heuristics.rule(c, lanes)
    return None if p is None else nests.lower(c, p, renderer, lanes)
