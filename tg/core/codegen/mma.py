"""bfloat16 and float16 contractions on NVIDIA tensor cores (sm_80 and later): `mma.sync` in the generated
CUDA C, float32 sums.

A contraction (gemm.py) whose two factors are values of the same narrow type cast to float32
(fused.sum_of_products: matmul, linear and conv in bfloat16 or float16, as autocast makes them) runs as
this kernel on a CUDA device whose compute capability is 8.0 or more. One block of 128 threads (four
warps, 2 x 2) computes a BM x BN = 64 x 64 tile of C for one batch index:

    for k0 in K by BK = 32:
      the block stages x's 64 x 32 and y's 32 x 64 elements in shared memory as their 16-bit words
      (zeros past the matrix), y transposed ([n][k]) so both are read as k pairs; the threads walk
      each along the factor's contiguous side (coalesced reads of a plain load)
      for each 16 of the 32:
        each warp loads its A fragments (2 of 16 x 16) and B fragments (4 of 16 x 8) from shared
        memory as 32-bit k pairs and issues 8 mma.sync.m16n8k16 (row.col, f32 accumulators)
    each thread's 32 sums through the kernel's epilogue (its cast to the output type, a bias, an
    activation) into the output, where inside the matrix

The fragments' coordinates are those of the PTX ISA's m16n8k16 layouts (`FRAGMENTS`; with g = lane / 4
and t = lane % 4: an A register holds row g or g + 8, k 2t, 2t+1 or 2t+8, 2t+9; a B register k 2t, 2t+1
or 2t+8, 2t+9 of column g; the C registers rows g, g + 8 and columns 2t, 2t + 1). Without a GPU,
tests/core/test_mma.py checks them against the ISA's statement and runs the kernel's index arithmetic
(these strings) over a block in numpy into a product, and NVRTC compiles the kernels to cubins for
sm_80 and sm_90; scripts/gpu_check.py runs them where a GPU is. The shared-memory rows are
40 words long (80 bytes) so the 32 lanes of a fragment load fall in 32 different banks.
"""
from __future__ import annotations

from tg.core.codegen import gemm, heuristics
from tg.core.codegen.gemm import Contraction
from tg.core.codegen.linearizer import Linearized
from tg.core.codegen.nests import _decode, _epilogue, _index, _inner_stride, info, narrow_word, stored
from tg.core.codegen.renderer import CStyleRenderer
from tg.core.dtype import dtypes
from tg.core.kernel import KOp
from tg.core.ops import UnaryOps

BM, BN, BK = 64, 64, 32     # a block's tile of C and its step along K
THREADS = 128               # four warps, 2 x 2, each 32 x 32 of the tile
ROW = BK + 8                # shared-memory row length in 16-bit words (conflict-free fragment loads)
PTX_TYPE = {dtypes.bfloat16: "bf16", dtypes.float16: "f16"}
MIN_CAPABILITY = (8, 0)

# Where each 32-bit fragment register's pair of 16-bit elements (or C's float) lies, as C expressions of
# g = lane / 4, t = lane % 4 and reg (the pair's first element; the second is one k further). A is
# 16 x 16 (row, k), B 16 x 8 (k, column), C 16 x 8 (row, column). The kernel's loads and stores are
# these strings, and tests/core/test_mma.py evaluates them in Python against the PTX ISA's own statement.
FRAGMENTS = {
    "a": ("g + 8 * (reg & 1)", "2 * t + 8 * (reg >> 1)"),
    "b": ("2 * t + 8 * reg", "g"),
    "c": ("g + 8 * (reg >> 1)", "2 * t + (reg & 1)"),
}
WARP = ("(warp >> 1) * 32", "(warp & 1) * 32")      # a warp's 32 x 32 of the block's tile: (rows, columns)


def narrow_type(c: Contraction):
    """The 16-bit type both factors are values of (bfloat16 or float16), or None."""
    def of(tree: KOp):
        ok = tree.op is UnaryOps.CAST and tree.dtype == dtypes.float32 and tree.src[0].dtype in PTX_TYPE
        return tree.src[0].dtype if ok else None
    t = of(c.x)
    return t if t is not None and t == of(c.y) else None


def find_mma(kernel, capability: tuple[int, int]) -> Contraction | None:
    """The kernel as a contraction for tensor cores on a GPU of this compute capability, or None."""
    if capability < MIN_CAPABILITY:
        return None
    c = gemm.contraction(kernel, 8, heuristics.MMA_MIN_MACS)
    return c if c is not None and narrow_type(c) is not None else None


def _stage(c: Contraction, renderer: CStyleRenderer, side: str) -> list[str]:
    """CUDA C storing the block's elements of x (side "a": 64 rows x 32 k into As[row][k]) or y ("b":
    32 k x 64 columns into Bs[column][k]) as 16-bit words, zero past the matrix; the threads walk the
    source's contiguous side (k for x along k, else the rows or columns)."""
    tree, dims, total, first, arr = (c.x, c.m_dims, c.sizes[1], "ic", "As") if side == "a" else \
        (c.y, c.n_dims, c.sizes[2], "jc", "Bs")
    lines, value = narrow_word(c, renderer, tree, dims)
    along_k = _inner_stride(c, tree, c.k_dims) == 1
    span = BM if side == "a" else BN
    if along_k:
        where = [f"int r = e / {BK}, kk = e % {BK};"]
    else:
        where = [f"int r = e % {span}, kk = e / {span};"]
    return [f"for (int e = threadIdx.x; e < {span * BK}; e += {THREADS}) {{",
            *["  " + x for x in where],
            f"  long row = {first} + r, k = k0 + kk;",
            "  unsigned short w = 0;",
            f"  if (row < {total} && k < {c.sizes[3]}) {{",
            *["    " + x for x in [*_decode(c, dims, "row"), *_decode(c, c.k_dims, "k"), *lines,
                                   f"w = {value};"]],
            "  }",
            f"  {arr}[r][kk] = w;",
            "}"]


