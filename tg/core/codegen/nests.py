"""The CPU's contraction nests (codegen/gemm.py finds the contractions): the levels of GotoBLAS and BLIS,
generated as C from the kernel's own AST, with one shared preamble (`_source`: the scratch pool's
declarations, the buffers' parameters, the one-pass fallback's macros).

A kernel is a *contraction* when its one reduce is a float32 SUM of a product `x * y` in which x does
not depend on some output dims (the N dims: C's columns) and y not on others (the M dims: C's rows),
each a run of dims the store walks as one flat dim; the other output dims are batch dims (both factors
or one of them depend on them: a conv's images), the reduce dims are K (any number). Matmul in every
operand layout (A B, A^T B, A B^T, batched, broadcast) is one, and so is a product whose factors are
any elementwise expressions of their loads (a cast, a scale): packing evaluates them. So are a
stride-1 conv over its input rows (M = Cout/G, N = the positions, K = Cin/G x kh x kw) and a conv's
weight gradient (N = Cin x kh x kw).

The packed nest (render_packed), for each batch index:

    for jc in N by NC:                     B's block (KC x NC) is packed once, shared by the threads,
      for pc in K by KC:                   in panels of NR columns, each KC x NR contiguous
        pack B[pc:pc+KC, jc:jc+NC]
        for ic in M by MC (threads):       A's block (MC x KC) is packed per thread, in panels of MR rows
          pack A[ic:ic+MC, pc:pc+KC]
          for jr in NC by NR:              B's micro-panel stays in L1 while
            for ir in MC by MR:            A's micro-panels stream from L2
              micro-kernel: C[ir:ir+MR, jr:jr+NR] (+)= A panel x B panel, MR x NR/VW vector registers

The micro-kernel keeps an MR x NR tile of C in registers (NR a multiple of the SIMD width) and per k
loads NR/VW vectors of B and broadcasts MR values of A. The store must be plain (row m at m * ldc, unit
stride along n, float32): the output holds the partial sums of the K blocks, so a kernel that reads its
own output is not taken. A full tile is written straight into it; an edge tile, and on the last K block
any tile of a kernel with an epilogue (a bias or an activation fused after the reduce), goes through a
small buffer and a per-element loop that adds the partial sums and applies the epilogue.

Where y is a plain load with unit stride along n (a conv's input rows through a window view),
render_direct reads it where it lies: only A is packed, K runs whole, the micro-kernel's vectors come
from y at a tabled offset per k. Packing such a y would copy each input element kh x kw times.
render_broadcast turns C around for a short M and a long K whose columns y reads at tabled offsets (a
conv's weight gradient over the window copy): the rows are vectors of a packed, transposed x block, y
is broadcast a scalar per column and k from where it lies.

The block sizes and the nest (MR, NR, KC, MC, NC, nest) come from `params`, `direct_rule` and
`broadcast_rule` (rules of thumb) or
from the search in `tg/core/codegen/search.py`, which times candidates and remembers the winner on disk.
"""
from __future__ import annotations

from typing import Callable

from tg.core.codegen import heuristics
from tg.core.codegen.gemm import (
    NARROW,
    Contraction,
    _depends,
    _separable,
    _vars,
)
from tg.core.codegen.heuristics import Params
from tg.core.codegen.linearizer import Linearized, _coef
from tg.core.codegen.renderer import _C_TYPES, CStyleRenderer, _lit
from tg.core.dtype import DType, dtypes
from tg.core.kernel import AstOps, KOp
from tg.core.ops import BufferOps, TernaryOps, UnaryOps
from tg.core.shape import prod
from tg.core.symbolic import Node, num


