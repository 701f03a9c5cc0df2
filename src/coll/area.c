/* Small collectives through the shared area, when every rank of the
 * communicator is on this host and reached over shared memory.
 *
 * Each rank's shared-memory segment holds an area (the transport's shared
 * region, op region(); layout in coll/sched.h): a line of two counters,
 * `posted` and `done` (the region's watch words), written by the owner
 * only, COLL_AREA_NDESC (64) slots of 1 KiB and a data space of twice
 * RCOLL_SHM_AREA bytes. Operation k of the area (every rank numbers them
 * alike: collectives are posted in the same order everywhere, and whether
 * one takes the area depends only on its arguments) uses slot k % NDESC:
 * a descriptor line, with the input right after it when it fits (up to
 * 984 bytes), else in the data space (area_assign: a ring for broadcast
 * and reduce, whose ranks may run ahead, the two halves in turn for the
 * rest):
 *
 *   1. publish: a rank whose input someone reads (all of them, except
 *      broadcast, where only the root's is read) waits until every rank,
 *      itself included, has finished the operations that used the line or
 *      bytes before (their `done`: nobody still reads them), copies its
 *      input and the call's descriptor in and stores the line's seq = k
 *      (release);
 *   2. consume: it waits for the seq of the ranks whose input it needs,
 *      checks their descriptors against its own call (a mismatch is
 *      RCOLL_ERR_MISMATCH, naming both), and computes its output straight
 *      from their buffers: reductions in rank order, so that every rank
 *      gets the same bits (as the flat all-reduce);
 *   3. finish: done = k, in order.
 *
 * One round: no message, no slot, no credit; a rank is done as soon as the
 * inputs it needs are there, and a broadcast root may run 64 calls ahead
 * of its readers. A counter store wakes peers asleep in the transport's
 * wait(), which watches the counters. The engine drives this like any
 * schedule (coll_sched_progress), so it runs beside every other operation
 * in flight; core/comm.c also runs a blocking call straight from the
 * caller when nothing else is in flight. */
#include "coll/sched.h"
#include "util/params.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define AREA_CL 64
_Static_assert(sizeof(coll_area_ctl_t) == RCOLL_TL_WATCH * sizeof(uint64_t),
               "the area's counters are its region's watch words");

/* A slot: the call, and its seq, stored last (release): the flag a
 * reader polls; then up to AREA_INLINE bytes of input, so an input of 24
 * bytes or less costs a reader one cache line. */
typedef struct {
    uint64_t seq;
    uint64_t count;
    uint32_t kind, dt, op;
    int32_t root;
    uint64_t done;          /* the writer's `done` when it wrote this */
    char data[];            /* an input that fits the slot */
} area_desc_t;
#define AREA_INLINE (COLL_AREA_SLOT - sizeof(area_desc_t))

struct coll_area {
    int n, rank;
    char **base;            /* by rank: its area */
    size_t data;            /* bytes per buffer */
    uint64_t seq;           /* operations started (coll_area_build) */
    uint64_t published;     /* operations past step 1 here, in order */
    uint64_t finished;      /* operations finished here, in order */
    uint64_t *seen_done;    /* by rank: its `done`, as last read */
    size_t ring;            /* bytes of the data space (2 * data) */
    size_t dcur;            /* where the next rooted input goes */
    uint64_t dalt;          /* unrooted inputs placed so far */
    size_t dstart[COLL_AREA_NDESC]; /* by operation k % NDESC: where its
                               input lies in the data space */
    size_t dlen[COLL_AREA_NDESC]; /* and its bytes; 0: in its line */
    const rcoll_tl_ops_t *tl;
    rcoll_tl_ctx_t *ctx;
    int wake_pending;       /* posted without waking sleepers yet */
};

