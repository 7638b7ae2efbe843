/* "Every rank made the same call", as tg's C engines decide it (shm_engine.c, ucx_engine.c; the Python
 * side splices this text in where an engine says #include "agree.c", as reductions.c and wait.c). Each
 * rank's call is a 64-bit hash of its descriptor (wire.desc_hash); the ranks fold every hash into a
 * range (the MIN and the MAX), and they agree when the range is one value. The shm engine folds the
 * hashes every rank posted in shared memory; the ucx engine sends its range round in the pattern of
 * recursive doubling (agree_steps), as algorithms.agree does in Python. Who is odd is named in Python
 * (wire.disagreement) from the descriptors, once the engine has said DISAGREE. */
#include <stdint.h>

typedef struct { uint64_t lo, hi; } hash_range;

static hash_range range_of(uint64_t hash) { return (hash_range){hash, hash}; }

static void range_fold(hash_range *a, hash_range b) {
    if (b.lo < a->lo) a->lo = b.lo;
    if (b.hi > a->hi) a->hi = b.hi;
}

static int range_agreed(hash_range a) { return a.lo == a.hi; }

/* The exchange of rank r of n, in order: steps of (peer, merge), a send of this rank's range to peer
   (merge 0) or a receive of peer's folded into it (merge 1). Ranks beyond the largest power of two p2
   send to r - p2 first and take the result from it last; the others fold them in first, then swap with
   r ^ mask for every bit of p2, then send the result back out. At most 2 log2(n) + 2 steps. */
static int agree_steps(int n, int r, int *peers, int *merges) {
    int p2 = 1, steps = 0;
    while (p2 * 2 <= n) p2 *= 2;
    if (r >= p2) {
        peers[steps] = r - p2, merges[steps++] = 0;
        peers[steps] = r - p2, merges[steps++] = 1;
        return steps;
    }
    if (r + p2 < n) peers[steps] = r + p2, merges[steps++] = 1;
    for (int mask = 1; mask < p2; mask <<= 1) {
        peers[steps] = r ^ mask, merges[steps++] = 0;
        peers[steps] = r ^ mask, merges[steps++] = 1;
    }
    if (r + p2 < n) peers[steps] = r + p2, merges[steps++] = 0;
    return steps;
}
