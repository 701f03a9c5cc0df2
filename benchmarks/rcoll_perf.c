/* rcoll-perf: nccl-tests-style benchmark of rcoll's collectives.
 * Same options and columns as nccl-tests (size, count, type, redop, root,
 * time, algbw, busbw, #wrong for out-of-place and in-place) and the same
 * bus-bandwidth factors, so numbers compare directly. Ranks come from
 * rcoll_comm_init_env: run it under rcoll-run, mpirun, srun or torchrun. */
#include "../tests/ref.h"
#include <rcoll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef enum {
    ALLREDUCE, ALLGATHER, BROADCAST, REDUCE_SCATTER, REDUCE, ALLTOALL
} coll_t;
#define NCOLLS 6
static const char *coll_names[] = {"allreduce", "allgather", "broadcast",
                                   "reduce_scatter", "reduce", "alltoall"};
static const char *type_names[] = {"int8", "uint8", "int32", "uint32",
                                   "int64", "uint64", "half", "bfloat16",
                                   "float", "double"};
static const char *op_names[] = {"sum", "prod", "min", "max", "avg"};

static int rank, nranks;
static rcoll_comm_t comm;

static void die(const char *what, rcoll_status_t st)
{
    fprintf(stderr, "rcoll-perf: rank %d: %s failed: %s: %s\n", rank, what,
            rcoll_status_string(st), rcoll_last_error());
    exit(1);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int parse_size(const char *s, size_t *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || v < 0)
        return -1;
    switch (*end) {
    case 'K': case 'k': v *= 1024; end++; break;
    case 'M': case 'm': v *= 1024 * 1024; end++; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; end++; break;
    }
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end)
        return -1;
    *out = (size_t)v;
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: rcoll-perf COLLECTIVE [options]\n"
            "  COLLECTIVE: allreduce | allgather | broadcast | "
            "reduce_scatter | reduce | alltoall\n"
            "  -b SIZE   minimum size in bytes (default 8; K/M/G suffixes)\n"
            "  -e SIZE   maximum size in bytes (default 32M)\n"
            "  -f N      multiply the size by N each row (default 2)\n"
            "  -i N      or add N bytes each row\n"
            "  -d TYPE   int8 uint8 int32 uint32 int64 uint64 half bfloat16 "
            "float double all (default float)\n"
            "  -o OP     sum prod min max avg all (default sum)\n"
            "  -r ROOT   root of broadcast/reduce (default 0)\n"
            "  -n N      timed iterations (default 20)\n"
            "  -w N      warm-up iterations (default 5)\n"
            "  -T SEC    time-targeted instead of -n: per size, enough calls "
            "that a trial\n"
            "            lasts >= SEC on the slowest rank (found by doubling), "
            "then -R trials\n"
            "  -R N      trials with -T (default 5); the time printed is "
            "their median\n"
            "  -c 0|1    check results (default 1): #wrong counts elements\n"
            "  -D 0|1    1: before each timed call, store to every cache line\n"
            "            this rank sends, as if its data changed (default 0)\n"
            "  -P 0|1|2  placements measured: 0 out-of-place only, 1 in-place "
            "only,\n"
            "            2 both (default); a skipped one prints '-'\n"
            "Run under rcoll-run -n N, mpirun -np N, srun or torchrun.\n");
}

typedef struct {
    coll_t coll;
    rcoll_datatype_t dt;
    rcoll_op_t op;
    int root;
    size_t count;      /* per-rank send count (allgather), recv count (rs),
                          count per peer (alltoall), else the element
                          count */
    char *sbuf, *rbuf, *expect;
} run_t;

