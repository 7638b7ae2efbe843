/* tg's elementwise reductions, shared by the collective engines written in C (shm_engine.c,
 * ucx_engine.c): the Python side puts this text before each engine's source. dtype and op codes
 * are wire.DTYPE_CODES' order and ReduceOp's values. Integers wrap as numpy's do; MIN and MAX keep
 * a NaN; float16 and bfloat16 are summed in float32 and rounded once (a ring's steps: once each); every
 * rank combines in the same order. */
#include <stdint.h>
#include <string.h>

#define BLOCK 2048            /* elements reduced at a time: the partial sums stay in L1 */
enum { D_BOOL, D_I8, D_U8, D_I16, D_U16, D_I32, D_U32, D_I64, D_U64, D_F16, D_F32, D_F64, D_C64, D_C128, D_BF16 };
enum { R_SUM = 1, R_PROD = 2, R_MIN = 3, R_MAX = 4, R_AVG = 5, R_BAND = 6, R_BOR = 7, R_BXOR = 8 };
static const int SIZE[] = {1, 1, 1, 2, 2, 4, 4, 8, 8, 2, 4, 8, 8, 16, 2};

/* bfloat16 words: widened to float32 (the bits on top), rounded back to nearest even; a NaN stays a
   quiet NaN with its top bits (wire.bf16_narrow) */
static inline float bf16_widen(uint16_t w) { union { uint32_t u; float f; } c; c.u = (uint32_t)w << 16; return c.f; }
static inline uint16_t bf16_narrow(float f) {
    union { uint32_t u; float f; } c; c.f = f;
    uint32_t top = c.u >> 16;
    if (f != f) return (uint16_t)((top & 0x7f) ? top : (top | 0x40));
    return (uint16_t)((c.u + 0x7fffu + (top & 1u)) >> 16);
}

/* ------------------------------------------------------------------ reductions */

#define BINOPS(T, NAME)                                                                           \
    static void NAME##_sum(T *d, const T *a, const T *b, uint64_t m) { for (uint64_t i = 0; i < m; i++) d[i] = a[i] + b[i]; } \
    static void NAME##_prod(T *d, const T *a, const T *b, uint64_t m) { for (uint64_t i = 0; i < m; i++) d[i] = a[i] * b[i]; } \
    static void NAME##_min(T *d, const T *a, const T *b, uint64_t m) { for (uint64_t i = 0; i < m; i++) d[i] = (a[i] < b[i] || a[i] != a[i]) ? a[i] : b[i]; } \
    static void NAME##_max(T *d, const T *a, const T *b, uint64_t m) { for (uint64_t i = 0; i < m; i++) d[i] = (a[i] > b[i] || a[i] != a[i]) ? a[i] : b[i]; }
#define BITOPS(T, NAME)                                                                           \
    static void NAME##_band(T *d, const T *a, const T *b, uint64_t m) { for (uint64_t i = 0; i < m; i++) d[i] = a[i] & b[i]; } \
    static void NAME##_bor(T *d, const T *a, const T *b, uint64_t m) { for (uint64_t i = 0; i < m; i++) d[i] = a[i] | b[i]; } \
    static void NAME##_bxor(T *d, const T *a, const T *b, uint64_t m) { for (uint64_t i = 0; i < m; i++) d[i] = a[i] ^ b[i]; }

/* integers wrap (numpy's rule): computed unsigned */
BINOPS(uint8_t, u8) BITOPS(uint8_t, u8)
BINOPS(uint16_t, u16) BITOPS(uint16_t, u16)
BINOPS(uint32_t, u32) BITOPS(uint32_t, u32)
BINOPS(uint64_t, u64) BITOPS(uint64_t, u64)
BINOPS(float, f32)
BINOPS(double, f64)
/* signed order for MIN and MAX */
#define SIGNED(T, NAME)                                                                           \
    static void NAME##_min(T *d, const T *a, const T *b, uint64_t m) { for (uint64_t i = 0; i < m; i++) d[i] = a[i] < b[i] ? a[i] : b[i]; } \
    static void NAME##_max(T *d, const T *a, const T *b, uint64_t m) { for (uint64_t i = 0; i < m; i++) d[i] = a[i] > b[i] ? a[i] : b[i]; }
