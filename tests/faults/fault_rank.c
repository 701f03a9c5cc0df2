/* One rank of the fault-injection suite (tests/faults/run.sh starts them
 * by hand with RCOLL_ROOT / RCOLL_RANK / RCOLL_SIZE, in network-namespace
 * "hosts" or on one host).
 *
 *   fault_rank ITERS SEED [MAXBYTES]
 *
 * Runs ITERS collectives chosen from SEED (the same sequence on every
 * rank): all-reduce, reduce, reduce-scatter, all-gather, broadcast - and
 * with FAULT_ALL=1 also all-to-all and a point-to-point ring exchange
 * (isend to the next rank, irecv from the previous, tagged) - with a
 * random datatype, op, root and count (up to MAXBYTES per rank, default
 * 1 MiB), and checks each result bit-exact against tests/ref.h. Prints
 *   READY <epoch s>            after init
 *   ERROR <iter> <epoch s> <status>: <message>   (exit 3) on an error
 *   WRONG <iter> <coll>: N of M elements differ  (exit 4): a wrong result
 *   DONE <n> collectives <epoch s>               (exit 0, only after
 *                              rcoll_comm_destroy succeeded; a failed
 *                              destroy is ERROR destroy ..., exit 3)
 * and destroys the communicator in every case. A wrong result is the one
 * outcome the suite never accepts: a fault must become an error. */
#include "../ref.h"
#include <rcoll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MIN(a, b) ((a) < (b) ? (a) : (b))

