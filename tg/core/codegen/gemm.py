"""Contractions on the CPU as a blocked, packed loop nest: the levels of GotoBLAS and BLIS, generated
from the kernel's own AST.

What the nests are and how they are written is codegen/nests.py; which one runs and with what
block sizes, codegen/heuristics.py and codegen/search.py. Here: `find` (the structure), `contraction`
(one found and large enough to block), and which nests can read y where it lies
(`Contraction.direct_ok`, `Contraction.broadcast_ok`).
"""
from __future__ import annotations

from dataclasses import dataclass

from tg.core.codegen import heuristics
from tg.core.codegen.linearizer import _coef, normalized
from tg.core.dtype import dtypes
from tg.core.kernel import AstOps, Kernel, KOp
from tg.core.ops import BinaryOps, BufferOps, ReduceOps, UnaryOps
from tg.core.shape import prod
from tg.core.symbolic import Lin, Node, Var, num

NARROW = (dtypes.float16, dtypes.bfloat16)


@dataclass
class Contraction:
    """A kernel found to be a contraction, in its normalized dims."""
    kernel: Kernel
    ast: KOp
    shape: tuple[int, ...]
    b_dims: list[int]
    m_dims: list[int]
    n_dims: list[int]
    k_dims: list[int]
    x: KOp               # the factor indexed by (batch, m, k)
    y: KOp               # the factor indexed by (batch, k, n)
    red: KOp
    ldc: int             # the row stride of the store (C[m * ldc + n])

    def size(self, dims: list[int]) -> int:
        return prod(self.shape[d] for d in dims)

    @property
    def sizes(self) -> tuple[int, int, int, int]:
        """(batch, M, N, K)"""
        return (self.size(self.b_dims), self.size(self.m_dims), self.size(self.n_dims),
                self.size(self.k_dims))

    @property
    def epilogue(self) -> bool:
        return self.ast.src[0] is not self.red

    @property
    def low(self) -> bool:
        """Whether a factor is a float16 or bfloat16 value cast to float32: the one-pass kernel would
        convert it at every use (float16 a scalar at a time), the nests once, in the packing (measured
        on a Xeon without AMX: a bfloat16 512 x 64 x 192 in 199 us one-pass)."""
        return _from_narrow(self.x) or _from_narrow(self.y)

    @property
    def half(self) -> bool:
        """Whether a factor is a float16 value cast to float32 (the one-pass kernel widens it a scalar
        at a time)."""
        return _from_narrow(self.x, (dtypes.float16,)) or _from_narrow(self.y, (dtypes.float16,))

    @property
    def narrow(self) -> bool:
        """Whether the output is float16 or bfloat16 (the float32 sums rounded once, in the epilogue):
        it cannot hold the partial sums of K blocks, so the nests run K whole or sum elsewhere."""
        return self.kernel.buf_dtypes[0] != dtypes.float32

    def direct_ok(self, lanes: int) -> bool:
        """Whether y can be read where it lies (render_direct): one float32 load, no mask, unit stride along
        n (its index is n plus a function of the batch and reduce dims), and at least one vector of n."""
        y = self.y
        if len(self.n_dims) != 1 or y.op is not AstOps.LOAD or y.dtype != dtypes.float32 or \
                self.kernel.buf_dtypes[y.arg[0]] != dtypes.float32:
            return False
        variables = _vars(self.shape)
        idx, valid = y.arg[1].expr_idxs(variables)
        return valid.is_const and valid.min == 1 and _coef(idx, variables[self.n_dims[0]]) == 1 and \
            self.size(self.n_dims) >= lanes

    def broadcast_ok(self) -> bool:
        """Whether render_broadcast can run c: y one float32 load, no mask, whose index is a part of the
        columns plus a part of the reduce plus a part of the batch (a conv's window copy read by the weight
        gradient: channel and window offset; image and position; group); no epilogue."""
        y = self.y
        if self.epilogue or y.op is not AstOps.LOAD or y.dtype != dtypes.float32 or \
                self.kernel.buf_dtypes[y.arg[0]] != dtypes.float32:
            return False
        _, valid = y.arg[1].expr_idxs(_vars(self.shape))
        return valid.is_const and valid.min == 1 and _parts(self, y, [self.n_dims, self.k_dims, self.b_dims])


def _from_narrow(tree: KOp, dtypes_: tuple = NARROW) -> bool:
    """Whether tree is a value of one of dtypes_ (float16, bfloat16) cast to float32."""
    return tree.op is UnaryOps.CAST and tree.src[0].dtype in dtypes_


def _vars(shape: tuple[int, ...]) -> list[Var]:
    return [Var(f"x{d}", 0, max(s - 1, 0)) for d, s in enumerate(shape)]


def _leaves(tree: KOp) -> list[KOp]:
    return [n for n in tree.walk() if n.op in (AstOps.LOAD, BufferOps.CONST)]


def _depends(tree: KOp, variables: list[Var]) -> set[int]:
    """The dims whose index some load or constant of tree (or its validity) uses."""
    used: set[int] = set()
    for n in _leaves(tree):
        idx, valid = n.arg[1].expr_idxs(variables)
        names = {v.name for v in idx.vars() | valid.vars()}
        used |= {d for d, v in enumerate(variables) if v.name in names}
    return used