class _Expr:
    """Scalar C for a KOp tree at given index variables: one statement per ALU node (shared nodes
    once), loads and constants inline (an expression each, named by itself in `names`)."""

    def __init__(self, renderer: CStyleRenderer, variables: list[Node]):
        self.r, self.variables = renderer, variables
        self.lines: list[str] = []
        self.names: dict[int, str] = {}

    def __call__(self, root: KOp) -> str:
        for n in root.walk(stop=self.names):
            if id(n) not in self.names:
                self.names[id(n)] = self._node(n)
        return self.names[id(root)]

    def _node(self, n: KOp) -> str:
        if n.op is BufferOps.CONST:
            value, st = n.arg
            _, valid = st.expr_idxs(self.variables)
            lit = _lit(value, n.dtype, self.r.d)
            if valid.is_const:
                return lit if valid.min == 1 else _lit(0, n.dtype, self.r.d)
            return f"(({valid.render()})?{lit}:{_lit(0, n.dtype, self.r.d)})"
        if n.op is AstOps.LOAD:
            buf, st = n.arg
            idx, valid = st.expr_idxs(self.variables)
            return self.r.load_scalar(buf, n.dtype, idx, valid)
        args = [self.names[id(s)] for s in n.src]
        src_dtype = n.src[-1].dtype if n.op is TernaryOps.WHERE else n.src[0].dtype
        name = f"t{len(self.lines)}"
        expr = self.r.scalar_expr(n.op, n.dtype, src_dtype, args, n.arg)
        self.lines.append(f"{self.r.ctype(n.dtype)} {name} = {expr};")
        return name


def _decode(c: Contraction, dims: list[int], flat: str) -> list[str]:
    """C lines setting each dim's variable x<d> from a flat index over dims (outermost first)."""
    lines, stride = [], 1
    for d in reversed(dims):
        size = c.shape[d]
        expr = flat if stride == 1 else f"({flat} / {stride})"
        lines.append(f"long x{d} = {expr} % {size};" if d != dims[0] else f"long x{d} = {expr};")
        stride *= size
    return lines


def _context(c: Contraction, dims: list[int]) -> list[Node]:
    """Index variables for the given dims, 0 for the others."""
    variables = _vars(c.shape)
    return [variables[d] if d in dims else num(0) for d in range(len(c.shape))]


def _index(c: Contraction, tree: KOp, dims: list[int]) -> str:
    """C for the index of tree's load (or store) at the variables of dims, 0 for the others."""
    return tree.arg[1].expr_idxs(_context(c, dims))[0].render()


def _fallback(c: Contraction, name: str) -> str:
    """The call of the plain loops (`name`_naive) on the kernel's buffers."""
    return f"{name}_naive({', '.join(f'data{i}' for i in range(len(c.kernel.buf_dtypes)))});"


def _inner_stride(c: Contraction, tree: KOp, dims: list[int]) -> int | None:
    """The stride of tree's first load along the innermost of dims (None if not affine or no load)."""
    loads = [n for n in tree.walk() if n.op is AstOps.LOAD]
    if not loads:
        return None
    variables = _vars(c.shape)
    idx, _ = loads[0].arg[1].expr_idxs(variables)
    return _coef(idx, variables[dims[-1]])


def _pack(c: Contraction, renderer: CStyleRenderer, side: str, p: Params) -> list[str]:
    """The body packing one block of x (side "a": rows m, panels of MR) or y (side "b": columns n,
    panels of NR) into `dst`: panel-major, k-major within a panel, zeros past the matrix's edge. A full
    panel runs without bound checks, its inner loop marked for SIMD (the source contiguous along it when
    the panel's rows are the inner loop)."""
    tree, dims, width, total = (c.x, c.m_dims, p.mr, "M") if side == "a" else (c.y, c.n_dims, p.nr, "N")
    lo = "ic" if side == "a" else "jc"
    ex = _Expr(renderer, _context(c, c.b_dims + dims + c.k_dims))
    value = ex(tree)
    rows_inner = _inner_stride(c, tree, dims) == 1     # the source is contiguous along m (or n)
    row_lines = ["long row = " + lo + " + panel + i;", *_decode(c, dims, "row")]
    k_lines = ["long k = pc + kk;", *_decode(c, c.k_dims, "k")]
    outer, inner = (("kk", "kc", k_lines), ("i", "rows", row_lines)) if rows_inner else \
        (("i", "rows", row_lines), ("kk", "kc", k_lines))

    def loops(simd: bool) -> list[str]:
        return [f"for (long {outer[0]} = 0; {outer[0]} < {outer[1]}; {outer[0]}++) {{",
                *["  " + x for x in outer[2]],
                *(["  #pragma omp simd"] if simd else []),
                f"  for (long {inner[0]} = 0; {inner[0]} < {inner[1]}; {inner[0]}++) {{",
                *["    " + x for x in [*inner[2], *ex.lines, f"dst[kk * {width} + i] = {value};"]],
                "  }", "}"]
    return [f"long rows = {total} - ({lo} + panel) < {width} ? {total} - ({lo} + panel) : {width};",
            f"if (rows == {width}) {{", *["  " + x for x in loops(True)], "} else {",
            f"  for (long z = 0; z < kc * {width}; z++) dst[z] = 0.0f;",
            *["  " + x for x in loops(False)], "}"]


