"""Row groups: consecutive CPU kernels that each work row by row on the same rows run as one C function.

softmax on an (R, C) input is three kernels: the max of each row, the sum of exp(x - max), then
exp(x - max) / sum. Alone, each reads all of x from memory, so a large x is read three times. As a
*row group* each thread takes a block of rows through all three in turn: the block is read from memory
by the first and from cache by the others, and the per-row results between them (the max, the sum)
live in a small array on the thread's stack, never in memory. layer_norm (mean, variance, scaling),
cross_entropy's rows and softmax's backward (a row's sum of g * y, then the gradient) group the same
way.

What makes kernels a group (`fuse`, on a schedule in run order):
- they are consecutive kernels of one CPU device, none writes memory in place, none is a contraction
  (those get the blocked nests of nests.py);
- every kernel but the last writes a buffer that only later kernels of the group read (not a result
  asked for, nor read after the group): those buffers are *internal*, and stay unwritten; the lazy
  buffers they were for keep their sources, so anything that asks for one later computes it then;
- after merging the same leading dims in each kernel to R rows, every buffer index is `row * s + the
  rest` (s fixed per buffer) with no mask on the row: then a block of rows is a block of each buffer,
  `s` elements a row further on; a kernel reads an internal buffer only at the rows it runs (the part
  of a row it reads lies within the row the producer wrote);
- the group reads some external buffer in more than one kernel, or has internal buffers, worth at least
  heuristics.ROW_GROUP_MIN_BYTES, and R gives every thread a block.

Each kernel is restricted to a block of B rows (a shrink of every view), linearized with no loop of its
own shared among threads (`serial`), and rendered as a static function; the group's function shares
the blocks among the threads and calls each member on a block, with pointers advanced to it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from tg.core.codegen import heuristics
from tg.core.codegen.linearizer import Linearized, _coef, map_sts
from tg.core.dtype import DType
from tg.core.kernel import AstOps, Kernel, KOp
from tg.core.ops import BufferOps, ReduceOps
from tg.core.schedule import ScheduleItem
from tg.core.shape import prod
from tg.core.symbolic import Var, num


@dataclass(frozen=True)
class Arg:
    """Where a member's buffer lives: the group's buffer `index` ("ext"), advanced `step` elements a
    row, or the internal scratch array `index` ("tmp")."""
    kind: str
    index: int
    step: int = 0


@dataclass(eq=False)
class RowGroup:
    """Kernels run block by block of `rows` rows, `block` rows at a time. members: each kernel restricted
    to one block (its own buffer numbering); args: per member, an Arg per buffer; scratch: per internal
    buffer, its dtype and elements per block. buf_dtypes / buf_sizes: the group's buffers (the last
    member's output first, then every external input), as a Kernel's."""
    members: list[Kernel]
    args: list[tuple[Arg, ...]]
    scratch: list[tuple[DType, int]]
    rows: int
    block: int
    buf_dtypes: list[DType]
    buf_sizes: list[int]
    assign: bool = False          # as a Kernel's: a group never writes in place

    @property
    def name(self) -> str:
        last = self.members[-1].full_shape
        return f"G{len(self.members)}_{self.rows}_" + "_".join(str(s) for s in last[1:])

    @property
    def key(self) -> tuple:
        return ("rows", self.rows, self.block, tuple(m.key for m in self.members), tuple(self.args),
                tuple((dt.name, n) for dt, n in self.scratch))


# ---- finding groups

def fuse(items: list, outs: list, device: str, member_ok: Any, threads: int = 0) -> list:
    """The schedule with each row group of `device`'s kernels as one item (see the module docstring).
    member_ok(kernel): whether the device lets a kernel join (not a contraction). outs: what was asked
    for (always stored)."""
    asked = {id(o.base) for o in outs}
    readers = _readers(items)
    threads = threads or os.cpu_count() or 1

    known: dict[int, bool] = {}

    def eligible(it) -> bool:
        if id(it) not in known:
            known[id(it)] = it.kind == "kernel" and it.out.device == device and \
                isinstance(it.kernel, Kernel) and not it.kernel.assign and prod(it.out.shape) > 0 and \
                member_ok(it.kernel)
        return known[id(it)]

    out: list = []
    done: set[int] = set()          # items already placed (set aside before a group, or grouped)
    for i, it in enumerate(items):
        if i in done:
            continue
        made = None
        if eligible(it):
            for members, aside in reversed(_windows(items, i, readers, asked, eligible)):
                made = _group([items[m] for m in members], threads)
                if made is not None:
                    out += [items[a] for a in aside]
                    done |= set(members) | set(aside)
                    break
        out.append(made if made is not None else it)
    return out


def _readers(items: list) -> dict[int, list[int]]:
    """Per base (by id), the items that need its memory: kernels reading it, copies of it, and kernels
    assigning into it (which reach it as their output, not as an input)."""
    readers: dict[int, list[int]] = {}
    for i, it in enumerate(items):
        for b in (it.inputs if it.kind == "kernel" else [it.src] if it.src is not None else []):
            readers.setdefault(id(b), []).append(i)
        if it.kind == "kernel" and it.kernel.assign:
            readers.setdefault(id(it.out.srcs[0].base), []).append(i)
    return readers


def _windows(items: list, first: int, readers: dict[int, list[int]], asked: set[int],
             eligible) -> list[tuple[list[int], list[int]]]:
    """The groups that may start at item `first`, shortest first: (members, the items between them set
    aside). A later item joins when it reads an earlier member's output; an item reading none (a kernel
    computing something else) is set aside, to run before the group. A window closes where every
    member but the last writes a buffer that only later members read, and nobody asked for."""
    found: list[tuple[list[int], list[int]]] = []
    members, aside, last_reader = [first], [], first
    for k in range(first + 1, min(len(items), first + heuristics.ROW_GROUP_MAX_SCAN)):
        if len(members) == heuristics.ROW_GROUP_MAX_MEMBERS:
            break
        it, written = items[k], {id(items[m].out.base) for m in members}
        if not any(id(b) in written for b in it.inputs):
            if it.kind != "kernel" or it.kernel.assign:
                break                # copies and in-place writes keep their place
            aside.append(k)
            continue
        if not eligible(it):
            break
        prev = items[members[-1]].out.base       # the last member becomes an internal buffer's writer
        rs = readers.get(id(prev), [])
        if id(prev) in asked or not rs or any(r in aside for r in rs):
            break
        last_reader = max(last_reader, *rs)
        members.append(k)
        if last_reader <= k:
            found.append((list(members), list(aside)))
    return found


def _group(members: list, threads: int):
    """One schedule item running `members` as a row group, or None where they do not make one."""
    kernels = [it.kernel for it in members]
    # every byte a group could save is a byte of some member's buffers: too few, and no group pays
    # (checked first: a schedule of thousands of small kernels tries tens of windows each)
    touched = sum(n * dt.itemsize for k in kernels for n, dt in zip(k.buf_sizes, k.buf_dtypes))
    if touched < heuristics.ROW_GROUP_MIN_BYTES:
        return None
    for rows in _common_rows(kernels):
        if rows < 4 * threads:
            break
        made = _rowwise(kernels, rows)
        if made is not None:
            return _build(members, made, rows, threads)
    return None


def _common_rows(kernels: list[Kernel]) -> list[int]:
    """Row counts every kernel's leading output dims multiply to, largest first."""
    common: set[int] | None = None
    for k in kernels:
        red = _reduce_axes(k)
        full, sizes, acc = k.full_shape, set(), 1
        for d, s in enumerate(full):
            if d in red:
                break
            acc *= s
            sizes.add(acc)
        common = sizes if common is None else common & sizes
    return sorted(common or (), reverse=True)


