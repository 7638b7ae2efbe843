"""bfloat16 contractions on the CPU's bfloat16 units, float32 sums: the AMX tile unit (Sapphire Rapids and
later; TDPBF16PS multiplies a 16 x 32 bfloat16 tile by a 32 x 16 one into a 16 x 16 float32 tile, 16x what
the float32 FMAs of a core do) or, without AMX, AVX512_BF16's VDPBF16PS (Zen 4/5, Cooper Lake; a 16-lane
float32 vector += 16 pairs of bfloat16 products, twice the float32 FMA's rate).

A contraction (gemm.py) whose two factors are bfloat16 values cast to float32 (fused.sum_of_products:
matmul, linear and conv in bfloat16, as autocast makes them) runs here on the first unit of UNITS the
CPU has (ops_cpu.features: AMX only where Linux granted this process the tile state) and may use
(ops_cpu.CPUDevice.usable: TG_CC builds its probe and, for VDPBF16PS, it measures faster than the
FMAs). The two units share everything but the micro-kernel. For each batch index:

    pack all of x into bfloat16 panels of 32 rows:     [K/32][32 rows][32 k]        (a tile: 16 rows)
    pack all of y into bfloat16 panels of 32 columns:  [K/32][2][16 k pairs][16 columns][2]
                                                        (VNNI: the two k of a pair side by side)
    for each MC x NC block of C (the threads share the blocks; MC smaller where there would be fewer
    blocks than threads):
      for pc in K by KC:
        for jr in NC by 32:            y's micro-panel (KC x 32) stays in L1 while
          for ir in MC by 32:          x's micro-panels stream from L2:
            micro-kernel, a 32 x 32 block of C:
              amx:    2 x 2 float32 tiles in tile registers 0-3, two tiles of x and two of y per 32 of K
                      (registers 4-7), four TDPBF16PS
              dpbf16: rows in groups of 12, 12 and 8, each row two float32 vectors (columns 0-15,
                      16-31); per k pair y's two vectors are loaded, each row's pair broadcast to 16
                      lanes, two VDPBF16PS per row
            its sums added to the block's float32 sums (a per-thread buffer) after each K block
      the block's epilogue: each sum through the kernel's epilogue (its cast to bfloat16, a bias, an
      activation) into the output

K, M and N are padded to whole tiles with zeros in the packed copies; the sums outside the matrix are
never stored. The packs read a plain bfloat16 load's bits as they are (a vector copy); any other factor
is evaluated in float and converted (exact: it is a bfloat16 value). On AMX each thread loads the tile
configuration (eight tiles of 16 rows x 64 bytes) at the start of the parallel region and releases the
tiles at its end.

Both units treat subnormal inputs as zero and flush subnormal sums to zero (their definition: neither
reads MXCSR; oneDNN's kernels do the same); the packed nest, where neither is used, keeps them. A
product of magnitude below 2^-126 is all that differs (tests/core/test_low_precision_gemm.py pins both).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tg.core.codegen.gemm import Contraction, _depends, _vars
from tg.core.codegen.heuristics import Params
from tg.core.codegen.linearizer import _coef
from tg.core.codegen.nests import (
    SCRATCH_DECLS,
    _context,
    _decode,
    _epilogue,
    _fallback,
    _index,
    _inner_stride,
    _naive,
    _params,
    narrow_word,
    stored,
)
from tg.core.codegen.renderer import _C_TYPES, CStyleRenderer
from tg.core.dtype import dtypes
from tg.core.kernel import AstOps, KOp
from tg.core.ops import UnaryOps
from tg.core.symbolic import Node


@dataclass(frozen=True)
class Unit:
    """A bfloat16 unit: its name (Params.nest), the CPU features it needs (as /proc/cpuinfo names them),
    a C probe TG_CC must build for it (a compiler older than the CPU may lack the intrinsics), and where
    having the feature does not make it faster, C of `double tg_speedup(void)`: its rate over the float32
    FMAs' in register-only loops on one core, the unit used only where that is at least
    heuristics.UNIT_PAYS."""
    name: str
    features: frozenset[str]
    probe: str
    speedup: str | None = None


# 24 independent chains of each (distinct values: none may be merged), the best of 3 runs
_SPEEDUP = """#include <immintrin.h>
#include <time.h>
static double now(void) {
  struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec;
}
#define CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15) \\
  X(16) X(17) X(18) X(19) X(20) X(21) X(22) X(23)
