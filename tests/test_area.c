/* Small collectives of ranks that share a host (the shared area,
 * coll/area.c) under stress: rounds of 1-8 operations of every kind the
 * area runs, with random counts (some past the area's limit, so the
 * message algorithms run between them), types, ops and roots, each rank
 * choosing by itself whether to call the blocking or the non-blocking form
 * (so the same operation runs inline on one rank and through the engine on
 * another), up to 20 in flight at once, and one round in 8 up to 80
 * (so a descriptor line, 64 of them, is wanted again while a rank still
 * reads it; with a small RCOLL_SHM_AREA the data space's bytes are too),
 * half of those a burst of broadcasts or reduces from one root, with the
 * ranks that read held back (so the others run a lap ahead), and random
 * delays on random ranks. Every result is checked bit for bit against tests/ref.h.
 * Run under rcoll-run. usage: test_area [ROUNDS] */
#include "ref.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static int rank, n;
#define CHECK_RANK rank
#include "check.h"

enum { K_ALLREDUCE, K_BCAST, K_ALLGATHER, K_RS, K_REDUCE, K_ALLTOALL,
       K_BARRIER, K_N };
static const char *const kname[] = {"allreduce", "broadcast", "allgather",
                                    "reduce_scatter", "reduce", "alltoall",
                                    "barrier"};

#define MAXQ 80

typedef struct {
    int kind, root, nb, inplace;
    size_t count, outn; /* elements per call, elements of out to check */
    rcoll_datatype_t dt;
    rcoll_op_t op;
    char *in, *out, *ex;
    rcoll_request_t req;
} op_t;

static uint64_t next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static const rcoll_datatype_t dts[] = {RCOLL_INT32, RCOLL_FLOAT32,
                                       RCOLL_FLOAT64, RCOLL_INT64,
                                       RCOLL_UINT8};
static const rcoll_op_t ops[] = {RCOLL_SUM, RCOLL_MAX, RCOLL_MIN, RCOLL_AVG};

