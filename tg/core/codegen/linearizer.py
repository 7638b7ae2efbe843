"""From a scheduled kernel to a linear list of UOps.

1. Every ShapeTracker is brought to the kernel's full shape (epilogue views are expanded).
2. Dims that every buffer walks contiguously are merged; size-1 dims are dropped; reduce dims
   go last.
3. Optimisations pick (a) a *lane* dim rendered as SIMD vectors when the store (or, for a
   contiguous reduce, every load) is unit-stride along it, (b) *upcasts*: output tiles held in
   registers, chosen on dims where some input is broadcast (so a loaded value is reused, as in
   matmul), (c) an *unrolled* reduce with independent accumulators, (d) which output loops run
   in parallel (OpenMP on the CPU; global ids on GPUs), (e) on GPUs, a *work-group* sharing one
   long reduce where outputs are few (the partials meet in local memory).
4. The loop nest is lowered to UOps with common subexpressions shared.

    >>> from tg.core.codegen.linearizer import Dims
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from tg import config
from tg.core.codegen import heuristics
from tg.core.codegen.uops import UOp, UOps
from tg.core.dtype import DType, dtypes, min_value, value_key
from tg.core.kernel import AstOps, Kernel, KOp
from tg.core.ops import BinaryOps, BufferOps, ReduceOps, TernaryOps, UnaryOps
from tg.core.shape import ShapeTracker, prod
from tg.core.symbolic import And, Ge, Lin, Lt, Node, Var, ands, ge, lt, num

if TYPE_CHECKING:
    from tg.core.codegen.renderer import Dialect

VECTOR_DTYPES = {dtypes.float32, dtypes.int32, dtypes.uint32, dtypes.bool}
# ALU ops the C vector extension does natively (others are done lane by lane).
NATIVE_VECTOR_OPS = {BinaryOps.ADD, BinaryOps.MUL, UnaryOps.NEG, BinaryOps.MAX, BinaryOps.CMPLT,
                     BinaryOps.CMPNE, BinaryOps.AND, BinaryOps.OR, BinaryOps.XOR, BinaryOps.SHL,
                     BinaryOps.SHR, TernaryOps.WHERE, TernaryOps.MULACC, UnaryOps.RECIP, UnaryOps.CAST,
                     UnaryOps.BITCAST}


@dataclass
class Dim:
    size: int
    reduce: bool
    upcast: int = 1     # unrolled into registers
    lanes: int = 1      # SIMD lanes (at most one dim)
    group: int = 1      # GPU work items sharing this reduce dim (at most one dim)
    tail: int = 0       # elements past the loops' whole vectors (a reduce lane dim lanes do not divide)

    @property
    def loops(self) -> int:
        return self.size // (self.upcast * self.lanes * self.group)


def map_sts(ast: KOp, fn) -> KOp:
    """The AST with every view (of each load, store and constant) replaced by fn(view)."""
    viewed = (AstOps.LOAD, AstOps.STORE, BufferOps.CONST)
    return ast.map_args(lambda n: (n.arg[0], fn(n.arg[1])) if n.op in viewed else n.arg)


def _coef(idx: Node, v: Var) -> int | None:
    """Coefficient of v when v appears only as a plain linear term of idx (0 when absent)."""
    terms = dict(idx.terms) if isinstance(idx, Lin) else {idx: 1}
    c = terms.get(v, 0)
    for atom in terms:
        if atom is not v and atom != v and v in atom.vars():
            return None
    return c


def normalized(kernel: Kernel) -> tuple[KOp, tuple[int, ...], list[bool]]:
    """The kernel's AST with every view at the full shape, dims that every buffer walks contiguously
    merged, size-1 dims dropped and reduce dims last: (ast, shape, which dims reduce)."""
    ast = kernel.ast
    reduce_node = next((n for n in ast.walk() if isinstance(n.op, ReduceOps)), None)
    full = kernel.full_shape
    ast = map_sts(ast, lambda st: st.expand(full) if st.shape != full else st)
    reduce_axes = set(reduce_node.arg) if reduce_node is not None else set()
    ast, shape, is_reduce = Dims.merge(ast, full, reduce_axes)
    order = [d for d in range(len(shape)) if not is_reduce[d]] + \
        [d for d in range(len(shape)) if is_reduce[d]]
    if order != list(range(len(shape))):
        ast = map_sts(ast, lambda st: st.permute(tuple(order)))
        shape = tuple(shape[d] for d in order)
        is_reduce = [is_reduce[d] for d in order]
    return ast, shape, is_reduce


class Dims:
    """The kernel's shape after merging and reordering, with the chosen optimisations."""

    def __init__(
        self, kernel: Kernel, vector_width_bytes: int, use_lanes: bool, gpu: bool, group_size: int = 256,
        part: tuple[KOp, tuple[int, ...], list[bool]] | None = None, serial: bool = False,
        narrow_lanes: bool = False
    ):
        """`part`: one piece of a kernel split along a ragged lane dim (see `ragged`), already
        normalized; it is optimised as it is, never split again. `serial`: no loop is shared among
        threads (a member of a row group, whose caller shares the rows; see rows.py)."""
        ast, shape, is_reduce = normalized(kernel) if part is None else part
        self.ast = ast
        # float16 and bfloat16 values may be lanes (as float vectors) where the dialect has the helpers
        self.narrow_lanes = narrow_lanes
        self.vector_dtypes = VECTOR_DTYPES | ({dtypes.float16, dtypes.bfloat16} if narrow_lanes else set())
        self.reduce_node = next((n for n in ast.walk() if isinstance(n.op, ReduceOps)), None)
        self.dims = [Dim(s, r) for s, r in zip(shape, is_reduce)]
        self.lane_dim: int | None = None
        self.parallel: list[int] = []   # output dims whose loops run in parallel, outermost first
        self.loop_order: list[int] = [d for d, dim in enumerate(self.dims) if not dim.reduce]
        self.group_dim: int | None = None
        # an output dim the widest SIMD vectors do not divide, where only narrower ones (or none) fit
        # elsewhere: linearize splits the kernel along it into a part the widest lanes divide and a
        # tail (a conv's 26x26 = 676 outputs: 42 vectors of 16, then one over outputs 660..675, not 169
        # vectors of 4; see _split_ragged)
        self.ragged: int | None = None
        self.may_split = part is None and not gpu
        self.gpu = gpu
        # whether the kernel reads the memory it writes (then a split's tail may not overlap the rest)
        self.rereads = kernel.assign or kernel.reads_target
        self.max_group = 1 << (max(group_size, 1).bit_length() - 1)   # a power of two: the tree halves it
        self._lanes_ok: dict[int, bool] = {}
        self.widest = 0
        if not config.TG_NOOPT:
            self._optimise(vector_width_bytes, use_lanes, gpu)
        for dim in self.dims:
            if dim.tail:          # what the whole vectors of the loops (and their unroll) leave
                dim.tail = dim.size - dim.loops * dim.upcast * dim.lanes
        # the outer loops are shared among the threads, as few as give PARALLEL_ITEMS pieces: inner
        # loops stay plain loops (no index decoded from a collapsed counter per element) for the compiler
        self.parallel = []
        self.serial = serial
        pieces = 1
        for d in self.loop_order:
            if self.dims[d].loops > 1 and pieces < heuristics.PARALLEL_ITEMS and not serial:
                self.parallel.append(d)
                pieces *= self.dims[d].loops

    @property
    def lanes(self) -> int:
        """SIMD lanes of the lane dim (1: none)."""
        return self.dims[self.lane_dim].lanes if self.lane_dim is not None else 1

    # ---- analysis helpers
    def sts(self) -> list[tuple[KOp, ShapeTracker]]:
        return [
            (n, n.arg[1]) for n in self.ast.walk() if n.op in (AstOps.LOAD, AstOps.STORE, BufferOps.CONST)
        ]

    @staticmethod
    def merge(ast: KOp, shape: tuple[int, ...], reduce_axes: set[int]):
        is_reduce = [d in reduce_axes and shape[d] > 1 for d in range(len(shape))]
        keep = [d for d in range(len(shape)) if shape[d] != 1]
        variables = [Var(f"x{d}", 0, max(s - 1, 0)) for d, s in enumerate(shape)]
        exprs = []
        for n in ast.walk():
            if n.op in (AstOps.LOAD, AstOps.STORE, BufferOps.CONST):
                exprs.append(n.arg[1].expr_idxs(variables))
        groups: list[list[int]] = []
        for d in keep:
            if groups:
                prev = groups[-1][-1]
                ok = is_reduce[prev] == is_reduce[d]
                for idx, valid in exprs:
                    if not ok:
                        break
                    cp, cd = _coef(idx, variables[prev]), _coef(idx, variables[d])
                    used = valid.vars()
                    ok = cp is not None and cd is not None and cp == cd * shape[d] and \
                        variables[prev] not in used and variables[d] not in used
                if ok:
                    groups[-1].append(d)
                    continue
            groups.append([d])
        new_shape = tuple(prod(shape[d] for d in g) for g in groups)
        new_reduce = [is_reduce[g[0]] for g in groups]
        if new_shape != shape:
            ast = map_sts(ast, lambda st: st.reshape(new_shape))
        return ast, new_shape, new_reduce

    def _vectorizable(self, d: int) -> bool:
        """Whether every value that varies along dim d has a SIMD type. Values constant along it stay
        scalars, whatever their type, and are broadcast where they meet the vectors (a row's int64
        class index beside the row's float32 logits)."""
        if d not in self._lanes_ok:
            var = Var(f"x{d}", 0, max(self.dims[d].size - 1, 0))
            variables = [var if i == d else Var(f"x{i}", 0, max(dim.size - 1, 0))
                         for i, dim in enumerate(self.dims)]
            varies: dict[int, bool] = {}
            ok = True
            for n in self.ast.walk():          # sources before their users
                # a reduce's accumulators are vectors in any kernel with lanes
                varies[id(n)] = isinstance(n.op, ReduceOps) or any(varies[id(x)] for x in n.src)
                if n.op in (AstOps.LOAD, BufferOps.CONST, AstOps.STORE):     # and where it is written
                    idx, valid = n.arg[1].expr_idxs(variables)
                    varies[id(n)] = varies[id(n)] or var in idx.vars() or var in valid.vars()
                # a narrow float's lanes are float vectors, not its bits: no bitcast to or from one
                if varies[id(n)] and (n.dtype not in self.vector_dtypes or
                                      (n.op is UnaryOps.CAST and n.src[0].dtype not in self.vector_dtypes) or
                                      (n.op is UnaryOps.BITCAST and
                                       {n.dtype, n.src[0].dtype} & {dtypes.float16, dtypes.bfloat16})):
                    ok = False
                    break
            self._lanes_ok[d] = ok
        return self._lanes_ok[d]

    def _coefs(self, d: int, inside_reduce: bool | None) -> list[tuple[KOp, int | None, bool]]:
        """(node, coefficient of dim d, whether validity uses d) for every load/store/const."""
        variables = [Var(f"x{i}", 0, max(dim.size - 1, 0)) for i, dim in enumerate(self.dims)]
        reduce_src = set(id(n) for n in self.reduce_node.src[0].walk()) if self.reduce_node else set()
        out = []
        for n, st in self.sts():
            if inside_reduce is not None and (id(n) in reduce_src) != inside_reduce:
                continue
            idx, valid = st.expr_idxs(variables)
            out.append((n, _coef(idx, variables[d]), variables[d] in valid.vars()))
        return out

    def _pick_lane_dim(self, width: int, out_dims: list[int], red_dims: list[int],
                       ragged: bool = False) -> int | None:
        """The dim whose consecutive elements become SIMD lanes. In a reduce kernel the loads in
        the inner loop matter most: every one of them must walk the lane dim with unit stride
        or not at all (no gathers). Then prefer a dim the store is unit-stride on. `ragged`: an
        output dim longer than a vector that width does not divide (for a split; of at least RAGGED_MIN
        vectors where the split's tail must be scalar)."""
        dims = self.dims

        def fits(d: int) -> bool:
            if ragged:
                size = dims[d].size
                least = heuristics.RAGGED_MIN * width if self.rereads else width + 1
                return not dims[d].reduce and size % width != 0 and size >= least and self._vectorizable(d)
            return dims[d].size % width == 0 and self._vectorizable(d)

        def store_unit(d: int) -> bool:
            return all(c == 1 and not uses for n, c, uses in self._coefs(d, None) if n.op is AstOps.STORE)

        def inner_ok(d: int, need_unit: bool) -> bool:
            coefs = [(c, uses) for n, c, uses in self._coefs(d, True) if n.op is AstOps.LOAD]
            return (all(c in (0, 1) and not uses for c, uses in coefs)
                    and (not need_unit or any(c == 1 for c, _ in coefs)))

        if not red_dims:
            return next((d for d in reversed(out_dims) if fits(d) and store_unit(d)), None)
        for rule in (lambda d: store_unit(d) and inner_ok(d, False), lambda d: inner_ok(d, True)):
            found = next((d for d in reversed(out_dims) if fits(d) and rule(d)), None)
            if found is not None:
                return found
        if ragged:             # never a split whose inner loads gather
            return None
        last = red_dims[-1]
        contiguous = all(c in (0, 1) and not uses for n, c, uses in self._coefs(last, True))
        if contiguous and (fits(last) or self._tail_ok(last, width)):
            return last
        return next((d for d in reversed(out_dims) if fits(d) and store_unit(d)), None)

    def _tail_ok(self, d: int, width: int) -> bool:
        """Whether the widest vectors go along the contiguous reduce dim d that they do not divide, the rest
        as a tail (a conv weight gradient's 26 x 26 = 676 positions: 42 vectors of 16 and a tail of 4, not
        169 vectors of 4). CPU only; marks the dim (its length is set once the unroll is known)."""
        size = self.dims[d].size
        if self.gpu or width != self.widest or not size % width or size < 4 * width:
            return False
        if not self._vectorizable(d):
            return False
        self.dims[d].tail = -1
        return True

    def _optimise_gpu(self, out_dims: list[int]) -> None:
        """A reduce with few outputs and a long reduce axis is shared by a work-group (see _group).
        Otherwise one work item per output tile: in a reduce, each of up to two output dims along
        which an input is reused (matmul: a row of A across the columns, a column of B across the
        rows) is upcast by 4, so a loaded value feeds several accumulators held in registers."""
        if self.reduce_node is None or self._group(out_dims):
            return
        dims = self.dims
        tiled: set[int] = set()
        for d in reversed(out_dims):
            reused = {id(n) for n, c, _ in self._coefs(d, True) if c == 0 and n.op is AstOps.LOAD}
            if d == self.lane_dim:      # the lanes already share each reused value
                tiled |= reused
                continue
            if not reused or reused <= tiled or dims[d].size % 4 or dims[d].size < 16:
                continue
            dims[d].upcast = 4
            tiled |= reused
            if sum(dims[x].upcast > 1 for x in out_dims) == 2:
                return

    @property
    def local_size(self) -> int:
        """Work items of the work-group sharing a reduce (0: no grouped reduce)."""
        return self.dims[self.group_dim].group if self.group_dim is not None else 0

    def _group(self, out_dims: list[int]) -> bool:
        """Split the last reduce dim across the work items of a work-group: item t of G takes
        elements t, t+G, ... (neighbouring items read neighbouring addresses), and the G partial
        results are combined through local (shared) memory. Worth it where one work item per
        output leaves the device mostly idle: few outputs, a long reduce, read contiguously (or so
        few outputs that any order is better than serial)."""
        dims = self.dims
        d = max(i for i, x in enumerate(dims) if x.reduce)
        outputs = prod(dims[x].size for x in out_dims)
        if outputs >= heuristics.GROUP_MAX_OUTPUTS or dims[d].size < heuristics.GROUP_MIN_REDUCE or \
                (self.lane_dim is not None and self.lane_dim != d):
            return False
        contiguous = any(c == 1 for n, c, _ in self._coefs(d, True) if n.op is AstOps.LOAD)
        if not contiguous and outputs >= heuristics.GROUP_MAX_OUTPUTS // 16:
            return False
        per_item = dims[d].size // dims[d].lanes
        size = next(
            (g for g in (self.max_group >> i for i in range(5)) if per_item % g == 0 and per_item >= 2 * g), 0
        )
        if size < 16:
            return False
        dims[d].group = size
        self.group_dim = d
        return True

    def _optimise(self, vector_width_bytes: int, lanes_ok: bool, gpu: bool) -> None:
        dims = self.dims
        out_dims = [d for d, dim in enumerate(dims) if not dim.reduce]
        red_dims = [d for d, dim in enumerate(dims) if dim.reduce]
        if lanes_ok:
            self._pick_lanes(vector_width_bytes, out_dims, red_dims)
            if self.ragged is not None:
                return                  # only a probe: each part is optimised on its own
        if gpu:
            self._optimise_gpu(out_dims)
            return
        self._unroll_masks(out_dims)
        if self.reduce_node is not None and self.lane_dim is not None and self._tile_for_reuse(out_dims):
            return
        self._split_accumulators(out_dims, red_dims)

    def _pick_lanes(self, vector_width_bytes: int, out_dims: list[int], red_dims: list[int]) -> None:
        """The widest SIMD width that divides a suitable dim becomes the lane dim."""
        widest = self.widest = max(vector_width_bytes // 4, 1)
        for width in [w for w in (widest, widest // 2, widest // 4) if w >= 4]:
            self.lane_dim = self._pick_lane_dim(width, out_dims, red_dims)
            if self.lane_dim is not None:
                break
        lane_reduce = self.lane_dim is not None and self.dims[self.lane_dim].reduce
        if self.may_split and widest >= 4 and not lane_reduce and (self.lane_dim is None or width < widest):
            ragged = self._pick_lane_dim(widest, out_dims, red_dims, ragged=True)
            if ragged is not None:
                self.ragged, self.lane_dim = ragged, None
                return
        if self.lane_dim is not None:
            self.dims[self.lane_dim].lanes = width

    def _tile_for_reuse(self, out_dims: list[int]) -> bool:
        """Register tiles for broadcast inputs (matmul: a row of B is reused by every row of A).
        True when a tile was made (the reduce then needs no extra accumulators)."""
        dims, lane = self.dims, self.lane_dim
        assert lane is not None
        lane_reduce = dims[lane].reduce
        tiled_for: set[int] = set()     # loads whose reuse a tile dim already exploits
        # 3 (a conv weight gradient's 9 window positions) is tried only after every dim was offered 4 or 2
        for allowed in ((4, 2), (3,)) if lane_reduce else ((8, 4, 2),):
            for d in reversed(out_dims):
                if d == lane or dims[d].upcast > 1:
                    continue
                reused = [id(n) for n, c, _ in self._coefs(d, True) if c == 0 and n.op is AstOps.LOAD]
                if not reused or set(reused) <= tiled_for:
                    continue
                up = next((u for u in allowed if dims[d].size % u == 0), 1)
                if up == 1:
                    continue
                dims[d].upcast = up
                tiled_for |= set(reused)
                if not lane_reduce:
                    if dims[lane].loops % 2 == 0:
                        dims[lane].upcast = 2
                    # keep the reused strip hot in cache: walk the other dim innermost. Not where
                    # all of it stays in cache anyway (a conv's few window positions): the stores
                    # then run along the lanes instead of jumping between rows of the output
                    reach = prod(x.size for x in dims if x.reduce) * dims[lane].size * 4
                    if reach > heuristics.REORDER_MIN_BYTES:
                        self.loop_order = [lane] + [x for x in self.loop_order if x != lane]
                    return True
                if len(tiled_for) >= 2 or sum(dims[x].upcast > 1 for x in out_dims) >= 2:
                    return True         # a 2-d tile: each of two inputs is reused across one tile dim
        return bool(tiled_for)

    def _unroll_masks(self, out_dims: list[int]) -> None:
        """A short output dim that some load's validity depends on is unrolled whole: each unrolled copy
        then knows its index, and the masks fold to constants. (A stack of a pool's shifted windows sums
        one masked load per window position, of which one is valid: a branch-free sum of nine selects
        per element becomes nine plain copies.) Elementwise kernels only: in a reduce each unrolled copy
        would multiply the accumulators the tiles hold."""
        if self.reduce_node is not None:
            return
        dims, unrolled = self.dims, 1
        for d in reversed(out_dims):
            most = heuristics.MASK_UNROLL
            if d == self.lane_dim or dims[d].size > most or unrolled * dims[d].size > most:
                continue
            if any(uses and n.op is AstOps.LOAD for n, _, uses in self._coefs(d, None)):
                dims[d].upcast = dims[d].size
                unrolled *= dims[d].size

    def _split_accumulators(self, out_dims: list[int], red_dims: list[int]) -> None:
        """Independent accumulators so a reduce is not one long dependency chain (or, without a
        reduce or lanes, a small unroll of the last output dim)."""
        dims = self.dims
        if red_dims:
            d = red_dims[-1]
            dims[d].upcast = next((up for up in (4, 2) if dims[d].loops % up == 0 and dims[d].loops > up), 1)
        elif self.lane_dim is None and out_dims and dims[out_dims[-1]].upcast == 1:   # not unrolled already
            d = out_dims[-1]
            dims[d].upcast = next((up for up in (4, 2) if dims[d].size % up == 0 and dims[d].size > up), 1)




@dataclass
class Linearized:
    name: str
    uops: list[UOp]
    buf_dtypes: list[DType]
    lanes: int
    global_size: int               # work items for GPU dialects (1 for loop-only kernels)
    work: int                      # elements of the full shape, for the parallel threshold
    flops: int
    mem_bytes: int
    local_size: int = 0            # work-group size the kernel needs (0: any)
    extra: dict = field(default_factory=dict)


class Lowerer:
    """Turns the optimised loop nest into UOps, sharing common subexpressions."""

    def __init__(self, kernel: Kernel, dims: Dims, gpu: bool):
        self.kernel, self.dims, self.gpu = kernel, dims, gpu
        self.uops: list[UOp] = []
        self.cache: dict[Any, UOp] = {}
        self.walks: dict[tuple, list[KOp]] = {}   # value()'s order of nodes, by (root, nodes given)
        self.lanes = dims.lanes
        self.lane_var = Var("lane", 0, self.lanes - 1) if self.lanes > 1 else None
        self.local_var = Var("lidx0", 0, dims.local_size - 1) if dims.group_dim is not None else None

    def emit(self, op: UOps, dtype: DType | None = None, src: tuple[UOp, ...] = (), arg: Any = None,
             vec: bool = False, cache: bool = True) -> UOp:
        key = (op, dtype, tuple(id(s) for s in src), _hashable(arg), vec)
        if cache and key in self.cache:
            return self.cache[key]
        u = UOp(op, dtype, src, arg, vec)
        self.uops.append(u)
        if cache:
            self.cache[key] = u
        return u

    def index_of(self, d: int, loop: Node, up: int) -> Node:
        dim = self.dims.dims[d]
        idx = loop * (dim.upcast * dim.lanes * dim.group) + up * dim.lanes
        if d == self.dims.group_dim and self.local_var is not None:
            idx = idx + self.local_var * (dim.upcast * dim.lanes)
        if d == self.dims.lane_dim:
            assert self.lane_var is not None   # a lane dim always has lanes > 1
            idx = idx + self.lane_var
        return idx

    # ---- values
    def value(self, n: KOp, ctx: list[Node], acc_of: dict[int, UOp]) -> UOp:
        """n's value at the indices ctx, where the nodes in acc_of are already computed. One pass over
        n's nodes, each once (a value read twice is one uop either way: emit shares it)."""
        walk_key = (id(n), tuple(acc_of))
        if walk_key not in self.walks:
            self.walks[walk_key] = n.walk(stop=acc_of)
        values = dict(acc_of)
        for x in self.walks[walk_key]:
            if id(x) not in values:
                values[id(x)] = self._node_value(x, ctx, values)
        return values[id(n)]

    def _node_value(self, n: KOp, ctx: list[Node], values: dict[int, UOp]) -> UOp:
        if n.op is BufferOps.CONST:
            value, st = n.arg
            _, valid = st.expr_idxs(ctx)
            c = self.emit(UOps.CONST, n.dtype, arg=value)
            if valid.is_const:
                return c if valid.min == 1 else self.emit(UOps.CONST, n.dtype, arg=_zero(n.dtype))
            cond = self.emit(UOps.INDEX_COND, dtypes.bool, arg=valid, vec=self._uses_lane(valid))
            zero = self.emit(UOps.CONST, n.dtype, arg=_zero(n.dtype))
            return self.alu(TernaryOps.WHERE, n.dtype, (cond, c, zero), None)
        if n.op is AstOps.LOAD:
            buf, st = n.arg
            idx, valid = st.expr_idxs(ctx)
            if valid.is_const and valid.min == 0:          # never valid here: no load at all
                return self.emit(UOps.CONST, n.dtype, arg=_zero(n.dtype))
            idx = narrowed(idx, valid, self.lane_var)
            return self.emit(UOps.LOAD, n.dtype, arg=(buf, idx, valid, self._access(idx, valid)),
                             vec=self._uses_lane(idx) or self._uses_lane(valid))
        return self.alu(n.op, n.dtype, tuple(values[id(s)] for s in n.src), n.arg)

    def alu(self, op, dtype: DType, srcs: tuple[UOp, ...], arg: Any) -> UOp:
        if op is TernaryOps.WHERE:
            cond = srcs[0]
            if cond.op is UOps.CONST:           # a mask known here (a cat's or a padded one's): its pick
                return srcs[1] if cond.arg else srcs[2]
            if cond.op is UOps.ALU and cond.arg[0] is TernaryOps.WHERE and \
                    all(s.op is UOps.CONST for s in cond.src[1:]) and cond.src[1].arg and not cond.src[2].arg:
                srcs = (cond.src[0], *srcs[1:])      # where(where(c, true, false), a, b): where(c, a, b)
            cond, a, b = srcs
            if cond.op is UOps.INDEX_COND and a.op is UOps.LOAD and not a.src and a.arg[2] == cond.arg \
                    and (a.vec or not b.vec) and a.dtype == dtype == b.dtype:
                # a load picked exactly where it is valid (a cat's part): one load that reads b where not,
                # so a cat of n parts is n nested picks, not n loads and n selects on the same conditions
                # (which took GCC 9 s at 300 parts); where b is +0 it is the load itself
                if b.op is UOps.CONST and b.arg == 0 and math.copysign(1.0, b.arg) > 0:
                    return a
                return self.emit(UOps.LOAD, dtype, (b,), a.arg, vec=a.vec)
        vec = any(s.vec for s in srcs)
        return self.emit(UOps.ALU, dtype, srcs, (op, arg), vec=vec)

    def _uses_lane(self, node: Node) -> bool:
        return self.lane_var is not None and self.lane_var in node.vars()

    def _access(self, idx: Node, valid: Node) -> str:
        """How a load/store touches the lanes: 'scalar', 'vector' (unit stride) or 'gather'."""
        if self.lane_var is None or not (self._uses_lane(idx) or self._uses_lane(valid)):
            return "scalar"
        if not self._uses_lane(valid) and _coef(idx, self.lane_var) == 1:
            return "vector"
        return "gather"

    # ---- the loop nest
    def lower(self) -> list[UOp]:
        """The loop nest as UOps: parameters, output loops (or global ids), the reduce with its
        accumulators, the epilogue and stores, closing loops."""
        dims = self.dims
        for i, dt in enumerate(self.kernel.buf_dtypes):
            self.emit(UOps.DEFINE_GLOBAL, dt, arg=(i, i == 0), cache=False)
        out_dims = [d for d, dim in enumerate(dims.dims) if not dim.reduce]
        red_dims = [d for d, dim in enumerate(dims.dims) if dim.reduce]
        loop_vars = self._output_indices(out_dims)
        out_combos = list(itertools.product(*[range(dims.dims[d].upcast) for d in out_dims]))
        acc_of = (
            self._reduce(out_dims, red_dims, out_combos, loop_vars) if dims.reduce_node is not None else {}
        )
        self._store(out_dims, red_dims, out_combos, loop_vars, acc_of)
        if not self.gpu:
            for d in dims.loop_order:
                if dims.dims[d].loops > 1:
                    self.emit(UOps.ENDLOOP, cache=False)
        self.uops = _live(self.uops)
        return self.uops

    def _output_indices(self, out_dims: list[int]) -> dict[int, Node]:
        """Each output dim's loop index: decoded from the global id on GPUs, else an opened loop
        (the first parallel one carries the OpenMP collapse count)."""
        dims = self.dims
        loop_vars: dict[int, Node] = {}
        if self.gpu:
            total = prod(dims.dims[d].loops for d in out_dims)
            gid = Var("gidx0", 0, max(total - 1, 0))
            if self.local_var is not None:
                self.emit(UOps.GROUP, arg=(gid, self.local_var), cache=False)
            else:
                self.emit(UOps.GID, arg=(gid, total), cache=False)
            acc = 1
            for d in reversed(out_dims):
                loops = dims.dims[d].loops
                loop_vars[d] = (gid // acc) % loops if loops > 1 else num(0)
                acc *= loops
            return loop_vars
        parallel = dims.parallel
        for d in dims.loop_order:
            loops = dims.dims[d].loops
            if loops == 1:
                loop_vars[d] = num(0)
                continue
            v = Var(f"g{d}", 0, loops - 1)
            loop_vars[d] = v
            self.emit(UOps.LOOP, arg=(v, loops, len(parallel) if parallel and d == parallel[0] else 0),
                      cache=False)
        return loop_vars

    # Complexity: one pass over tile elements, reduce loops and combine steps that share the
    # accumulators; split, each part would pass them all around.
    def _reduce(self, out_dims: list[int], red_dims: list[int], out_combos: list[tuple[int, ...]],  # noqa: C901
                loop_vars: dict[int, Node]) -> dict[tuple[int, ...], UOp]:
        """Accumulators per (output, reduce) tile element, the reduce loops, then each output's
        accumulators combined pairwise (and across lanes and the work-group)."""
        dims, red = self.dims, self.dims.reduce_node
        assert red is not None
        red_combos = list(itertools.product(*[range(dims.dims[d].upcast) for d in red_dims]))
        identity = 0 if red.op is ReduceOps.SUM else min_value(red.dtype)
        accs = {(oc, rc): self.emit(UOps.DEFINE_ACC, red.dtype, arg=identity, vec=self.lanes > 1, cache=False)
                for oc in out_combos for rc in red_combos}
        red_vars: dict[int, Node] = {}
        for d in red_dims:
            loops = dims.dims[d].loops
            if loops == 1:
                red_vars[d] = num(0)
                continue
            red_vars[d] = v = Var(f"r{d}", 0, loops - 1)
            self.emit(UOps.LOOP, arg=(v, loops, 0), cache=False)
        outer_cache = self.cache
        self.cache = dict(outer_cache)
        for rc in red_combos:
            for oc in out_combos:
                val = self.value(red.src[0], self._ctx(out_dims, oc, loop_vars, red_dims, rc, red_vars), {})
                a = accs[(oc, rc)]
                self.emit(UOps.ACC, red.dtype, (a, val), arg=red.op, vec=a.vec, cache=False)
        still_open = red_dims
        if red_dims and dims.dims[red_dims[-1]].tail:     # close the lane dim's loop, then add its tail
            if dims.dims[red_dims[-1]].loops > 1:
                self.emit(UOps.ENDLOOP, cache=False)
            self.cache = dict(outer_cache)
            self._reduce_tail(out_dims, red_dims, out_combos, red_combos, loop_vars, red_vars, accs, identity)
            still_open = red_dims[:-1]
        for d in reversed(still_open):
            if dims.dims[d].loops > 1:
                self.emit(UOps.ENDLOOP, cache=False)
        self.cache = outer_cache
        lane_is_reduce = dims.lane_dim is not None and dims.dims[dims.lane_dim].reduce
        red_alu = _red_alu(cast(ReduceOps, red.op))   # the reduce node's op is a ReduceOps
        combined: dict[tuple[int, ...], UOp] = {}
        for oc in out_combos:
            parts = [accs[(oc, rc)] for rc in red_combos]
            while len(parts) > 1:   # pairwise: a balanced tree keeps float error small
                nxt = [self.alu(red_alu, red.dtype, (parts[i], parts[i + 1]), None)
                       for i in range(0, len(parts) - 1, 2)]
                parts = nxt + ([parts[-1]] if len(parts) % 2 else [])
            combined[oc] = parts[0]
        # the lanes of every output's vector are folded together: HREDUCE i of the group takes the
        # whole group, so a dialect with shuffles folds all of them in one transposing tree
        group = tuple(combined.values())
        acc_of: dict[tuple[int, ...], UOp] = {}
        for i, oc in enumerate(out_combos):
            reduced = combined[oc]
            if lane_is_reduce:
                reduced = self.emit(UOps.HREDUCE, red.dtype, group, arg=(red.op, i))
            if self.local_var is not None:     # combine the work-group's partial results
                reduced = self.emit(UOps.LOCAL_REDUCE, red.dtype, (reduced,),
                                    arg=(red.op, dims.local_size, self.local_var), cache=False)
            acc_of[oc] = reduced
        return acc_of

    def _reduce_tail(self, out_dims, red_dims, out_combos, red_combos, loop_vars, red_vars, accs,
                     identity) -> None:
        """The last reduce dim's elements past its loops' whole vectors, into the same accumulators: each
        a whole vector too, the last one moved back to end at the dim's end (all its loads plain vector
        loads, in bounds), its lanes already added before adding the reduce's identity instead."""
        dims, red = self.dims, self.dims.reduce_node
        assert red is not None and self.lane_var is not None
        last = red_dims[-1]
        dim = dims.dims[last]
        done = dim.loops * dim.upcast * dim.lanes
        for t in range((dim.tail + dim.lanes - 1) // dim.lanes):
            rc = red_combos[t % len(red_combos)]
            first = done + t * dim.lanes                  # the first element this vector adds
            start = min(first, dim.size - dim.lanes)
            pos = num(start) + self.lane_var
            fresh = ge(pos, first)
            cond = None if fresh.is_const else self.emit(UOps.INDEX_COND, dtypes.bool, arg=fresh, vec=True)
            fill = self.emit(UOps.CONST, red.dtype, arg=identity)
            for oc in out_combos:
                ctx = self._ctx(out_dims, oc, loop_vars, red_dims, rc, red_vars)
                ctx[last] = pos
                val = self.value(red.src[0], ctx, {})
                if cond is not None:
                    val = self.alu(TernaryOps.WHERE, red.dtype, (cond, val, fill), None)
                a = accs[(oc, rc)]
                self.emit(UOps.ACC, red.dtype, (a, val), arg=red.op, vec=a.vec, cache=False)

    def _store(self, out_dims: list[int], red_dims: list[int], out_combos: list[tuple[int, ...]],
               loop_vars: dict[int, Node], acc_of: dict[tuple[int, ...], UOp]) -> None:
        """The epilogue and store, once per output tile element."""
        red, store = self.dims.reduce_node, self.dims.ast
        for oc in out_combos:
            ctx = self._ctx(out_dims, oc, loop_vars, red_dims, None, {})
            value = self.value(store.src[0], ctx, {id(red): acc_of[oc]} if red is not None else {})
            _, st = store.arg
            idx, valid = st.expr_idxs(ctx)
            if self.local_var is not None:        # every item holds the result; one writes it
                valid = ands([valid, lt(self.local_var, 1)])
            self.emit(UOps.STORE, store.dtype, (value,), arg=(0, idx, valid, self._access(idx, valid)),
                      vec=self._uses_lane(idx), cache=False)

    def _ctx(self, out_dims, oc, loop_vars, red_dims, rc, red_vars) -> list[Node]:
        ctx: list[Node] = [num(0)] * len(self.dims.dims)
        for d, u in zip(out_dims, oc):
            ctx[d] = self.index_of(d, loop_vars[d], u)
        for i, d in enumerate(red_dims):
            ctx[d] = self.index_of(d, red_vars[d], rc[i]) if rc is not None else num(0)
        return ctx


def narrowed(idx: Node, valid: Node, lane: Var | None) -> Node:
    """idx simplified on the ranges valid leaves its loop variables (not the lane, which the
    renderer substitutes by its identity): a load only happens where valid holds, so where valid
    bounds a loop variable (a padded or concatenated input: `g2*16+lane<64`), idx may assume it.
    The divisions and modulos of a view over a reshaped, permuted buffer often vanish then, and a
    gather becomes a vector load."""
    if valid.is_const:
        return idx
    bounds: dict[Var, list[int]] = {}
    for cond in valid.nodes if isinstance(valid, And) else (valid,):
        if not isinstance(cond, (Lt, Ge)):
            continue
        terms = dict(cond.a.terms) if isinstance(cond.a, Lin) else {cond.a: 1}
        const = cond.a.const if isinstance(cond.a, Lin) else 0
        lo_all = const + sum(c * (t.min if c > 0 else t.max) for t, c in terms.items())
        hi_all = const + sum(c * (t.max if c > 0 else t.min) for t, c in terms.items())
        for v, c in terms.items():
            if not isinstance(v, Var) or c <= 0 or v is lane:
                continue
            lo_hi = bounds.setdefault(v, [v.min, v.max])
            if isinstance(cond, Lt):   # c*v + (the rest, at least lo_all - c*v.min) <= b - 1
                lo_hi[1] = min(lo_hi[1], (cond.b - 1 - (lo_all - c * v.min)) // c)
            else:                      # c*v + (the rest, at most hi_all - c*v.max) >= b
                lo_hi[0] = max(lo_hi[0], -((hi_all - c * v.max - cond.b) // c))
    sub: dict[Var, Node] = {v: Var(v.name, lo, hi) for v, (lo, hi) in bounds.items()
                            if lo <= hi and (lo, hi) != (v.min, v.max)}
    return idx.substitute(sub) if sub else idx


def _red_alu(op: ReduceOps):
    return BinaryOps.ADD if op is ReduceOps.SUM else BinaryOps.MAX


def _zero(dtype: DType) -> Any:
    return False if dtype == dtypes.bool else (0.0 if dtype.is_float else 0)


def _hashable(arg: Any) -> Any:
    if isinstance(arg, tuple):
        return tuple(_hashable(a) for a in arg)
    if isinstance(arg, Node):
        return arg.key
    return value_key(arg)   # a float by its bits: -0.0 and 0.0 are two constants, and a nan finds itself


def linearize(kernel: Kernel, vector_width_bytes: int = 64, use_lanes: bool = True, gpu: bool = False,
              group_size: int = 256, serial: bool = False, narrow_lanes: bool = False) -> Linearized:
    """The kernel as UOps. On GPUs, group_size is the largest work-group a reduce may be shared by.
    `serial`: one thread runs every loop (see Dims)."""
    dims = Dims(kernel, vector_width_bytes, use_lanes, gpu, group_size, serial=serial,
                narrow_lanes=narrow_lanes)
    if dims.ragged is not None:
        uops, lanes = _split_ragged(kernel, dims, vector_width_bytes)
    else:
        uops, lanes = Lowerer(kernel, dims, gpu).lower(), dims.lanes
    full = prod(d.size for d in dims.dims)
    out_size = prod(d.size for d in dims.dims if not d.reduce)
    flops = 0
    red_src = set(id(n) for n in dims.reduce_node.src[0].walk()) if dims.reduce_node else set()
    for n in dims.ast.walk():
        if isinstance(n.op, (UnaryOps, BinaryOps, TernaryOps)) and n.op not in (
            UnaryOps.CAST,
            UnaryOps.BITCAST,
        ):
            flops += full if id(n) in red_src else out_size
        elif isinstance(n.op, ReduceOps):
            flops += full
    mem = sum(size * dt.itemsize for size, dt in zip(kernel.buf_sizes, kernel.buf_dtypes))
    shape_name = "_".join(str(d.size) for d in dims.dims) or "1"
    name = ("r_" if dims.reduce_node is not None else "E_") + shape_name
    gsize = prod(d.loops for d in dims.dims if not d.reduce) * max(dims.local_size, 1) if gpu else 1
    out = Linearized(name, uops, list(kernel.buf_dtypes), lanes, gsize, full, flops, mem, dims.local_size)
    out.extra["streaming"] = dims.ragged is None and _streaming_ok(out, dims, kernel)
    return out


def _part(dims: Dims, d: int, lo: int, hi: int) -> tuple[KOp, tuple[int, ...], list[bool]]:
    """The normalized kernel of dims restricted to lo..hi along dim d."""
    shape = tuple(x.size for x in dims.dims)
    arg = tuple((lo, hi) if i == d else (0, n) for i, n in enumerate(shape))
    return (map_sts(dims.ast, lambda st: st.shrink(arg)),
            tuple(hi - lo if i == d else n for i, n in enumerate(shape)), [x.reduce for x in dims.dims])


def _split_ragged(kernel: Kernel, dims: Dims, vector_width_bytes: int) -> tuple[list[UOp], int]:
    """The kernel as two loop nests in one function, along its ragged dim of size S: the part the
    widest vectors (W lanes) divide, with SIMD lanes, then the rest. Where no load reads the output's
    memory, the rest is one more vector, over the last W outputs (S - W to S): it recomputes and
    rewrites a few outputs of the first part, with the same values. Else (an in-place update) the rest
    is scalar. The second nest reuses the parameters."""
    d = dims.ragged
    assert d is not None
    size, width = dims.dims[d].size, max(vector_width_bytes // 4, 1)
    split = size - size % width
    main = Dims(kernel, vector_width_bytes, True, False, part=_part(dims, d, 0, split), serial=dims.serial,
                narrow_lanes=dims.narrow_lanes)
    tail = None
    if not dims.rereads:
        tail = Dims(kernel, vector_width_bytes, True, False, part=_part(dims, d, size - width, size),
                    serial=dims.serial, narrow_lanes=dims.narrow_lanes)
        if tail.lane_dim is None or tail.lanes != main.lanes:
            tail = None                 # the nests share one vector type
    if tail is None:
        tail = Dims(kernel, vector_width_bytes, False, False, part=_part(dims, d, split, size),
                    serial=dims.serial)
    first = Lowerer(kernel, main, False).lower()
    second = [u for u in Lowerer(kernel, tail, False).lower() if u.op is not UOps.DEFINE_GLOBAL]
    return first + second, main.lanes




_VALUES = (UOps.CONST, UOps.INDEX_COND, UOps.LOAD, UOps.ALU)    # uops that only make a value


def _live(uops: list[UOp]) -> list[UOp]:
    """uops without the values nothing uses (a load a pick replaced, a mask folded into one)."""
    used: set[int] = set()
    keep = []
    for u in reversed(uops):
        if u.op not in _VALUES or id(u) in used:
            keep.append(u)
            used.update(id(s) for s in u.src)
    return keep[::-1]


def _streaming_ok(lin: Linearized, dims: Dims, kernel: Kernel) -> bool:
    """Whether the stores may bypass the cache (non-temporal): a large fresh output written once with
    full vector stores at multiples of 16 elements (an elementwise kernel's, or a reduce's with its
    lanes along the outputs); it is not read back soon, and skipping the read of each destination line
    saves a third of the memory traffic. Never an assign's (its target may be a view at any 4 bytes);
    the rendered kernel still checks that its output is 64-byte aligned, once a launch, and stores
    plainly where it is not (a streaming store there faults)."""
    # 16 lanes are chosen only where the CPU has AVX-512, so _mm512_stream_ps exists
    lane_reduce = dims.lane_dim is not None and dims.dims[dims.lane_dim].reduce
    if lane_reduce or lin.lanes != 16 or kernel.assign:
        return False
    if (
        kernel.buf_sizes[0] * kernel.buf_dtypes[0].itemsize < heuristics.STREAM_MIN_BYTES
        or kernel.buf_dtypes[0] != dtypes.float32
    ):
        return False
    stores = [u for u in lin.uops if u.op is UOps.STORE]
    for u in stores:
        _, idx, valid, access = u.arg
        if access != "vector" or not (valid.is_const and valid.min == 1):
            return False
        terms = dict(idx.terms) if isinstance(idx, Lin) else {idx: 1}
        const = idx.const if isinstance(idx, Lin) else 0
        if const % lin.lanes or any(not isinstance(a, Var) or (c % lin.lanes and a.name != "lane")
                                    for a, c in terms.items()):
            return False
    return bool(stores)


def linearize_for(kernel, dialect: Dialect, cpu_vector_bytes: int = 0, group_size: int = 256,
                  serial: bool = False) -> Linearized:
    """The kernel lowered for a dialect: SIMD lanes where the dialect has vectors (as wide as its own
    width, or the running CPU's for C), global ids on GPU dialects, reduces shared by work-groups of
    at most group_size items; `serial`: no loop shared among threads."""
    vec = dialect.vec
    width = (vec.bytes or cpu_vector_bytes) if vec is not None else 0
    return linearize(
        kernel,
        vector_width_bytes=width or 16,
        use_lanes=width > 0,
        gpu=dialect.global_id is not None,
        group_size=group_size,
        serial=serial,
        narrow_lanes=vec is not None and vec.narrow,
    )