static double epoch(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static const rcoll_datatype_t types[] = {
    RCOLL_INT8, RCOLL_UINT8, RCOLL_INT32, RCOLL_UINT32, RCOLL_INT64,
    RCOLL_UINT64, RCOLL_FLOAT16, RCOLL_BFLOAT16, RCOLL_FLOAT32, RCOLL_FLOAT64};
static const rcoll_op_t ops[] = {RCOLL_SUM, RCOLL_PROD, RCOLL_MIN, RCOLL_MAX,
                                 RCOLL_AVG};
static const char *const names[] = {"allreduce", "reduce", "reduce_scatter",
                                    "allgather", "broadcast", "alltoall",
                                    "p2p_ring"};

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: fault_rank ITERS SEED [MAXBYTES]\n");
        return 2;
    }
    int iters = atoi(argv[1]);
    rng = strtoull(argv[2], NULL, 0) * 2654435761u + 88172645463325252ull;
    size_t maxb = argc > 3 ? strtoull(argv[3], NULL, 0) : (1u << 20);
    rcoll_comm_t c;
    setvbuf(stdout, NULL, _IOLBF, 0);
    rcoll_status_t ist = rcoll_comm_init_env(&c);
    if (ist != RCOLL_OK) {
        printf("ERROR init %.3f %s: %s\n", epoch(), rcoll_status_string(ist),
               rcoll_last_error());
        return 3;
    }
    int rank, n;
    rcoll_comm_rank(c, &rank);
    rcoll_comm_size(c, &n);
    printf("READY %.3f\n", epoch());
    size_t cap = maxb * (size_t)n + 64;
    char *sb = malloc(cap), *rb = malloc(cap), *ex = malloc(cap);
    if (!sb || !rb || !ex)
        return 2;
    const char *all = getenv("FAULT_ALL");
    int nkinds = all && atoi(all) ? 7 : 5;
    for (int it = 0; it < iters; it++) {
        int k = (int)(next_rand() % (uint64_t)nkinds);
        rcoll_datatype_t dt = types[next_rand() % 10];
        rcoll_op_t op = ops[next_rand() % 5];
        int root = (int)(next_rand() % (uint64_t)n);
        size_t s = rcoll_datatype_size(dt);
        /* log-uniform count: many small, some large */
        size_t c1 = (size_t)1 << (next_rand() % 21);
        size_t cnt = MIN(c1 + next_rand() % c1, maxb / s);
        if (next_rand() % 16 == 0)
            cnt = 0;
        int salt = it + 7;
        rcoll_status_t st = RCOLL_OK;
        size_t check = 0, wrong = 0;
        memset(rb, 0xa5, cap);
        switch (k) {
        case 0:
            ref_fill(sb, cnt, 0, dt, op, rank, salt);
            st = rcoll_allreduce(sb, rb, cnt, dt, op, c, NULL);
            ref_reduce(ex, cnt, 0, dt, op, n, salt);
            check = cnt;
            break;
        case 1:
            ref_fill(sb, cnt, 0, dt, op, rank, salt);
            st = rcoll_reduce(sb, rb, cnt, dt, op, root, c, NULL);
            ref_reduce(ex, cnt, 0, dt, op, n, salt);
            check = rank == root ? cnt : 0;
            break;
        case 2:
            cnt = MIN(cnt, maxb / s / (size_t)n);
            ref_fill(sb, cnt * (size_t)n, 0, dt, op, rank, salt);
            st = rcoll_reduce_scatter(sb, rb, cnt, dt, op, c, NULL);
            ref_reduce(ex, cnt, (size_t)rank * cnt, dt, op, n, salt);
            check = cnt;
            break;
        case 3:
            ref_fill(sb, cnt, (size_t)rank * cnt, dt, RCOLL_SUM, rank, salt);
            st = rcoll_allgather(sb, rb, cnt, dt, c, NULL);
            for (int q = 0; q < n; q++)
                ref_fill(ex + (size_t)q * cnt * s, cnt, (size_t)q * cnt, dt,
                         RCOLL_SUM, q, salt);
            check = cnt * (size_t)n;
            break;
        case 5:
            cnt = MIN(cnt, maxb / s / (size_t)n);
            for (int q = 0; q < n; q++) /* block q goes to rank q */
                ref_fill(sb + (size_t)q * cnt * s, cnt, (size_t)q * cnt, dt,
                         RCOLL_SUM, rank, salt);
            st = rcoll_alltoall(sb, rb, cnt, dt, c, NULL);
            for (int q = 0; q < n; q++) /* block q came from rank q */
                ref_fill(ex + (size_t)q * cnt * s, cnt, (size_t)rank * cnt,
                         dt, RCOLL_SUM, q, salt);
            check = cnt * (size_t)n;
            break;
        case 6: {
            int next = (rank + 1) % n, prev = (rank + n - 1) % n;
            rcoll_request_t rq[2];
            ref_fill(sb, cnt, 0, dt, RCOLL_SUM, rank, salt);
            ref_fill(ex, cnt, 0, dt, RCOLL_SUM, prev, salt);
            check = n > 1 ? cnt : 0;
            if (n == 1)
                break;
            st = rcoll_isend_tag(sb, cnt, dt, next, it, c, NULL, &rq[0]);
            if (st == RCOLL_OK) {
                st = rcoll_irecv_tag(rb, cnt, dt, prev, it, c, NULL, &rq[1]);
                if (st == RCOLL_OK)
                    st = rcoll_wait(rq[1]);
                rcoll_status_t s0 = rcoll_wait(rq[0]);
                if (st == RCOLL_OK)
                    st = s0;
            }
            break;
        }
        default:
            if (rank == root)
                ref_fill(rb, cnt, 0, dt, RCOLL_SUM, root, salt);
            st = rcoll_broadcast(rb, rb, cnt, dt, root, c, NULL);
            ref_fill(ex, cnt, 0, dt, RCOLL_SUM, root, salt);
            check = cnt;
            break;
        }
        if (st != RCOLL_OK) {
            printf("ERROR %d %.3f %s: %s\n", it, epoch(),
                   rcoll_status_string(st), rcoll_last_error());
            rcoll_comm_destroy(c);
            free(sb);
            free(rb);
            free(ex);
            return 3;
        }
        wrong = ref_count_wrong(rb, ex, check, dt);
        if (wrong) {
            printf("WRONG %d %s type %d op %d count %zu: %zu of %zu elements "
                   "differ\n", it, names[k], (int)dt, (int)op, cnt, wrong,
                   check);
            rcoll_comm_destroy(c);
            free(sb);
            free(rb);
            free(ex);
            return 4;
        }
    }
    /* the verdict comes after destroy: an error or crash in it (a peer
     * that died at the end) must not pass as DONE */
    rcoll_status_t dst = rcoll_comm_destroy(c);
    free(sb);
    free(rb);
    free(ex);
    if (dst != RCOLL_OK) {
        printf("ERROR destroy %.3f %s: %s\n", epoch(),
               rcoll_status_string(dst), rcoll_last_error());
        return 3;
    }
    printf("DONE %d collectives %.3f\n", iters, epoch());
    return 0;
}