def _reduce_axes(k: Kernel) -> set[int]:
    red = next((n for n in k.ast.walk() if isinstance(n.op, ReduceOps)), None)
    return set(red.arg) if red is not None else set()


def _as_rows(k: Kernel, rows: int) -> tuple[KOp, tuple[int, ...]] | None:
    """k's AST over the shape (rows, the rest): its leading dims merged into one."""
    full, acc, p = k.full_shape, 1, 0
    while acc < rows:
        acc *= full[p]
        p += 1
    if acc != rows:
        return None
    shape = (rows, *full[p:])
    shift = p - 1

    def arg(n: KOp):
        if n.op in (AstOps.LOAD, AstOps.STORE, BufferOps.CONST):
            st = n.arg[1]
            return (n.arg[0], (st.expand(full) if st.shape != full else st).reshape(shape))
        return tuple(a - shift for a in n.arg) if isinstance(n.op, ReduceOps) else n.arg
    return k.ast.map_args(arg), shape


def _steps(ast: KOp, shape: tuple[int, ...]) -> dict[int, tuple[int, int, int]] | None:
    """Per buffer the kernel touches: (elements a row, lowest and highest index within row 0), or None
    where some index is not `row * step + the rest` or a mask depends on the row."""
    row = Var("row", 0, shape[0] - 1)
    variables = [row] + [Var(f"x{d}", 0, s - 1) for d, s in enumerate(shape) if d > 0]
    found: dict[int, tuple[int, int, int]] = {}
    for n in ast.walk():
        if n.op not in (AstOps.LOAD, AstOps.STORE, BufferOps.CONST):
            continue
        idx, valid = n.arg[1].expr_idxs(variables)
        step = _coef(idx, row)
        if step is None or row in valid.vars():
            return None
        if n.op is BufferOps.CONST:
            continue
        first = idx.substitute({row: num(0)})
        lo, hi = first.min, first.max
        old = found.get(n.arg[0])
        if old is not None:
            if old[0] != step:
                return None
            lo, hi = min(lo, old[1]), max(hi, old[2])
        found[n.arg[0]] = (step, lo, hi)
    return found