#define INIT(i) __m512 c##i = _mm512_set1_ps(1e-3f * (i + 1));
#define SUM(i) s += _mm512_reduce_add_ps(c##i);
static volatile float sink;
static double fma_seconds(long n, __m512 m, __m512 a) {
  CHAINS(INIT) double t = now();
#define FMA(i) c##i = _mm512_fmadd_ps(c##i, m, a);
  for (long i = 0; i < n; i++) { CHAINS(FMA) }
  t = now() - t; float s = 0; CHAINS(SUM) sink = s; return t;
}
static double dp_seconds(long n, __m512bh x, __m512bh y) {
  CHAINS(INIT) double t = now();
#define DP(i) c##i = _mm512_dpbf16_ps(c##i, x, y);
  for (long i = 0; i < n; i++) { CHAINS(DP) }
  t = now() - t; float s = 0; CHAINS(SUM) sink = s; return t;
}
double tg_speedup(void) {
  double f = 1e9, d = 1e9;
  __m512 m = _mm512_set1_ps(0.9999f + sink), a = _mm512_set1_ps(1e-6f);
  __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80 + (short)sink), y = (__m512bh)_mm512_set1_epi16(0x3c00);
  for (int r = 0; r < 3; r++) {
    double tf = fma_seconds(40000, m, a), td = dp_seconds(40000, x, y);
    f = tf < f ? tf : f; d = td < d ? td : d;
  }
  return (64.0 / d) / (32.0 / f);       /* flops per second: 64 per VDPBF16PS, 32 per FMA */
}
"""


AMX = Unit("amx", frozenset({"amx_tile", "amx_bf16"}),
           "#include <immintrin.h>\nvoid tg_probe(void) { _tile_zero(0); _tile_dpbf16ps(0, 1, 2); }\n")
DPBF16 = Unit("dpbf16", frozenset({"avx512_bf16", "avx512bw"}),
              "#include <immintrin.h>\n__m512 tg_probe(__m512 a, __m512i b) "
              "{ return _mm512_dpbf16_ps(a, (__m512bh)b, (__m512bh)b); }\n", _SPEEDUP)
UNITS = (AMX, DPBF16)        # the first one the CPU has is used
TILE = 32          # the micro-kernel's block of C: 32 x 32 floats (2 x 2 AMX tiles); x and y panels of 32
DP_ROWS = (12, 12, 8)           # dpbf16: rows of the micro-kernel's block in registers at once (2 each)


def _bf16(tree: KOp) -> bool:
    return tree.op is UnaryOps.CAST and tree.dtype == dtypes.float32 and tree.src[0].dtype == dtypes.bfloat16


def unit(c: Contraction, features: frozenset[str], usable: Callable[[Unit], bool] = lambda u: True) \
        -> Unit | None:
    """The unit c runs on here: the first of UNITS whose features the CPU has and that `usable` says
    TG_CC builds and pays (ops_cpu.CPUDevice.usable), where both factors are bfloat16 values; else None
    (the packed nest)."""
    return available(features, usable) if _bf16(c.x) and _bf16(c.y) else None


def available(features: frozenset[str], usable: Callable[[Unit], bool] = lambda u: True) -> Unit | None:
    """The first of UNITS whose features the CPU has and that `usable` allows, or None."""
    return next((u for u in UNITS if u.features <= features and usable(u)), None)


def _flat_stride(c: Contraction, idx: Node, dims: list[int]) -> int | None:
    """The stride of idx along the flat index over dims (outermost first), where each dim's variable is a
    plain term whose coefficient nests (the innermost's s, the next's s times the innermost's size...),
    else None."""
    variables = _vars(c.shape)
    stride = None
    span = 1
    for d in reversed(dims):
        coef = _coef(idx, variables[d])
        if coef is None or (stride is not None and coef != stride * span):
            return None
        if stride is None:
            stride = coef
        span *= c.shape[d]
    return stride


def _strides(c: Contraction, load: KOp, dims: list[int]) -> tuple[int | None, int | None] | None:
    """(flat stride along the panel's rows or columns, along k) of a plain bfloat16 load with no mask,
    each None where it does not nest; None for a masked load."""
    idx, valid = load.arg[1].expr_idxs(_vars(c.shape))
    if not (valid.is_const and valid.min == 1):
        return None
    return _flat_stride(c, idx, dims), _flat_stride(c, idx, c.k_dims)


def _at(c: Contraction, load: KOp, dims: list[int], row: str, k: str) -> str:
    """C (a statement expression) for the address of load's element at flat row (or column) `row` and
    flat reduce index `k`, the batch dims' variables in scope."""
    idx, _ = load.arg[1].expr_idxs(_context(c, c.b_dims + dims + c.k_dims))
    decode = " ".join([*_decode(c, dims, "row_"), *_decode(c, c.k_dims, "k_")])
    return f"({{ long row_ = {row}, k_ = {k}; {decode} data{load.arg[0]} + {idx.render()}; }})"


def _vector_pack(c: Contraction, side: str) -> list[str] | None:
    """A full block of the panel (32 rows or columns by 32 of K, all inside the matrix) packed with
    AVX-512 from a plain load, by layout: x along k (64-byte copies of each row), x along m (32-bit
    gathers of row pairs, split by a permute), y along n (two rows of k interleaved by a permute), y
    along k (32-bit gathers of k pairs). The rows of x and the k rows of y are found by their own index
    (a conv's reduce over channels and window offsets: a row of its window view per k). None where no
    layout applies."""
    tree, dims = (c.x, c.m_dims) if side == "a" else (c.y, c.n_dims)
    load = tree.src[0]
    # autocast's usual factor: a float32 load cast to bfloat16 in the kernel, rounded 16 lanes at a time
    wide = load.op is UnaryOps.CAST and load.src[0].op is AstOps.LOAD and load.src[0].dtype == dtypes.float32
    if wide:
        load = load.src[0]
    found = _strides(c, load, dims) if load.op is AstOps.LOAD else None
    if found is None:
        return None
    rs, ks = found
    if wide:
        return _rounding_pack(c, side, load, dims, rs, ks)
    if side == "a" and ks == 1:
        return ["for (long i = 0; i < 32; i++)",
                f"  _mm512_store_si512(dst + kb * 1024 + i * 32, "
                f"_mm512_loadu_si512({_at(c, load, dims, 'first + i', 'kb * 32')}));"]
    if side == "a" and rs == 1 and ks is not None:      # a gather of 32 bits holds rows i, i+1 at one k
        return [_offsets(ks), f"const unsigned short* s = {_at(c, load, dims, 'first', 'kb * 32')};",
                "for (long i = 0; i < 32; i += 2) {",
                "  __m512i lo = _mm512_i32gather_epi32(at, s + i, 2);",
                f"  __m512i hi = _mm512_i32gather_epi32(at, s + i + 16L * {ks}, 2);",
                "  unsigned short* d = dst + kb * 1024 + i * 32;",
                "  _mm512_store_si512(d, _mm512_permutex2var_epi16(lo, evens, hi));",
                "  _mm512_store_si512(d + 32, _mm512_permutex2var_epi16(lo, odds, hi));",
                "}"]
    if side == "a" and rs == 1:      # the same gathers, each k's offset found by its own index (a conv's
        # reduce over channels and window offsets: no one stride along k), once per block of 32 k
        return [f"const unsigned short* s = {_at(c, load, dims, 'first', 'kb * 32')};",
                "int offs[32];",
                "for (long j = 0; j < 32; j++)",
                f"  offs[j] = (int)({_at(c, load, dims, 'first', 'kb * 32 + j')} - s);",
                "const __m512i at_lo = _mm512_loadu_si512(offs), at_hi = _mm512_loadu_si512(offs + 16);",
                "for (long i = 0; i < 32; i += 2) {",
                "  __m512i lo = _mm512_i32gather_epi32(at_lo, s + i, 2);",
                "  __m512i hi = _mm512_i32gather_epi32(at_hi, s + i, 2);",
                "  unsigned short* d = dst + kb * 1024 + i * 32;",
                "  _mm512_store_si512(d, _mm512_permutex2var_epi16(lo, evens, hi));",
                "  _mm512_store_si512(d + 32, _mm512_permutex2var_epi16(lo, odds, hi));",
                "}"]
    if side == "b" and rs == 1:      # rows k, k+1 of 32 columns, interleaved
        return ["for (long kp = 0; kp < 16; kp++) {",
                f"  __m512i r0 = _mm512_loadu_si512({_at(c, load, dims, 'first', 'kb * 32 + 2 * kp')});",
                f"  __m512i r1 = _mm512_loadu_si512({_at(c, load, dims, 'first', 'kb * 32 + 2 * kp + 1')});",
                "  unsigned short* d = dst + kb * 1024 + kp * 32;",
                "  _mm512_store_si512(d, _mm512_permutex2var_epi16(r0, first16, r1));",
                "  _mm512_store_si512(d + 512, _mm512_permutex2var_epi16(r0, last16, r1));",
                "}"]
    if side == "b" and ks == 1 and rs is not None:      # a gather of 32 bits holds a k pair of one column
        return [_offsets(rs), f"const unsigned short* s = {_at(c, load, dims, 'first', 'kb * 32')};",
                "for (long j = 0; j < 2; j++)",
                "  for (long kp = 0; kp < 16; kp++)",
                f"    _mm512_store_si512(dst + kb * 1024 + j * 512 + kp * 32, "
                f"_mm512_i32gather_epi32(at, s + j * 16L * {rs} + 2 * kp, 2));",
                ]
    return None


def _rounding_pack(c: Contraction, side: str, load: KOp, dims: list[int], rs: int | None,
                   ks: int | None) -> list[str] | None:
    """_vector_pack's contiguous layouts for float32 values rounded to bfloat16 (renderer.NARROW_VECTORS:
    nearest even, NaN kept), 16 at a time: x along k (each row's 32), y along n (two k rows of 32
    columns, interleaved). None for the others (packed element by element)."""
    def words(ptr: str) -> str:
        """32 floats from ptr as 32 bfloat16 words in a 512-bit vector."""
        low, high = (f"(__m256i)tg_bf16_narrow_v(*(const f32v*)({ptr}{off}))" for off in ("", " + 16"))
        return f"_mm512_inserti64x4(_mm512_castsi256_si512({low}), {high}, 1)"
    if side == "a" and ks == 1:
        return ["for (long i = 0; i < 32; i++) {",
                f"  const float* p = {_at(c, load, dims, 'first + i', 'kb * 32')};",
                f"  _mm512_store_si512(dst + kb * 1024 + i * 32, {words('p')});",
                "}"]
    if side == "b" and rs == 1:
        return ["for (long kp = 0; kp < 16; kp++) {",
                f"  const float* p0 = {_at(c, load, dims, 'first', 'kb * 32 + 2 * kp')};",
                f"  const float* p1 = {_at(c, load, dims, 'first', 'kb * 32 + 2 * kp + 1')};",
                f"  __m512i r0 = {words('p0')}, r1 = {words('p1')};",
                "  unsigned short* d = dst + kb * 1024 + kp * 32;",
                "  _mm512_store_si512(d, _mm512_permutex2var_epi16(r0, first16, r1));",
                "  _mm512_store_si512(d + 512, _mm512_permutex2var_epi16(r0, last16, r1));",
                "}"]
    return None


def _offsets(stride: int) -> str:
    """C declaring `at`, the 16 lanes 0, stride, 2 * stride, ...: a gather's offsets (16-bit elements)."""
    return f"const __m512i at = _mm512_set_epi32({', '.join(str(i * stride) for i in range(15, -1, -1))});"


# permutes of 32 16-bit lanes from two vectors (indices >= 32 pick from the second)
_PERMUTES = {
    "evens": [2 * i for i in range(32)],                       # lo's then hi's even lanes: row i
    "odds": [2 * i + 1 for i in range(32)],                    # row i + 1
    "first16": [v for col in range(16) for v in (col, 32 + col)],        # columns 0-15: (k, k+1) pairs
    "last16": [v for col in range(16, 32) for v in (col, 32 + col)],     # columns 16-31
}


def _pack(c: Contraction, renderer: CStyleRenderer, side: str) -> list[str]:
    """The body packing one panel of 32 rows of x (side "a") or 32 columns of y ("b"), all of K, into
    `dst` (bfloat16 bits, zeros past the matrix), starting at row or column `first`: full blocks with
    AVX-512 where the layout allows (_vector_pack), the rest element by element."""
    tree, dims, total = (c.x, c.m_dims, "M") if side == "a" else (c.y, c.n_dims, "N")
    lines, value = narrow_word(c, renderer, tree, dims)
    # where in the panel: x [kb][row][k]; y [kb][column / 16][k / 2][column % 16][k % 2]
    at = "kb * 1024 + i * 32 + kk" if side == "a" else \
        "kb * 1024 + (i >> 4) * 512 + (kk >> 1) * 32 + (i & 15) * 2 + (kk & 1)"
    row = ["long row = first + i;", *_decode(c, dims, "row")]
    kay = ["long k = kb * 32 + kk;", *_decode(c, c.k_dims, "k")]
    rows_inner = _inner_stride(c, tree, dims) == 1     # the source contiguous along rows (or columns)
    outer, inner = (("kk", kay), ("i", row)) if rows_inner else (("i", row), ("kk", kay))

    def loops(check: bool) -> list[str]:
        body = [*lines, f"dst[{at}] = {value};"]
        if check:        # past the matrix nothing is read (a fused factor's loads are in `lines`): a zero
            body = [f"if (row < {total} && k < K) {{", *["  " + x for x in body], f"}} else dst[{at}] = 0;"]
        return [f"for (long {outer[0]} = 0; {outer[0]} < 32; {outer[0]}++) {{", *["  " + x for x in outer[1]],
                f"  for (long {inner[0]} = 0; {inner[0]} < 32; {inner[0]}++) {{",
                *["    " + x for x in [*inner[1], *body]], "  }", "}"]
    fast = _vector_pack(c, side)
    full = fast if fast is not None else loops(False)
    return ["for (long kb = 0; kb < KP / 32; kb++) {",
            f"  if (first + 32 <= {total} && kb * 32 + 32 <= K) {{",
            *["    " + x for x in full], "  } else {", *["    " + x for x in loops(True)], "  }", "}"]


def _micro(name: str, nest: str) -> list[str]:
    """C (32 x 32 floats at c, row stride NC) (+)= a panel (kc x 32 rows) times b panel (kc x 32
    columns), on the unit `nest` names."""
    head = [f"static inline __attribute__((always_inline)) void {name}_micro(long kc, "
            "const unsigned short* a, const unsigned short* b, float* c, int add) {"]
    if nest == DPBF16.name:
        return [*head, *_dp_micro(), "}"]
    ld = "NC * 4"
    cs = [("c", 0), ("c + 16", 1), ("c + 16 * NC", 2), ("c + 16 * NC + 16", 3)]
    return [*head,
            "  if (add) {", *[f"    _tile_loadd({t}, {p}, {ld});" for p, t in cs], "  } else {",
            *[f"    _tile_zero({t});" for _, t in cs], "  }",
            "  for (long k = 0; k < kc; k += 32, a += 1024, b += 1024) {",
            "    _tile_loadd(4, a, 64); _tile_loadd(5, a + 512, 64);",
            "    _tile_loadd(6, b, 64); _tile_loadd(7, b + 512, 64);",
            "    _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7);",
            "    _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);",
            "  }", *[f"  _tile_stored({t}, {p}, {ld});" for p, t in cs], "}"]


def _dp_micro() -> list[str]:
    """The VDPBF16PS micro-kernel's body: each group of DP_ROWS rows in 2 x rows float32 vectors over all
    of kc; per k pair y's two vectors (columns 0-15 at b, 16-31 at b + 512 in each block of 32 k) and
    each row's pair of x broadcast."""
    lines: list[str] = []
    first = 0
    for rows in DP_ROWS:
        acc = [(f"c{i}_{h}", f"c + {first + i} * NC + {16 * h}") for i in range(rows) for h in range(2)]
        lines += ["  {",
                  *[f"    __m512 {v} = add ? _mm512_loadu_ps({p}) : _mm512_setzero_ps();" for v, p in acc],
                  "    for (long k = 0; k < kc; k += 32) {",
                  "      const unsigned short* ak = a + k * 32 + " + str(first * 32) + ";",
                  "      const unsigned short* bk = b + k * 32;",
                  "      for (long p = 0; p < 16; p++) {",
                  "        __m512bh y0 = (__m512bh)_mm512_load_si512(bk + p * 32);",
                  "        __m512bh y1 = (__m512bh)_mm512_load_si512(bk + 512 + p * 32);",
                  *[line for i in range(rows) for line in (
                      f"        __m512bh x{i} = "
                      f"(__m512bh)_mm512_set1_epi32(*(const int*)(ak + {i * 32} + 2 * p));",
                      f"        c{i}_0 = _mm512_dpbf16_ps(c{i}_0, x{i}, y0); "
                      f"c{i}_1 = _mm512_dpbf16_ps(c{i}_1, x{i}, y1);")],
                  "      }", "    }",
                  *[f"    _mm512_storeu_ps({p}, {v});" for v, p in acc], "  }"]
        first += rows
    return lines


def _finish_block(c: Contraction, renderer: CStyleRenderer) -> list[str]:
    """The block's sums (in `cs`, rows ic.., columns jc..) through the epilogue into the output."""
    ex, value = _epilogue(c, renderer)
    out = c.kernel.buf_dtypes[0]
    head = "long rows = M - ic < mc ? M - ic : mc, cols = N - jc < nc ? N - jc : nc;"
    plain = c.ast.src[0] is c.red and out == dtypes.float32
    rounded = c.ast.src[0].op is UnaryOps.CAST and c.ast.src[0].src[0] is c.red and out == dtypes.bfloat16
    if plain or rounded:      # the sums as they are, or rounded to bfloat16: 16 at a time
        convert = "tg_bf16_narrow_v(*(f32v*)(src + j))" if rounded else "*(f32v*)(src + j)"
        vtype = "u16v" if rounded else "f32v"
        return [head, "for (long i = 0; i < rows; i++) {",
                "  const float* src = cs + i * NC;",
                f"  {_C_TYPES[out.name]}* dst = data0 + cbase + (ic + i) * {c.ldc} + jc;",
                "  long j = 0;",
                f"  for (; j + 16 <= cols; j += 16) *({vtype}*)(dst + j) = {convert};",
                f"  for (; j < cols; j++) dst[j] = {stored(renderer, out, 'src[j]')};",
                "}"]
    return [head,
            "for (long i = 0; i < rows; i++) {",
            "  long mm = ic + i;",
            *["  " + x for x in _decode(c, c.m_dims, "mm")],
            "  #pragma omp simd",
            "  for (long j = 0; j < cols; j++) {",
            *["    " + x for x in ["long nn = jc + j;", *_decode(c, c.n_dims, "nn"),
                                   "float acc = cs[i * NC + j];",
                                   *ex.lines,
                                   f"data0[cbase + mm * {c.ldc} + nn] = {stored(renderer, out, value)};"]],
            "  }", "}"]


def render(c: Contraction, p: Params, renderer: CStyleRenderer, name: str, lanes: int) -> str:
    """The C source of the nest on the unit p.nest names (the module's docstring) as one function `name`."""
    batch, m, n, k = c.sizes
    mp, np_, kp = (-(-v // TILE) * TILE for v in (m, n, k))
    threads = f" num_threads({renderer.threads})" if renderer.threads else ""
    defines = {"BATCH": batch, "M": m, "N": n, "K": k, "MP": mp, "NP": np_, "KP": kp, "KC": p.kc, "MC": p.mc,
               "NC": p.nc}
    cfg = f"{name}_cfg"
    x_batch = bool(_depends(c.x, _vars(c.shape)) & set(c.b_dims))    # else x's pack serves every batch index
    tiles = p.nest == AMX.name
    body = [
        *([f"typedef struct {{ unsigned char palette, start; unsigned char zero[14]; "
           f"unsigned short colsb[16]; unsigned char rows[16]; }} {cfg};"] if tiles else []),
        *_micro(name, p.nest), *_naive(c, renderer, name),
        # the loop vectorizer (off for the one-pass kernels) on for this function: the epilogue's loop
        f'__attribute__((optimize("tree-loop-vectorize"))) void {name}({_params(c)}) {{',
        f"  int max_threads = {renderer.threads or 'omp_get_max_threads()'};",
        "  unsigned short* ap_all = (unsigned short*)tg_scratch_take(2L * MC * KP * max_threads);",
        "  unsigned short* bp = (unsigned short*)tg_scratch_take(2L * NP * KP);",
        "  float* cs_all = (float*)tg_scratch_take(4L * MC * NC * max_threads);",
        "  if (!ap_all || !bp || !cs_all) {",
        "    tg_scratch_give(ap_all); tg_scratch_give(bp); tg_scratch_give(cs_all);",
        f"    {_fallback(c, name)}",
        "    return;",
        "  }",
        f"  #pragma omp parallel{threads}",
        "  {",
        *([f"    {cfg} cfg = {{0}};",
           "    cfg.palette = 1;",
           "    for (int t = 0; t < 8; t++) { cfg.rows[t] = 16; cfg.colsb[t] = 64; }",
           "    _tile_loadconfig(&cfg);"] if tiles else []),
        "    const long nth = omp_get_num_threads(), tid = omp_get_thread_num();",
        "    float* cs = cs_all + tid * MC * NC;",
        "    unsigned short* ap = ap_all + tid * MC * KP;",
        *[f"    const __m512i {k_} = _mm512_set_epi16({', '.join(map(str, reversed(v)))});"
          for k_, v in _PERMUTES.items()],
        "    const long blocks_n = (NP + NC - 1) / NC;",
        "    long mcb = MC;     /* rows of a block: fewer where MC would leave a thread without one */",
        "    if ((MP + MC - 1) / MC * blocks_n < nth) {",
        "      long want = (nth + blocks_n - 1) / blocks_n;",
        "      mcb = ((MP + want - 1) / want + 31) / 32 * 32;",
        "    }",
        "    const long blocks = (MP + mcb - 1) / mcb * blocks_n;",
        *(["    long packed = -1;         /* the rows of x in this thread's pack (the same for each one) */"]
          if not x_batch else []),
        "    for (long bb = 0; bb < BATCH; bb++) {",
        *["      " + x for x in _decode(c, c.b_dims, "bb")],
        f"      long cbase = {_index(c, c.ast, c.b_dims)};",
        "      #pragma omp for schedule(static)",
        "      for (long first = 0; first < NP; first += 32) {",
        "        unsigned short* dst = bp + first * KP;",
        *["        " + x for x in _pack(c, renderer, "b")],
        "      }",
        *(["      long packed = -1;         /* the rows of x in this thread's pack */"] if x_batch else []),
        "      for (long blk = blocks * tid / nth; blk < blocks * (tid + 1) / nth; blk++) {",
        "        long ic = blk / blocks_n * mcb, jc = blk % blocks_n * NC;",
        "        long mc = MP - ic < mcb ? MP - ic : mcb, nc = NP - jc < NC ? NP - jc : NC;",
        "        if (ic != packed) {    /* x's rows of this block, packed where they are used next */",
        "          for (long first = ic; first < ic + mc; first += 32) {",
        "            unsigned short* dst = ap + (first - ic) * KP;",
        *["            " + x for x in _pack(c, renderer, "a")],
        "          }",
        "          packed = ic;",
        "        }",
        "        for (long pc = 0; pc < KP; pc += KC) {",
        "          long kc = KP - pc < KC ? KP - pc : KC;",
        "          for (long jr = 0; jr < nc; jr += 32)",
        "            for (long ir = 0; ir < mc; ir += 32)",
        f"              {name}_micro(kc, ap + ir * KP + pc * 32, bp + (jc + jr) * KP + pc * 32, "
        "cs + ir * NC + jr, pc > 0);",
        "        }",
        *["        " + x for x in _finish_block(c, renderer)],
        "      }",
        "      #pragma omp barrier      /* y's pack is read until here */",
        "    }",
        *(["    _tile_release();"] if tiles else []),
        "  }",
        "  tg_scratch_give(ap_all); tg_scratch_give(bp); tg_scratch_give(cs_all);",
        "}",
    ]
    head = renderer.d.header + "#include <stdlib.h>\n#include <omp.h>\n#include <immintrin.h>\n" + \
        SCRATCH_DECLS + \
        renderer.v.header.replace("BYTES", "64")      # (AVX-512 wherever AMX is)
    lines = [*[f"#define {k_} {v}L" for k_, v in defines.items()], *body, *[f"#undef {k_}" for k_ in defines]]
    return head + "\n".join(lines) + "\n"