static rcoll_status_t do_coll(run_t *r, int inplace)
{
    size_t dts = rcoll_datatype_size(r->dt);
    switch (r->coll) {
    case ALLREDUCE:
        return rcoll_allreduce(inplace ? r->rbuf : r->sbuf, r->rbuf, r->count,
                               r->dt, r->op, comm, NULL);
    case ALLGATHER:
        return rcoll_allgather(inplace ? r->rbuf + (size_t)rank * r->count * dts
                                       : r->sbuf,
                               r->rbuf, r->count, r->dt, comm, NULL);
    case BROADCAST:
        return rcoll_broadcast(inplace ? r->rbuf : r->sbuf, r->rbuf, r->count,
                               r->dt, r->root, comm, NULL);
    case REDUCE_SCATTER:
        return rcoll_reduce_scatter(r->sbuf,
                                    inplace ? r->sbuf + (size_t)rank *
                                                  r->count * dts
                                            : r->rbuf,
                                    r->count, r->dt, r->op, comm, NULL);
    case REDUCE:
        return rcoll_reduce(inplace ? r->rbuf : r->sbuf, r->rbuf, r->count,
                            r->dt, r->op, r->root, comm, NULL);
    case ALLTOALL:
        return rcoll_alltoall(inplace ? r->rbuf : r->sbuf, r->rbuf, r->count,
                              r->dt, comm, NULL);
    }
    return RCOLL_ERR_INVALID_ARGUMENT;
}

/* Fills inputs for one checked run; returns the result buffer to compare,
 * its element count and the expected values in r->expect. */
static char *prepare(run_t *r, int inplace, size_t *ncheck)
{
    size_t c = r->count, dts = rcoll_datatype_size(r->dt);
    rcoll_op_t op = r->op;
    switch (r->coll) {
    case ALLREDUCE:
    case REDUCE:
        ref_fill(inplace ? r->rbuf : r->sbuf, c, 0, r->dt, op, rank, 0);
        ref_reduce(r->expect, c, 0, r->dt, op, nranks, 0);
        *ncheck = (r->coll == REDUCE && rank != r->root) ? 0 : c;
        return r->rbuf;
    case ALLGATHER:
        ref_fill(inplace ? r->rbuf + (size_t)rank * c * dts : r->sbuf, c,
                 (size_t)rank * c, r->dt, RCOLL_SUM, rank, 0);
        for (int q = 0; q < nranks; q++)
            ref_fill(r->expect + (size_t)q * c * dts, c, (size_t)q * c, r->dt,
                     RCOLL_SUM, q, 0);
        *ncheck = c * (size_t)nranks;
        return r->rbuf;
    case BROADCAST:
        if (rank == r->root)
            ref_fill(inplace ? r->rbuf : r->sbuf, c, 0, r->dt, RCOLL_SUM,
                     r->root, 0);
        ref_fill(r->expect, c, 0, r->dt, RCOLL_SUM, r->root, 0);
        *ncheck = c;
        return r->rbuf;
    case REDUCE_SCATTER:
        ref_fill(r->sbuf, c * (size_t)nranks, 0, r->dt, op, rank, 0);
        ref_reduce(r->expect, c, (size_t)rank * c, r->dt, op, nranks, 0);
        *ncheck = c;
        return inplace ? r->sbuf + (size_t)rank * c * dts : r->rbuf;
    case ALLTOALL: /* block (src -> dst) starts at index (src n + dst) c */
        for (int q = 0; q < nranks; q++) {
            ref_fill((inplace ? r->rbuf : r->sbuf) + (size_t)q * c * dts, c,
                     ((size_t)rank * nranks + q) * c, r->dt, RCOLL_SUM, rank,
                     0);
            ref_fill(r->expect + (size_t)q * c * dts, c,
                     ((size_t)q * nranks + rank) * c, r->dt, RCOLL_SUM, q, 0);
        }
        *ncheck = c * (size_t)nranks;
        return r->rbuf;
    }
    return NULL;
}

static int dirty; /* -D 1 */

/* -D 1: before each timed call, a store to every cache line of what this
 * rank sends (its own value back, so the data stays as checked), as in a
 * program whose data changes between calls. Without it a library that
 * copies once out of the sender's buffer reads lines that both cores keep
 * cached from the last call; with it the lines move between cores on
 * every call, as they do for two copies through shared memory. */