SIGNED(int8_t, i8) SIGNED(int16_t, i16) SIGNED(int32_t, i32) SIGNED(int64_t, i64)
/* complex: (re, im) pairs; the product written out as numpy's formula, each part rounded once */
#define COMPLEX(T, NAME, REAL)                                                                    \
    static void NAME##_sum(T *d, const T *a, const T *b, uint64_t m) { REAL##_sum(d, a, b, 2 * m); } \
    static void NAME##_prod(T *d, const T *a, const T *b, uint64_t m) {                           \
        for (uint64_t i = 0; i < m; i++) {                                                        \
            T re = a[2 * i] * b[2 * i] - a[2 * i + 1] * b[2 * i + 1];                             \
            T im = a[2 * i] * b[2 * i + 1] + a[2 * i + 1] * b[2 * i];                             \
            d[2 * i] = re, d[2 * i + 1] = im;                                                     \
        }                                                                                         \
    }
COMPLEX(float, c64, f32) COMPLEX(double, c128, f64)
/* bool: SUM, MAX, BOR are or; PROD, MIN, BAND are and; BXOR is xor; any nonzero byte is true */
static void b_or(uint8_t *d, const uint8_t *a, const uint8_t *b, uint64_t m) { for (uint64_t i = 0; i < m; i++) d[i] = (a[i] | b[i]) != 0; }
static void b_and(uint8_t *d, const uint8_t *a, const uint8_t *b, uint64_t m) { for (uint64_t i = 0; i < m; i++) d[i] = a[i] && b[i]; }
static void b_xor(uint8_t *d, const uint8_t *a, const uint8_t *b, uint64_t m) { for (uint64_t i = 0; i < m; i++) d[i] = (a[i] != 0) != (b[i] != 0); }

/* one combine of two bfloat16 arrays (a ring step), in float32, rounded once */
#define BF16OP(NAME, EXPR)                                                                        \
    static void bf16_##NAME(uint16_t *d, const uint16_t *a, const uint16_t *b, uint64_t m) {      \
        for (uint64_t i = 0; i < m; i++) { float x = bf16_widen(a[i]), y = bf16_widen(b[i]); d[i] = bf16_narrow(EXPR); } \
    }
BF16OP(sum, x + y)
BF16OP(min, (x < y || x != x) ? x : y)
BF16OP(max, (x > y || x != x) ? x : y)

typedef void (*binop)(void *, const void *, const void *, uint64_t);

static binop pick(int dtype, int op) {
    int sum = op == R_SUM || op == R_AVG;
    if (dtype == D_BOOL) {
        if (sum || op == R_MAX || op == R_BOR) return (binop)b_or;
        if (op == R_BXOR) return (binop)b_xor;
        return (binop)b_and;
    }
#define INT_CASE(CODE, U, S)                                                                      \
    case CODE:                                                                                    \
        return sum ? (binop)U##_sum : op == R_PROD ? (binop)U##_prod : op == R_MIN ? (binop)S##_min \
             : op == R_MAX ? (binop)S##_max : op == R_BAND ? (binop)U##_band : op == R_BOR ? (binop)U##_bor \
             : (binop)U##_bxor;
    switch (dtype) {
        INT_CASE(D_I8, u8, i8)
        INT_CASE(D_U8, u8, u8)
        INT_CASE(D_I16, u16, i16)
        INT_CASE(D_U16, u16, u16)
        INT_CASE(D_I32, u32, i32)
        INT_CASE(D_U32, u32, u32)
        INT_CASE(D_I64, u64, i64)
        INT_CASE(D_U64, u64, u64)
    case D_F16:   /* reduced in float32 (see reduce_f16) */
    case D_F32: return sum ? (binop)f32_sum : op == R_PROD ? (binop)f32_prod : op == R_MIN ? (binop)f32_min : (binop)f32_max;
    case D_F64: return sum ? (binop)f64_sum : op == R_PROD ? (binop)f64_prod : op == R_MIN ? (binop)f64_min : (binop)f64_max;
    case D_C64: return op == R_PROD ? (binop)c64_prod : (binop)c64_sum;
    case D_C128: return op == R_PROD ? (binop)c128_prod : (binop)c128_sum;
    case D_BF16: return sum ? (binop)bf16_sum : op == R_MIN ? (binop)bf16_min : op == R_MAX ? (binop)bf16_max : NULL;
    }
    return NULL;
}