def _rowwise(kernels: list[Kernel], rows: int) -> list[tuple[KOp, tuple[int, ...], dict]] | None:
    """Each kernel over (rows, the rest) with its buffers' steps, or None where one is not row-wise."""
    made = []
    for k in kernels:
        as_rows = _as_rows(k, rows)
        if as_rows is None:
            return None
        steps = _steps(*as_rows)
        if steps is None or steps[0][0] * rows != k.buf_sizes[0]:
            return None              # a store that does not write its buffer row after row
        made.append((*as_rows, steps))
    return made


def _build(members: list, made: list, rows: int, threads: int) -> ScheduleItem | None:
    """The group's item: its buffers, where each member's buffers live, the block size."""
    placed = _place(members, made)
    if placed is None:
        return None
    args_rows, ext, reread = placed
    sizes = [members[-1].kernel.buf_sizes[0]] + [prod(b.shape) for b in ext]
    dtypes_ = [members[-1].kernel.buf_dtypes[0]] + [b.dtype for b in ext]
    internal = [(it.kernel.buf_dtypes[0], made[m][2][0][0]) for m, it in enumerate(members[:-1])]
    worth = sum(prod(b.shape) * b.dtype.itemsize for b in ext if reread[id(b)] > 1)
    worth += sum(dt.itemsize * step * rows for dt, step in internal)
    if worth < heuristics.ROW_GROUP_MIN_BYTES:
        return None
    widest: dict[int, int] = {}            # external buffer -> the most elements a row it spans
    for args in args_rows:
        for a in args:
            if a.kind == "ext":
                widest[a.index] = max(widest.get(a.index, 0), abs(a.step))
    row_bytes = sum(n * dtypes_[index].itemsize for index, n in widest.items())
    tmp_row = sum(dt.itemsize * step for dt, step in internal)
    block = max((b for b in range(1, rows + 1) if rows % b == 0 and rows // b >= threads
                 and b * row_bytes <= heuristics.ROW_BLOCK_BYTES
                 and b * tmp_row <= heuristics.ROW_SCRATCH_BYTES), default=0)
    if block == 0:
        return None
    parts = []
    for it, (ast, shape, _) in zip(members, made):
        window = ((0, block),) + tuple((0, s) for s in shape[1:])
        k = it.kernel
        parts.append(Kernel(map_sts(ast, lambda st, w=window: st.shrink(w)), list(k.buf_dtypes),
                            list(k.buf_sizes)))
    scratch = [(dt, block * step) for dt, step in internal]
    group = RowGroup(parts, args_rows, scratch, rows, block, dtypes_, sizes)
    return ScheduleItem("kernel", members[-1].out, kernel=group, inputs=ext)