def _micro(name: str, p: Params, lanes: int, stream: bool = False) -> list[str]:
    """The register tile: c (+)= a panel (kc x MR) times b panel (kc x NR), packed (`name`_micro); or,
    for render_direct, c = a panel (K x MR) times the NR columns of y at b + koff[k] (`name`_microd)."""
    nv = p.nr // lanes
    direct = p.nest == "direct"
    if direct:
        head = f"{name}_microd(const float* restrict a, const float* restrict b, const long* restrict koff, "
        loop, row = "K", ["    const float* bk = b + koff[k];"]
    else:
        head = f"{name}_micro(long kc, const float* restrict a, const float* restrict b, "
        loop, row = "kc", [f"    const float* bk = b + k * {p.nr};"]
    out = [f"static inline __attribute__((always_inline)) void {head}float* restrict c, long ldc"
           f"{', int nt' if direct else ', int add'}) {{"]
    out += [f"  f32v c{i}_{j} = (f32v){{}};" for i in range(p.mr) for j in range(nv)]
    out += [f"  for (long k = 0; k < {loop}; k++) {{", *row]
    out += [f"    f32v b{j} = *(const f32v*)(bk + {j * lanes});" for j in range(nv)]
    for i in range(p.mr):
        fmas = " ".join(f"c{i}_{j} += a{i} * b{j};" for j in range(nv))
        out.append(f"    {{ float a{i} = a[k * {p.mr} + {i}]; {fmas} }}")
    out.append("  }")
    for i in range(p.mr):
        for j in range(nv):
            addr = f"(f32v*)(c + {i} * ldc + {j * lanes})"
            if not direct:
                out.append(f"  if (add) c{i}_{j} += *{addr};")
            if stream:        # an aligned vector into C bypasses the cache (never one into the tile buffer,
                # read back at once; nor the overlapping last tile's, unaligned)
                out.append(f"  if (nt && ((unsigned long)({addr}) & 63) == 0) "
                           f"_mm512_stream_ps((float*)({addr}), (__m512)c{i}_{j}); else *{addr} = c{i}_{j};")
            else:
                out.append(f"  *{addr} = c{i}_{j};")
    out.append("}")
    return out


def _epilogue(c: Contraction, renderer: CStyleRenderer) -> tuple[_Expr, str]:
    """The stored value at an output (b, m, n), the reduce's result being the C variable `acc`."""
    ex = _Expr(renderer, _context(c, c.b_dims + c.m_dims + c.n_dims))
    ex.names[id(c.red)] = "acc"
    root = c.ast.src[0]
    if root.op is UnaryOps.CAST and root.dtype in NARROW and root.src[0].dtype == dtypes.float32:
        root = root.src[0]          # narrowed once, by the store (`stored`): the same bits
    return ex, ex(root)


def _finish_tile(c: Contraction, renderer: CStyleRenderer, p: Params) -> list[str]:
    """A tile held in `tile`: rows and columns inside the matrix get (partial sums of earlier K blocks
    added, then) the epilogue and the store."""
    ex, value = _epilogue(c, renderer)
    out = c.kernel.buf_dtypes[0]
    partial = [] if c.narrow else ["if (pc > 0) acc += *cp;", "if (!last) { *cp = acc; continue; }"]
    inner = [f"float acc = tile[i * {p.nr} + j];",
             f"{_C_TYPES[out.name]}* cp = data0 + cbase + (m0 + i) * {c.ldc} + n0 + j;",
             *partial, *_decode(c, c.m_dims, "(m0 + i)"), *_decode(c, c.n_dims, "(n0 + j)"), *ex.lines,
             f"*cp = {stored(renderer, out, value)};"]
    if c.narrow:        # no partial sums: a straight loop the vectorizer takes (the function allows it)
        return [f"for (long i = 0; i < {p.mr} && m0 + i < M; i++) {{",
                f"  long jn = N - n0 < {p.nr} ? N - n0 : {p.nr};",
                "  #pragma omp simd",
                "  for (long j = 0; j < jn; j++) {", *["    " + x for x in inner], "  }", "}"]
    return [f"for (long i = 0; i < {p.mr} && m0 + i < M; i++)",
            f"  for (long j = 0; j < {p.nr} && n0 + j < N; j++) {{", *["    " + x for x in inner], "  }"]


