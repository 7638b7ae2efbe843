/* tg's UCX engine: a large all_reduce of the ucx transport, agreement and ring, in one C call.
 *
 * It speaks the exact messages of the Python algorithms (algorithms.py over ucx.py), on the worker
 * and data endpoints ucxx made: the agreement's fixed-size frames (tag part CONTROL: the call's
 * number, the MIN and MAX of the descriptor hashes, FOLD bytes of room) in the pattern of recursive
 * doubling, then a ring reduce-scatter and all-gather whose data messages carry tag part DATA and
 * the call's number. What differs from the Python ring is the size of the messages: PIECE bytes
 * (set by the Python side), small enough that a piece is reduced while it is still in cache, which
 * costs a C loop nothing and Python a call per piece. Every rank of a group uses the engine or none
 * does (the Python side agrees on it when the group starts), so the pieces always match.
 *
 * Waiting progresses the worker (which also runs ucxx's own callbacks: its standing ABORT receive,
 * the control endpoints' error handlers), spins `spins` polls, yields the core for `yield_s`, then
 * sleeps. At least every millisecond of waiting it calls back into Python (`check(peer, sleep)`),
 * which looks at what ucxx saw (an ABORT from any rank, the waited-for peer's control endpoint
 * closed; nonzero stops the call) and, to sleep, arms the worker and waits on its event fd for up to
 * a millisecond with the transport's lock released, so point-to-point calls of other threads go on
 * meanwhile. Past the job's timeout the wait ends naming the peer not heard from.
 *
 * Nothing received is used as a size: every receive is posted with this rank's own sizes, which the
 * agreement has shown equal everywhere, and a message of another length is an error naming its rank.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucp/api/ucp.h>

enum { OK = 0, DISAGREE = 1, TIMEOUT = 2, STOPPED = 3, BAD_STEP = 4, BAD_SIZE = 5, UCX_FAILED = 6 };

#include "reductions.c"     /* spliced in by native.source() */
#include "agree.c"          /* spliced in by native.source(): the agreement's rule and exchange */

#define PART_CONTROL 4ULL
#define PART_DATA 1ULL
/* an agreement frame: the call's number, (min, max) of the hashes, room for algorithms.FOLD bytes */
#define FRAME_HEAD (4 + 16)
#define MAX_OPS 64            /* agreement messages a call keeps in flight (2 log2(n) + 2) */

typedef int (*check_fn)(int peer, int sleep);

typedef struct {
    ucp_worker_h worker;
    ucp_ep_h *eps;            /* data endpoints by rank (NULL for this rank) */
    int rank, n, spins;
    double timeout, yield_s;  /* seconds: the job's timeout; yielding before sleeping */
    uint64_t piece;           /* bytes per data message */
    int slots;                /* pieces of scratch for received partial sums */
    check_fn check;
    uint8_t *tmp;             /* received partial sums (reduce-scatter) */
    uint64_t tmp_bytes;
    /* the agreement's frames (MAX_OPS to send, one received): here, not on the stack, as a failed
       call may leave a send in flight */
    uint8_t *frames, *got;
    uint64_t frame;
    /* what the last failed call saw */
    int culprit;
    uint32_t got_seq;
    uint64_t got_bytes, want_bytes;
    ucs_status_t status;
} engine;

typedef struct {
    void *req;                /* UCX's request while in flight */
    int peer, recv, done;
    uint64_t want;
    ucp_tag_recv_info_t info;
    ucs_status_t status;
} op;

#include "wait.c"         /* spliced in by native.source(): now(), tg_wait_step */

static uint64_t tag(uint64_t part, int src, uint64_t seq) {
    return (part << 60) | ((seq & 0xFFFFFFULL) << 32) | (uint64_t)(uint32_t)src;    /* channel 0 */
}

/* ------------------------------------------------------------------ messages */

static ucp_request_param_t params(op *o) {
    ucp_request_param_t p;
    memset(&p, 0, sizeof p);
    p.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    p.datatype = ucp_dt_make_contig(1);
    p.memory_type = UCS_MEMORY_TYPE_HOST;
    if (o->recv) {
        p.op_attr_mask |= UCP_OP_ATTR_FIELD_RECV_INFO;
        p.recv_info.tag_info = &o->info;
    }
    return p;
}

/* An operation just posted: in flight, done, or failed at once (then done, with its status, which
   wait_op judges like any other completion). */
