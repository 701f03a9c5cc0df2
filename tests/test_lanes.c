/* A job that rcoll-info -p inspects (tests/test_lanes.sh): under rcoll-run,
 * each rank runs PHASE_A ring all-reduces of 3 x 64 Ki floats, writes
 * DIR/a.RANK and waits for DIR/go; then PHASE_B more, writes DIR/b.RANK
 * and waits for DIR/end. Between the two answers of rcoll-info -p, each
 * rank's lanes have sent and received exactly PHASE_B x 2 (n-1)/n x the
 * buffer's bytes (the ring's reduce-scatter and all-gather). The results
 * are checked too (small integers: exact in float). */
#include <rcoll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define COUNT (3 * 65536)
#define PHASE_A 5
#define PHASE_B 7

static void mark(const char *dir, const char *what, int rank)
{
    char p[512];
    snprintf(p, sizeof(p), "%s/%s.%d", dir, what, rank);
    FILE *f = fopen(p, "w");
    if (f)
        fclose(f);
}

static int await(const char *dir, const char *what)
{
    char p[512];
    snprintf(p, sizeof(p), "%s/%s", dir, what);
    for (int i = 0; i < 12000; i++) { /* 120 s */
        if (access(p, F_OK) == 0)
            return 0;
        usleep(10000);
    }
    printf("no %s in 120 s\n", p);
    return 1;
}

static int run(rcoll_comm_t c, float *in, float *out, int rank, int n,
               int calls, int base)
{
    int bad = 0;
    for (int k = 0; k < calls; k++) {
        for (int i = 0; i < COUNT; i++)
            in[i] = (float)((base + k + i + rank) % 97);
        if (rcoll_allreduce(in, out, COUNT, RCOLL_FLOAT32, RCOLL_SUM, c,
                            NULL) != RCOLL_OK) {
            printf("rank %d: allreduce: %s\n", rank, rcoll_last_error());
            return 1;
        }
        for (int i = 0; i < COUNT; i++) {
            float want = 0;
            for (int r = 0; r < n; r++)
                want += (float)((base + k + i + r) % 97);
            bad += out[i] != want;
        }
    }
    if (bad)
        printf("rank %d: %d wrong elements\n", rank, bad);
    return bad != 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_lanes DIR (under rcoll-run)\n");
        return 2;
    }
    rcoll_comm_t c;
    int rank, n;
    if (rcoll_comm_init_env(&c) != RCOLL_OK) {
        printf("init: %s\n", rcoll_last_error());
        return 1;
    }
    rcoll_comm_rank(c, &rank);
    rcoll_comm_size(c, &n);
    float *in = malloc(COUNT * sizeof(float));
    float *out = malloc(COUNT * sizeof(float));
    int rc = !in || !out;
    rc = rc || run(c, in, out, rank, n, PHASE_A, 0);
    mark(argv[1], "a", rank);
    rc = rc || await(argv[1], "go");
    rc = rc || run(c, in, out, rank, n, PHASE_B, PHASE_A);
    mark(argv[1], "b", rank);
    rc = rc || await(argv[1], "end");
    rcoll_comm_destroy(c);
    free(in);
    free(out);
    if (!rc)
        printf("test_lanes: rank %d of %d: %d + %d all-reduces exact\n", rank,
               n, PHASE_A, PHASE_B);
    return rc;
}