static inline coll_area_ctl_t *area_ctl(const coll_area_t *a, int r)
{
    return (coll_area_ctl_t *)a->base[r];
}
static inline area_desc_t *area_desc(const coll_area_t *a, int r, uint64_t k)
{
    return (area_desc_t *)(a->base[r] + AREA_CL +
                           (size_t)(k % COLL_AREA_NDESC) * COLL_AREA_SLOT);
}
/* where rank r's input of the operation lies */
static inline char *area_data(const coll_area_t *a, int r,
                              const coll_sched_t *s)
{
    if (s->adoff == SIZE_MAX)
        return area_desc(a, r, s->aseq)->data;
    return a->base[r] + AREA_CL + COLL_AREA_SLOT * COLL_AREA_NDESC +
           s->adoff;
}

coll_area_t *coll_area_create(int rank, int n, const rcoll_tl_ops_t *tl,
                              rcoll_tl_ctx_t *ctx)
{
    if (n < 2 || !tl || !tl->region || !tl->region_wake)
        return NULL;
    coll_area_t *a = calloc(1, sizeof(*a));
    if (!a)
        return NULL;
    a->base = calloc((size_t)n, sizeof(*a->base));
    a->seen_done = calloc((size_t)n, sizeof(*a->seen_done));
    if (!a->base || !a->seen_done)
        goto none;
    size_t min = SIZE_MAX;
    for (int r = 0; r < n; r++) {
        size_t len = 0;
        if (!(a->base[r] = tl->region(ctx, r, &len)) ||
            len < COLL_AREA_LEN(AREA_CL) || (size_t)a->base[r] % AREA_CL)
            goto none; /* every rank sees the same: all take the area or
                          none does */
        if (len < min)
            min = len;
    }
    /* every page mapped now, at setup: otherwise the first calls of a
     * run take the page faults (each maps up to 16 pages), and a short
     * benchmark's small calls cost up to three times their steady time;
     * the owner maps its own area for writing */
    for (int r = 0; r < n; r++)
        rcoll_prefault(a->base[r], min, r == rank);
    /* the smallest area of all, so every rank computes the same size */
    a->data = ((min - AREA_CL - COLL_AREA_SLOT * COLL_AREA_NDESC) / 2) &
              ~(size_t)(AREA_CL - 1);
    a->ring = 2 * a->data;
    a->n = n;
    a->rank = rank;
    a->tl = tl;
    a->ctx = ctx;
    return a;
none:
    coll_area_destroy(a);
    return NULL;
}

void coll_area_destroy(coll_area_t *a)
{
    if (!a)
        return;
    free(a->base);
    free(a->seen_done);
    free(a);
}

void coll_area_flush(coll_area_t *a)
{
    if (a && a->wake_pending) {
        a->tl->region_wake(a->ctx);
        a->wake_pending = 0;
    }
}

size_t coll_area_data(const coll_area_t *a)
{
    return a ? a->data : 0;
}

/* The bytes a rank publishes for this call. */
static size_t area_in_bytes(const coll_sched_t *s, int n)
{
    size_t bytes = s->count * rcoll_datatype_size(s->dt);
    switch (s->kind) {
    case COLL_REDUCE_SCATTER:
    case COLL_ALLTOALL: return bytes * (size_t)n;
    case COLL_BARRIER: return 0;
    default: return bytes;
    }
}

int coll_area_fits(const coll_sched_t *s, const coll_env_t *e)
{
    const coll_area_t *a = e->area;
    if (!a || !rcoll_config.shm_area_max)
        return 0;
    switch (s->kind) {
    case COLL_ALLREDUCE: case COLL_REDUCE: case COLL_REDUCE_SCATTER:
    case COLL_ALLGATHER: case COLL_BROADCAST: case COLL_ALLTOALL:
        if (s->count == 0)
            return 0;
        break;
    case COLL_BARRIER:
        return 1;
    default:
        return 0;
    }
    size_t in = area_in_bytes(s, a->n), max = rcoll_config.shm_area_max;
    /* a broadcast publishes one input (the root's) and each rank copies it
     * once: up to 4x the limit (64 KiB by default) it beats the tree's
     * copy into a slot and out per hop (up to 64 KiB on 2 and 4 ranks;
     * docs/design.md, "Small collectives through the shared area") */
    if (in > a->data || in > (s->kind == COLL_BROADCAST ? 4 * max : max))
        return 0;
    /* a reduction reads n inputs on every rank */
    if ((s->kind == COLL_ALLREDUCE || s->kind == COLL_REDUCE) &&
        in * (size_t)a->n > 4 * max)
        return 0;
    return 1;
}

