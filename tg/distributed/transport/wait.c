/* How tg's C engines wait (shm_engine.c, ucx_engine.c; the Python side splices this text in where an
 * engine says #include "wait.c", as reductions.c): poll `spins` times (the peer is usually a few
 * hundred nanoseconds away), then yield the core for `yield_s` seconds (native.YIELD_S: a peer a few
 * microseconds late, or one that needs this core), then sleep, each engine its own way (a futex; the
 * UCX worker's fd). Once the polls ran out the peers are checked every millisecond (alive, not
 * aborted), from the start (`check_first`: the shm engine's check is a poll() of sockets) or a
 * millisecond on (the ucx engine's is a call into Python); an engine may check before every sleep. */
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct {
    int polls;                /* polls made */
    double start, next_check; /* when the polls ran out; when the peers are next due a check */
    int check_first;          /* check the peers as soon as the polls run out (else a millisecond on) */
} tg_wait;

enum { TG_POLL, TG_YIELD, TG_SLEEP };

/* After a poll that found nothing: TG_POLL (poll again at once: the first `spins` times), else what the
   wait does next, TG_YIELD (sched_yield) or TG_SLEEP; *check says the peers are due a check, *waited
   the seconds since the polls ran out (for the engine's timeout). */
static inline int tg_wait_step(tg_wait *w, int spins, double yield_s, int *check, double *waited) {
    *check = 0, *waited = 0;
    if (w->polls < spins) {
        w->polls++;
        return TG_POLL;
    }
    double t = now();
    if (w->polls == spins) w->polls++, w->start = t, w->next_check = t + (w->check_first ? 0 : 1e-3);
    *waited = t - w->start;
    if (t >= w->next_check) *check = 1, w->next_check = t + 1e-3;
    return *waited < yield_s ? TG_YIELD : TG_SLEEP;
}