static void started(op *o, ucs_status_ptr_t r) {
    o->req = UCS_PTR_IS_ERR(r) ? NULL : r;
    o->done = r == NULL || UCS_PTR_IS_ERR(r);
    o->status = UCS_PTR_IS_ERR(r) ? UCS_PTR_STATUS(r) : UCS_OK;
}

static void post_recv(engine *e, op *o, int peer, void *buf, uint64_t n, uint64_t t) {
    o->peer = peer, o->recv = 1, o->want = n;
    o->info.length = n;       /* what an immediate completion reports */
    ucp_request_param_t p = params(o);
    started(o, ucp_tag_recv_nbx(e->worker, buf, n, t, ~0ULL, &p));
}

static void post_send(engine *e, op *o, int peer, const void *buf, uint64_t n, uint64_t t) {
    o->peer = peer, o->recv = 0, o->want = n;
    ucp_request_param_t p = params(o);
    started(o, ucp_tag_send_nbx(e->eps[peer], buf, n, t, &p));
}

/* Whether o has completed (freeing its request then). */
static int test(op *o) {
    if (o->done) return 1;
    ucs_status_t s = o->recv ? ucp_tag_recv_request_test(o->req, &o->info) : ucp_request_check_status(o->req);
    if (s == UCS_INPROGRESS) return 0;
    ucp_request_free(o->req);
    o->req = NULL, o->done = 1, o->status = s;
    return 1;
}

/* Progress until o completes; then whether it went as agreed. */
static int wait_op(engine *e, op *o) {
    tg_wait w = {0, 0, 0, 0};        /* check() is Python's: not in the first millisecond of yielding */
    while (!test(o)) {
        if (ucp_worker_progress(e->worker)) continue;
        int check;
        double waited;
        int next = tg_wait_step(&w, e->spins, e->yield_s, &check, &waited);
        if (next == TG_POLL) continue;
        if (waited > e->timeout) {
            e->culprit = o->peer;
            return TIMEOUT;
        }
        int sleep = next == TG_SLEEP;       /* check() sleeps on the worker's fd */
        if (sleep || check) {
            if (e->check(o->peer, sleep)) {
                e->culprit = o->peer;
                return STOPPED;
            }
        }
        if (!sleep) sched_yield();          /* the peer may need this core (more ranks than cores) */
    }
    if (o->status == UCS_ERR_MESSAGE_TRUNCATED) {
        e->culprit = o->peer, e->want_bytes = o->want, e->got_bytes = o->want + 1;
        return BAD_SIZE;
    }
    if (o->status != UCS_OK) {
        e->status = o->status, e->culprit = o->peer;
        return UCX_FAILED;
    }
    if (o->recv && o->info.length != o->want) {
        e->culprit = o->peer, e->want_bytes = o->want, e->got_bytes = o->info.length;
        return BAD_SIZE;
    }
    return OK;
}

static int wait_all(engine *e, op *ops, int k) {
    for (int i = 0; i < k; i++) {
        int rc = wait_op(e, &ops[i]);
        if (rc != OK) return rc;
    }
    return OK;
}

/* After a failure: receives not yet matched are cancelled, the requests of the others (a receive
   already landing, a send) are left to complete on their own. Every failure then aborts the transport,
   whose closing endpoints end them; the scratch they may write is freed only after that. */
static void abandon(engine *e, op *ops, int k) {
    for (int i = 0; i < k; i++) {
        if (ops[i].done || !ops[i].req) continue;
        if (ops[i].recv) ucp_request_cancel(e->worker, ops[i].req);
        ucp_request_free(ops[i].req);
        ops[i].req = NULL, ops[i].done = 1;
    }
}

/* ------------------------------------------------------------------ the agreement */

/* Every rank in the same call (agree.c): the range of the descriptor hashes goes round in
   agree_steps' order, in fixed-size frames of (call number, MIN, MAX). */