static rcoll_status_t post(rcoll_comm_t c, op_t *o, int salt)
{
    size_t s = rcoll_datatype_size(o->dt), cnt = o->count;
    size_t nn = (size_t)n;
    rcoll_request_t *rq = o->nb ? &o->req : NULL;
    o->in = calloc(cnt * nn + 1, s);
    o->out = calloc(cnt * nn + 1, s);
    o->ex = calloc(cnt * nn + 1, s);
    const void *sb = o->in;
    void *rb = o->out;
    o->outn = cnt;
    switch (o->kind) {
    case K_ALLREDUCE:
        ref_fill(o->in, cnt, 0, o->dt, o->op, rank, salt);
        ref_reduce(o->ex, cnt, 0, o->dt, o->op, n, salt);
        if (o->inplace) {
            memcpy(o->out, o->in, cnt * s);
            sb = rb;
        }
        return rq ? rcoll_iallreduce(sb, rb, cnt, o->dt, o->op, c, NULL, rq)
                  : rcoll_allreduce(sb, rb, cnt, o->dt, o->op, c, NULL);
    case K_REDUCE:
        ref_fill(o->in, cnt, 0, o->dt, o->op, rank, salt);
        ref_reduce(o->ex, cnt, 0, o->dt, o->op, n, salt);
        if (rank != o->root)
            o->outn = 0;
        return rq ? rcoll_ireduce(sb, rb, cnt, o->dt, o->op, o->root, c, NULL,
                                  rq)
                  : rcoll_reduce(sb, rb, cnt, o->dt, o->op, o->root, c, NULL);
    case K_BCAST:
        ref_fill(o->ex, cnt, 0, o->dt, RCOLL_SUM, o->root, salt);
        if (rank == o->root)
            ref_fill(o->in, cnt, 0, o->dt, RCOLL_SUM, o->root, salt);
        if (o->inplace) { /* MPI_Bcast's shape: one buffer */
            if (rank == o->root)
                memcpy(o->out, o->in, cnt * s);
            sb = rb;
        }
        return rq ? rcoll_ibroadcast(sb, rb, cnt, o->dt, o->root, c, NULL, rq)
                  : rcoll_broadcast(sb, rb, cnt, o->dt, o->root, c, NULL);
    case K_ALLGATHER:
        ref_fill(o->in, cnt, (size_t)rank * cnt, o->dt, RCOLL_SUM, rank,
                 salt);
        for (int q = 0; q < n; q++)
            ref_fill(o->ex + (size_t)q * cnt * s, cnt, (size_t)q * cnt, o->dt,
                     RCOLL_SUM, q, salt);
        o->outn = cnt * nn;
        return rq ? rcoll_iallgather(sb, rb, cnt, o->dt, c, NULL, rq)
                  : rcoll_allgather(sb, rb, cnt, o->dt, c, NULL);
    case K_RS:
        ref_fill(o->in, cnt * nn, 0, o->dt, o->op, rank, salt);
        ref_reduce(o->ex, cnt, (size_t)rank * cnt, o->dt, o->op, n, salt);
        return rq ? rcoll_ireduce_scatter(sb, rb, cnt, o->dt, o->op, c, NULL,
                                          rq)
                  : rcoll_reduce_scatter(sb, rb, cnt, o->dt, o->op, c, NULL);
    case K_ALLTOALL:
        /* block q of rank r's input: elements q * cnt... of r's values */
        for (int q = 0; q < n; q++) {
            ref_fill(o->in + (size_t)q * cnt * s, cnt, (size_t)q * cnt, o->dt,
                     RCOLL_SUM, rank, salt);
            ref_fill(o->ex + (size_t)q * cnt * s, cnt, (size_t)rank * cnt,
                     o->dt, RCOLL_SUM, q, salt);
        }
        o->outn = cnt * nn;
        return rq ? rcoll_ialltoall(sb, rb, cnt, o->dt, c, NULL, rq)
                  : rcoll_alltoall(sb, rb, cnt, o->dt, c, NULL);
    default:
        o->outn = 0;
        return rq ? rcoll_ibarrier(c, rq) : rcoll_barrier(c);
    }
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 300;
    rcoll_comm_t c;
    if (rcoll_comm_init_env(&c) != RCOLL_OK) {
        printf("init: %s\n", rcoll_last_error());
        return 1;
    }
    rcoll_comm_rank(c, &rank);
    rcoll_comm_size(c, &n);
    uint64_t all = 0x9e3779b97f4a7c15ull, mine = 0x2545f4914f6cdd1dull +
                                                  (uint64_t)rank * 7919;
    int nops = 0, nb_ops = 0;
    long faults = 0;
    /* the area's pages are all mapped at setup (area_prefault): after one
     * call of each, 64 small all-reduces (a descriptor line each) and 64
     * broadcasts of 4000 bytes from rank 0 (round its data ring) took 0-1
     * page faults per rank here, 6-10 at 8 ranks without it (a fault maps
     * up to 16 pages of the segment; with a 16 KiB data space at 3 ranks
     * 1-2, not caught there) */
    {
        int64_t x = rank, y = 0;
        static char bb[4000];
        /* one of each first: the code paths' own first faults */
        CHECK(rcoll_allreduce(&x, &y, 1, RCOLL_INT64, RCOLL_SUM, c, NULL) ==
              RCOLL_OK, "first all-reduce: %s", rcoll_last_error());
        CHECK(rcoll_broadcast(bb, bb, sizeof(bb), RCOLL_UINT8, 0, c, NULL) ==
              RCOLL_OK, "first broadcast: %s", rcoll_last_error());
        struct rusage u0, u1;
        getrusage(RUSAGE_SELF, &u0);
        for (int i = 0; i < 64; i++)
            rcoll_allreduce(&x, &y, 1, RCOLL_INT64, RCOLL_SUM, c, NULL);
        for (int i = 0; i < 64; i++) {
            if (rank == 0)
                memset(bb, i, sizeof(bb));
            rcoll_broadcast(bb, bb, sizeof(bb), RCOLL_UINT8, 0, c, NULL);
        }
        getrusage(RUSAGE_SELF, &u1);
        faults = u1.ru_minflt - u0.ru_minflt;
        CHECK(y == (int64_t)n * (n - 1) / 2, "all-reduce: %lld",
              (long long)y);
        CHECK(bb[0] == 63 && bb[3999] == 63, "broadcast: %d", bb[0]);
    }
    for (int r = 0; r < rounds && !failures; r++) {
        op_t q[MAXQ];
        int big = next(&all) % 8 == 0;
        int nq = 1 + (int)(next(&all) % (big ? MAXQ : 20));
        /* half the big rounds: a burst of more broadcasts (or reduces)
         * from one root than there are lines, the ranks that read held
         * back, so the others run a whole lap ahead */
        int burst = big && next(&all) % 2 ? 1 + (int)(next(&all) % 2) : 0;
        int broot = (int)(next(&all) % (uint64_t)n);
        if (burst) {
            nq = MAXQ - (int)(next(&all) % 8);
            if ((burst == 1) == (rank != broot))
                usleep(2000);
        }
        for (int i = 0; i < nq; i++) {
            op_t *o = &q[i];
            memset(o, 0, sizeof(*o));
            o->kind = (int)(next(&all) % K_N);
            o->dt = dts[next(&all) % (sizeof(dts) / sizeof(dts[0]))];
            o->op = ops[next(&all) % (sizeof(ops) / sizeof(ops[0]))];
            if (o->dt == RCOLL_UINT8 && o->op == RCOLL_AVG)
                o->op = RCOLL_SUM;
            /* a third tiny (inside the descriptor line), most small, one
             * in 8 past any area limit */
            uint64_t z = next(&all) % 24;
            o->count = z < 8 ? 1 + next(&all) % 6
                             : z < 21 ? 1 + next(&all) % 300
                                      : 4000 + next(&all) % 3000;
            o->root = (int)(next(&all) % (uint64_t)n);
            o->inplace = (int)(next(&all) % 3 == 0);
            if (burst) {
                o->kind = burst == 1 ? K_BCAST : K_REDUCE;
                o->root = broot;
                o->count = z < 16 ? 1 + z % 3 : 1 + z * 7;
            }
            /* a broadcast takes the area up to 4x the limit: past it too */
            if (o->kind == K_BCAST && z >= 21)
                o->count *= 3;
            o->nb = (int)(next(&mine) % 2); /* each rank its own choice */
            if (next(&mine) % 6 == 0)
                usleep((useconds_t)(next(&mine) % 400));
            rcoll_status_t st = post(c, o, r * MAXQ + i);
            CHECK(st == RCOLL_OK, "round %d op %d (%s count %zu, %s): %s", r,
                  i, kname[o->kind], o->count, o->nb ? "non-blocking" :
                  "blocking", rcoll_last_error());
            nops++;
            nb_ops += o->nb;
        }
        /* completed in a random order */
        for (int left = nq; left > 0; left--) {
            int i = (int)(next(&mine) % (uint64_t)nq);
            while (q[i].in == NULL)
                i = (i + 1) % nq;
            op_t *o = &q[i];
            if (o->nb)
                CHECK(rcoll_wait(o->req) == RCOLL_OK, "round %d op %d wait: %s",
                      r, i, rcoll_last_error());
            size_t wrong = ref_count_wrong(o->out, o->ex, o->outn, o->dt);
            if (wrong) { /* the first wrong element, for the log */
                size_t es = rcoll_datatype_size(o->dt), e = 0;
                while (e < o->outn &&
                       !memcmp(o->out + e * es, o->ex + e * es, es))
                    e++;
                printf("rank %d round %d op %d (%s, %zu in flight): first "
                       "wrong element %zu of %zu\n", rank, r, i,
                       o->nb ? "non-blocking" : "blocking", (size_t)nq, e,
                       o->outn);
            }
            CHECK(wrong == 0, "round %d op %d: %s count %zu type %d op %d "
                  "root %d%s: %zu elements wrong", r, i, kname[o->kind],
                  o->count, (int)o->dt, (int)o->op, o->root,
                  o->inplace ? " in place" : "", wrong);
            free(o->in);
            free(o->out);
            free(o->ex);
            o->in = NULL;
        }
    }
    /* checked after the rounds: a rank that failed it before them would
     * skip them alone (the loop stops at a failure) and the others would
     * see a mismatch instead of the cause. The fewest faults of any rank:
     * without the prefault every rank takes 6-10 at 8 ranks, and with it
     * 0-1, but now and then one rank takes 4 (CI, twice in a day, at 3
     * and 8 ranks; the cause not found). Only with the default area: with
     * RCOLL_SHM_AREA=8192 at 3 ranks the check cannot tell (1-2 faults
     * without the prefault), and with 0 there is no area. */
    int64_t myf = faults, minf = -1;
    CHECK(rcoll_allreduce(&myf, &minf, 1, RCOLL_INT64, RCOLL_MIN, c, NULL) ==
              RCOLL_OK, "fault count: %s", rcoll_last_error());
    if (!getenv("RCOLL_SHM_AREA"))
        CHECK(minf <= 3,
              "64 small all-reduces and 64 broadcasts took at least %lld "
              "page faults on every rank (%ld here): the shared area's "
              "pages are not mapped at setup", (long long)minf, faults);
    int64_t f = failures, tot = 0;
    rcoll_allreduce(&f, &tot, 1, RCOLL_INT64, RCOLL_SUM, c, NULL);
    printf("test_area: rank %d of %d: %d operations (%d non-blocking), %d "
           "checks, %lld failures in all; %ld page faults in the first 128 "
           "calls\n", rank, n, nops, nb_ops, checks, (long long)tot,
           faults);
    CHECK(rcoll_comm_destroy(c) == RCOLL_OK, "destroy");
    return tot || failures ? 1 : 0;
}