rcoll_status_t coll_area_build(coll_sched_t *s, const coll_env_t *e)
{
    coll_area_t *a = e->area;
    if (!coll_area_fits(s, e))
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "%s #%llu (count %zu, %s): RCOLL_ALGO names "
                                "the shared area, which this call cannot "
                                "use (%s)", coll_kind_name(s->kind),
                                (unsigned long long)s->seq, s->count,
                                rcoll_datatype_name(s->dt),
                                !a ? "the ranks are not all on one host over "
                                     "shared memory, or RCOLL_SHM_AREA=0"
                                   : "its input exceeds RCOLL_SHM_AREA_MAX "
                                     "or RCOLL_SHM_AREA");
    s->nsteps = 0;
    return coll_area_start(s, e);
}

/* The operation's number, descriptor line and place in the data space,
 * in posting order: every rank gives the same to the same call.
 *
 * A broadcast or reduce, whose root reads nothing (broadcast) or whose
 * other ranks read nothing (reduce), lets ranks run ahead: their inputs
 * go round the data space as a ring, one after the other, so that up to
 * NDESC of them may be in flight. The others cannot get more than one
 * operation ahead (each needs every rank's input before it finishes):
 * their inputs alternate between the two halves, the same bytes every
 * other call (the lines stay in the caches). */
static void area_assign(coll_sched_t *s, coll_area_t *a)
{
    uint64_t k = ++a->seq;
    unsigned i = (unsigned)(k % COLL_AREA_NDESC);
    s->aseq = k;
    s->ain = area_in_bytes(s, a->n);
    /* reusable once every rank (this one too) has finished the operation
     * that used them before: the line's, NDESC earlier, and the newest
     * one whose input lay where this one's will (ranks finish in order,
     * so the older ones are over too) */
    s->aneed = k > COLL_AREA_NDESC ? k - COLL_AREA_NDESC : 0;
    s->adoff = SIZE_MAX;
    a->dlen[i] = 0;
    if (s->ain > AREA_INLINE) {
        size_t p, len = s->ain; /* at most half the space */
        if (s->kind == COLL_BROADCAST || s->kind == COLL_REDUCE) {
            p = a->dcur + len <= a->ring ? a->dcur : 0;
            a->dcur = (p + len + AREA_CL - 1) & ~(size_t)(AREA_CL - 1);
        } else {
            p = (a->dalt++ & 1) ? a->ring / 2 : 0;
        }
        for (uint64_t j = 1; j < COLL_AREA_NDESC && j < k; j++) {
            unsigned o = (unsigned)((k - j) % COLL_AREA_NDESC);
            if (a->dlen[o] && a->dstart[o] < p + len &&
                p < a->dstart[o] + a->dlen[o]) {
                if (k - j > s->aneed)
                    s->aneed = k - j;
                break;
            }
        }
        a->dstart[i] = p;
        a->dlen[i] = len;
        s->adoff = p;
    }
    s->area = 1;
    s->aphase = 0;
    s->anext = 0;
}

rcoll_status_t coll_area_start(coll_sched_t *s, const coll_env_t *e)
{
    s->algo = "shared";
    s->md = e->md;
    s->reduce = s->md->reduce_get(s->dt, s->op);
    area_assign(s, e->area);
    return RCOLL_OK;
}

