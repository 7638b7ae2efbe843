/* tg's shared-memory collective engine: every collective of a group whose ranks share one host.
 *
 * Each rank owns one segment that every other rank of the group maps: a head of counters and two
 * slots. A collective is a number of rounds, the same on every rank; round g uses slot g % 2 of
 * every segment. In a round a rank waits until its slot is free (every peer has finished the round
 * before last, which read it), writes what the peers need into it (round 0 also writes the call's
 * descriptor), publishes it (posted = g + 1), waits for the peers it reads from, reads, and
 * finishes the round (consumed = g + 1). Round 0 waits for every rank and compares the descriptor
 * hashes before any data is read: that is the agreement, folded into the first exchange.
 *
 * Waiting spins briefly, then yields, then sleeps on a futex of the counter (the poster wakes
 * sleepers only when a waiter says it sleeps). While it waits, a rank polls the peers' TCP
 * connections every millisecond: nothing but an ABORT frame or the end of the stream (a dead
 * process) arrives there while the group's collectives run here, so either ends the wait at once
 * and the Python side reads why. Past the job's timeout the wait ends naming the peer not seen.
 *
 * Nothing read from a peer's segment is used as a size: the sizes are this rank's own, which the
 * agreement has shown equal on every rank. Descriptors are copied out at most DESC_MAX bytes.
 * Reductions combine the ranks' values in rank order, so every rank gets the same bits.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define OFF_POSTED 0
#define OFF_CONSUMED 64
#define OFF_SLEEPERS 128
#define SEG_HEAD 4096
#define SLOT_HEAD 4096
#define DESC_MAX 4080
#define BLOCK 2048            /* elements reduced at a time: the partial sums stay in L1 */

enum { OK = 0, DISAGREE = 1, TIMEOUT = 2, PEER_SOCKET = 3 };
enum { D_BOOL, D_I8, D_U8, D_I16, D_U16, D_I32, D_U32, D_I64, D_U64, D_F16, D_F32, D_F64, D_C64, D_C128 };
enum { R_SUM = 1, R_PROD = 2, R_MIN = 3, R_MAX = 4, R_AVG = 5, R_BAND = 6, R_BOR = 7, R_BXOR = 8 };
static const int SIZE[] = {1, 1, 1, 2, 2, 4, 4, 8, 8, 2, 4, 8, 8, 16};

typedef struct {
    int rank, n;
    uint64_t slot_bytes;
    uint8_t **seg;
    struct pollfd *fds;       /* the peers' TCP connections (n - 1 of them) */
    int *fd_rank;             /* the peer each of fds belongs to */
    double timeout, spin;     /* seconds: the job's timeout; yielding before sleeping */
    uint64_t parts_from;      /* bytes from which all_reduce reduces in parts (all_reduce_parts) */
    int spins;                /* polls before a wait starts yielding */
    uint64_t round;           /* rounds this rank has posted */
    int culprit;              /* the peer a failed wait names */
    uint64_t fail_round;      /* the round whose descriptors disagreed */
} engine;

/* ------------------------------------------------------------------ waiting */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static inline uint64_t *counter(engine *e, int r, int off) { return (uint64_t *)(e->seg[r] + off); }