static void touch(run_t *r, int inplace)
{
    size_t dts = rcoll_datatype_size(r->dt), bytes = r->count * dts;
    char *in = inplace ? r->rbuf : r->sbuf;
    switch (r->coll) {
    case ALLGATHER:
        if (inplace)
            in = r->rbuf + (size_t)rank * bytes;
        break;
    case BROADCAST:
        if (rank != r->root)
            return;
        break;
    case REDUCE_SCATTER:
        in = r->sbuf;
        bytes *= (size_t)nranks;
        break;
    case ALLTOALL:
        bytes *= (size_t)nranks;
        break;
    default:
        break;
    }
    volatile char *p = in;
    for (size_t j = 0; j < bytes; j += 64)
        p[j] = p[j];
}

/* The slowest rank's time of one trial of k calls (seconds per call). */
static double trial(run_t *r, int inplace, int k)
{
    rcoll_status_t st;
    if ((st = rcoll_barrier(comm)) != RCOLL_OK)
        die("rcoll_barrier", st);
    double t0 = now();
    for (int i = 0; i < k; i++) {
        if (dirty)
            touch(r, inplace);
        if ((st = do_coll(r, inplace)) != RCOLL_OK)
            die(coll_names[r->coll], st);
    }
    double dt = now() - t0, slowest;
    if ((st = rcoll_allreduce(&dt, &slowest, 1, RCOLL_FLOAT64, RCOLL_MAX,
                              comm, NULL)) != RCOLL_OK)
        die("rcoll_allreduce(time)", st);
    return slowest;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Seconds per call: one trial of `iters` calls, or (target > 0) the median
 * of `trials` trials of k calls, k doubled from 1 until a trial lasts at
 * least `target` on the slowest rank (every rank sees the same maximum, so
 * all agree on k; the calibration trials are warm-up too). */
static double timed(run_t *r, int inplace, int iters, double target,
                    int trials)
{
    if (target <= 0)
        return trial(r, inplace, iters) / iters;
    int k = 1;
    double t;
    while ((t = trial(r, inplace, k)) < target && k < (1 << 28)) {
        double grow = t > 0 ? target / t * 1.1 : 2;
        double nk = k * (grow < 2 ? 2 : grow > 16 ? 16 : grow);
        k = nk > (1 << 28) ? 1 << 28 : (int)nk;
    }
    double v[100];
    v[0] = t / k;
    for (int i = 1; i < trials; i++)
        v[i] = trial(r, inplace, k) / k;
    qsort(v, (size_t)trials, sizeof(v[0]), cmp_double);
    return trials % 2 ? v[trials / 2]
                      : (v[trials / 2 - 1] + v[trials / 2]) / 2;
}

int main(int argc, char **argv)
{
    size_t minb = 8, maxb = 32 << 20, incr = 0;
    int factor = 2, iters = 20, warmup = 5, check = 1, root = 0, trials = 5;
    int places = 2;
    double target = 0;
    const char *dtarg = "float", *oparg = "sum";
    coll_t coll;
    int c, k;

    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (k = 0; k < NCOLLS && strcmp(argv[1], coll_names[k]); k++)
        ;
    if (k == NCOLLS) {
        fprintf(stderr, "rcoll-perf: unknown collective \"%s\"\n", argv[1]);
        usage(stderr);
        return 2;
    }
    coll = (coll_t)k;
    optind = 2;
    while ((c = getopt(argc, argv, "b:e:f:i:d:o:r:n:w:c:T:R:D:P:h")) != -1) {
        switch (c) {
        case 'b': if (parse_size(optarg, &minb)) goto bad; break;
        case 'e': if (parse_size(optarg, &maxb)) goto bad; break;
        case 'f': factor = atoi(optarg); incr = 0; break;
        case 'i': if (parse_size(optarg, &incr)) goto bad; break;
        case 'd': dtarg = optarg; break;
        case 'o': oparg = optarg; break;
        case 'r': root = atoi(optarg); break;
        case 'n': iters = atoi(optarg); break;
        case 'w': warmup = atoi(optarg); break;
        case 'c': check = atoi(optarg); break;
        case 'T': target = atof(optarg); break;
        case 'R': trials = atoi(optarg); break;
        case 'D': dirty = atoi(optarg); break;
        case 'P': places = atoi(optarg); break;
        case 'h': usage(stdout); return 0;
        default: goto bad;
        }
    }
    if (factor < 1 || iters < 1 || warmup < 0 || minb > maxb ||
        target < 0 || trials < 1 || trials > 99 || places < 0 ||
        places > 2)
        goto bad;

    int dts_list[RCOLL_DATATYPE_COUNT], ndt = 0, ops[RCOLL_OP_COUNT], nop = 0;
    for (k = 0; k < RCOLL_DATATYPE_COUNT; k++)
        if (!strcmp(dtarg, "all") || !strcmp(dtarg, type_names[k]) ||
            (!strcmp(dtarg, "float16") && k == RCOLL_FLOAT16) ||
            (!strcmp(dtarg, "float32") && k == RCOLL_FLOAT32) ||
            (!strcmp(dtarg, "float64") && k == RCOLL_FLOAT64))
            dts_list[ndt++] = k;
    int has_op = coll == ALLREDUCE || coll == REDUCE_SCATTER || coll == REDUCE;
    for (k = 0; k < RCOLL_OP_COUNT; k++)
        if (!strcmp(oparg, "all") || !strcmp(oparg, op_names[k]))
            ops[nop++] = k;
    if (!ndt || !nop) {
        fprintf(stderr, "rcoll-perf: unknown type \"%s\" or op \"%s\"\n",
                dtarg, oparg);
        return 2;
    }
    if (!has_op)
        nop = 1;

    rcoll_status_t st = rcoll_comm_init_env(&comm);
    if (st != RCOLL_OK)
        die("rcoll_comm_init_env", st);
    rcoll_comm_rank(comm, &rank);
    rcoll_comm_size(comm, &nranks);
    if (root < 0 || root >= nranks) {
        if (rank == 0)
            fprintf(stderr, "rcoll-perf: root %d out of range\n", root);
        rcoll_comm_destroy(comm);
        return 2;
    }
    int rooted = coll == BROADCAST || coll == REDUCE;
    double bw_factor = 1.0;
    if (coll == ALLREDUCE)
        bw_factor = 2.0 * (nranks - 1) / nranks;
    else if (coll == ALLGATHER || coll == REDUCE_SCATTER ||
             coll == ALLTOALL)
        bw_factor = (double)(nranks - 1) / nranks;

    if (rank == 0) {
        char host[256] = "";
        gethostname(host, sizeof(host) - 1);
        printf("# rcoll-perf %s (rcoll %s): nranks %d minBytes %zu maxBytes "
               "%zu step: %zu(%s) warmup iters: %d iters: %d validation: "
               "%d\n", coll_names[coll], rcoll_version(), nranks, minb, maxb,
               incr ? incr : (size_t)factor, incr ? "bytes" : "factor",
               warmup, iters, check);
        if (target > 0)
            printf("# time-targeted: trials of >= %g s on the slowest rank, "
                   "median of %d (-n ignored)\n", target, trials);
        printf("#\n#  Rank %2d Pid %6d on %s\n#\n", rank, (int)getpid(), host);
        printf("# %10s  %12s  %8s  %6s  %6s  %35s  %35s\n", "", "", "", "",
               "", "out-of-place", "in-place");
        printf("# %10s  %12s  %8s  %6s  %6s  %8s  %7s  %7s  %6s  %8s  %7s  "
               "%7s  %6s\n", "size", "count", "type", "redop", "root", "time",
               "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
               "#wrong");
        printf("# %10s  %12s  %8s  %6s  %6s  %8s  %7s  %7s  %6s  %8s  %7s  "
               "%7s  %6s\n", "(B)", "(elements)", "", "", "", "(us)",
               "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
        fflush(stdout);
    }

    double bw_sum = 0;
    int bw_rows = 0;
    long long wrong_total = 0, wrong_mine = 0;
    for (int di = 0; di < ndt; di++) {
        for (int oi = 0; oi < nop; oi++) {
            rcoll_datatype_t dt = (rcoll_datatype_t)dts_list[di];
            size_t dts = rcoll_datatype_size(dt);
            for (size_t bytes = minb; bytes <= maxb;
                 bytes = incr ? bytes + incr : bytes * (size_t)factor) {
                run_t r = {.coll = coll, .dt = dt,
                           .op = has_op ? (rcoll_op_t)ops[oi] : RCOLL_SUM,
                           .root = root};
                size_t total = bytes / dts, sbytes, rbytes;
                if (coll == ALLGATHER || coll == REDUCE_SCATTER ||
                    coll == ALLTOALL) {
                    r.count = total / (size_t)nranks;
                    total = r.count * (size_t)nranks;
                } else {
                    r.count = total;
                }
                size_t size = total * dts;
                sbytes = (coll == ALLGATHER ? r.count : total) * dts;
                rbytes = (coll == REDUCE_SCATTER ? r.count : total) * dts;
                r.sbuf = malloc(sbytes + 64);
                r.rbuf = malloc(rbytes + 64);
                r.expect = malloc(rbytes + 64);
                if (!r.sbuf || !r.rbuf || !r.expect) {
                    fprintf(stderr, "rcoll-perf: rank %d: out of memory for "
                            "%zu bytes\n", rank, size);
                    return 1;
                }
                memset(r.sbuf, 0, sbytes);
                memset(r.rbuf, 0, rbytes);
                double t_us[2] = {0, 0};
                long long wrong[2] = {0, 0};
                for (int inplace = 0; inplace < 2; inplace++) {
                    long long w = 0;
                    if (places != 2 && places != inplace)
                        continue;
                    if (check) {
                        size_t ncheck;
                        char *res = prepare(&r, inplace, &ncheck);
                        if ((st = do_coll(&r, inplace)) != RCOLL_OK)
                            die(coll_names[coll], st);
                        w = (long long)ref_count_wrong(res, r.expect, ncheck,
                                                       dt);
                        wrong_mine += w;
                    }
                    for (int i = 0; i < warmup; i++)
                        if ((st = do_coll(&r, inplace)) != RCOLL_OK)
                            die(coll_names[coll], st);
                    if ((st = rcoll_barrier(comm)) != RCOLL_OK)
                        die("rcoll_barrier", st);
                    t_us[inplace] = timed(&r, inplace, iters, target,
                                          trials) * 1e6;
                    int64_t wl = w, wsum;
                    if ((st = rcoll_allreduce(&wl, &wsum, 1, RCOLL_INT64,
                                              RCOLL_SUM, comm, NULL)) !=
                        RCOLL_OK)
                        die("rcoll_allreduce(#wrong)", st);
                    wrong[inplace] = wsum;
                    wrong_total += wsum;
                }
                if (rank == 0) {
                    char col[2][64];
                    for (int p = 0; p < 2; p++) {
                        if (places != 2 && places != p) {
                            snprintf(col[p], sizeof(col[p]),
                                     "%8s  %7s  %7s  %6s", "-", "-", "-",
                                     "-");
                            continue;
                        }
                        double alg = t_us[p] > 0
                                         ? (double)size / 1e3 / t_us[p] : 0;
                        double bus = alg * bw_factor;
                        bw_sum += bus;
                        bw_rows++;
                        char w[24] = "N/A";
                        if (check)
                            snprintf(w, sizeof(w), "%lld", wrong[p]);
                        snprintf(col[p], sizeof(col[p]),
                                 "%8.2f  %7.3f  %7.3f  %6s", t_us[p], alg,
                                 bus, w);
                    }
                    printf("  %10zu  %12zu  %8s  %6s  %6d  %s  %s\n", size,
                           total, type_names[dt],
                           has_op ? op_names[r.op] : "none",
                           rooted ? root : -1, col[0], col[1]);
                    fflush(stdout);
                }
                free(r.sbuf);
                free(r.rbuf);
                free(r.expect);
                if (!incr && factor == 1)
                    break;
            }
        }
    }
    if (rank == 0) {
        printf("# Out of bounds values : %lld %s\n", wrong_total,
               wrong_total ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %g \n#\n",
               bw_rows ? bw_sum / bw_rows : 0.0);
    }
    st = rcoll_comm_destroy(comm);
    if (st != RCOLL_OK)
        die("rcoll_comm_destroy", st);
    /* this rank's own count decides too (a sum the library got wrong
     * must not hide it) */
    return wrong_total || wrong_mine ? 1 : 0;
bad:
    usage(stderr);
    return 2;
}
