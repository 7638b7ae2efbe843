"""One C-style renderer. The C, OpenCL and CUDA dialects are data (prefixes, type names,
function names, how to get a global id), not control flow. Only the C dialect has SIMD lanes
(GCC vector extensions); GPU dialects get parallelism from global ids instead.

    >>> DIALECTS["opencl"].kernel_prefix
    '__kernel void '
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from tg.core.codegen import heuristics
from tg.core.codegen.linearizer import Linearized
from tg.core.codegen.uops import UOp, UOps
from tg.core.dtype import DType, dtypes
from tg.core.ops import BinaryOps, ReduceOps, TernaryOps, UnaryOps
from tg.core.symbolic import Node, Var, num

# Scalar templates for every ALU op and reduce op: one table, keyed by op, shared by all dialects.
# {0} {1} {2} are already-named operands; functions named "@NAME" are looked up in the dialect.
RENDER_TEMPLATES: dict = {
    UnaryOps.EXP2: "@exp2({0})", UnaryOps.LOG2: "@log2({0})", UnaryOps.SIN: "@sin({0})",
    UnaryOps.COS: "@cos({0})", UnaryOps.SQRT: "@sqrt({0})", UnaryOps.RECIP: "(1/{0})", UnaryOps.NEG: "(-{0})",
    UnaryOps.CAST: "<cast>", UnaryOps.BITCAST: "<bitcast>",
    BinaryOps.ADD: "({0}+{1})", BinaryOps.MUL: "({0}*{1})", BinaryOps.MAX: "(({0}>{1})?{0}:{1})",
    BinaryOps.MOD: "(({1})==0?0:({0})%({1}))", BinaryOps.IDIV: "(({1})==0?0:({0})/({1}))",
    BinaryOps.CMPLT: "({0}<{1})", BinaryOps.CMPNE: "({0}!={1})", BinaryOps.AND: "({0}&{1})",
    BinaryOps.OR: "({0}|{1})", BinaryOps.XOR: "({0}^{1})", BinaryOps.SHL: "({0}<<{1})",
    BinaryOps.SHR: "({0}>>{1})", TernaryOps.WHERE: "({0}?{1}:{2})", TernaryOps.MULACC: "(({0}*{1})+{2})",
    ReduceOps.SUM: BinaryOps.ADD, ReduceOps.MAX: BinaryOps.MAX,
}
# Signed integer ops that overflow, as unsigned arithmetic on operands already cast ({u}: the type), in
# dialects whose compilers do not make signed overflow wrap (Dialect.signed_wraps).
WRAPPING_OPS = {UnaryOps.NEG: "(({u})0-{0})", BinaryOps.ADD: "({0}+{1})", BinaryOps.MUL: "({0}*{1})",
                TernaryOps.MULACC: "(({0}*{1})+{2})"}
# How each op reads on bool values (1-bit logic).
BOOL_TEMPLATES = {BinaryOps.ADD: "({0}|{1})", BinaryOps.MUL: "({0}&{1})", BinaryOps.MAX: "({0}|{1})",
                  UnaryOps.NEG: "(!{0})"}
FLOAT_FUNCS = ("exp2", "log2", "sin", "cos", "sqrt", "fmod")


@dataclass(frozen=True)
class Dialect:
    name: str
    kernel_prefix: str
    buffer_qualifier: str
    restrict: str
    header: str
    global_id: str | None                  # None: output dims are loops
    types: dict[str, str]                  # dtype name -> storage type
    compute_float: str = "float"
    bool_type: str = "_Bool"
    func32: dict[str, str] = field(default_factory=dict)   # float32 function names
    func64: dict[str, str] = field(default_factory=dict)
    # float16 as its bits, converted by the dialect's helpers (tg_h2f, tg_f2h; tg_d2h from a double, in
    # one rounding as numpy does); OpenCL has its own half type
    half_load: str = "tg_h2f({0})"
    half_store: str = "tg_f2h({0})"
    half_round: str = "tg_h2f(tg_f2h({0}))"
    half_round64: str = "tg_h2f(tg_d2h({0}))"   # a double value rounded to half (as float)
    half_value: str = "tg_f2h({0})"   # a computed (float) value as the half type, for BITCAST
    bitcast: str = "({{ union {{ {src} s; {dst} d; }} u_; u_.s = ({0}); u_.d; }})"
    inf: str = "INFINITY"
    nan: str = "NAN"
    vec: VecSyntax | None = None            # how SIMD vectors are written; None: no lanes
    group_id: str = ""                      # work-group id, local id, local memory and barrier (GPUs)
    local_id: str = ""
    local_memory: str = ""
    barrier: str = ""
    # whether signed integer overflow wraps (the C dialect: the CPU compiler runs with -fwrapv); else signed
    # ADD, MUL and NEG are rendered in unsigned arithmetic (WRAPPING_OPS), lane by lane in vectors
    signed_wraps: bool = False
    # the max of two integers of 32 bits or fewer, where the ternary will not do: ptxas 13.0 (sm_90)
    # fuses a chain of maxes over negated values into VIMNMX3 and drops the negation of one operand,
    # so CUDA's flips the sign bit and takes the max of the other signedness, which it cannot fuse
    int_max: str = "(({0}>{1})?{0}:{1})"
    # math functions (as named in the source) whose every call the compiler expands in place, at a
    # compile-time cost: a kernel calling one more than heuristics.OUTLINE_CALLS times calls it through
    # one out-of-line copy instead (`outline`: its definition, {t} the type and {f} the function)
    outlined: tuple[str, ...] = ()
    outline: str = ""


@dataclass(frozen=True)
class VecSyntax:
    """How a dialect writes SIMD values of n lanes: {t} a vector type, {x} an operand, {n} the lane
    count. Vector bools are integer masks (-1 true, 0 false) in every dialect."""
    types: dict[str, str]          # dtype name -> vector type name ({n} is the lane count)
    splat: str                     # a scalar on every lane
    build: str                     # from per-lane scalars {xs}
    get: str                       # lane {i} (hex digit {h})
    load: str                      # unit-stride load from address {addr}
    store: str                     # unit-stride store of {x} to {addr}
    convert: str                   # numeric conversion to vector type {t}
    bitcast: str
    select: str                    # lanes of {a} where mask {m} is true, else {b}
    math: dict[str, str]           # vector math functions by UnaryOps name
    header: str = ""
    bytes: int = 0                 # SIMD width; 0 = the running CPU's (the C dialect)
    evens: str = ""                # the even lanes of {a} then those of {b} ({idx}: their numbers)
    odds: str = ""                 # the odd lanes likewise; "" (both): no shuffles, lanes one by one
    narrow: bool = False           # float16 and bfloat16 values in lanes (float vectors; NARROW_VECTORS)


# exp2 / log2 on whole SIMD vectors (libm has only scalar versions): range reduction to a small
# interval, then a minimax polynomial (Cephes' coefficients, ~1e-7 relative error); inf, NaN,
# zero, negative and subnormal inputs give what exp2f / log2f give. With AVX-512 (64-byte vectors),
# exp2 scales by 2**k with vscalefps: 9 fewer instructions than building 2**k from its bits (the
# exp-and-sum pass of softmax on 4096 x 4096: 2.2 -> 1.7 ms), the same values. With GCC and AVX-512
# its clamps are vminps / vmaxps and its rounding vrndscaleps, again builtins: 1.68 -> 1.24 ns a
# vector of 16 (a compare-and-select clamp is 4 instructions), the same values.
VECTOR_MATH = """
#define TG_SEL(m, a, b) ((f32v)((((i32v)(a)) & (m)) | (((i32v)(b)) & ~(m))))
static inline f32v tg_exp2_v(f32v x) {
#if defined(__AVX512F__) && BYTES == 64 && defined(__GNUC__) && !defined(__clang__)
  /* vminps / vmaxps return their second operand where either is NaN: a NaN x stays NaN */
  typedef float tg_v16sf __attribute__((vector_size(64)));
  tg_v16sf hi = ((tg_v16sf){}) + 128.0f, lo = ((tg_v16sf){}) - 150.0f;
  tg_v16sf x16 = __builtin_ia32_minps512_mask(hi, (tg_v16sf)x, hi, (unsigned short)0xffff, 4);
  x16 = __builtin_ia32_maxps512_mask(lo, x16, lo, (unsigned short)0xffff, 4);
  f32v xc = (f32v)x16;
  f32v k = (f32v)__builtin_ia32_rndscaleps_mask(x16, 0, x16, (unsigned short)0xffff, 4);  /* to nearest */
#else
  f32v xc = TG_SEL(x > 128.0f, ((f32v){} + 128.0f), x);
  xc = TG_SEL(xc < -150.0f, ((f32v){} - 150.0f), xc);
  f32v k = (xc + 12582912.0f) - 12582912.0f;                 /* round to nearest: 1.5 * 2**23 */
#endif
  f32v f = xc - k;                                           /* in [-0.5, 0.5] */
  f32v p = ((f32v){}) + 1.535336188319500e-4f;
  p = p * f + 1.339887440266574e-3f; p = p * f + 9.618437357674640e-3f;
  p = p * f + 5.550332471162809e-2f; p = p * f + 2.402264791363012e-1f;
  p = p * f + 6.931472028550421e-1f; p = p * f + 1.0f;
#if defined(__AVX512F__) && BYTES == 64
  /* p * 2**k in one instruction (vscalefps; the builtin, as immintrin.h costs 0.13 s to parse per
     compile), rounded once; a NaN x is NaN all the way through */
  typedef float tg_v16sf_s __attribute__((vector_size(64)));
  tg_v16sf_s p16 = (tg_v16sf_s)p;
  return (f32v)__builtin_ia32_scalefps512_mask(p16, (tg_v16sf_s)k, p16, (unsigned short)0xffff, 4);
#else
  i32v n = __builtin_convertvector(k, i32v);                 /* exact: k is a whole number */
  i32v half = n >> 1;                                        /* 2**n as two normal factors: */
  f32v r = (p * (f32v)((half + 127) << 23)) * (f32v)((n - half + 127) << 23);
  return TG_SEL(x != x, x, r);     /* clamped at 128: p = 1 and 2**128 is inf; at -150: 2**-150 is 0 */
#endif
}
static inline f32v tg_log2_v(f32v x) {
  i32v sub = (((i32v)x >> 23) & 0xff) == 0;                   /* subnormal (or zero) input */
  f32v xs = TG_SEL(sub, x * 8388608.0f, x);                  /* times 2**23: now normal */
  i32v bits = (i32v)xs;
  i32v e = ((bits >> 23) & 0xff) - 127 + (sub & -23);
  f32v m = (f32v)((bits & 0x7fffff) | 0x3f800000);           /* mantissa in [1, 2) */
  i32v big = m > 1.41421356f;
  m = TG_SEL(big, m * 0.5f, m);
  e = e - big;                                                /* big is -1 where true */
  f32v z = m - 1.0f, z2 = z * z;
  f32v p = ((f32v){}) + 7.0376836292e-2f;
  p = p * z - 1.1514610310e-1f; p = p * z + 1.1676998740e-1f; p = p * z - 1.2420140846e-1f;
  p = p * z + 1.4249322787e-1f; p = p * z - 1.6668057665e-1f; p = p * z + 2.0000714765e-1f;
  p = p * z - 2.4999993993e-1f; p = p * z + 3.3333331174e-1f;
  f32v ln = z + (z * z2 * p - 0.5f * z2);
  f32v r = ln * 1.4426950408889634f + __builtin_convertvector(e, f32v);
  r = TG_SEL(x == 0.0f, ((f32v){} - INFINITY), r);
  r = TG_SEL(x < 0.0f, ((f32v){} + NAN), r);
  r = TG_SEL(x == INFINITY, x, r);
  return TG_SEL(x != x, x, r);
}
static inline float tg_exp2_s(float x) { return tg_exp2_v(((f32v){}) + x)[0]; }
static inline float tg_log2_s(float x) { return tg_log2_v(((f32v){}) + x)[0]; }
"""

# float32 exp2 / log2 on one value in C: the vector functions on a splat, lane 0, so a value gives the
# same bits in a vector loop, in its scalar tail and in a kernel with no lanes (libm's exp2f differs from
# the polynomial in the last bit: the same exp(x) recomputed by two kernels, or by a row's vector body
# and its tail, then compared unequal, and an argmax matched nothing).
C_SCALAR_MATH = {"exp2": "tg_exp2_s", "log2": "tg_log2_s"}

# Two vectors' lanes picked into one: Clang and GCC 12+ spell it __builtin_shufflevector, older GCC
# __builtin_shuffle with a mask vector.
SHUFFLE_MACRO = """#if defined(__clang__) || __GNUC__ >= 12
#define TG_SHUF(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define TG_SHUF(a, b, ...) __builtin_shuffle(a, b, (i32v){__VA_ARGS__})
#endif
"""

# float16 and bfloat16 in C's lanes: their values compute as float vectors (as a scalar computes in
# float). bfloat16: a load widens the 16-bit words (the bits to the top half), a store or a cast to it
# rounds to nearest even in integer arithmetic, a NaN kept a NaN with its top bits (quiet), exactly as
# tg_f32_to_bf16. float16: the CPU's conversion instructions on whole vectors (AVX-512's 16 lanes,
# F16C's 8; through builtins, as immintrin.h costs 0.13 s to parse), else integer arithmetic with the
# same results as tg_h2f / tg_f2h (round to nearest even, subnormals, overflow to inf); a NaN keeps
# its sign and payload's top bits both ways, as the scalar helpers do (the instructions quiet it). The
# macros end with the header: a batch build puts kernels of several widths in one file.
NARROW_VECTORS = """typedef unsigned short u16v __attribute__((vector_size(BYTES / 2), aligned(2)));
#if defined(__AVX512F__) && BYTES == 64
typedef short tg_vh __attribute__((vector_size(32)));
typedef float tg_vs __attribute__((vector_size(64)));
#define TG_ALL ((unsigned short)0xffff)
#define TG_H2F_HW(h) ((f32v)__builtin_ia32_vcvtph2ps512_mask((tg_vh)(h), (tg_vs){}, TG_ALL, 4))
#define TG_F2H_HW(f) ((u16v)__builtin_ia32_vcvtps2ph512_mask((tg_vs)(f), 0, (tg_vh){}, TG_ALL))
#define TG_ANY_NAN(f) (__builtin_ia32_cmpps512_mask((tg_vs)(f), (tg_vs)(f), 3, TG_ALL, 4) != 0)
#define TG_WIDEN(b) ((u32v)__builtin_ia32_pmovzxwd512_mask((tg_vh)(b), (i32v){}, TG_ALL))
#define TG_NARROW(u) ((u16v)__builtin_ia32_pmovdw512_mask((i32v)(u), (tg_vh){}, TG_ALL))
#if defined(__AVX512BF16__) && defined(__AVX512DQ__) && defined(__GNUC__) && !defined(__clang__)
#define TG_BF16_HW(f) ((u16v)__builtin_ia32_cvtneps2bf16_v16sf((tg_vs)(f)))
#define TG_BF16_ODD(f) (__builtin_ia32_fpclassps512_mask((tg_vs)(f), 0xA1, TG_ALL) != 0)
#endif
#elif defined(__F16C__) && BYTES == 32
typedef short tg_vh __attribute__((vector_size(16)));
typedef float tg_vs __attribute__((vector_size(32)));
#define TG_H2F_HW(h) ((f32v)__builtin_ia32_vcvtph2ps256((tg_vh)(h)))
#define TG_F2H_HW(f) ((u16v)__builtin_ia32_vcvtps2ph256((tg_vs)(f), 0))
#define TG_ANY_NAN(f) (__builtin_ia32_movmskps256((tg_vs)((f) != (f))) != 0)
#endif
#ifndef TG_WIDEN
#define TG_WIDEN(b) __builtin_convertvector(b, u32v)
#define TG_NARROW(u) __builtin_convertvector(u, u16v)
#endif
static inline f32v tg_bf16_widen_v(u16v b) { return (f32v)(TG_WIDEN(b) << 16); }
static inline u32v tg_bf16_bits_v(f32v f) {
  u32v u = (u32v)f, t = u >> 16;
  u32v r = (u + 0x7fffu + (t & 1u)) >> 16, q = t | ((u32v)((t & 0x7fu) == 0) & 0x40u);
  i32v nan = (i32v)(f != f);
  return (u32v)(((i32v)r & ~nan) | ((i32v)q & nan));
}
static inline u16v tg_bf16_narrow_v(f32v f) {
#ifdef TG_BF16_HW
  /* VCVTNEPS2BF16 rounds to nearest even in one instruction, but makes a subnormal zero and sets a NaN's
     quiet bit: a vector with either (VFPCLASSPS: NaN or subnormal) takes the integer path */
  return __builtin_expect(TG_BF16_ODD(f), 0) ? TG_NARROW(tg_bf16_bits_v(f)) : TG_BF16_HW(f);
#else
  return TG_NARROW(tg_bf16_bits_v(f));
#endif
}
static inline f32v tg_bf16_round_v(f32v f) { return (f32v)(tg_bf16_bits_v(f) << 16); }
static inline f32v tg_h2f_nan_v(u16v b, f32v f) {      /* f with each NaN lane's bits as tg_h2f's */
  u32v h = TG_WIDEN(b);
  u32v nan = ((h & 0x8000u) << 16) | 0x7f800000u | ((h & 0x7fffu) << 13);
  return TG_SEL((i32v)((h & 0x7fffu) > 0x7c00u), (f32v)nan, f);
}
static inline u16v tg_f2h_nan_v(f32v f, u32v h) {      /* h with each NaN lane's bits as tg_f2h's */
  u32v u = (u32v)f, m = (u >> 13) & 0x3ffu;
  u32v nan = ((u >> 16) & 0x8000u) | 0x7c00u | (u32v)TG_SEL((i32v)(m != 0u), (f32v)m, (f32v)(m * 0u + 512u));
  return TG_NARROW((u32v)TG_SEL((i32v)(f != f), (f32v)nan, (f32v)h));
}
static inline f32v tg_h2f_v(u16v b) {
#ifdef TG_H2F_HW
  f32v f = TG_H2F_HW(b);
  return __builtin_expect(TG_ANY_NAN(f), 0) ? tg_h2f_nan_v(b, f) : f;
#else
  u32v h = TG_WIDEN(b), o = (h & 0x7fffu) << 13, e = h & 0x7c00u;
  f32v f = TG_SEL((i32v)(e == 0u), (f32v)(o + 0x38800000u) - 6.103515625e-05f, (f32v)(o + 0x38000000u));
  f = TG_SEL((i32v)(e == 0x7c00u), (f32v)(o | 0x7f800000u), f);
  return (f32v)((u32v)f | ((h & 0x8000u) << 16));
#endif
}
static inline u16v tg_f2h_v(f32v f) {
#ifdef TG_F2H_HW
  u16v h = TG_F2H_HW(f);
  return __builtin_expect(TG_ANY_NAN(f), 0) ? tg_f2h_nan_v(f, TG_WIDEN(h)) : h;
#else
  u32v u = (u32v)f, a = u & 0x7fffffffu;
  u32v h = (u32v)TG_SEL((i32v)(a < 0x38800000u), (f32v)((u32v)((f32v)a + 0.5f) - 0x3f000000u),
                        (f32v)((a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13));
  h = (u32v)TG_SEL((i32v)(a >= 0x47800000u), (f32v)(a * 0u + 0x7c00u), (f32v)h) | ((u >> 16) & 0x8000u);
  return tg_f2h_nan_v(f, h);
#endif
}
static inline f32v tg_h_round_v(f32v f) { return tg_h2f_v(tg_f2h_v(f)); }
#undef TG_ALL
#undef TG_H2F_HW
#undef TG_F2H_HW
#undef TG_ANY_NAN
#undef TG_WIDEN
#undef TG_NARROW
#undef TG_BF16_HW
#undef TG_BF16_ODD
"""

# GCC/Clang vector extensions: typedefs sized for the lane count, operators as on scalars. A splat is
# the scalar minus a zero vector: x - 0.0 is x for every float (0.0 + x would turn -0.0 into +0.0).
C_VECTORS = VecSyntax(
    types={"float32": "f32v", "int32": "i32v", "uint32": "u32v", "bool": "i32v", "float16": "f32v",
           "bfloat16": "f32v"},
    splat="({x}-({t}){{}})", build="(({t}){{{xs}}})", get="{x}[{i}]", load="(*({t}*)({addr}))",
    store="*({t}*)({addr}) = {x};", convert="__builtin_convertvector({x}, {t})", bitcast="(({t})({x}))",
    select="(({t})((((i32v)({a}))&({m}))|(((i32v)({b}))&~({m}))))",
    math={"EXP2": "tg_exp2_v", "LOG2": "tg_log2_v"},
    evens="TG_SHUF({a}, {b}, {idx})", odds="TG_SHUF({a}, {b}, {idx})",
    header=SHUFFLE_MACRO + "".join(f"typedef {t} {v} __attribute__((vector_size(BYTES), aligned(4)));\n"
                   for t, v in (("float", "f32v"), ("int", "i32v"), ("unsigned int", "u32v"))) + VECTOR_MATH
    + NARROW_VECTORS, narrow=True)
# cos through sincos: Intel's CPU OpenCL runtime (the `cl` extra) crashes in its vectorizer
# ("sycl-kernel-vec-clone") on kernels that take cos of several values next to sin (cos(sin(cos(x))),
# a chain the issue-34 tests build); sincos's cosine is the same correctly reduced value
OPENCL_COS = "".join(f"inline {t} {name}({t} x) {{ {t} c; (void)sincos(x, &c); return c; }}\n"
                     for t, name in (("float", "tg_cosf"), ("double", "tg_cos"), ("float4", "tg_cosv")))
# OpenCL C's own vector types (float4 ...): unaligned vload/vstore, built-in math on whole vectors.
OPENCL_VECTORS = VecSyntax(
    types={"float32": "float{n}", "int32": "int{n}", "uint32": "uint{n}", "bool": "int{n}"},
    splat="(({t})({x}))", build="(({t})({xs}))", get="{x}.s{h}", load="vload{n}(0, {addr})",
    store="vstore{n}({x}, 0, {addr});", convert="convert_{t}({x})", bitcast="as_{t}({x})",
    select="select({b}, {a}, {m})", math={"EXP2": "exp2", "LOG2": "log2", "SIN": "sin",
                                                 "COS": "tg_cosv", "SQRT": "sqrt"},
    bytes=16, evens="(({t})({a}.even, {b}.even))", odds="(({t})({a}.odd, {b}.odd))")


# Every file-level name a C kernel's source declares besides the kernel itself (vector typedefs,
# static helpers): a batch build renames them per kernel (ClangCompiler.compile_many_to).
C_FILE_NAMES = ("f32v", "i32v", "u32v", "u16v", "tg_bf16_widen_v", "tg_bf16_bits_v", "tg_bf16_narrow_v",
                "tg_bf16_round_v", "tg_vh", "tg_vs", "tg_h2f_v", "tg_f2h_v", "tg_h_round_v",
                "tg_h2f_nan_v", "tg_f2h_nan_v", "tg_exp2_v", "tg_log2_v", "tg_exp2_s", "tg_log2_s",
                "tg_bf16_to_f32", "tg_f32_to_bf16", "tg_h2f", "tg_f2h", "tg_d2h", "tg_v4sf", "tg_v8hi",
                "tg_nan_h2f", "tg_nan_f2h")

_C_TYPES = {"bool": "unsigned char", "int8": "signed char", "uint8": "unsigned char", "int16": "short",
            "uint16": "unsigned short", "int32": "int", "uint32": "unsigned int", "int64": "long long",
            "uint64": "unsigned long long", "float16": "unsigned short", "bfloat16": "unsigned short",
            "float32": "float", "float64": "double"}
# Each C function stays on one line of the generated source; the pieces below only wrap the Python.
_BF16_HELPERS = (
    "\n"
    "static inline float tg_bf16_to_f32(unsigned short b) { union { unsigned int u; float f; } c; "
    "c.u = ((unsigned int)b) << 16; return c.f; }\n"
    "static inline unsigned short tg_f32_to_bf16(float f) { union { unsigned int u; float f; } c; c.f = f; "
    "if (f != f) { unsigned short t = (unsigned short)(c.u >> 16); "
    "return (t & 0x7f) ? t : (unsigned short)(t | 0x40); } "
    "return (unsigned short)((c.u + 0x7fffu + ((c.u >> 16) & 1u)) >> 16); }\n"
)

# float16 on the CPU as its bits, converted by these helpers, not by the compiler's _Float16: GCC 12's
# SLP vectorizer with AVX512-FP16 drops a float -> _Float16 -> float round trip it vectorizes (a cast
# to half in a kernel then did not round), and older compilers have no _Float16 at all. With F16C
# (every x86 CPU since 2012) a conversion is one instruction, called through builtins the optimizer
# does not fold; elsewhere integer code with the same results (round to nearest even, subnormals, inf).
# A NaN keeps its sign and payload's top bits, signaling or not (by hand: vcvtps2ph quiets it), so a
# float16 NaN read and stored back keeps its bits, as in CUDA's helpers below. tg_d2h rounds a double
# to float by rounding to odd (its last bit set where it was inexact), so the float's rounding to half
# is the one rounding of the double (numpy's).
_HALF_HELPERS = (
    "\nstatic inline unsigned int tg_nan_h2f(unsigned short h) { "
    "return ((unsigned int)(h & 0x8000u) << 16) | 0x7f800000u | ((unsigned int)(h & 0x3ffu) << 13); }\n"
    "static inline unsigned short tg_nan_f2h(unsigned int u) { unsigned int m = (u >> 13) & 0x3ffu; "
    "return (unsigned short)(((u >> 16) & 0x8000u) | 0x7c00u | (m ? m : 0x200u)); }\n"
    "#if defined(__F16C__)\n"
    "typedef float tg_v4sf __attribute__((vector_size(16)));\n"
    "typedef short tg_v8hi __attribute__((vector_size(16)));\n"
    "static inline unsigned short tg_f2h(float f) { union { unsigned int u; float f; } c; c.f = f; "
    "if (f != f) return tg_nan_f2h(c.u); "
    "return (unsigned short)__builtin_ia32_vcvtps2ph((tg_v4sf){f, 0.0f, 0.0f, 0.0f}, 0)[0]; }\n"
    "static inline float tg_h2f(unsigned short h) { union { unsigned int u; float f; } o; "
    "if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) { o.u = tg_nan_h2f(h); return o.f; } "
    "return __builtin_ia32_vcvtph2ps((tg_v8hi){(short)h})[0]; }\n"
    "#else\n"
    "static inline unsigned short tg_f2h(float f) { union { unsigned int u; float f; } c; c.f = f; "
    "unsigned int sign = (c.u >> 16) & 0x8000u, h; c.u &= 0x7fffffffu; "
    "if (c.u > 0x7f800000u) return tg_nan_f2h(c.u | (sign << 16)); "
    "if (c.u >= 0x47800000u) h = 0x7c00u; "
    "else if (c.u < 0x38800000u) { c.f += 0.5f; h = c.u - 0x3f000000u; } "
    "else h = (c.u + 0xc8000fffu + ((c.u >> 13) & 1u)) >> 13; "
    "return (unsigned short)(h | sign); }\n"
    "static inline float tg_h2f(unsigned short h) { union { unsigned int u; float f; } o; "
    "unsigned int e = h & 0x7c00u; o.u = (h & 0x7fffu) << 13; "
    "if (e == 0x7c00u) o.u |= 0x7f800000u; "
    "else if (e == 0) { o.u += 0x38800000u; o.f -= 6.103515625e-05f; } "
    "else o.u += 0x38000000u; "
    "o.u |= (unsigned int)(h & 0x8000u) << 16; return o.f; }\n"
    "#endif\n"
    "static inline unsigned short tg_d2h(double d) { union { unsigned int u; float f; } c; c.f = (float)d; "
    "if ((double)c.f != d && d == d && !(c.u & 1u) && (c.u & 0x7fffffffu) != 0x7f800000u) "
    "c.u += fabs(d) > fabs((double)c.f) ? 1u : 0xffffffffu; return tg_f2h(c.f); }\n"
)

# CUDA has no headers under NVRTC (it has none of the toolkit's): half is its bits, converted by PTX
# instructions. Those turn every NaN into 0x7fff, so the helpers carry a NaN's sign and the payload's
# top bits by hand: a float16 NaN read as float and stored back keeps its bits (a bitcast round trip).
# tg_max: see Dialect.int_max.
_CUDA_HELPERS = (
    "#define INFINITY (__int_as_float(0x7f800000))\n#define NAN (__int_as_float(0x7fffffff))\n"
    "__device__ inline float tg_h2f(unsigned short h) { float f; asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : "
    "\"h\"(h)); if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) f = __uint_as_float(((h & 0x8000u) << 16) | "
    "0x7f800000u | ((h & 0x3ffu) << 13)); return f; }\n"
    "__device__ inline unsigned short tg_f2h(float f) { unsigned short h; asm(\"cvt.rn.f16.f32 %0, %1;\" : "
    "\"=h\"(h) : \"f\"(f)); if (f != f) { unsigned int u = __float_as_uint(f); h = (unsigned short)"
    "(((u >> 16) & 0x8000u) | 0x7c00u | ((u >> 13) & 0x3ffu)); if (!(h & 0x3ffu)) h |= 0x200u; } "
    "return h; }\n"
    "__device__ inline unsigned short tg_d2h(double d) { unsigned short h; "
    "if (d != d) return tg_f2h((float)d); "
    "asm(\"cvt.rn.f16.f64 %0, %1;\" : \"=h\"(h) : \"d\"(d)); return h; }\n"
    "__device__ inline int tg_max(int a, int b) { unsigned int x = (unsigned int)a ^ 0x80000000u, "
    "y = (unsigned int)b ^ 0x80000000u; return (int)((x > y ? x : y) ^ 0x80000000u); }\n"
    "__device__ inline unsigned int tg_max(unsigned int a, unsigned int b) { int x = (int)(a ^ 0x80000000u), "
    "y = (int)(b ^ 0x80000000u); return (unsigned int)(x > y ? x : y) ^ 0x80000000u; }\n"
)


DIALECTS: dict[str, Dialect] = {
    "c": Dialect(
        "c",
        "void ",
        "",
        "restrict ",
        "#include <math.h>\n" + _BF16_HELPERS + _HALF_HELPERS,
        None,
        _C_TYPES,
        # float32 exp2 / log2 on one value are the vector ones on a splat (C_SCALAR_MATH)
        func32={f: C_SCALAR_MATH.get(f, f + "f") for f in FLOAT_FUNCS},
        func64={f: f for f in FLOAT_FUNCS},
        vec=C_VECTORS,
        signed_wraps=True,
    ),
    "opencl": Dialect(
        "opencl",
        "__kernel void ",
        "__global ",
        "",
        "#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n"
        "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
        + OPENCL_COS
        + _BF16_HELPERS.replace("static inline", "inline")
        .replace("unsigned short", "ushort")
        .replace("unsigned int", "uint"),
        "get_global_id(0)",
        {
            **_C_TYPES,
            "bool": "uchar",
            "int8": "char",
            "uint8": "uchar",
            "uint16": "ushort",
            "int64": "long",
            "uint64": "ulong",
            "uint32": "uint",
            "float16": "half",
            "bfloat16": "ushort",
        },
        bool_type="bool",
        func32={**{f: f for f in FLOAT_FUNCS}, "cos": "tg_cosf"},
        func64={**{f: f for f in FLOAT_FUNCS}, "cos": "tg_cos"},
        half_load="(float)({0})",
        half_store="({0})",
        half_round="((float)convert_half({0}))",
        half_round64="((float)convert_half({0}))",
        half_value="convert_half({0})",
        bitcast="as_{dst_word}({0})",
        vec=OPENCL_VECTORS,
        group_id="get_group_id(0)",
        local_id="get_local_id(0)",
        local_memory="__local ",
        barrier="barrier(CLK_LOCAL_MEM_FENCE);",
    ),
    "cuda": Dialect(
        "cuda",
        'extern "C" __global__ void ',
        "",
        "__restrict__ ",
        _CUDA_HELPERS +
        "template <typename D, typename S> __device__ inline D tg_bitcast(S s) { union { S s; D d; } u; "
        "u.s = s; "
        "return u.d; }\n" + _BF16_HELPERS.replace("static inline", "__device__ inline"),
        "(blockIdx.x*blockDim.x+threadIdx.x)",
        _C_TYPES,
        bool_type="bool",
        func32={f: f + "f" for f in FLOAT_FUNCS},
        func64={f: f for f in FLOAT_FUNCS},
        bitcast="tg_bitcast<{dst}, {src}>({0})",
        # NVRTC inlines each call: sinf's slow path alone is ~1.8 KB of machine code (exp2f and sqrtf are a
        # few instructions and stay inline)
        outlined=("sinf", "cosf", "log2f", "sin", "cos", "exp2", "log2"),
        outline="__device__ __noinline__ {t} tg_{f}_call({t} x) {{ return {f}(x); }}\n",
        group_id="blockIdx.x",
        local_id="threadIdx.x",
        local_memory="__shared__ ",
        barrier="__syncthreads();",
        int_max="tg_max({0},{1})",
    ),
}


def _lit(value, dtype: DType, d: Dialect) -> str:
    """A constant as C source: a literal, or a parenthesized expression where the literal alone would not
    do. A negative one (-0.0 and -inf too) is always parenthesized: after a unary minus, `--0.0f` is a
    decrement."""
    if dtype == dtypes.bool:
        return "1" if value else "0"
    if dtype.is_float:
        value = float(value)
        if dtype != dtypes.float64:
            # float, and the half types, which compute in float: the value a float holds, so the
            # compiler neither rounds the decimal a second time nor meets a literal out of float's range
            with np.errstate(over="ignore"):
                value = float(np.float32(value))
        negative = math.copysign(1.0, value) < 0
        if math.isnan(value):
            return f"(-{d.nan})" if negative else d.nan
        if math.isinf(value):
            return f"(-{d.inf})" if negative else d.inf
        s = repr(value)
        if "e" not in s and "." not in s:
            s += ".0"
        s = s if dtype == dtypes.float64 else s + "f"
        return f"({s})" if negative else s
    value = int(value)
    suffix = {"int64": "ll", "uint64": "ull", "uint32": "u"}.get(dtype.name, "")
    # the literal 2**(bits-1) does not fit the type, so -2**(bits-1) would be a wider type (a long
    # in OpenCL, which then will not mix with int vectors)
    if dtype.name == "int64" and value == -(2 ** 63):
        return "(-9223372036854775807ll-1)"
    if dtype.name == "int32" and value == -(2 ** 31):
        return "(-2147483647-1)"
    body = f"{value}{suffix}"
    return f"({body})" if value < 0 else body


class CStyleRenderer:
    def __init__(self, dialect: Dialect, parallel_threshold: int = 1 << 15, threads: int = 0,
                 loop_pragma: str = ""):
        """`loop_pragma`: a line put before every loop (a device that needs its driver told how to
        compile loops; see ops_cl.py)."""
        self.d, self.parallel_threshold, self.threads = dialect, parallel_threshold, threads
        self.loop_pragma = loop_pragma

    # ---- types
    def ctype(self, dtype: DType) -> str:
        """The type a value of dtype is computed in (half types compute in float)."""
        if dtype == dtypes.bool:
            return self.d.bool_type
        if dtype in (dtypes.float16, dtypes.bfloat16):
            return self.d.compute_float
        return self.d.types[dtype.name]

    @property
    def v(self) -> VecSyntax:
        assert self.d.vec is not None, f"the {self.d.name} dialect has no SIMD lanes"
        return self.d.vec

    def vtype(self, dtype: DType) -> str:
        return self.v.types[dtype.name].format(n=self.lanes)

    def vfmt(self, template: str, dtype: DType | None = None, **parts: str) -> str:
        """A vector syntax template filled in; {t} is dtype's vector type, {n} the lane count."""
        return template.format(t=self.vtype(dtype) if dtype is not None else "", n=self.lanes, **parts)

    # Complexity: one branch per uop kind that opens or closes a scope; the shared indent and parallel-
    # region state stay local.
    def render(self, lin: Linearized, name: str | None = None, storage: str = "",  # noqa: C901
               prefetch: dict[int, int] | None = None) -> str:
        """The kernel's source; `storage` goes before the function (static: a helper of another).
        prefetch: buffer -> elements; each vector load of the buffer also asks the cache for the line
        that many elements further on (C; a row group's next block, see rows.py)."""
        d = self.d
        self.prefetch = prefetch or {}
        name = name or lin.name
        self.lanes = lin.lanes
        self.by_lane: dict[tuple[Node, int], Node] = {}
        self.names: dict[int, str] = {}
        self.folds: dict[tuple[int, ...], list[str]] = {}   # HREDUCE groups already folded
        self.counter = 0
        params, body = [], []
        indent = 1
        streaming = bool(lin.extra.get("streaming")) and d.vec is C_VECTORS and lin.lanes == 16
        self.streaming = streaming
        stream_depth = None          # the loop whose end closes the parallel region (and fences)
        if streaming:    # a streaming store faults on memory not 64-byte aligned: checked once a launch
            body.append("  const int tg_nt = (((unsigned long)data0) & 63) == 0;")
        self.moved = _moved_words(lin.uops, d)
        for u in lin.uops:
            op = u.op
            if op is UOps.DEFINE_GLOBAL:
                i, is_out = u.arg
                const = "" if is_out else "const "
                assert u.dtype is not None
                params.append(f"{d.buffer_qualifier}{const}{d.types[u.dtype.name]}* {d.restrict}data{i}")
                continue
            pad = "  " * indent
            if op is UOps.LOOP:
                var, count, n_parallel = u.arg
                if n_parallel and d.global_id is None:
                    threads = f" num_threads({self.threads})" if self.threads else ""
                    collapse = f" collapse({n_parallel})" if n_parallel > 1 else ""
                    work = max(lin.work, lin.flops // heuristics.PARALLEL_OPS)
                    cond = ("" if work >= self.parallel_threshold * 8
                            else f" if({work}>={self.parallel_threshold})")
                    if streaming:
                        # each thread fences its own streaming stores before the region ends
                        body.append(f"{pad}#pragma omp parallel{threads}{cond}")
                        body.append(f"{pad}{{")
                        body.append(f"{pad}#pragma omp for{collapse}")
                        stream_depth = indent
                    elif work >= self.parallel_threshold and self.threads != 1:
                        # one thread: no parallel region to enter on every launch
                        body.append(f"{pad}#pragma omp parallel for{collapse}{threads}{cond}")
                if self.loop_pragma:
                    body.append(pad + self.loop_pragma)
                body.append(
                    f"{pad}for ({self.idx_type(lin)} {var.name} = 0; {var.name} < {count}; {var.name}++) {{"
                )
                indent += 1
            elif op is UOps.ENDLOOP:
                indent -= 1
                body.append("  " * indent + "}")
                if stream_depth is not None and indent == stream_depth:
                    body.append("  " * indent + "_mm_sfence();")
                    body.append("  " * indent + "}")
                    stream_depth = None
            elif op is UOps.GID:
                var, total = u.arg
                body.append(f"{pad}{self.idx_type(lin)} {var.name} = {d.global_id};")
                body.append(f"{pad}if ({var.name} >= {total}) return;")
            elif op is UOps.GROUP:     # launched as exactly one work-group per output: no bound check
                group, local = u.arg
                body.append(f"{pad}{self.idx_type(lin)} {group.name} = {d.group_id};")
                body.append(f"{pad}int {local.name} = {d.local_id};")
            elif op is UOps.LOCAL_REDUCE:
                body.extend(pad + line for line in self.local_reduce(u))
            else:
                text = self.statement(u)
                if text:
                    body.extend(pad + line for line in text.split("\n"))
        vec_header = ""
        if lin.lanes > 1 or d.name == "c":   # C's scalar exp2 / log2 are the vector ones (C_SCALAR_MATH)
            vec_header = self.v.header.replace("BYTES", str(4 * max(lin.lanes, 4)))
        if streaming:
            vec_header = "#include <immintrin.h>\n" + vec_header
        sig = f"{storage}{d.kernel_prefix}{name}({', '.join(params)}) {{"
        text = "\n".join(body)
        outlined, text = self.outline_calls(text)
        return d.header + vec_header + outlined + sig + "\n" + text + "\n}\n"

    def outline_calls(self, text: str) -> tuple[str, str]:
        """(definitions, text) where the dialect's `outlined` functions called more than
        heuristics.OUTLINE_CALLS times in text are called through one out-of-line copy each: a
        2,000-deep chain of float64 sin took NVRTC 384 s inlined and 9 s so."""
        d, defs = self.d, ""
        for f in d.outlined:
            pattern = re.compile(r"\b" + f + r"\(")
            if len(pattern.findall(text)) <= heuristics.OUTLINE_CALLS:
                continue
            t = "float" if f in d.func32.values() else "double"
            defs += d.outline.format(t=t, f=f)
            text = pattern.sub(f"tg_{f}_call(", text)
        return defs, text

    def idx_type(self, lin: Linearized) -> str:
        return "long long" if lin.work >= 2 ** 31 or lin.mem_bytes >= 2 ** 31 else "int"

    # ---- values
    def new_name(self, u: UOp, prefix: str = "v") -> str:
        self.counter += 1
        n = f"{prefix}{self.counter}"
        self.names[id(u)] = n
        return n

    def ref(self, u: UOp) -> str:
        if u.op is UOps.CONST:
            assert u.dtype is not None
            return _lit(u.arg, u.dtype, self.d)
        if u.op is UOps.INDEX_COND and not u.vec:
            return u.arg.render()
        return self.names[id(u)]

    def bcast(self, u: UOp, dtype: DType) -> str:
        """A vector operand: scalars are broadcast (bools become -1/0 masks)."""
        if u.vec:
            return self.ref(u)
        val = f"(-(int)({self.ref(u)}))" if u.dtype == dtypes.bool else self.ref(u)
        return self.vfmt(self.v.splat, dtype, x=val)

    def lane(self, u: UOp, i: int) -> str:
        if not u.vec:
            return self.ref(u)
        x = self.vfmt(self.v.get, x=self.ref(u), i=str(i), h=format(i, "x"))
        return f"({x}!=0)" if u.dtype == dtypes.bool else x

    def per_lane(self, dtype: DType, exprs: list[str]) -> str:
        if dtype == dtypes.bool:
            exprs = [f"-(int)({e})" for e in exprs]
        return self.vfmt(self.v.build, dtype, xs=", ".join(exprs))

    def decl(self, u: UOp, expr: str, prefix: str = "v") -> str:
        assert u.dtype is not None
        t = self.vtype(u.dtype) if u.vec else self.ctype(u.dtype)
        return f"{t} {self.new_name(u, prefix)} = {expr};"

    # Complexity: a dispatch with one branch per uop kind, each a few lines.
    def statement(self, u: UOp) -> str | None:  # noqa: C901
        op = u.op
        if op is UOps.CONST:
            return None
        if op is UOps.INDEX_COND:
            if not u.vec:
                return None
            lanes = [self.sub_lane(u.arg, i).render() for i in range(self.lanes)]
            return self.decl(u, self.per_lane(dtypes.bool, lanes))
        if op is UOps.LOAD:
            buf, idx, _, access = u.arg
            if id(u) in self.moved:
                return self.load_words(u)
            if buf in self.prefetch and u.vec and access == "vector":
                ahead = f"data{buf}+{self.sub_lane(idx, 0).render()}+{self.prefetch[buf]}"
                return self.decl(u, self.load(u)) + f"\n__builtin_prefetch({ahead}, 0, 3);"
            return self.decl(u, self.load(u))
        if op is UOps.ALU:
            return self.decl(u, self.alu(u))
        if op is UOps.DEFINE_ACC:
            assert u.dtype is not None
            init = _lit(u.arg, u.dtype, self.d)
            return self.decl(u, self.vfmt(self.v.splat, u.dtype, x=init) if u.vec else init, "acc")
        if op is UOps.ACC:
            acc, val = u.src
            combine = BinaryOps.ADD if u.arg is ReduceOps.SUM else BinaryOps.MAX
            fake = UOp(UOps.ALU, u.dtype, (acc, val), (combine, None), vec=acc.vec)
            return f"{self.ref(acc)} = {self.alu(fake)};"
        if op is UOps.HREDUCE:
            red_op, which = u.arg
            assert u.dtype is not None
            if self.v.evens and u.dtype in (dtypes.float32, dtypes.int32, dtypes.uint32):
                return self.folded_lanes(u, red_op, which)
            src = u.src[which]
            lanes = [self.lane(src, i) for i in range(self.lanes)]   # bool lanes read as 0/1
            while len(lanes) > 1:
                lanes = [
                    self.scalar_expr(
                        RENDER_TEMPLATES[red_op], u.dtype, u.dtype, [lanes[i], lanes[i + 1]], None
                    )
                    for i in range(0, len(lanes) - 1, 2)
                ] + ([lanes[-1]] if len(lanes) % 2 else [])
            return self.decl(u, lanes[0])
        if op is UOps.STORE:
            return self.store(u)
        raise NotImplementedError(f"[codegen] no rendering for uop {op}")

    def folded_lanes(self, u: UOp, red_op: ReduceOps, which: int) -> str:
        """Lane `which` of a transposing fold of the whole group's vectors. Each level adds the even
        lanes of a pair of vectors to their odd lanes, so every vector's lanes are combined in the
        same pairs and order as the scalar tree combines them (the same bits), in a few shuffles per
        vector instead of an add per lane. The fold is written once, at the group's first HREDUCE;
        source t ends in lane t % lanes of vector t // lanes."""
        assert u.dtype is not None
        lines: list[str] = []
        key = tuple(id(s) for s in u.src)
        if key not in self.folds:
            width = 1 << (len(u.src) - 1).bit_length()        # padded with copies of the last
            vecs = [self.ref(s) for s in u.src] + [self.ref(u.src[-1])] * (width - len(u.src))
            evens, odds = _lane_list(self.lanes, 0), _lane_list(self.lanes, 1)
            for _ in range(self.lanes.bit_length() - 1):      # each level halves every source's span
                pairs = list(zip(vecs[0::2], vecs[1::2])) if len(vecs) > 1 else [(vecs[0], vecs[0])]
                vecs = []
                for a, b in pairs:
                    ev = self.vfmt(self.v.evens, u.dtype, a=a, b=b, idx=evens)
                    od = self.vfmt(self.v.odds, u.dtype, a=a, b=b, idx=odds)
                    self.counter += 1
                    vecs.append(f"fold{self.counter}")
                    value = f"({ev}+{od})" if red_op is ReduceOps.SUM else self.vmax(ev, od, u.dtype)
                    lines.append(f"{self.vtype(u.dtype)} {vecs[-1]} = {value};")
            self.folds[key] = vecs
        vec, lane = self.folds[key][which // self.lanes], which % self.lanes
        lines.append(self.decl(u, self.vfmt(self.v.get, x=vec, i=str(lane), h=format(lane, "x"))))
        return "\n".join(lines)

    def local_reduce(self, u: UOp) -> list[str]:
        """A work-group's partial results combined in local memory by a halving tree; every work
        item ends holding the result."""
        red_op, size, local = u.arg
        assert u.dtype is not None
        t, lid = self.ctype(u.dtype) if u.dtype != dtypes.bool else self.d.types["int32"], local.name
        mem = self.new_name(u, "part")
        combine = self.scalar_expr(
            RENDER_TEMPLATES[red_op], u.dtype, u.dtype, [f"{mem}[{lid}]", f"{mem}[{lid}+s]"], None
        )
        return [f"{self.d.local_memory}{t} {mem}[{size}];",
                f"{mem}[{lid}] = {self.ref(u.src[0])};",
                self.d.barrier,
                f"for (int s = {size // 2}; s > 0; s >>= 1) {{",
                f"  if ({lid} < s) {mem}[{lid}] = {combine};",
                f"  {self.d.barrier}",
                "}",
                f"{t} {self.new_name(u)} = {mem}[0];"]

    def sub_lane(self, node: Node, i: int) -> Node:
        """node at lane i. Kept for the render: a gather's index and mask are substituted lane by lane,
        and loads of one kernel share them (DCGAN's unrolled window sums asked 3x each)."""
        got = self.by_lane.get((node, i))
        if got is None:
            lane = Var("lane", 0, self.lanes - 1)
            got = self.by_lane[(node, i)] = node.substitute({lane: num(i)}) if lane in node.vars() else node
        return got

    def load_scalar(self, buf: int, dtype: DType, idx: Node, valid: Node, other: str | None = None) -> str:
        """The value at idx where valid, else `other` (a load that picks: see Linearizer.alu), else 0."""
        access = f"data{buf}[{idx.render()}]"
        if dtype == dtypes.float16:
            access = self.d.half_load.format(access)
        elif dtype == dtypes.bfloat16:
            access = f"tg_bf16_to_f32({access})"
        elif dtype == dtypes.bool:
            access = f"({access}!=0)"
        other = _lit(0, dtype, self.d) if other is None else other
        if valid.is_const:
            return access if valid.min == 1 else other
        return f"(({valid.render()})?{access}:{other})"

    def load(self, u: UOp) -> str:
        buf, idx, valid, access = u.arg
        assert u.dtype is not None
        if not u.vec:
            return self.load_scalar(buf, u.dtype, idx, valid, self.ref(u.src[0]) if u.src else None)
        if access == "vector" and u.dtype != dtypes.bool:
            base = self.sub_lane(idx, 0).render()
            expr = self.vfmt(self.v.load, u.dtype, addr=f"data{buf}+{base}")
            if u.dtype in NARROW_FLOATS:
                expr = f"{_WIDEN_V[u.dtype]}(*(u16v*)(data{buf}+{base}))"
            zero = self.bcast(u.src[0], u.dtype) if u.src else \
                self.vfmt(self.v.splat, u.dtype, x=_lit(0, u.dtype, self.d))
            if valid.is_const:
                return expr if valid.min == 1 else zero
            return f"(({valid.render()})?{expr}:{zero})"
        lanes = [self.load_scalar(buf, u.dtype, self.sub_lane(idx, i), self.sub_lane(valid, i),
                                  self.lane(u.src[0], i) if u.src else None)
                 for i in range(self.lanes)]
        return self.per_lane(u.dtype, lanes)

    def load_words(self, u: UOp) -> str:
        """A load of a 16-bit float that is only stored again (_moved_words): its words as they are,
        0 (the bits of +0.0) where it is not valid."""
        buf, idx, valid, access = u.arg
        assert u.dtype is not None
        other = self.ref(u.src[0]) if u.src else None      # a picking load's other words (moved too)

        def one(at: Node, ok: Node, i: int | None = None) -> str:
            word = f"data{buf}[{at.render()}]"
            alt = "0" if other is None else other if i is None else f"{other}[{i}]"
            if ok.is_const:
                return word if ok.min == 1 else alt
            return f"(({ok.render()})?{word}:{alt})"
        if not u.vec:
            return f"{self.d.types[u.dtype.name]} {self.new_name(u)} = {one(idx, valid)};"
        if access == "vector":
            expr = f"(*(u16v*)(data{buf}+{self.sub_lane(idx, 0).render()}))"
            alt = "((u16v){})" if other is None else other
            if not valid.is_const:
                expr = f"(({valid.render()})?{expr}:{alt})"
            elif valid.min != 1:
                expr = alt
        else:
            expr = "((u16v){" + ", ".join(one(self.sub_lane(idx, i), self.sub_lane(valid, i), i)
                                          for i in range(self.lanes)) + "})"
        return f"u16v {self.new_name(u)} = {expr};"

    def stored(self, dtype: DType, x: str) -> str:
        """A computed value x as a buffer of dtype holds it (float16 and bfloat16 rounded to their words)."""
        if dtype == dtypes.float16:
            return self.d.half_store.format(x)
        if dtype == dtypes.bfloat16:
            return f"tg_f32_to_bf16({x})"
        return x

    def store(self, u: UOp) -> str:
        buf, idx, valid, access = u.arg
        val = u.src[0]
        dtype = u.dtype
        assert dtype is not None
        words = id(val) in self.moved       # the words of a load, stored as they are

        def conv(x: str) -> str:
            return x if words else self.stored(dtype, x)
        guard = "" if valid.is_const and valid.min == 1 else f"if ({valid.render()}) "
        if _narrowing(val, dtype):      # narrowed once, by the store (rounding twice gives the same bits)
            val = val.src[0]
        if not u.vec:
            src = self.ref(val) if not val.vec else f"{self.ref(val)}[0]"
            return f"{guard}data{buf}[{idx.render()}] = {conv(src)};"
        if access == "vector" and dtype != dtypes.bool:
            addr = f"data{buf}+{self.sub_lane(idx, 0).render()}"
            if getattr(self, "streaming", False):
                plain = self.vfmt(self.v.store, dtype, addr=addr, x=self.bcast(val, dtype))
                return (f"{guard}{{ if (tg_nt) _mm512_stream_ps((float*)({addr}), "
                        f"(__m512){self.bcast(val, dtype)}); else {plain} }}")
            if words:
                return f"{guard}*(u16v*)({addr}) = {self.ref(val)};"
            if dtype in NARROW_FLOATS:
                return f"{guard}*(u16v*)({addr}) = {_NARROW_V[dtype]}({self.bcast(val, dtype)});"
            return guard + self.vfmt(self.v.store, dtype, addr=addr, x=self.bcast(val, dtype))
        parts = []
        for i in range(self.lanes):
            parts.append(f"data{buf}[{self.sub_lane(idx, i).render()}] = {conv(self.lane(val, i))};")
        return guard + "{ " + " ".join(parts) + " }"

    # ---- ALU
    # Complexity: a dispatch with one branch per ALU op family, each a line or two.
    def scalar_expr(self, op, dtype: DType, src_dtype: DType, args: list[str], arg) -> str:  # noqa: C901
        d = self.d
        if op is UnaryOps.CAST:
            return self.cast(src_dtype, arg, args[0])
        if op is UnaryOps.BITCAST:
            x = args[0]
            if src_dtype == dtypes.bfloat16:          # bf16 values compute as float: recover the bits
                x = f"tg_f32_to_bf16({x})"
            elif src_dtype == dtypes.float16:         # so do half values
                x = d.half_value.format(x)
            src, dst = d.types[src_dtype.name], d.types[arg.name]
            out = d.bitcast.format(x, src=src, dst=dst, dst_word=dst.replace("unsigned ", "u"))
            if arg == dtypes.float16:
                return d.half_load.format(out)
            return f"tg_bf16_to_f32({out})" if arg == dtypes.bfloat16 else out
        if src_dtype == dtypes.bool and op in BOOL_TEMPLATES:
            return BOOL_TEMPLATES[op].format(*args)
        if op in WRAPPING_OPS and self.wraps_by_hand(src_dtype):
            # in unsigned arithmetic, which wraps: a signed overflow (x - INT_MIN, x + INT_MAX) is undefined,
            # and GPU compilers use that (OpenCL turned x - INT_MIN into x)
            signed, unsigned = d.types[src_dtype.name], d.types["u" + src_dtype.name]
            body = WRAPPING_OPS[op].format(*[f"(({unsigned})({a}))" for a in args], u=unsigned)
            return f"(({signed}){body})"
        tmpl = RENDER_TEMPLATES[op]
        if op is BinaryOps.MAX and src_dtype.is_float:
            tmpl = "((({0}>{1})||({0}!={0}))?{0}:{1})"    # NaN propagates, as in torch.maximum
        elif op is BinaryOps.MAX and src_dtype.itemsize <= 4:
            tmpl = d.int_max
        if op is BinaryOps.MOD and src_dtype.is_float:
            tmpl = "@fmod({0},{1})"
        if op is UnaryOps.RECIP and src_dtype.is_float:
            tmpl = "(1.0f/{0})" if src_dtype != dtypes.float64 else "(1.0/{0})"
        if "@" in tmpl:
            funcs = d.func64 if src_dtype == dtypes.float64 else d.func32
            for f in FLOAT_FUNCS:
                tmpl = tmpl.replace("@" + f + "(", funcs[f] + "(")
        return tmpl.format(*args)

    def wraps_by_hand(self, dtype: DType) -> bool:
        """Whether signed overflow of dtype's values must be made to wrap in the source: a signed type of
        32 or 64 bits (narrower ones compute in int, which they cannot overflow) in a dialect where it
        does not wrap by itself."""
        return dtype.is_int and not dtype.is_unsigned and dtype.itemsize >= 4 and not self.d.signed_wraps

    def cast(self, src: DType, dst: DType, x: str) -> str:
        if dst == dtypes.bool:
            return f"(({x})!=0)"
        if dst == dtypes.float16:
            if src == dtypes.float64:
                return self.d.half_round64.format(x)
            # ints go through float (exact for every int a half can hold): OpenCL's convert_half has no
            # integer overloads, so convert_half(long) is ambiguous
            return self.d.half_round.format(x if src.is_float else f"(float)({x})")
        if dst == dtypes.bfloat16:
            return f"tg_bf16_to_f32(tg_f32_to_bf16((float)({x})))"
        return f"(({self.ctype(dst)})({x}))"

    def alu(self, u: UOp) -> str:
        op, arg = u.arg
        srcs = u.src
        src_dtype = srcs[-1].dtype if op is TernaryOps.WHERE else srcs[0].dtype
        assert u.dtype is not None and src_dtype is not None
        if not u.vec:
            args = [self.ref(s) for s in srcs]
            leaves = op is UnaryOps.CAST and src_dtype in NARROW_FLOATS and arg != src_dtype
            if leaves and not _exact(srcs[0]):
                args[0] = self.cast(dtypes.float32, src_dtype, args[0])
            return self.scalar_expr(op, u.dtype, src_dtype, args, arg)
        native = self.vector_expr(op, u.dtype, src_dtype, srcs, arg)
        if native is not None:
            return native
        exprs = [self.scalar_expr(op, u.dtype, src_dtype, [self.lane(s, i) for s in srcs], arg)
                 for i in range(self.lanes)]
        return self.per_lane(u.dtype, exprs)

    # Complexity: a dispatch with one branch per ALU op family the vector syntax can express.
    def vector_expr(self, op, dtype: DType, src_dtype: DType, srcs: tuple[UOp, ...], arg) -> str | None:  # noqa: C901
        r = [self.ref(s) for s in srcs]
        is_bool = src_dtype == dtypes.bool
        if op is UnaryOps.CAST:
            return self.vector_cast(srcs[0], src_dtype, arg) if srcs[0].vec else None
        if op is UnaryOps.BITCAST:
            return self.vfmt(self.v.bitcast, arg, x=self.bcast(srcs[0], src_dtype)) if not is_bool else None
        if is_bool:
            simple = {BinaryOps.ADD: "({0}|{1})", BinaryOps.MUL: "({0}&{1})", BinaryOps.MAX: "({0}|{1})",
                      BinaryOps.AND: "({0}&{1})", BinaryOps.OR: "({0}|{1})", BinaryOps.XOR: "({0}^{1})",
                      BinaryOps.CMPNE: "({0}^{1})", BinaryOps.CMPLT: "((~{0})&{1})", UnaryOps.NEG: "(~{0})"}
            if op in simple:
                return simple[op].format(*[self.bcast(s, dtypes.bool) for s in srcs])
            if op is not TernaryOps.WHERE:
                return None
        if op is TernaryOps.WHERE:
            cond, a, b = srcs
            if not cond.vec:
                return f"({r[0]}?{self.bcast(a, dtype)}:{self.bcast(b, dtype)})"
            return self.select(self.ref(cond), self.bcast(a, dtype), self.bcast(b, dtype), dtype)
        if op is BinaryOps.MAX:
            return self.vmax(self.bcast(srcs[0], dtype), self.bcast(srcs[1], dtype), dtype)
        computed_as_f32 = src_dtype in (dtypes.float32, *NARROW_FLOATS)     # narrow lanes are floats
        if op is UnaryOps.RECIP and computed_as_f32:
            return f"(1.0f/{r[0]})"
        if op.name in self.v.math and computed_as_f32 and srcs[0].vec:
            return f"{self.v.math[op.name]}({r[0]})"
        basic = {
            BinaryOps.ADD,
            BinaryOps.MUL,
            UnaryOps.NEG,
            TernaryOps.MULACC,
            BinaryOps.CMPLT,
            BinaryOps.CMPNE,
        }
        if src_dtype.is_int:
            basic |= {BinaryOps.AND, BinaryOps.OR, BinaryOps.XOR, BinaryOps.SHL, BinaryOps.SHR}
            if self.wraps_by_hand(src_dtype):
                basic -= set(WRAPPING_OPS)     # lane by lane, each wrapping (scalar_expr)
        if op in basic:
            return RENDER_TEMPLATES[op].format(*r)
        return None

    def vector_cast(self, src: UOp, src_dtype: DType, to: DType) -> str:
        """A vector value converted lane by lane (bool masks are -1/0, so negated into 1/0). float16 and
        bfloat16 lanes are floats: a value leaving its narrow type is rounded to it first unless it is
        one of its values already (as alu() does for a scalar), one entering it is rounded to it."""
        x = self.ref(src)
        if to == src_dtype:
            return x
        if src_dtype in NARROW_FLOATS:
            x = x if _exact(src) else f"{_ROUND_V[src_dtype]}({x})"
            src_dtype = dtypes.float32          # its float value, rounded again if `to` is narrow too
        if to in NARROW_FLOATS:
            return f"{_ROUND_V[to]}({self._vector_convert(x, src_dtype, dtypes.float32)})"
        return self._vector_convert(x, src_dtype, to)

    def _vector_convert(self, x: str, src_dtype: DType, to: DType) -> str:
        if to == src_dtype:
            return x
        if src_dtype == dtypes.bool:
            return f"(-({x}))" if to == dtypes.int32 else self.vfmt(self.v.convert, to, x=f"-({x})")
        if to == dtypes.bool:
            return f"({x}!=0)"
        return self.vfmt(self.v.convert, to, x=x)

    def vmax(self, lhs: str, rhs: str, dtype: DType) -> str:
        """Lane-wise max of two vectors; a NaN on the left propagates, as in the scalar template."""
        mask = f"(({lhs}>{rhs})|({lhs}!={lhs}))" if dtype.is_float else f"({lhs}>{rhs})"
        return self.select(mask, lhs, rhs, dtype)

    def select(self, mask: str, a: str, b: str, dtype: DType) -> str:
        return self.vfmt(self.v.select, dtype, m=mask, a=a, b=b)


# float16 and bfloat16 values are computed in float and rounded when they leave their type: stored,
# or cast to another type (a fused kernel then computes what it would from the stored value)
NARROW_FLOATS = (dtypes.float16, dtypes.bfloat16)
_ROUND_V = {dtypes.float16: "tg_h_round_v", dtypes.bfloat16: "tg_bf16_round_v"}   # a float vector rounded
_WIDEN_V = {dtypes.float16: "tg_h2f_v", dtypes.bfloat16: "tg_bf16_widen_v"}      # 16-bit words -> floats
_NARROW_V = {dtypes.float16: "tg_f2h_v", dtypes.bfloat16: "tg_bf16_narrow_v"}    # floats -> 16-bit words


def _moved_words(uops: list[UOp], d: Dialect) -> set[int]:
    """The loads (ids) of a float16 / bfloat16 buffer held as 16-bit words in d whose every use is a
    store of that value to the same type (a copy, a pad, a permute, a slice): the kernel moves their words
    as they are instead of widening each to float and rounding it back (which gives the same bits,
    NaNs included, at several times the cost). A vector of them needs C's u16v and a store of the same
    width."""
    users: dict[int, list[UOp]] = {}
    for u in uops:
        for s in u.src:
            users.setdefault(id(s), []).append(u)
    moved: set[int] = set()
    for u in reversed(uops):         # users first: a picking load's other value moves with it
        if u.op is UOps.LOAD and u.dtype in NARROW_FLOATS and d.types.get(u.dtype.name) in WORD_TYPES \
                and (not u.vec or d.vec is C_VECTORS) and id(u) in users \
                and all(s.dtype == u.dtype and s.src[0] is u and s.vec == u.vec
                        and (s.op is UOps.STORE or id(s) in moved) for s in users[id(u)]):
            moved.add(id(u))
    for u in uops:                   # ... and one whose other value cannot move computes as float
        if id(u) in moved and u.src and id(u.src[0]) not in moved:
            moved.discard(id(u))
    return moved


WORD_TYPES = ("unsigned short", "ushort")     # how a dialect declares a buffer of 16-bit words


def _narrowing(u: UOp, dtype: DType) -> bool:
    """Whether u is a float32 value cast to the narrow float type dtype (a store of it narrows the
    float32 value itself: the same bits, one conversion fewer)."""
    return dtype in NARROW_FLOATS and u.op is UOps.ALU and u.arg[0] is UnaryOps.CAST and u.arg[1] == dtype \
        and u.src[0].dtype == dtypes.float32


def _exact(u: UOp) -> bool:
    """Whether a narrow-typed value is already one of its type's values (loaded, a constant, a cast
    to it): rounding it again changes nothing."""
    while u.op is UOps.LOAD and u.src:       # a picking load: its value or the other one's (a loop: a
        u = u.src[0]                         # cat of a thousand parts is a chain that long)
    return u.op in (UOps.LOAD, UOps.CONST) or (u.op is UOps.ALU and u.arg[0] is UnaryOps.CAST)


def _lane_list(lanes: int, first: int) -> str:
    """Every other lane number of two concatenated vectors, from first: a shuffle's selector."""
    return ", ".join(str(i) for i in range(first, 2 * lanes, 2))