static void wake(engine *e, int off) {
    uint32_t *sleepers = (uint32_t *)(e->seg[e->rank] + OFF_SLEEPERS);
    if (__atomic_load_n(sleepers, __ATOMIC_SEQ_CST))
        syscall(SYS_futex, counter(e, e->rank, off), FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

static void set_counter(engine *e, int off, uint64_t value) {
    __atomic_store_n(counter(e, e->rank, off), value, __ATOMIC_SEQ_CST);
    wake(e, off);
}

/* A peer's connection is readable: an ABORT frame or the end of the stream. */
static int check_peers(engine *e) {
    if (e->n < 2 || poll(e->fds, e->n - 1, 0) <= 0) return OK;
    for (int i = 0; i < e->n - 1; i++)
        if (e->fds[i].revents) {
            e->culprit = e->fd_rank[i];
            return PEER_SOCKET;
        }
    return OK;
}

static int wait_for(engine *e, int peer, int off, uint64_t want) {
    uint64_t *c = counter(e, peer, off);
    for (int i = 0; i < e->spins; i++) {
        if (__atomic_load_n(c, __ATOMIC_ACQUIRE) >= want) return OK;
        relax();
    }
    double start = now(), next_check = start;
    uint32_t *sleepers = (uint32_t *)(e->seg[peer] + OFF_SLEEPERS);
    for (;;) {
        if (__atomic_load_n(c, __ATOMIC_ACQUIRE) >= want) return OK;
        double t = now();
        if (t >= next_check) {
            int rc = check_peers(e);
            if (rc == OK && t - start > e->timeout) e->culprit = peer, rc = TIMEOUT;
            /* the peer may have arrived while this rank was off the core: only then a failure */
            if (rc != OK) return __atomic_load_n(c, __ATOMIC_ACQUIRE) >= want ? OK : rc;
            next_check = t + 1e-3;
        }
        if (t - start < e->spin) {
            sched_yield();
            continue;
        }
        __atomic_fetch_add(sleepers, 1, __ATOMIC_SEQ_CST);
        uint64_t seen = __atomic_load_n(c, __ATOMIC_SEQ_CST);
        if (seen < want) {
            struct timespec ms = {0, 1000000};
            syscall(SYS_futex, c, FUTEX_WAIT, (uint32_t)seen, &ms, NULL, 0);   /* the low half */
        }
        __atomic_fetch_sub(sleepers, 1, __ATOMIC_SEQ_CST);
    }
}

/* ------------------------------------------------------------------ rounds */

static inline uint8_t *slot(engine *e, int r, uint64_t g) {
    return e->seg[r] + SEG_HEAD + (g & 1) * (SLOT_HEAD + e->slot_bytes);
}
static inline uint8_t *data(engine *e, int r, uint64_t g) { return slot(e, r, g) + SLOT_HEAD; }

/* This rank's slot for the next round, once every peer has finished the round that last used it. */
static int begin(engine *e, uint8_t **mine) {
    uint64_t g = e->round;
    if (g >= 2)
        for (int r = 0; r < e->n; r++)
            if (r != e->rank) {
                int rc = wait_for(e, r, OFF_CONSUMED, g - 1);
                if (rc != OK) return rc;
            }
    *mine = data(e, e->rank, g);
    return OK;
}

static void header(engine *e, uint64_t hash, const char *desc, uint32_t len) {
    uint8_t *h = slot(e, e->rank, e->round);
    if (len > DESC_MAX) len = DESC_MAX;
    memcpy(h, &hash, 8);
    memcpy(h + 8, &len, 4);
    memcpy(h + 16, desc, len);
}

static void publish(engine *e) {
    e->round++;
    set_counter(e, OFF_POSTED, e->round);
}

static void finish(engine *e) { set_counter(e, OFF_CONSUMED, e->round); }

static int wait_posted(engine *e, int r) { return wait_for(e, r, OFF_POSTED, e->round); }

/* Round 0 of a call: every rank posted; every descriptor hash equal to this rank's. */
static int agree(engine *e) {
    uint64_t g = e->round - 1, mine;
    memcpy(&mine, slot(e, e->rank, g), 8);
    for (int r = 0; r < e->n; r++)
        if (r != e->rank) {
            int rc = wait_posted(e, r);
            if (rc != OK) return rc;
        }
    for (int r = 0; r < e->n; r++) {
        uint64_t theirs;
        memcpy(&theirs, slot(e, r, g), 8);
        if (theirs != mine) {
            e->fail_round = g;
            return DISAGREE;
        }
    }
    return OK;
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
    if (dtype == D_F16) {
        float acc[BLOCK], other[BLOCK];
        for (uint64_t lo = 0; lo < m; lo += BLOCK) {
            uint64_t b = m - lo < BLOCK ? m - lo : BLOCK;
            const _Float16 *s0 = (const _Float16 *)srcs[0] + lo;
            for (uint64_t i = 0; i < b; i++) acc[i] = (float)s0[i];
            for (int j = 1; j < k; j++) {
                const _Float16 *s = (const _Float16 *)srcs[j] + lo;
                for (uint64_t i = 0; i < b; i++) other[i] = (float)s[i];
                f(acc, acc, other, b);
            }
            if (op == R_AVG) divide(D_F32, acc, b, k);
            _Float16 *d = (_Float16 *)dst + lo;
            for (uint64_t i = 0; i < b; i++) d[i] = (_Float16)acc[i];
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

/* ------------------------------------------------------------------ the collectives */

#define TRY(x) do { int rc_ = (x); if (rc_ != OK) return rc_; } while (0)
#define CEIL(a, b) (((a) + (b) - 1) / (b))

/* Round k of a call: this rank's slot, with the call's descriptor in round 0. */
static int open_round(engine *e, uint64_t k, uint64_t hash, const char *desc, uint32_t len, uint8_t **mine) {
    TRY(begin(e, mine));
    if (k == 0) header(e, hash, desc, len);
    return OK;
}

/* After publishing round k: round 0 waits for everyone and agrees; later rounds wait for `from`
   (-1: every peer, -2: none). */
static int gather_round(engine *e, uint64_t k, int from) {
    if (k == 0) return agree(e);
    if (from == -2) return OK;
    for (int r = 0; r < e->n; r++)
        if (r != e->rank && (from == -1 || r == from)) TRY(wait_posted(e, r));
    return OK;
}

int tg_barrier(engine *e, uint64_t hash, const char *desc, uint32_t len) {
    uint8_t *mine;
    TRY(open_round(e, 0, hash, desc, len, &mine));
    publish(e);
    TRY(agree(e));
    finish(e);
    return OK;
}

/* Large all_reduce in two rounds a chunk: each rank posts the parts of its chunk its peers reduce,
   reduces its own part (its values first, then the others' in rank order: one rank computes each part,
   so every rank ends with the same bits) into its memory and posts it, then copies the others'. */
static int all_reduce_parts(engine *e, uint8_t *buf, uint64_t count, int dtype, int op, uint64_t hash,
                            const char *desc, uint32_t len) {
    int n = e->n, me = e->rank, es = SIZE[dtype];
    uint64_t per = e->slot_bytes / ((uint64_t)n * es), chunk = per * n, rounds = count ? CEIL(count, chunk) : 1;
    const void *srcs[n];
    for (uint64_t k = 0; k < rounds; k++) {
        uint64_t lo = k * chunk, m = count - lo < chunk ? count - lo : chunk;
        uint8_t *mine, *part[n];
        uint64_t size[n];
        for (int j = 0; j < n; j++) {
            uint64_t a = m * j / n, b = m * (j + 1) / n;
            part[j] = buf + (lo + a) * es, size[j] = b - a;
        }
        TRY(open_round(e, k, hash, desc, len, &mine));
        for (int j = 0; j < n; j++)
            if (j != me) memcpy(mine + j * per * es, part[j], size[j] * es);
        publish(e);
        TRY(gather_round(e, k, -1));
        srcs[0] = part[me];
        for (int r = 0, i = 1; r < n; r++)
            if (r != me) srcs[i++] = data(e, r, e->round - 1) + me * per * es;
        reduce_into(dtype, op, part[me], srcs, n, size[me]);
        finish(e);
        TRY(begin(e, &mine));
        memcpy(mine, part[me], size[me] * es);
        publish(e);
        TRY(gather_round(e, 1, -1));
        for (int r = 0; r < n; r++)
            if (r != me) memcpy(part[r], data(e, r, e->round - 1), size[r] * es);
        finish(e);
    }
    return OK;
}

int tg_all_reduce(engine *e, void *buf, uint64_t count, int dtype, int op, uint64_t hash, const char *desc,
                  uint32_t len) {
    int es = SIZE[dtype];
    if (count * es >= e->parts_from) return all_reduce_parts(e, buf, count, dtype, op, hash, desc, len);
    uint64_t per = e->slot_bytes / es, rounds = count ? CEIL(count, per) : 1;
    const void *srcs[e->n];
    for (uint64_t k = 0; k < rounds; k++) {
        uint64_t lo = k * per, m = count - lo < per ? count - lo : per;
        uint8_t *mine;
        TRY(open_round(e, k, hash, desc, len, &mine));
        memcpy(mine, (uint8_t *)buf + lo * es, m * es);
        publish(e);
        TRY(gather_round(e, k, -1));
        for (int r = 0; r < e->n; r++) srcs[r] = data(e, r, e->round - 1);
        reduce_into(dtype, op, (uint8_t *)buf + lo * es, srcs, e->n, m);
        finish(e);
    }
    return OK;
}

int tg_broadcast(engine *e, void *buf, uint64_t nbytes, int root, uint64_t hash, const char *desc, uint32_t len) {
    uint64_t per = e->slot_bytes, rounds = nbytes ? CEIL(nbytes, per) : 1;
    for (uint64_t k = 0; k < rounds; k++) {
        uint64_t lo = k * per, m = nbytes - lo < per ? nbytes - lo : per;
        uint8_t *mine;
        TRY(open_round(e, k, hash, desc, len, &mine));
        if (e->rank == root) memcpy(mine, (uint8_t *)buf + lo, m);
        publish(e);
        TRY(gather_round(e, k, e->rank == root ? -2 : root));
        if (e->rank != root) memcpy((uint8_t *)buf + lo, data(e, root, e->round - 1), m);
        finish(e);
    }
    return OK;
}

/* Pieces laid end to end as one stream of bytes: copy stream bytes [lo, lo + m) out of (to_stream)
   or into the pieces, at offset skip[i] of piece i. */
static void stream_copy(uint8_t *flat, uint64_t lo, uint64_t m, uint8_t **pieces, const uint64_t *sizes,
                        const uint64_t *skip, int npieces, int to_stream) {
    uint64_t at = 0;
    for (int i = 0; i < npieces && m; i++) {
        uint64_t s = sizes[i];
        if (lo < at + s) {
            uint64_t off = lo - at, take = s - off < m ? s - off : m;
            uint8_t *p = pieces[i] + (skip ? skip[i] : 0) + off;
            if (to_stream) memcpy(flat, p, take);
            else memcpy(p, flat, take);
            flat += take;
            lo += take;
            m -= take;
        }
        at += s;
    }
}

/* all_gather of several pieces as one call: rank r's mines[i] (sizes[i] bytes) lands at byte
   r * sizes[i] of outs[i] on every rank (its own part is placed by the caller). With root >= 0 it
   is gather: only root takes the parts, into outs[r] (whole, one per rank; skip is then unused). */
int tg_all_gather(engine *e, uint8_t **outs, uint8_t **mines, const uint64_t *sizes, int npieces, int root,
                  uint64_t hash, const char *desc, uint32_t len) {
    uint64_t total = 0;
    for (int i = 0; i < npieces; i++) total += sizes[i];
    uint64_t per = e->slot_bytes, rounds = total ? CEIL(total, per) : 1;
    uint64_t skip[npieces > 0 ? npieces : 1];
    int takes = root < 0 || e->rank == root;
    for (uint64_t k = 0; k < rounds; k++) {
        uint64_t lo = k * per, m = total - lo < per ? total - lo : per;
        uint8_t *mine;
        TRY(open_round(e, k, hash, desc, len, &mine));
        stream_copy(mine, lo, m, mines, sizes, NULL, npieces, 1);
        publish(e);
        TRY(gather_round(e, k, takes ? -1 : -2));
        if (takes)
            for (int r = 0; r < e->n; r++) {
                if (r == e->rank) continue;
                if (root >= 0) {
                    stream_copy(data(e, r, e->round - 1), lo, m, &outs[r], sizes, NULL, 1, 0);
                    continue;
                }
                for (int i = 0; i < npieces; i++) skip[i] = r * sizes[i];
                stream_copy(data(e, r, e->round - 1), lo, m, outs, sizes, skip, npieces, 0);
            }
        finish(e);
    }
    return OK;
}

/* The block exchanges: every rank's input is n blocks (sizes[j] elements of es bytes, block j
   starting at element starts[j] of `in`); a round carries up to `per` elements of every block, block
   j's at j * per in the slot.
   - reduce_scatter (op > 0): out = block `rank` reduced over the ranks;
   - scatter (root >= 0): rank j takes block j of root's input (from `ins`, one array per block);
   - all_to_all: out's block i (at outstarts[i]) is block `rank` of rank i's input. */
static int blocks(engine *e, const uint8_t *in, uint8_t **ins, const uint64_t *starts, const uint64_t *sizes,
                  int es, uint8_t *out, const uint64_t *outstarts, int dtype, int op, int root,
                  uint64_t hash, const char *desc, uint32_t len) {
    int n = e->n, me = e->rank;
    uint64_t per = e->slot_bytes / ((uint64_t)n * es), longest = 0;
    for (int j = 0; j < n; j++) longest = sizes[j] > longest ? sizes[j] : longest;
    uint64_t rounds = longest ? CEIL(longest, per) : 1;
    const void *srcs[n];
    for (uint64_t k = 0; k < rounds; k++) {
        uint64_t lo = k * per;
        uint8_t *mine;
        TRY(open_round(e, k, hash, desc, len, &mine));
        if (root < 0 || me == root)
            for (int j = 0; j < n; j++) {
                if (lo >= sizes[j]) continue;
                uint64_t m = sizes[j] - lo < per ? sizes[j] - lo : per;
                const uint8_t *src = ins ? ins[j] + lo * es : in + (starts[j] + lo) * es;
                memcpy(mine + j * per * es, src, m * es);
            }
        publish(e);
        TRY(gather_round(e, k, root < 0 ? -1 : root));
        uint64_t g = e->round - 1, m = lo < sizes[me] ? (sizes[me] - lo < per ? sizes[me] - lo : per) : 0;
        if (m && op > 0) {
            for (int r = 0; r < n; r++) srcs[r] = data(e, r, g) + me * per * es;
            reduce_into(dtype, op, out + lo * es, srcs, n, m);
        } else if (m && root >= 0) {
            memcpy(out + lo * es, data(e, root, g) + me * per * es, m * es);
        } else if (m) {
            for (int i = 0; i < n; i++)
                memcpy(out + (outstarts[i] + lo) * es, data(e, i, g) + me * per * es, m * es);
        }
        finish(e);
    }
    return OK;
}

int tg_reduce_scatter(engine *e, const void *in, void *out, uint64_t count, int dtype, int op, uint64_t hash,
                      const char *desc, uint32_t len) {
    uint64_t starts[e->n], sizes[e->n];
    for (int j = 0; j < e->n; j++) starts[j] = j * count, sizes[j] = count;
    return blocks(e, in, NULL, starts, sizes, SIZE[dtype], out, NULL, dtype, op, -1, hash, desc, len);
}

int tg_scatter(engine *e, uint8_t **ins, void *out, uint64_t nbytes, int root, uint64_t hash, const char *desc,
               uint32_t len) {
    uint64_t sizes[e->n];
    for (int j = 0; j < e->n; j++) sizes[j] = nbytes;
    return blocks(e, NULL, ins, NULL, sizes, 1, out, NULL, 0, 0, root, hash, desc, len);
}

int tg_all_to_all(engine *e, const void *in, void *out, const uint64_t *starts, const uint64_t *sizes, int es,
                  uint64_t hash, const char *desc, uint32_t len) {
    return blocks(e, in, NULL, starts, sizes, es, out, starts, 0, 0, -1, hash, desc, len);
}

/* ------------------------------------------------------------------ set-up and reports */

void tg_engine_free(engine *e);

engine *tg_engine_new(int rank, int n, uint64_t slot_bytes, uint8_t **segs, const int *fds, double timeout) {
    if (n < 1 || slot_bytes < (uint64_t)n * 16) return NULL;   /* a round must carry an element per rank */
    engine *e = calloc(1, sizeof(engine));
    if (!e) return NULL;
    e->rank = rank, e->n = n, e->slot_bytes = slot_bytes, e->timeout = timeout;
    e->seg = calloc(n, sizeof(uint8_t *));
    e->fds = calloc(n > 1 ? n - 1 : 1, sizeof(struct pollfd));
    e->fd_rank = calloc(n > 1 ? n - 1 : 1, sizeof(int));
    if (!e->seg || !e->fds || !e->fd_rank) {
        tg_engine_free(e);
        return NULL;
    }
    for (int r = 0, i = 0; r < n; r++) {
        e->seg[r] = segs[r];
        if (r == rank) continue;
        e->fds[i].fd = fds[r], e->fds[i].events = POLLIN;
        e->fd_rank[i++] = r;
    }
    e->round = *counter(e, rank, OFF_POSTED);
    return e;
}

/* How to wait and which all_reduce to run (see shm_engine.py's choices). */
void tg_engine_tune(engine *e, int spins, double spin, uint64_t parts_from) {
    e->spins = spins, e->spin = spin, e->parts_from = parts_from;
}

void tg_engine_free(engine *e) {
    if (!e) return;
    free(e->seg), free(e->fds), free(e->fd_rank), free(e);
}

int tg_engine_culprit(engine *e) { return e->culprit; }

/* The descriptor rank r posted in the round that disagreed (at most cap bytes); its length. */
uint32_t tg_engine_desc(engine *e, int r, char *out, uint32_t cap) {
    uint8_t *h = slot(e, r, e->fail_round);
    uint32_t len;
    memcpy(&len, h + 8, 4);
    if (len > DESC_MAX) len = DESC_MAX;
    if (len > cap) len = cap;
    memcpy(out, h + 16, len);
    return len;
}

uint64_t tg_engine_head_bytes(void) { return SEG_HEAD; }
uint64_t tg_engine_slot_head(void) { return SLOT_HEAD; }
