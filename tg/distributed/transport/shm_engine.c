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

enum { OK = 0, DISAGREE = 1, TIMEOUT = 2, PEER_SOCKET = 3 };

#include "reductions.c"     /* spliced in by native.source() */
#include "agree.c"          /* spliced in by native.source(): the agreement's rule */

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

#include "wait.c"         /* spliced in by native.source(): now(), tg_wait_step */

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
    uint32_t *sleepers = (uint32_t *)(e->seg[peer] + OFF_SLEEPERS);
    tg_wait w = {0, 0, 0, 1};        /* the peers' sockets polled as soon as the polls run out */
    for (;;) {
        if (__atomic_load_n(c, __ATOMIC_ACQUIRE) >= want) return OK;
        int check;
        double waited;
        int next = tg_wait_step(&w, e->spins, e->spin, &check, &waited);
        if (next == TG_POLL) {
            relax();
            continue;
        }
        if (check) {
            int rc = check_peers(e);
            if (rc == OK && waited > e->timeout) e->culprit = peer, rc = TIMEOUT;
            /* the peer may have arrived while this rank was off the core: only then a failure */
            if (rc != OK) return __atomic_load_n(c, __ATOMIC_ACQUIRE) >= want ? OK : rc;
        }
        if (next == TG_YIELD) {
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

/* Round 0 of a call: every rank posted; the range of their descriptor hashes one value (agree.c). */
static int agree(engine *e) {
    uint64_t g = e->round - 1, mine;
    memcpy(&mine, slot(e, e->rank, g), 8);
    for (int r = 0; r < e->n; r++)
        if (r != e->rank) {
            int rc = wait_posted(e, r);
            if (rc != OK) return rc;
        }
    hash_range all = range_of(mine);
    for (int r = 0; r < e->n; r++) {
        uint64_t theirs;
        memcpy(&theirs, slot(e, r, g), 8);
        range_fold(&all, range_of(theirs));
    }
    if (range_agreed(all)) return OK;
    e->fail_round = g;
    return DISAGREE;
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