def find(kernel: Kernel) -> Contraction | None:
    """The kernel as a contraction, of any size, or None: one float32 SUM of x * y over rows of x and
    columns of y (`contraction`: one large enough to block). Its sums are
    float32; its output float32, or float16 / bfloat16 (fused.sum_of_products: narrow factors cast to
    float32 in the kernel, the sum rounded once)."""
    out_dtype = kernel.buf_dtypes[0]
    if out_dtype not in (dtypes.float32, *NARROW):
        return None
    if kernel.reads_target:
        return None      # an in-place update reading its target: the partial sums in it would be read
    reds = [n for n in kernel.ast.walk() if isinstance(n.op, ReduceOps)]
    if len(reds) != 1 or reds[0].op is not ReduceOps.SUM or reds[0].dtype != dtypes.float32 or \
            reds[0].src[0].op is not BinaryOps.MUL or kernel.ast.dtype != out_dtype:
        return None      # (checked before normalizing: most reduce kernels are not products)
    ast, shape, is_reduce = normalized(kernel)
    red = next(n for n in ast.walk() if isinstance(n.op, ReduceOps))
    variables = _vars(shape)
    x, y = red.src[0].src
    dx, dy = _depends(x, variables), _depends(y, variables)
    out = [d for d in range(len(shape)) if not is_reduce[d]]
    only_x = [d for d in out if d in dx and d not in dy]
    only_y = [d for d in out if d in dy and d not in dx]
    k_dims = [d for d in range(len(shape)) if is_reduce[d]]
    found = _rows_and_columns(ast, variables, shape, out, only_x, only_y)
    if found is None:
        return None
    m_dims, n_dims, ldc = found
    if m_dims[0] in only_y:
        x, y = y, x
    b_dims = [d for d in out if d not in m_dims + n_dims]
    return Contraction(kernel, ast, shape, b_dims, m_dims, n_dims, k_dims, x, y, red, ldc)


def contraction(kernel: Kernel, lanes: int, least: int | None = None) -> Contraction | None:
    """The kernel as a contraction large enough to block (heuristics.large_enough: lanes are float32s per
    SIMD vector, `least` the fewest multiply-adds), or None."""
    c = find(kernel)
    return c if c is not None and heuristics.large_enough(c, lanes, least) else None


def _run(coefs: dict[int, int | None], shape: tuple[int, ...], dims: list[int], inner: int,
         base: int) -> list[int]:
    """The dims of `dims` the store walks as one flat dim from `inner` (whose coefficient is base)
    outwards: each next one's coefficient is base times the sizes inside it. Outermost first."""
    run, span = [inner], base * shape[inner]
    while (nxt := next((d for d in dims if d not in run and coefs[d] == span), None)) is not None:
        run.insert(0, nxt)
        span *= shape[nxt]
    return run


def _rows_and_columns(store: KOp, variables: list[Var], shape: tuple[int, ...], out: list[int],
                      only_x: list[int], only_y: list[int]) -> tuple[list[int], list[int], int] | None:
    """(m dims, n dims, ldc): C's rows and columns, each a run of output dims the store walks as one flat
    dim, one run of dims only x depends on and one of dims only y does (in either role): the columns
    from unit stride up, the rows from stride ldc up; the largest such pair. The other output dims are
    batch dims, along which one factor may be constant (a conv's images: the weight is the same for
    each). The weight gradient of a conv has columns (Cin, kh, kw): contiguous in the store, but not in
    the input rows it reads."""
    idx, valid = store.arg[1].expr_idxs(variables)
    if not (valid.is_const and valid.min == 1):
        return None
    coefs = {d: _coef(idx, variables[d]) for d in range(len(shape))}
    best: tuple[int, list[int], list[int], int] | None = None
    for rows, cols in ((only_x, only_y), (only_y, only_x)):
        for inner_n in (d for d in cols if coefs[d] == 1):
            n_dims = _run(coefs, shape, cols, inner_n, 1)
            for inner_m in rows:
                ldc = coefs[inner_m]
                if ldc is None or ldc < 1:
                    continue
                m_dims = _run(coefs, shape, rows, inner_m, ldc)
                size = prod(shape[d] for d in m_dims + n_dims)
                if (best is None or size > best[0]) and _rest_is_batch(idx, variables, m_dims + n_dims, out):
                    best = (size, m_dims, n_dims, ldc)
    return None if best is None else (best[1], best[2], best[3])


def _rest_is_batch(idx: Node, variables: list[Var], dims: list[int], out: list[int]) -> bool:
    """Whether the store's index, less its rows and columns, uses output dims only (never a reduce
    dim): those are the batch dims."""
    rest = idx.substitute({variables[d]: num(0) for d in dims}).vars()
    return {v.name for v in rest} <= {variables[d].name for d in out}


def _separable(c: Contraction) -> bool:
    """Whether y's index is a function of the batch dims plus one of the reduce dims (no term uses
    both): a conv's image offset plus its window offsets. Then one table of K offsets serves every
    batch index."""
    return _parts(c, c.y, [c.b_dims, c.k_dims])


def _parts(c: Contraction, tree: KOp, groups: list[list[int]]) -> bool:
    """Whether tree's index is a sum of parts each using the dims of one group only."""
    variables = _vars(c.shape)
    idx, _ = tree.arg[1].expr_idxs(variables)
    sets = [{variables[d].name for d in g} for g in groups]
    for atom in ([a for a, _ in idx.terms] if isinstance(idx, Lin) else [idx]):
        used = {v.name for v in atom.vars()}
        if sum(bool(used & g) for g in sets) > 1:
            return False
    return True