def _finish(c: Contraction, renderer: CStyleRenderer) -> list[str]:
    """Each of the thread's sums (acc[i][j][reg]) through the epilogue into the output."""
    ex, value = _epilogue(c, renderer)
    out = c.kernel.buf_dtypes[0]
    _, m, n, _ = c.sizes
    store = f"data0[cbase + mm * {c.ldc} + nn] = {stored(renderer, out, value)};"
    return ["#pragma unroll",        # (unrolled, the sums stay in registers)
            "for (int i = 0; i < 2; i++)",
            "  #pragma unroll",
            "  for (int j = 0; j < 4; j++)",
            "    #pragma unroll",
            "    for (int reg = 0; reg < 4; reg++) {",
            f"      long mm = ic + wm + 16 * i + {FRAGMENTS['c'][0]};",
            f"      long nn = jc + wn + 8 * j + {FRAGMENTS['c'][1]};",
            f"      if (mm < {m} && nn < {n}) {{",
            *["        " + x for x in [*_decode(c, c.m_dims, "mm"), *_decode(c, c.n_dims, "nn"),
                                       "float acc = sums[i][j][reg];", *ex.lines, store]],
            "      }",
            "    }"]


def render(c: Contraction, renderer: CStyleRenderer, name: str) -> str:
    """The CUDA C source of the tensor-core kernel (the module's docstring) as one function `name`."""
    batch, m, n, k = c.sizes
    ptx = PTX_TYPE[narrow_type(c)]
    d = renderer.d
    params = ", ".join(f"{'' if i == 0 else 'const '}{d.types[dt.name]}* {d.restrict}data{i}"
                       for i, dt in enumerate(c.kernel.buf_dtypes))
    tiles_m, tiles_n = -(-m // BM), -(-n // BN)
    mma = (f"asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.{ptx}.{ptx}.f32 "
           "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\" : \"+f\"(s[0]), \"+f\"(s[1]), "
           "\"+f\"(s[2]), \"+f\"(s[3]) : \"r\"(a[i][0]), \"r\"(a[i][1]), \"r\"(a[i][2]), \"r\"(a[i][3]), "
           "\"r\"(b[j][0]), \"r\"(b[j][1]));")
    word = "*(const unsigned int*)&"
    body = [
        f"{d.kernel_prefix}__launch_bounds__({THREADS}) {name}({params}) {{",
        f"  __shared__ __align__(16) unsigned short As[{BM}][{ROW}];",
        f"  __shared__ __align__(16) unsigned short Bs[{BN}][{ROW}];",
        f"  const long blk = blockIdx.x, bb = blk / {tiles_m * tiles_n}, tile = blk % {tiles_m * tiles_n};",
        f"  const long ic = tile / {tiles_n} * {BM}, jc = tile % {tiles_n} * {BN};",
        *["  " + x for x in _decode(c, c.b_dims, "bb")],
        f"  const long cbase = {_index(c, c.ast, c.b_dims)};",
        "  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;",
        f"  const int wm = {WARP[0]}, wn = {WARP[1]};",
        "  float sums[2][4][4];",
        "  for (int i = 0; i < 2; i++)",
        "    for (int j = 0; j < 4; j++)",
        "      for (int r = 0; r < 4; r++) sums[i][j][r] = 0.0f;",
        f"  for (long k0 = 0; k0 < {k}; k0 += {BK}) {{",
        *["    " + x for x in _stage(c, renderer, "a")],
        *["    " + x for x in _stage(c, renderer, "b")],
        "    __syncthreads();",
        f"    for (int ks = 0; ks < {BK}; ks += 16) {{",
        "      unsigned int a[2][4], b[4][2];",
        "      for (int i = 0; i < 2; i++)",
        "        for (int reg = 0; reg < 4; reg++)",
        f"          a[i][reg] = {word}As[wm + 16 * i + {FRAGMENTS['a'][0]}][ks + {FRAGMENTS['a'][1]}];",
        "      for (int j = 0; j < 4; j++)",
        "        for (int reg = 0; reg < 2; reg++)",
        f"          b[j][reg] = {word}Bs[wn + 8 * j + {FRAGMENTS['b'][1]}][ks + {FRAGMENTS['b'][0]}];",
        "      for (int i = 0; i < 2; i++)",
        "        for (int j = 0; j < 4; j++) {",
        "          float* s = sums[i][j];",
        f"          {mma}",
        "        }",
        "    }",
        "    __syncthreads();",
        "  }",
        *["  " + x for x in _finish(c, renderer)],
        "}",
    ]
    return d.header + "\n".join(body) + "\n"


def lower(kernel, renderer: CStyleRenderer, capability: tuple[int, int]) \
        -> tuple[str, str, Linearized] | None:
    """(name, source, info) of the tensor-core kernel for a contraction of bfloat16 or float16 factors on a
    GPU of this compute capability; None for any other kernel (the linearizer's)."""
    c = find_mma(kernel, capability)
    if c is None:
        return None
    batch, m, n, _ = c.sizes
    lin = info(c, 1, batch * -(-m // BM) * -(-n // BN) * THREADS, THREADS)
    lin.extra["mma"] = (BM, BN, BK)
    return lin.name, render(c, renderer, lin.name), lin