/* AVG's last step, as numpy divides: a real by n, a complex by multiplying with 1 / n (its division
   by a real number does that). */
static void divide(int dtype, void *d, uint64_t m, int n) {
    if (dtype == D_F32) {
        float *f = d;
        for (uint64_t i = 0; i < m; i++) f[i] /= (float)n;
    } else if (dtype == D_F64) {
        double *f = d;
        for (uint64_t i = 0; i < m; i++) f[i] /= (double)n;
    } else if (dtype == D_C64) {
        float *f = d, scale = 1.0f / (float)n;
        for (uint64_t i = 0; i < 2 * m; i++) f[i] *= scale;
    } else if (dtype == D_C128) {
        double *f = d, scale = 1.0 / (double)n;
        for (uint64_t i = 0; i < 2 * m; i++) f[i] *= scale;
    }
}

/* dst = srcs[0] op srcs[1] op ... op srcs[k - 1] (in that order), then / k for AVG; dst may be any
   of the sources' memory only if it is srcs[0]. float16 is summed in float32 and rounded once. */
static void reduce_into(int dtype, int op, void *dst, const void **srcs, int k, uint64_t m) {
    binop f = pick(dtype, op);
    int es = SIZE[dtype];
    if (dtype == D_F16 || dtype == D_BF16) {
        binop wide = pick(D_F32, op);
        float acc[BLOCK], other[BLOCK];
        for (uint64_t lo = 0; lo < m; lo += BLOCK) {
            uint64_t b = m - lo < BLOCK ? m - lo : BLOCK;
            for (int j = 0; j < k; j++) {
                float *to = j ? other : acc;
                if (dtype == D_F16) {
                    const _Float16 *s = (const _Float16 *)srcs[j] + lo;
                    for (uint64_t i = 0; i < b; i++) to[i] = (float)s[i];
                } else {
                    const uint16_t *s = (const uint16_t *)srcs[j] + lo;
                    for (uint64_t i = 0; i < b; i++) to[i] = bf16_widen(s[i]);
                }
                if (j) wide(acc, acc, other, b);
            }
            if (op == R_AVG) divide(D_F32, acc, b, k);
            if (dtype == D_F16) {
                _Float16 *d = (_Float16 *)dst + lo;
                for (uint64_t i = 0; i < b; i++) d[i] = (_Float16)acc[i];
            } else {
                uint16_t *d = (uint16_t *)dst + lo;
                for (uint64_t i = 0; i < b; i++) d[i] = bf16_narrow(acc[i]);
            }
        }
        return;
    }
    if (k == 1) {
        if (dst != srcs[0]) memmove(dst, srcs[0], m * es);
    } else {
        for (uint64_t lo = 0; lo < m; lo += BLOCK) {
            uint64_t b = m - lo < BLOCK ? m - lo : BLOCK;
            uint8_t *d = (uint8_t *)dst + lo * es;
            f(d, (const uint8_t *)srcs[0] + lo * es, (const uint8_t *)srcs[1] + lo * es, b);
            for (int j = 2; j < k; j++) f(d, d, (const uint8_t *)srcs[j] + lo * es, b);
        }
    }
    if (op == R_AVG) divide(dtype, dst, m, k);
}
