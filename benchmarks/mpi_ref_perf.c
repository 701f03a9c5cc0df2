/* The same measurement as rcoll-perf, done with MPI collectives: a
 * reference for benchmarks/compare.sh (never linked into rcoll).
 * usage: mpi_ref_perf allreduce|allgather|broadcast|reduce_scatter|alltoall
 *        MINBYTES MAXBYTES FACTOR ITERS WARMUP [TARGET_S TRIALS]
 * ITERS 0: time-targeted, as rcoll-perf -T TARGET_S -R TRIALS (defaults
 * 0.1 and 5): per size, k calls per trial, k doubled from 1 until a trial
 * lasts TARGET_S on the slowest rank, and the median of TRIALS trials.
 * Prints "bytes time_us" per size: time is the slowest rank's average; for
 * allgather, reduce_scatter and alltoall the size is the whole gathered /
 * scattered / sent buffer, as in nccl-tests. DIRTY=1: see touch(). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void run_once(const char *coll, float *a, float *b, size_t count,
                     size_t per)
{
    if (!strcmp(coll, "allreduce"))
        MPI_Allreduce(a, b, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    else if (!strcmp(coll, "allgather"))
        MPI_Allgather(a, (int)per, MPI_FLOAT, b, (int)per, MPI_FLOAT,
                      MPI_COMM_WORLD);
    else if (!strcmp(coll, "reduce_scatter"))
        MPI_Reduce_scatter_block(a, b, (int)per, MPI_FLOAT, MPI_SUM,
                                 MPI_COMM_WORLD);
    else if (!strcmp(coll, "alltoall"))
        MPI_Alltoall(a, (int)per, MPI_FLOAT, b, (int)per, MPI_FLOAT,
                     MPI_COMM_WORLD);
    else
        MPI_Bcast(b, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD);
}

/* DIRTY=1 in the environment (rcoll-perf -D 1): before each call, every
 * cache line of what this rank sends is stored to (with its own value),
 * as by a program whose data changes between calls. Without it a library
 * that copies once out of the sender's buffer reads lines both cores keep
 * cached; with it the lines move between cores on every call. */
static int dirty, me;

static void touch(const char *coll, float *a, float *b, size_t count,
                  size_t per)
{
    volatile char *p = (volatile char *)a;
    size_t bytes = count * 4;
    if (!strcmp(coll, "allgather"))
        bytes = per * 4;
    else if (!strcmp(coll, "broadcast")) {
        if (me != 0)
            return;
        p = (volatile char *)b;
    }
    for (size_t j = 0; j < bytes; j += 64)
        p[j] = p[j];
}

/* The slowest rank's time of k calls (seconds). */
static double trial(const char *coll, float *a, float *b, size_t count,
                    size_t per, int k)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < k; i++) {
        if (dirty)
            touch(coll, a, b, count, per);
        run_once(coll, a, b, count, per);
    }
    double t = MPI_Wtime() - t0, tmax;
    MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return tmax;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

int main(int argc, char **argv)
{
    int r, n;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (argc < 7) {
        if (!r)
            fprintf(stderr, "usage: %s coll min max factor iters warmup\n",
                    argv[0]);
        MPI_Finalize();
        return 2;
    }
    const char *coll = argv[1];
    dirty = getenv("DIRTY") && atoi(getenv("DIRTY"));
    me = r;
    size_t minb = strtoull(argv[2], NULL, 0), maxb = strtoull(argv[3], NULL, 0);
    int factor = atoi(argv[4]), iters = atoi(argv[5]), warm = atoi(argv[6]);
    double target = argc > 7 ? atof(argv[7]) : 0.1;
    int trials = argc > 8 ? atoi(argv[8]) : 5;
    if (trials < 1 || trials > 99)
        trials = 5;
    for (size_t bytes = minb; bytes <= maxb; bytes *= (size_t)factor) {
        size_t count = bytes / 4, per = count / (size_t)n;
        if (!strcmp(coll, "allgather") || !strcmp(coll, "reduce_scatter") ||
            !strcmp(coll, "alltoall"))
            count = per * (size_t)n;
        float *a = calloc(count + 1, 4), *b = calloc(count + 1, 4);
        if (!a || !b) {
            fprintf(stderr, "mpi_ref_perf: out of memory for %zu bytes\n",
                    bytes);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        /* Written once, as rcoll-perf does: pages calloc never wrote map
         * the kernel's one zero page, and a single-copy (CMA) read of them
         * copies the same cache-hot 4 KiB over and over (2x faster than
         * real data at 16 MiB on the development VM). */
        memset(a, 0, (count + 1) * 4);
        memset(b, 0, (count + 1) * 4);
        for (int i = 0; i < warm; i++)
            run_once(coll, a, b, count, per);
        double tmax;
        if (iters > 0) {
            tmax = trial(coll, a, b, count, per, iters) / iters;
        } else {
            int k = 1;
            double t, v[100];
            while ((t = trial(coll, a, b, count, per, k)) < target &&
                   k < (1 << 28)) {
                double g = t > 0 ? target / t * 1.1 : 2;
                double nk = k * (g < 2 ? 2 : g > 16 ? 16 : g);
                k = nk > (1 << 28) ? 1 << 28 : (int)nk;
            }
            v[0] = t / k;
            for (int i = 1; i < trials; i++)
                v[i] = trial(coll, a, b, count, per, k) / k;
            qsort(v, (size_t)trials, sizeof(v[0]), cmp_double);
            tmax = trials % 2 ? v[trials / 2]
                              : (v[trials / 2 - 1] + v[trials / 2]) / 2;
        }
        if (!r)
            printf("%zu %.2f\n", count * 4, tmax * 1e6);
        free(a);
        free(b);
    }
    MPI_Finalize();
    return 0;
}
