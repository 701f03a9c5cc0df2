/* The same measurement as rcoll-perf, done with MPI collectives: a
 * reference for benchmarks/compare.sh (never linked into rcoll).
 * usage: mpi_ref_perf allreduce|allgather|broadcast|reduce_scatter|alltoall
 *        MINBYTES MAXBYTES FACTOR ITERS WARMUP
 * Prints "bytes time_us" per size: time is the slowest rank's average; for
 * allgather, reduce_scatter and alltoall the size is the whole gathered /
 * scattered / sent buffer, as in nccl-tests. */
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
    size_t minb = strtoull(argv[2], NULL, 0), maxb = strtoull(argv[3], NULL, 0);
    int factor = atoi(argv[4]), iters = atoi(argv[5]), warm = atoi(argv[6]);
    for (size_t bytes = minb; bytes <= maxb; bytes *= (size_t)factor) {
        size_t count = bytes / 4, per = count / (size_t)n;
        if (!strcmp(coll, "allgather") || !strcmp(coll, "reduce_scatter") ||
            !strcmp(coll, "alltoall"))
            count = per * (size_t)n;
        float *a = calloc(count + 1, 4), *b = calloc(count + 1, 4);
        for (int i = 0; i < warm; i++)
            run_once(coll, a, b, count, per);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; i++)
            run_once(coll, a, b, count, per);
        double t = (MPI_Wtime() - t0) / iters, tmax;
        MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (!r)
            printf("%zu %.2f\n", count * 4, tmax * 1e6);
        free(a);
        free(b);
    }
    MPI_Finalize();
    return 0;
}