static int agree(engine *e, uint32_t seq, uint64_t hash) {
    int nops = 0;
    hash_range all = range_of(hash);
    uint8_t *got = e->got;
    uint64_t frame = e->frame;
    op ops[MAX_OPS];
    int peers[MAX_OPS], merges[MAX_OPS];
    int steps = agree_steps(e->n, e->rank, peers, merges);
    for (int s = 0; s < steps; s++) {
        if (!merges[s]) {
            uint8_t *f = e->frames + (uint64_t)nops * frame;
            memset(f, 0, frame);
            memcpy(f, &seq, 4), memcpy(f + 4, &all.lo, 8), memcpy(f + 12, &all.hi, 8);
            post_send(e, &ops[nops], peers[s], f, frame, tag(PART_CONTROL, e->rank, 0));
            nops++;
            continue;
        }
        op in;
        post_recv(e, &in, peers[s], got, frame, tag(PART_CONTROL, peers[s], 0));
        int rc = wait_op(e, &in);
        if (rc != OK) {
            abandon(e, &in, 1);
            abandon(e, ops, nops);
            return rc;
        }
        uint32_t theirs_seq;
        hash_range theirs;
        memcpy(&theirs_seq, got, 4), memcpy(&theirs.lo, got + 4, 8), memcpy(&theirs.hi, got + 12, 8);
        if (theirs_seq != seq) {
            e->culprit = peers[s], e->got_seq = theirs_seq;
            abandon(e, ops, nops);
            return BAD_STEP;
        }
        range_fold(&all, theirs);
    }
    int rc = wait_all(e, ops, nops);
    if (rc != OK) {
        abandon(e, ops, nops);
        return rc;
    }
    return range_agreed(all) ? OK : DISAGREE;
}

/* ------------------------------------------------------------------ the ring */

static uint64_t edge(uint64_t count, int n, int i) { return count * (uint64_t)i / (uint64_t)n; }

/* Block b of the ring: [edge(b), edge(b + 1)) elements, as algorithms._blocks splits. */
#define BLOCK_START(b) edge(count, n, (b))
#define BLOCK_LEN(b) (edge(count, n, (b) + 1) - edge(count, n, (b)))

static int grow(engine *e, uint64_t bytes) {
    if (e->tmp_bytes >= bytes) return OK;
    free(e->tmp);
    e->tmp = aligned_alloc(64, (bytes + 63) / 64 * 64);
    e->tmp_bytes = e->tmp ? bytes : 0;
    if (!e->tmp) {
        e->status = UCS_ERR_NO_MEMORY, e->culprit = e->rank;
        return UCX_FAILED;
    }
    return OK;
}

/* One step of the ring: receive block rb from the previous rank while sending block sb to the next,
   both in pieces. With `reduce`, pieces land in e->slots pieces of scratch, reused in turn (so it stays
   in cache), and each is combined into rb as soon as it lands; the next piece's receive is posted into
   the freed slot. Without, pieces land straight in rb. */
static int ring_step(engine *e, uint8_t *buf, uint64_t count, int es, binop f, int reduce, int sb, int rb,
                     uint32_t seq) {
    int n = e->n, nxt = (e->rank + 1) % n, prv = (e->rank + n - 1) % n;
    uint64_t per = e->piece / es ? e->piece / es : 1;
    uint64_t rlen = BLOCK_LEN(rb), slen = BLOCK_LEN(sb);
    int nr = (int)((rlen + per - 1) / per), ns = (int)((slen + per - 1) / per);
    int window = reduce && e->slots < nr ? e->slots : nr;      /* receives in flight */
    op *ops = calloc((size_t)(nr + ns) + 1, sizeof(op));
    if (!ops) {
        e->status = UCS_ERR_NO_MEMORY, e->culprit = e->rank;
        return UCX_FAILED;
    }
    uint64_t rtag = tag(PART_DATA, prv, seq);
    uint8_t *dst0 = buf + BLOCK_START(rb) * es;
#define PIECE_LEN(j, len) ((len) - (uint64_t)(j) * per < per ? (len) - (uint64_t)(j) * per : per)
#define LANDS(j) (reduce ? e->tmp + (uint64_t)((j) % window) * per * es : dst0 + (uint64_t)(j) * per * es)
    int rc = OK;
    for (int j = 0; j < window; j++)
        post_recv(e, &ops[j], prv, LANDS(j), PIECE_LEN(j, rlen) * es, rtag);
    /* a reduce-scatter sends piece j + window once piece j has come in: the next rank, which runs the
       same loop, then finds a receive posted for most pieces, instead of UCX holding a whole block of
       unexpected messages (and copying it once more) */
    int sent = 0, ahead = reduce ? window : ns;
#define SEND_UP_TO(k) \
    for (; sent < ns && sent < (k); sent++) \
        post_send(e, &ops[nr + sent], nxt, buf + (BLOCK_START(sb) + (uint64_t)sent * per) * es, \
                  PIECE_LEN(sent, slen) * es, tag(PART_DATA, e->rank, seq))
    SEND_UP_TO(ahead);
    for (int j = 0; j < nr && rc == OK; j++) {
        rc = wait_op(e, &ops[j]);
        if (rc != OK || !reduce) continue;
        uint64_t m = PIECE_LEN(j, rlen);
        uint8_t *dst = dst0 + (uint64_t)j * per * es, *got = LANDS(j);
        for (uint64_t k = 0; k < m; k += BLOCK) {      /* dst = dst op received, as the Python ring */
            uint64_t b = m - k < BLOCK ? m - k : BLOCK;
            f(dst + k * es, dst + k * es, got + k * es, b);
        }
        if (j + window < nr)
            post_recv(e, &ops[j + window], prv, LANDS(j + window), PIECE_LEN(j + window, rlen) * es, rtag);
        SEND_UP_TO(j + 1 + ahead);
    }
    if (rc == OK) SEND_UP_TO(ns);
#undef SEND_UP_TO
#undef PIECE_LEN
#undef LANDS
    if (rc == OK) rc = wait_all(e, ops + nr, ns);
    if (rc != OK) abandon(e, ops, nr + ns);
    free(ops);
    return rc;
}