def _place(members: list, made: list) -> tuple[list[tuple[Arg, ...]], list, dict[int, int]] | None:
    """(per member, an Arg per buffer; the group's external inputs in first-read order; per external
    input, how many members read it), or None where a member reads an internal buffer outside the rows
    its block wrote."""
    produced = {id(it.out.base): m for m, it in enumerate(members[:-1])}
    ext: list = []
    reread: dict[int, int] = {}
    args_rows: list[tuple[Arg, ...]] = []
    for m, (it, (_, _, steps)) in enumerate(zip(members, made)):
        placed = [Arg("tmp", m, steps[0][0]) if m < len(members) - 1 else Arg("ext", 0, steps[0][0])]
        for i, b in enumerate(it.inputs, start=1):
            if i not in steps:
                return None
            step, lo, hi = steps[i]
            if id(b.base) in produced:
                writer = produced[id(b.base)]
                own = made[writer][2][0][0]
                if step != own or lo < 0 or hi >= own:
                    return None
                placed.append(Arg("tmp", writer, step))
                continue
            if not any(x is b for x in ext):
                ext.append(b)
            reread[id(b)] = reread.get(id(b), 0) + 1
            placed.append(Arg("ext", 1 + next(j for j, x in enumerate(ext) if x is b), step))
        args_rows.append(tuple(placed))
    return args_rows, ext, reread


# ---- code

def render(g: RowGroup, renderer, vector_bytes: int) -> tuple[str, str, Linearized]:
    """(name, C source, info) of a row group: each member a static function over one block, then the
    group's function sharing the blocks among the threads."""
    from tg.core.codegen.linearizer import linearize_for
    from tg.core.codegen.renderer import C_FILE_NAMES
    d, name = renderer.d, g.name
    pieces, flops, streams = [], 0, False
    last_reader = {a.index: m for m, args in enumerate(g.args) for a in args[1:] if a.kind == "ext"}
    for m, (k, args) in enumerate(zip(g.members, g.args)):
        # the last member reading an external input asks for the thread's next block of it, so memory
        # delivers it while this block is computed
        ahead = {j: a.step * g.block for j, a in enumerate(args) if j > 0 and a.kind == "ext"
                 and last_reader[a.index] == m}
        lin = linearize_for(k, d, cpu_vector_bytes=vector_bytes, serial=True)
        out = args[0]
        if out.kind != "ext" or (out.step * g.block) % max(lin.lanes, 1):
            lin.extra["streaming"] = False      # streams only into the output, at aligned blocks
        streams = streams or bool(lin.extra.get("streaming"))
        flops += lin.flops * (g.rows // g.block)
        renames = [f"#undef {n}\n#define {n} {n}_{name}_{m}" for n in C_FILE_NAMES]
        pieces += renames + [renderer.render(lin, f"{name}_{m}", storage="static ", prefetch=ahead)]
        pieces += [f"#undef {n}" for n in C_FILE_NAMES]
    params = [f"{'' if i == 0 else 'const '}{d.types[dt.name]}* {d.restrict}data{i}"
              for i, dt in enumerate(g.buf_dtypes)]
    body = [f"void {name}({', '.join(params)}) {{"]
    threads = f" num_threads({renderer.threads})" if renderer.threads else ""
    body += [f"  #pragma omp parallel{threads}", "  {", "  #pragma omp for schedule(static)",
             f"  for (long long blk = 0; blk < {g.rows // g.block}; blk++) {{"]
    for t, (dt, n) in enumerate(g.scratch):
        body.append(f"    {d.types[dt.name]} tmp{t}[{n}];")
    for m, args in enumerate(g.args):
        ptrs = [f"tmp{a.index}" if a.kind == "tmp" else f"data{a.index} + blk * {a.step * g.block}ll"
                for a in args]
        body.append(f"    {name}_{m}({', '.join(ptrs)});")
    body.append("  }")
    if streams:
        body.append("  _mm_sfence();")
    body += ["  }", "}"]
    mem = sum(n * dt.itemsize for n, dt in zip(g.buf_sizes, g.buf_dtypes))
    info = Linearized(name, [], list(g.buf_dtypes), 1, 1, g.rows, flops, mem)
    return name, "\n".join(pieces) + "\n" + "\n".join(body) + "\n", info
