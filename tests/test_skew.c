/* One slow rank: how long the others take after it finally calls. Rank
 * n - 1 enters each operation D ms after the others; every rank records
 * when its call returned, and the lag of the operation is the last
 * return minus the slow rank's entry (CLOCK_MONOTONIC is one clock for
 * every process of a host). An executor that lets one peer's missing
 * credits or a later step's message hold up transfers to and from other
 * peers stalls until its unblock timer (100 ms) fires; one with per-peer
 * cursors finishes in about the time the data takes.
 *   a2av  all-to-all-v, skewed: rank r sends 4 chunk-sized blocks' worth
 *         to r + 1 and one to every other rank
 *   hier  all-reduce, hierarchical (run it with RCOLL_HOSTID splitting the
 *         ranks into hosts and RCOLL_ALGO=allreduce:hierarchical)
 * Results are checked bit-exact. Prints the median and the largest lag of
 * ROUNDS operations; exits 1 on a wrong result, or (-m MS) when the
 * largest lag passes MS.
 * usage: test_skew a2av|hier [-r ROUNDS] [-d DELAY_MS] [-m MAX_LAG_MS] */
#include <rcoll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static uint32_t val(int src, int dst, size_t i, int round)
{
    return (uint32_t)(src * 7919 + dst * 104729) ^ (uint32_t)i ^
           ((uint32_t)round << 24);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "a2av";
    int rounds = 10, delay_ms = 30;
    double max_ms = 0;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-r"))
            rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-d"))
            delay_ms = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-m"))
            max_ms = atof(argv[i + 1]);
    }
    rcoll_comm_t c;
    int rank, n, bad = 0;
    if (rcoll_comm_init_env(&c) != RCOLL_OK) {
        printf("init: %s\n", rcoll_last_error());
        return 1;
    }
    rcoll_comm_rank(c, &rank);
    rcoll_comm_size(c, &n);
    int slow = n - 1;
    /* a chunk is 512 KiB by default: 4 of them to the next rank fill its
     * slots for us */
    size_t unit = ((size_t)512 << 10) / 4; /* elements of uint32 */
    size_t *sc = calloc((size_t)n, sizeof(size_t)),
           *sd = calloc((size_t)n, sizeof(size_t)),
           *rc = calloc((size_t)n, sizeof(size_t)),
           *rd = calloc((size_t)n, sizeof(size_t));
    size_t stot = 0, rtot = 0;
    for (int p = 0; p < n; p++) {
        sc[p] = p == (rank + 1) % n ? 4 * unit + 3 : unit + (size_t)p;
        rc[p] = rank == (p + 1) % n ? 4 * unit + 3 : unit + (size_t)rank;
        sd[p] = stot;
        rd[p] = rtot;
        stot += sc[p];
        rtot += rc[p];
    }
    size_t ar = ((size_t)8 << 20) / 4; /* the all-reduce: 8 MiB of uint32 */
    uint32_t *in = malloc(4 * (stot > ar ? stot : ar)),
             *out = malloc(4 * (rtot > ar ? rtot : ar));
    double *lags = calloc((size_t)rounds, sizeof(double));
    for (int round = 0; round < rounds; round++) {
        int hier = !strcmp(mode, "hier");
        if (hier) {
            for (size_t i = 0; i < ar; i++)
                in[i] = val(rank, 0, i, round) & 0xffff;
        } else {
            for (int p = 0; p < n; p++)
                for (size_t i = 0; i < sc[p]; i++)
                    in[sd[p] + i] = val(rank, p, i, round);
        }
        rcoll_barrier(c);
        if (rank == slow)
            usleep((useconds_t)delay_ms * 1000);
        double t0 = now();
        rcoll_status_t st =
            hier ? rcoll_allreduce(in, out, ar, RCOLL_UINT32, RCOLL_SUM, c,
                                   NULL)
                 : rcoll_alltoallv(in, sc, sd, out, rc, rd, RCOLL_UINT32, c,
                                   NULL);
        double t1 = now();
        if (st != RCOLL_OK) {
            printf("rank %d: %s\n", rank, rcoll_last_error());
            return 1;
        }
        if (hier) {
            for (size_t i = 0; i < ar && !bad; i++) {
                uint32_t want = 0;
                for (int p = 0; p < n; p++)
                    want += val(p, 0, i, round) & 0xffff;
                bad = out[i] != want;
            }
        } else {
            for (int p = 0; p < n && !bad; p++)
                for (size_t i = 0; i < rc[p] && !bad; i++)
                    bad = out[rd[p] + i] != val(p, rank, i, round);
        }
        double v[2] = {rank == slow ? t0 : 0, t1}, m[2];
        rcoll_allreduce(v, m, 2, RCOLL_FLOAT64, RCOLL_MAX, c, NULL);
        lags[round] = (m[1] - m[0]) * 1e3;
    }
    int allbad = 0;
    rcoll_allreduce(&bad, &allbad, 1, RCOLL_INT32, RCOLL_MAX, c, NULL);
    qsort(lags, (size_t)rounds, sizeof(double), cmp);
    int ok = !allbad && (max_ms <= 0 || lags[rounds - 1] <= max_ms);
    if (rank == 0)
        printf("test_skew %s: %d ranks, rank %d %d ms late, %d rounds: lag "
               "after it median %.1f ms, max %.1f ms%s%s\n", mode, n, slow,
               delay_ms, rounds, lags[rounds / 2], lags[rounds - 1],
               allbad ? "; WRONG RESULTS" : "",
               ok ? "" : " (over the limit)");
    rcoll_comm_destroy(c);
    return ok ? 0 : 1;
}