/* all_reduce of buf (count elements; float16 arrives widened to float32, AVG as SUM: the Python side
   divides): the agreement, then reduce-scatter and all-gather around the ring. */
int tg_ucx_all_reduce(engine *e, void *buf, uint64_t count, int dtype, int op_code, uint32_t seq, uint64_t hash) {
    int rc = agree(e, seq, hash);
    if (rc != OK) return rc;
    int n = e->n, r = e->rank, es = SIZE[dtype];
    binop f = pick(dtype, op_code == R_AVG ? R_SUM : op_code);
    if (!f || dtype == D_F16) {
        e->status = UCS_ERR_INVALID_PARAM, e->culprit = r;
        return UCX_FAILED;
    }
    uint64_t per = e->piece / es ? e->piece / es : 1, most = count / n + 1;
    if ((rc = grow(e, (most < per * e->slots ? most : per * e->slots) * es)) != OK) return rc;
    for (int s = 0; s < n - 1; s++) {          /* block r - s - 2 arrives with the previous rank's sum */
        rc = ring_step(e, buf, count, es, f, 1, (r - s - 1 + 2 * n) % n, (r - s - 2 + 2 * n) % n, seq);
        if (rc != OK) return rc;
    }
    for (int s = 0; s < n - 1; s++) {          /* then the reduced blocks go round */
        rc = ring_step(e, buf, count, es, f, 0, (r - s + n) % n, (r - s - 1 + n) % n, seq);
        if (rc != OK) return rc;
    }
    return OK;
}

/* ------------------------------------------------------------------ the engine */

void tg_ucx_free(engine *e);


engine *tg_ucx_new(void *worker, void **eps, int rank, int n, double timeout, int spins, double yield_s,
                   uint64_t piece, int slots, uint64_t fold, check_fn check) {
    engine *e = calloc(1, sizeof(engine));
    if (!e) return NULL;
    e->frame = FRAME_HEAD + fold;
    e->eps = calloc((size_t)n, sizeof(ucp_ep_h));
    e->frames = malloc(MAX_OPS * e->frame);
    e->got = malloc(e->frame);
    if (!e->eps || !e->frames || !e->got) {
        tg_ucx_free(e);
        return NULL;
    }
    for (int i = 0; i < n; i++) e->eps[i] = (ucp_ep_h)eps[i];
    e->worker = (ucp_worker_h)worker;
    e->rank = rank, e->n = n, e->timeout = timeout, e->spins = spins, e->yield_s = yield_s;
    e->piece = piece ? piece : 1;
    e->slots = slots > 0 ? slots : 1;
    e->check = check;
    return e;
}

void tg_ucx_free(engine *e) {
    if (!e) return;
    free(e->frames);
    free(e->got);
    free(e->tmp);
    free(e->eps);
    free(e);
}

/* What the last failed call saw: the peer, the frame's call number, the sizes, UCX's status text. */
int tg_ucx_culprit(engine *e) { return e->culprit; }
uint32_t tg_ucx_got_seq(engine *e) { return e->got_seq; }
uint64_t tg_ucx_got_bytes(engine *e) { return e->got_bytes; }
uint64_t tg_ucx_want_bytes(engine *e) { return e->want_bytes; }
const char *tg_ucx_status(engine *e) { return ucs_status_string(e->status); }