/* Does rank j's call (its descriptor) match ours? */
static rcoll_status_t area_check(const coll_sched_t *s, const coll_env_t *e,
                                 int j, const area_desc_t *d)
{
    int reduces = s->kind == COLL_ALLREDUCE || s->kind == COLL_REDUCE ||
                  s->kind == COLL_REDUCE_SCATTER;
    int rooted = s->kind == COLL_REDUCE || s->kind == COLL_BROADCAST;
    if (d->kind == (uint32_t)s->kind && d->dt == (uint32_t)s->dt &&
        d->count == s->count && (!reduces || d->op == (uint32_t)s->op) &&
        (!rooted || d->root == s->root))
        return RCOLL_OK;
    return rcoll__set_error(
        RCOLL_ERR_MISMATCH,
        "rank %d called %s #%llu (count %zu, %s%s%s, root %d), which does "
        "not match the call of rank %d (%s pid %d): %s, count %llu, %s%s%s, "
        "root %d; the "
        "ranks called different operations (every rank must call the same "
        "collectives in the same order with the same count, type, op and "
        "root)",
        e->rank, coll_kind_name(s->kind), (unsigned long long)s->seq,
        s->count, rcoll_datatype_name(s->dt), reduces ? ", " : "",
        reduces ? rcoll_op_name(s->op) : "", s->root, j,
        e->peers ? e->peers[j].hostname : "?", e->peers ? e->peers[j].pid : -1,
        coll_kind_name((coll_kind_t)d->kind), (unsigned long long)d->count,
        rcoll_datatype_name((rcoll_datatype_t)d->dt), reduces ? ", " : "",
        reduces ? rcoll_op_name((rcoll_op_t)d->op) : "", d->root);
}

/* out = in(0) op in(1) ... op in(n-1), each at offset `off` of its rank's
 * buffer: rank order, as coll_allreduce_flat */
static void area_reduce(coll_sched_t *s, const coll_area_t *a, char *out,
                        size_t off, size_t count)
{
    size_t bytes = count * rcoll_datatype_size(s->dt);
    s->md->copy(out, area_data(a, 0, s) + off, bytes);
    for (int j = 1; j < a->n; j++)
        s->reduce(out, out, area_data(a, j, s) + off, count);
    if (s->op == RCOLL_AVG)
        s->md->reduce_avg_scale(s->dt, out, out, count, a->n);
}

/* Waits for j's descriptor and buffer to be free for operation k (every
 * rank, this one included, has finished the operation that used them
 * before: s->aneed), then publishes this rank's input and descriptor. */
static rcoll_status_t area_publish(coll_sched_t *s, coll_area_t *a,
                                   uint64_t k)
{
    int n = a->n, me = a->rank;
    if (a->published != k - 1) {
        s->waiting_for = "an earlier shared-area operation of this rank";
        s->waiting_peer = -1;
        return RCOLL_INPROGRESS;
    }
    int contributes = s->kind != COLL_BROADCAST || me == s->root;
    uint64_t need = s->aneed;
    if (contributes && need && a->finished < need) {
        s->waiting_for = "an earlier shared-area operation of this rank";
        s->waiting_peer = -1;
        return RCOLL_INPROGRESS;
    }
    for (; contributes && need && s->anext < n; s->anext++) {
        int j = s->anext;
        if (j == me || a->seen_done[j] >= need)
            continue;
        a->seen_done[j] = __atomic_load_n(&area_ctl(a, j)->done,
                                          __ATOMIC_ACQUIRE);
        if (a->seen_done[j] < need) {
            s->waiting_for = "the shared area's buffer (still read by)";
            s->waiting_peer = j;
            return RCOLL_INPROGRESS;
        }
    }
    if (contributes) {
        area_desc_t *d = area_desc(a, me, k);
        if (s->ain)
            s->md->copy(area_data(a, me, s), s->sendbuf, s->ain);
        d->count = s->count;
        d->kind = (uint32_t)s->kind;
        d->dt = (uint32_t)s->dt;
        d->op = (uint32_t)s->op;
        d->root = s->root;
        d->done = a->finished;
        __atomic_store_n(&d->seq, k, __ATOMIC_RELEASE);
        /* for sleepers (the transport's wait() watches it); they are
         * woken before this rank waits (coll_area_flush) or when it
         * finishes: no fence here, on the fast path */
        __atomic_store_n(&area_ctl(a, me)->posted, k, __ATOMIC_RELAXED);
        a->wake_pending = 1;
    }
    a->published = k;
    s->anext = 0;
    return RCOLL_OK;
}