def _naive(c: Contraction, renderer: CStyleRenderer, name: str) -> list[str]:
    """The contraction as three plain loops: what runs if the packing buffers cannot be allocated."""
    ex = _Expr(renderer, _context(c, c.b_dims + c.m_dims + c.n_dims + c.k_dims))
    prod_value = ex(c.red.src[0])
    red_lines = ex.lines
    epi, value = _epilogue(c, renderer)
    idx, _ = c.ast.arg[1].expr_idxs(_context(c, c.b_dims + c.m_dims + c.n_dims))     # a plain store
    out = c.kernel.buf_dtypes[0]
    return [f"static void {name}_naive({_params(c)}) {{",
            "  for (long bb = 0; bb < BATCH; bb++)",
            "  for (long m = 0; m < M; m++)",
            "  for (long n = 0; n < N; n++) {",
            *["    " + x for x in [*_decode(c, c.b_dims, "bb"), *_decode(c, c.m_dims, "m"),
                                   *_decode(c, c.n_dims, "n")]],
            "    float acc = 0.0f;",
            "    for (long k = 0; k < K; k++) {",
            *["      " + x for x in [*_decode(c, c.k_dims, "k"), *red_lines, f"acc += {prod_value};"]],
            "    }",
            *["    " + x for x in [*epi.lines, f"data0[{idx.render()}] = {stored(renderer, out, value)};"]],
            "  }", "}"]


# The kernels' scratch pool (ops_cpu.SCRATCH_SOURCE, loaded before any kernel): buffers kept between calls.
SCRATCH_DECLS = "void* tg_scratch_take(long bytes);\nvoid tg_scratch_give(void* p);\n"


def narrow_word(c: Contraction, renderer: CStyleRenderer, tree: KOp,
                dims: list[int]) -> tuple[list[str], str]:
    """(lines, C expression) of the 16-bit word of a factor `tree` (a float16 or bfloat16 value cast to
    float32) at the variables of the batch dims, `dims` and K: a plain load's stored bits as they are
    (zero where masked), else the value computed in float and converted (exact: it is such a value)."""
    narrow = tree.src[0]
    ctx = _context(c, c.b_dims + dims + c.k_dims)
    if narrow.op is AstOps.LOAD:
        idx, valid = narrow.arg[1].expr_idxs(ctx)
        bits = f"data{narrow.arg[0]}[{idx.render()}]"
        return [], bits if valid.is_const and valid.min == 1 else f"(({valid.render()}) ? {bits} : 0)"
    ex = _Expr(renderer, ctx)
    value = stored(renderer, narrow.dtype, ex(tree))
    return ex.lines, value


def stored(renderer: CStyleRenderer, dtype: DType, value: str) -> str:
    """C for a computed float value as the bits a float16 or bfloat16 output holds (else as it is)."""
    if dtype == dtypes.float16:
        return renderer.d.half_store.format(value)
    return f"tg_f32_to_bf16({value})" if dtype == dtypes.bfloat16 else value


def _params(c: Contraction) -> str:
    k = c.kernel
    return ", ".join(f"{'' if i == 0 else 'const '}{_C_TYPES[dt.name]}* restrict data{i}"
                     for i, dt in enumerate(k.buf_dtypes))


def _source(c: Contraction, p: Params, renderer: CStyleRenderer, name: str, lanes: int,
            body: list[str], stream: bool = False) -> str:
    """A nest's whole C source: headers, the sizes as macros (undefined at the end, so nests share a
    translation unit), the micro-kernel, the plain loops it falls back to, then the function `body`."""
    batch, m, n, k = c.sizes
    defines = [f"#define BATCH {batch}L", f"#define M {m}L", f"#define N {n}L", f"#define K {k}L"]
    undefs = ["#undef BATCH", "#undef M", "#undef N", "#undef K"]
    head = renderer.d.header + "#include <stdlib.h>\n#include <omp.h>\n" + SCRATCH_DECLS + \
        ("#include <immintrin.h>\n" if stream else "") + renderer.v.header.replace("BYTES", str(4 * lanes))
    lines = [*defines, *_micro(name, p, lanes, stream), *_naive(c, renderer, name), *body, *undefs]
    return head + "\n".join(lines) + "\n"


