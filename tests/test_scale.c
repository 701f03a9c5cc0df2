/* Many ranks on one host: every rank runs all-reduce (8 B and 1 MiB),
 * all-gather, broadcast, all-to-all and a ring exchange (send to rank+1,
 * receive from rank-1), each result checked element by element against
 * values computed here, and reports how long init took and how much
 * memory the library holds per rank: the growth of the process's
 * anonymous memory since before init, less the test's own buffers, plus
 * the shared memory it has touched (/proc/self/smaps_rollup: Pss_Anon and
 * Pss_Shmem, each shared page split among the ranks that map it), the
 * maxima over all ranks.
 * Run under rcoll-run -n N. Usage: test_scale [MAX_MIB]: exits 1 when a
 * result is wrong or a rank holds more than MAX_MIB (0: no bound). */
#include <rcoll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* a field of /proc/self/smaps_rollup in KiB, -1 if absent */
static long rollup(const char *key)
{
    char line[256];
    long v = -1;
    size_t k = strlen(key);
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (!strncmp(line, key, k) && line[k] == ':')
            v = atol(line + k + 1);
    fclose(f);
    return v;
}

static int fails;
static int me;

#define CK(call, what)                                                     \
    do {                                                                   \
        rcoll_status_t st_ = (call);                                       \
        if (st_ != RCOLL_OK) {                                             \
            printf("FAIL rank %d: %s: %s\n", me, what, rcoll_last_error()); \
            return 1;                                                      \
        }                                                                  \
    } while (0)

static void expect(const char *what, size_t i, uint32_t got, uint32_t want)
{
    if (got != want && fails++ < 5)
        printf("FAIL rank %d: %s: element %zu is %u, not %u\n", me, what, i,
               got, want);
}

/* rank r's input element i */
static uint32_t val(int r, size_t i)
{
    return (uint32_t)r * 2654435761u ^ (uint32_t)i * 40503u;
}

int main(int argc, char **argv)
{
    double max_mib = argc > 1 ? atof(argv[1]) : 0;
    long anon0 = rollup("Pss_Anon");
    double t0 = now();
    rcoll_comm_t c;
    if (rcoll_comm_init_env(&c) != RCOLL_OK) {
        printf("FAIL: init: %s\n", rcoll_last_error());
        return 1;
    }
    double t_init = now() - t0;
    int n;
    rcoll_comm_rank(c, &me);
    rcoll_comm_size(c, &n);

    /* all-reduce, 8 B: sums of two elements (wrapping, as uint32) */
    uint32_t a[2] = {val(me, 0), val(me, 1)}, b[2];
    CK(rcoll_allreduce(a, b, 2, RCOLL_UINT32, RCOLL_SUM, c, NULL),
       "allreduce 8 B");
    for (size_t i = 0; i < 2; i++) {
        uint32_t w = 0;
        for (int r = 0; r < n; r++)
            w += val(r, i);
        expect("allreduce 8 B", i, b[i], w);
    }

    /* all-reduce, 1 MiB: input rank ^ i, so the sum has a closed form
     * per element only by summing; each element sums n values */
    size_t big = (1u << 20) / 4;
    uint32_t *x = malloc(big * 4), *y = malloc(big * 4);
    size_t ag = 1024 / 4; /* all-gather: 1 KiB per rank */
    uint32_t *g = malloc((size_t)n * ag * 4);
    size_t aa = 16; /* all-to-all: 64 B per pair */
    uint32_t *s = malloc((size_t)n * aa * 4), *t = malloc((size_t)n * aa * 4);
    if (!x || !y || !g || !s || !t) {
        printf("FAIL rank %d: no memory\n", me);
        return 1;
    }
    for (size_t i = 0; i < big; i++)
        x[i] = val(me, i);
    CK(rcoll_allreduce(x, y, big, RCOLL_UINT32, RCOLL_SUM, c, NULL),
       "allreduce 1 MiB");
    for (size_t i = 0; i < big; i += 997) { /* a sample: n x big is slow */
        uint32_t w = 0;
        for (int r = 0; r < n; r++)
            w += val(r, i);
        expect("allreduce 1 MiB", i, y[i], w);
    }

    /* all-gather */
    CK(rcoll_allgather(x, g, ag, RCOLL_UINT32, c, NULL), "allgather");
    for (int r = 0; r < n; r++)
        for (size_t i = 0; i < ag; i++)
            expect("allgather", (size_t)r * ag + i, g[(size_t)r * ag + i],
                   val(r, i));

    /* broadcast, 1 MiB, from the last rank */
    if (me == n - 1)
        memcpy(y, x, big * 4);
    else
        memset(y, 0, big * 4);
    CK(rcoll_broadcast(y, y, big, RCOLL_UINT32, n - 1, c, NULL),
       "broadcast");
    for (size_t i = 0; i < big; i++)
        expect("broadcast", i, y[i], val(n - 1, i));

    /* all-to-all: block p of rank r holds val(r, p * aa + i) */
    for (int p = 0; p < n; p++)
        for (size_t i = 0; i < aa; i++)
            s[(size_t)p * aa + i] = val(me, (size_t)p * aa + i);
    CK(rcoll_alltoall(s, t, aa, RCOLL_UINT32, c, NULL), "alltoall");
    for (int r = 0; r < n; r++)
        for (size_t i = 0; i < aa; i++)
            expect("alltoall", (size_t)r * aa + i, t[(size_t)r * aa + i],
                   val(r, (size_t)me * aa + i));

    /* ring exchange: 64 KiB to rank+1, from rank-1 */
    size_t ring = 16384;
    int next = (me + 1) % n, prev = (me + n - 1) % n;
    CK(rcoll_group_start(), "group_start");
    CK(rcoll_send(x, ring, RCOLL_UINT32, next, c, NULL), "send");
    CK(rcoll_recv(y, ring, RCOLL_UINT32, prev, c, NULL), "recv");
    CK(rcoll_group_end(), "group_end");
    for (size_t i = 0; i < ring; i++)
        expect("ring exchange", i, y[i], val(prev, i));

    /* what the library holds: the anonymous memory grown since before
     * init (heap, thread stacks, buffers allocated on first use) less
     * this test's own buffers, and the shared memory touched by now */
    size_t mine_kib = (2 * big * 4 + (size_t)n * ag * 4 +
                       2 * (size_t)n * aa * 4) / 1024;
    long anon = rollup("Pss_Anon") - anon0 - (long)mine_kib;
    double mib = ((anon > 0 ? anon : 0) + rollup("Pss_Shmem")) / 1024.0;
    double mine[2] = {mib, t_init}, most[2];
    CK(rcoll_allreduce(mine, most, 2, RCOLL_FLOAT64, RCOLL_MAX, c, NULL),
       "allreduce of the figures");
    int bad = fails != 0;
    int anybad = 0;
    CK(rcoll_allreduce(&bad, &anybad, 1, RCOLL_INT32, RCOLL_SUM, c, NULL),
       "allreduce of the failures");
    if (me == 0)
        printf("test_scale: %d ranks, init %.2f s (slowest rank), %.1f MiB "
               "per rank (the most: anonymous memory the library added + "
               "shared memory touched), %d rank(s) with wrong results\n",
               n, most[1], most[0], anybad);
    if (max_mib > 0 && most[0] > max_mib && me == 0)
        printf("FAIL: a rank holds %.1f MiB, more than %.1f\n", most[0],
               max_mib);
    CK(rcoll_comm_destroy(c), "destroy");
    free(x);
    free(y);
    free(g);
    free(s);
    free(t);
    return anybad || (max_mib > 0 && most[0] > max_mib) ? 1 : 0;
}