/* Waits for the descriptors of the ranks whose input this one reads
 * (all; a broadcast's root; none for a reduce's non-root), each checked
 * against this call. */
static rcoll_status_t area_inputs(coll_sched_t *s, const coll_env_t *e,
                                  coll_area_t *a, uint64_t k)
{
    int lo = 0, hi = a->n; /* ranks [lo, hi) */
    if (s->kind == COLL_BROADCAST) {
        lo = s->root;
        hi = a->rank == s->root ? lo : lo + 1;
    } else if (s->kind == COLL_REDUCE && a->rank != s->root) {
        hi = lo;
    }
    if (s->anext < lo)
        s->anext = lo;
    for (; s->anext < hi; s->anext++) {
        int j = s->anext;
        area_desc_t *d = area_desc(a, j, k);
        /* the line holds an earlier operation (or nothing) until j
         * writes k: it cannot get further before we finish k */
        if (__atomic_load_n(&d->seq, __ATOMIC_ACQUIRE) != k) {
            s->waiting_for = "the shared-area input of";
            s->waiting_peer = j;
            return RCOLL_INPROGRESS;
        }
        /* what it had finished then: spares a read of its counters at
         * our next publish */
        if (d->done > a->seen_done[j])
            a->seen_done[j] = d->done;
        rcoll_status_t st = area_check(s, e, j, d);
        if (st != RCOLL_OK)
            return st;
    }
    return RCOLL_OK;
}

/* The result from the inputs, in the caller's buffer. */
static void area_combine(coll_sched_t *s, const coll_area_t *a)
{
    int n = a->n, me = a->rank;
    size_t bytes = s->count * rcoll_datatype_size(s->dt);
    char *out = s->recvbuf;
    switch (s->kind) {
    case COLL_ALLREDUCE:
        area_reduce(s, a, out, 0, s->count);
        break;
    case COLL_REDUCE:
        if (me == s->root)
            area_reduce(s, a, out, 0, s->count);
        break;
    case COLL_REDUCE_SCATTER:
        area_reduce(s, a, out, (size_t)me * bytes, s->count);
        break;
    case COLL_ALLGATHER:
        for (int j = 0; j < n; j++)
            s->md->copy(out + (size_t)j * bytes, area_data(a, j, s), bytes);
        break;
    case COLL_ALLTOALL:
        for (int j = 0; j < n; j++)
            s->md->copy(out + (size_t)j * bytes,
                        area_data(a, j, s) + (size_t)me * bytes, bytes);
        break;
    case COLL_BROADCAST:
        if (me == s->root)
            coll_copy_in(s);
        else
            s->md->copy(out, area_data(a, s->root, s), bytes);
        break;
    default:
        break;
    }
}

/* An operation through the shared area, in three phases (s->aphase): 0
 * publish this rank's input, in order; 1 read the others' and combine;
 * 2 finish, in order (a later operation's done would tell writers that
 * this one's buffer is free). */
rcoll_status_t coll_area_progress(coll_sched_t *s, const coll_env_t *e,
                                  int *progressed)
{
    coll_area_t *a = e->area;
    uint64_t k = s->aseq;
    rcoll_status_t st;
    if (s->aphase == 0) {
        if ((st = area_publish(s, a, k)) != RCOLL_OK)
            return st;
        s->aphase = 1;
        *progressed = 1;
    }
    if (s->aphase == 1) {
        if ((st = area_inputs(s, e, a, k)) != RCOLL_OK)
            return st;
        area_combine(s, a);
        s->aphase = 2;
        *progressed = 1;
    }
    if (a->finished != k - 1) {
        s->waiting_for = "an earlier shared-area operation of this rank";
        s->waiting_peer = -1;
        return RCOLL_INPROGRESS;
    }
    __atomic_store_n(&area_ctl(a, a->rank)->done, k, __ATOMIC_RELEASE);
    a->finished = k;
    a->tl->region_wake(a->ctx);
    a->wake_pending = 0;
    s->waiting_peer = -1;
    return RCOLL_OK;
}