def render(c: Contraction, p: Params, renderer: CStyleRenderer, name: str, lanes: int) -> str:
    """The C source of the contraction as one function `name` taking the kernel's buffers: the nest
    p.nest names."""
    nests = {"packed": render_packed, "direct": render_direct, "broadcast": render_broadcast}
    return nests[p.nest](c, p, renderer, name, lanes)


def runs(c: Contraction, p: Params, lanes: int) -> bool:
    """Whether the nest p names can run c as it is (block sizes from a record or a candidate)."""
    if p.nest == "packed":
        return p.nr % lanes == 0
    if p.nest == "direct":
        return p.nr % lanes == 0 and c.direct_ok(lanes)
    return p.nest == "broadcast" and c.broadcast_ok()


def render_packed(c: Contraction, p: Params, renderer: CStyleRenderer, name: str, lanes: int) -> str:
    """The packed nest (the module's docstring)."""
    batch, m, n, k = c.sizes
    threads = f" num_threads({renderer.threads})" if renderer.threads else ""
    ap_floats = -(-p.kc * (p.mc + p.mr) // 16) * 16      # whole 64-byte lines
    bp_floats = -(-p.kc * p.nc // 16) * 16
    cbase = _index(c, c.ast, c.b_dims)
    tile_body = _finish_tile(c, renderer, p)
    direct = f"if (ir + {p.mr} <= mc && jr + {p.nr} <= nc{' && !last' if c.epilogue else ''})"
    body = [
        # a narrow output's tiles all go through _finish_tile's loop: vectorized in this function
        *(['__attribute__((optimize("tree-loop-vectorize")))'] if c.narrow else []),
        f"void {name}({_params(c)}) {{",
        f"  int max_threads = {renderer.threads or 'omp_get_max_threads()'};",
        f"  float* bp = (float*)tg_scratch_take(sizeof(float) * {bp_floats});",
        f"  float* ap_all = (float*)tg_scratch_take(sizeof(float) * {ap_floats} * (long)max_threads);",
        "  if (!bp || !ap_all) {",
        "    tg_scratch_give(bp); tg_scratch_give(ap_all);",
        f"    {_fallback(c, name)}",
        "    return;",
        "  }",
        f"  #pragma omp parallel{threads}",
        "  {",
        "    int nth = omp_get_num_threads();",
        f"    float* ap = ap_all + (long)omp_get_thread_num() * {ap_floats};",
        f"    float tile[{p.mr * p.nr}] __attribute__((aligned(64)));",
        f"    int by_rows = M >= 4L * {p.mr} * nth;   /* else the threads share each row block's columns */",
        "    for (long bb = 0; bb < BATCH; bb++) {",
        *["      " + x for x in _decode(c, c.b_dims, "bb")],
        f"      long cbase = {cbase};",
        f"      for (long jc = 0; jc < N; jc += {p.nc}) {{",
        f"        long nc = N - jc < {p.nc} ? N - jc : {p.nc};",
        f"        for (long pc = 0; pc < K; pc += {p.kc}) {{",
        f"          long kc = K - pc < {p.kc} ? K - pc : {p.kc};",
        "          int last = pc + kc >= K;",
        "          #pragma omp for schedule(static)",
        f"          for (long panel = 0; panel < nc; panel += {p.nr}) {{",
        "            float* dst = bp + panel * kc;",
        *["            " + x for x in _pack(c, renderer, "b", p)],
        "          }",
        "          #pragma omp for schedule(static)",
        "          for (long part = 0; part < nth; part++) {    /* one per thread */",
        "            long lo = 0, hi = M, jr_first = part, jr_step = nth;",
        "            if (by_rows) {            /* an equal share of the rows, in whole panels */",
        f"              lo = M * part / nth / {p.mr} * {p.mr};",
        f"              hi = part == nth - 1 ? M : M * (part + 1) / nth / {p.mr} * {p.mr};",
        "              jr_first = 0; jr_step = 1;",
        "            }",
        f"            for (long ic = lo; ic < hi; ic += {p.mc}) {{",
        f"              long mc = hi - ic < {p.mc} ? hi - ic : {p.mc};",
        f"              for (long panel = 0; panel < mc; panel += {p.mr}) {{",
        "                float* dst = ap + panel * kc;",
        *["                " + x for x in _pack(c, renderer, "a", p)],
        "              }",
        f"              for (long jr = jr_first * {p.nr}; jr < nc; jr += jr_step * {p.nr})",
        f"                for (long ir = 0; ir < mc; ir += {p.mr}) {{",
        "                  long m0 = ic + ir, n0 = jc + jr;",
        *([] if c.narrow else [      # (a narrow output takes every tile through the epilogue)
            f"                  {direct} {{",
            f"                    {name}_micro(kc, ap + ir * kc, bp + jr * kc, "
            f"data0 + cbase + m0 * {c.ldc} + n0, {c.ldc}, pc > 0);",
            "                    continue;",
            "                  }"]),
        f"                  {name}_micro(kc, ap + ir * kc, bp + jr * kc, tile, {p.nr}, 0);",
        *["                  " + x for x in tile_body],
        "                }",
        "            }",
        "          }",
        "        }",
        "      }",
        "    }",
        "  }",
        "  tg_scratch_give(bp);",
        "  tg_scratch_give(ap_all);",
        "}",
    ]
    return _source(c, p, renderer, name, lanes, body)


def render_direct(c: Contraction, p: Params, renderer: CStyleRenderer, name: str, lanes: int) -> str:
    """The contraction with y read where it lies: a conv's input rows through a window view, whose
    packing would copy every element kh x kw times. Only x is packed (all of M x K), and the offsets
    of y's K rows are tabled; both once, or both once per batch index where either depends on it. A piece of
    work is one batch index, one tile of NR columns and a share of the MR-row panels (all of them,
    unless there are too few pieces for the threads); it runs over all of K, so the tile's columns of
    y stay in L1/L2 across the panels. The last tile overlaps the one before it rather than passing N
    (the store then writes a few outputs twice, with equal values)."""
    batch, m, n, k = c.sizes
    threads = f" num_threads({renderer.threads})" if renderer.threads else ""
    mp = -(-m // p.mr) * p.mr
    ybuf = c.y.arg[0]
    cbase = _index(c, c.ast, c.b_dims)
    # once: one phase covering every batch index; else a phase per batch index, tables made afresh
    once = _separable(c) and not (_depends(c.x, _vars(c.shape)) & set(c.b_dims))
    koff = _index(c, c.y, c.k_dims if once else c.b_dims + c.k_dims)
    # koff holds y's index at batch 0, ybase what a batch index adds to it (its start counted once)
    origin = _index(c, c.y, [])
    ybase = f"({_index(c, c.y, c.b_dims)}) - ({origin})" if once else "0"
    tile_body = _finish_tile(c, renderer, p)
    direct = f"if (m0 + {p.mr} <= M{' && !last' if c.epilogue else ''})"
    # a large output, written once, bypasses the cache (no read of each line before its write)
    out_bytes = c.kernel.buf_sizes[0] * c.kernel.buf_dtypes[0].itemsize
    stream = lanes == 16 and out_bytes >= heuristics.STREAM_MIN_BYTES
    tables = ["#pragma omp for schedule(static)",
              f"for (long panel = 0; panel < M; panel += {p.mr}) {{",
              "  float* dst = ap + panel * K;",
              *["  " + x for x in _pack(c, renderer, "a", p)], "}",
              "#pragma omp for schedule(static)",
              "for (long k = 0; k < K; k++) {",
              *["  " + x for x in _decode(c, c.k_dims, "k")],
              f"  koff[k] = {koff};", "}"]
    body = [
        f"void {name}({_params(c)}) {{",
        f"  float* ap = (float*)tg_scratch_take(sizeof(float) * {-(-mp * k // 16) * 16});",
        "  long* koff = (long*)malloc(sizeof(long) * K);",
        "  if (!ap || !koff) {",
        "    tg_scratch_give(ap); free(koff);",
        f"    {_fallback(c, name)}",
        "    return;",
        "  }",
        f"  #pragma omp parallel{threads}",
        "  {",
        f"    float tile[{p.mr * p.nr}] __attribute__((aligned(64)));",
        "    const long ic = 0, pc = 0, kc = K, last = 1;",
        f"    const long per = {'BATCH' if once else '1'}, tiles = (N + {p.nr - 1}) / {p.nr}, "
        f"panels = (M + {p.mr - 1}) / {p.mr};",
        "    long share = 8L * omp_get_num_threads() / (per * tiles) + 1;    /* panel shares per tile */",
        "    if (share > panels) share = panels;",
        "    for (long phase = 0; phase < BATCH / per; phase++) {",
        *["      " + x for x in (_decode(c, c.b_dims, "phase") if not once else [])],
        *["      " + x for x in tables],
        "      #pragma omp for schedule(static)",
        "      for (long piece = 0; piece < per * tiles * share; piece++) {",
        "        long bb = phase * per + piece / (tiles * share), t = piece / share % tiles, "
        "part = piece % share;",
        *["        " + x for x in _decode(c, c.b_dims, "bb")],
        f"        long cbase = {cbase}, ybase = {ybase};",
        f"        long n0 = t * {p.nr} + {p.nr} <= N ? t * {p.nr} : N - {p.nr};",
        f"        for (long m0 = panels * part / share * {p.mr}; m0 < panels * (part + 1) / share * {p.mr}; "
        f"m0 += {p.mr}) {{",
        f"          {direct} {{",
        f"            {name}_microd(ap + m0 * K, data{ybuf} + ybase + n0, koff, "
        f"data0 + cbase + m0 * {c.ldc} + n0, {c.ldc}, 1);",
        "            continue;",
        "          }",
        f"          {name}_microd(ap + m0 * K, data{ybuf} + ybase + n0, koff, tile, {p.nr}, 0);",
        *["          " + x for x in tile_body],
        "        }",
        "      }",
        "    }",
        *(["    _mm_sfence();    /* this thread's streaming stores, before the region ends */"] if stream else
          []),
        "  }",
        "  tg_scratch_give(ap);",
        "  free(koff);",
        "}",
    ]
    return _source(c, p, renderer, name, lanes, body, stream)


def render_broadcast(c: Contraction, p: Params, renderer: CStyleRenderer, name: str, lanes: int) -> str:
    """The contraction with C's rows as vectors and y's values broadcast from where they lie: per
    reduce index, MR vectors of a packed, transposed block of x (MR * VW rows by KC) are multiplied by
    NR scalars of y, each read at a tabled column offset plus a tabled reduce offset. Suits a short M
    and a long K whose y no packing should copy: a conv's weight gradient, whose columns (Cin, kh, kw)
    are rows of the window copy. The threads share the tiles (MR * VW rows by NR columns), the same
    for every K block, so each owns its outputs; each packs its own x block. A tile adds its sums to C
    after each K block (the first writes them)."""
    mw = p.mr * lanes
    block = -(-mw * p.kc // 16) * 16            # a thread's packed block of x, in whole 64-byte lines
    threads = f" num_threads({renderer.threads})" if renderer.threads else ""
    ybuf = c.y.arg[0]
    origin = _index(c, c.y, [])
    cbase = _index(c, c.ast, c.b_dims)
    ex = _Expr(renderer, _context(c, c.b_dims + c.m_dims + c.k_dims))
    value = ex(c.x)
    k_inner = _inner_stride(c, c.x, c.k_dims) == 1        # x contiguous along the reduce: walk it inside
    loops = [("i", "MW"), ("kk", "kc")] if k_inner else [("kk", "kc"), ("i", "MW")]
    pack = [f"for (long {loops[0][0]} = 0; {loops[0][0]} < {loops[0][1]}; {loops[0][0]}++)",
            f"  for (long {loops[1][0]} = 0; {loops[1][0]} < {loops[1][1]}; {loops[1][0]}++) {{",
            *["    " + x for x in ["long mm = m0 + i, k = k0 + kk;",
                                   "if (mm >= M) { apk[kk * MW + i] = 0.0f; continue; }",
                                   *_decode(c, c.m_dims, "mm"), *_decode(c, c.k_dims, "k"), *ex.lines,
                                   f"apk[kk * MW + i] = {value};"]],
            "  }"]
    nr = p.nr
    micro = [f"f32v acc{j}_{v} = (f32v){{}};" for j in range(nr) for v in range(p.mr)]
    micro += [f"const float* col{j} = yb + yrow[n0 + {j} < N ? n0 + {j} : N - 1];" for j in range(nr)]
    micro += ["for (long kk = 0; kk < kc; kk++) {",
              "  long ko = ykoff[k0 + kk];",
              *[f"  f32v a{v} = *(const f32v*)(apk + kk * MW + {v * lanes});" for v in range(p.mr)],
              *[f"  {{ float b = col{j}[ko]; {' '.join(f'acc{j}_{v} += a{v} * b;' for v in range(p.mr))} }}"
                for j in range(nr)],
              "}"]
    store = []
    for j in range(nr):
        for v in range(p.mr):
            store += [f"*(f32v*)sums = acc{j}_{v};",
                      f"for (long l = 0; l < {lanes}; l++) {{",
                      f"  long mm = m0 + {v * lanes} + l;",
                      f"  if (mm < M && n0 + {j} < N) {{",
                      f"    float* cp = data0 + cbase + mm * {c.ldc} + n0 + {j};",
                      "    *cp = first ? sums[l] : *cp + sums[l];",
                      "  }", "}"]
    body = [
        f"void {name}({_params(c)}) {{",
        f"  #define MW {mw}L",
        "  long* yrow = (long*)malloc(sizeof(long) * N);",
        "  long* ykoff = (long*)malloc(sizeof(long) * K);",
        f"  int max_threads = {renderer.threads or 'omp_get_max_threads()'};",
        f"  float* ap_all = (float*)tg_scratch_take(sizeof(float) * {block} * (long)max_threads);",
        "  if (!yrow || !ykoff || !ap_all) {",
        "    free(yrow); free(ykoff); tg_scratch_give(ap_all);",
        f"    {_fallback(c, name)}",
        "    return;",
        "  }",
        "  for (long nn = 0; nn < N; nn++) {",
        *["    " + x for x in _decode(c, c.n_dims, "nn")],
        f"    yrow[nn] = {_index(c, c.y, c.n_dims)};",
        "  }",
        "  for (long k = 0; k < K; k++) {",
        *["    " + x for x in _decode(c, c.k_dims, "k")],
        f"    ykoff[k] = ({_index(c, c.y, c.k_dims)}) - ({origin});",
        "  }",
        f"  #pragma omp parallel{threads}",
        "  {",
        "    int nth = omp_get_num_threads(), tid = omp_get_thread_num();",
        f"    float* apk = ap_all + (long)tid * {block};",
        f"    float sums[{lanes}] __attribute__((aligned(64)));",
        f"    long mtiles = (M + MW - 1) / MW, ntiles = (N + {nr - 1}) / {nr}, tiles = mtiles * ntiles;",
        "    long lo = tiles * tid / nth, hi = tiles * (tid + 1) / nth;",
        "    for (long bb = 0; bb < BATCH; bb++) {",
        *["      " + x for x in _decode(c, c.b_dims, "bb")],
        f"      long cbase = {cbase};",
        f"      const float* yb = data{ybuf} + ({_index(c, c.y, c.b_dims)}) - ({origin});",
        f"      for (long k0 = 0; k0 < K; k0 += {p.kc}) {{",
        f"        long kc = K - k0 < {p.kc} ? K - k0 : {p.kc};",
        "        int first = k0 == 0;",
        "        long packed = -1;",
        "        for (long t = lo; t < hi; t++) {",
        f"          long m0 = t / ntiles * MW, n0 = t % ntiles * {nr};",
        "          if (m0 != packed) {",
        *["            " + x for x in pack],
        "            packed = m0;",
        "          }",
        *["          " + x for x in micro],
        *["          " + x for x in store],
        "        }",
        "      }",
        "    }",
        "  }",
        "  #undef MW",
        "  free(yrow); free(ykoff); tg_scratch_give(ap_all);",
        "}",
    ]
    return _source(c, p, renderer, name, lanes, body)


def name(c: Contraction) -> str:
    """The kernel's name, as the linearizer names a reduce: r_ and its normalized dims."""
    return "r_" + "_".join(str(s) for s in c.shape)


def info(c: Contraction, lanes: int, global_size: int = 1, local_size: int = 0) -> Linearized:
    """What the device keeps about a contraction's kernel: its name, buffers, work, flops and bytes
    (a GPU kernel's launch: global_size work items in groups of local_size)."""
    batch, m, n, k = c.sizes
    kernel = c.kernel
    mem = sum(size * dt.itemsize for size, dt in zip(kernel.buf_sizes, kernel.buf_dtypes))
    return Linearized(name(c), [], list(kernel.buf_dtypes), lanes, global_size, prod(c.shape),
                      2 * batch * m * n * k, mem, local_size=local_size)


def lower(c: Contraction, p: Params, renderer: CStyleRenderer, lanes: int,
          nest: Callable[..., str] = render) -> tuple[str, str, Linearized]:
    """(name, source, info) of the contraction's nest with block sizes p (rendered by `nest`: these
    here, or bf16.render)."""
    lin = info(c, lanes)
    lin.extra["gemm"] = p
    return lin.name, nest(c, p, renderer, lin.name, lanes), lin
