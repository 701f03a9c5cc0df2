/* Collectives in a row, each result checked bit for bit, while a test
 * script takes a network link away (tests/test_rails.sh): iteration i is
 * an all-reduce (int32 sum) of COUNT elements whose inputs depend on the
 * rank and on i, and every 4th also an all-gather of the same inputs.
 * Prints the milliseconds each block of 50 iterations took, so that a log
 * shows the stall when a rail fails and the rate after it; at the end,
 * whether the communicator's asynchronous error is still RCOLL_OK.
 * usage: test_failover [-n ITERS] [-c COUNT] [-s FILE] [-e FILE] [-d 1]
 *                      [-p MS] [-a 1] [-q MS]
 * -s FILE: rank 0 creates FILE after the first block (the script cuts the
 * link once it exists); -e FILE: the run ends after the block in which
 * rank 0 found FILE (an all-reduce of its flag: every rank stops at the
 * same iteration), or at ITERS; -d 1: each rank dumps its communicator's state
 * (transport counters) at the end; -p MS: rank 1 sleeps MS milliseconds
 * after iteration 50 with its peers' data in flight (a stopped rank, not
 * a lost link); -a 1: every 4th iteration (the others) also an
 * all-to-all of blocks of COUNT / ranks elements (receives in place over
 * ib); -q MS: at the end rank 0 creates the -s FILE (not after the
 * first block), waits a second (the script cuts a link), sends 8 eager
 * messages to rank 1 (done once staged) and destroys the communicator,
 * while rank 1 sleeps MS before it receives them: a link lost under
 * messages that rank 0's destroy must still see through. Exits 1 on a
 * wrong result or an error. */
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

/* rank r's element j in iteration i: below 2^16, so n of them sum in
 * int32 exactly */
static int32_t val(int r, size_t j, int i)
{
    uint32_t x = (uint32_t)r * 2654435761u ^ (uint32_t)j * 40503u ^
                 (uint32_t)i * 97u;
    return (int32_t)((x ^ (x >> 15)) & 0xffff);
}

int main(int argc, char **argv)
{
    int iters = 1000, rank, n, bad = 0, dump = 0, pause_ms = 0, a2a = 0,
        quiet_ms = 0;
    size_t count = 65536;
    const char *start = NULL, *endf = NULL;
    for (int a = 1; a + 1 < argc; a += 2) {
        if (!strcmp(argv[a], "-n"))
            iters = atoi(argv[a + 1]);
        else if (!strcmp(argv[a], "-c"))
            count = (size_t)atol(argv[a + 1]);
        else if (!strcmp(argv[a], "-s"))
            start = argv[a + 1];
        else if (!strcmp(argv[a], "-e"))
            endf = argv[a + 1];
        else if (!strcmp(argv[a], "-d"))
            dump = atoi(argv[a + 1]);
        else if (!strcmp(argv[a], "-p"))
            pause_ms = atoi(argv[a + 1]);
        else if (!strcmp(argv[a], "-a"))
            a2a = atoi(argv[a + 1]);
        else if (!strcmp(argv[a], "-q"))
            quiet_ms = atoi(argv[a + 1]);
    }
    rcoll_comm_t c;
    if (rcoll_comm_init_env(&c) != RCOLL_OK) {
        printf("init: %s\n", rcoll_last_error());
        return 1;
    }
    rcoll_comm_rank(c, &rank);
    rcoll_comm_size(c, &n);
    int32_t *in = malloc(count * sizeof(int32_t)),
            *out = malloc(count * sizeof(int32_t)),
            *all = malloc(count * (size_t)n * sizeof(int32_t));
    if (!in || !out || !all) {
        printf("no memory\n");
        return 1;
    }
    double t0 = now();
    int done = 0;
    for (int i = 0; i < iters && !bad; i++) {
        if (i == 50 && rank == 1 && pause_ms > 0) {
            struct timespec ts = {pause_ms / 1000,
                                  (long)(pause_ms % 1000) * 1000000L};
            nanosleep(&ts, NULL);
        }
        for (size_t j = 0; j < count; j++)
            in[j] = val(rank, j, i);
        rcoll_status_t st = rcoll_allreduce(in, out, count, RCOLL_INT32,
                                            RCOLL_SUM, c, NULL);
        if (st != RCOLL_OK) {
            printf("rank %d iteration %d: all-reduce: %s\n", rank, i,
                   rcoll_last_error());
            bad = 1;
            break;
        }
        for (size_t j = 0; j < count; j++) {
            int32_t want = 0;
            for (int r = 0; r < n; r++)
                want += val(r, j, i);
            if (out[j] != want) {
                printf("rank %d iteration %d: all-reduce element %zu is %d, "
                       "not %d\n", rank, i, j, out[j], want);
                bad = 1;
                break;
            }
        }
        if (i % 4 == 0 && !bad) {
            st = rcoll_allgather(in, all, count, RCOLL_INT32, c, NULL);
            if (st != RCOLL_OK) {
                printf("rank %d iteration %d: all-gather: %s\n", rank, i,
                       rcoll_last_error());
                bad = 1;
                break;
            }
            for (int r = 0; r < n && !bad; r++)
                for (size_t j = 0; j < count; j++)
                    if (all[(size_t)r * count + j] != val(r, j, i)) {
                        printf("rank %d iteration %d: all-gather block %d "
                               "element %zu is wrong\n", rank, i, r, j);
                        bad = 1;
                        break;
                    }
        }
        size_t b = count / (size_t)n; /* all-to-all block */
        if (a2a && i % 4 == 2 && b && !bad) {
            st = rcoll_alltoall(in, all, b, RCOLL_INT32, c, NULL);
            if (st != RCOLL_OK) {
                printf("rank %d iteration %d: all-to-all: %s\n", rank, i,
                       rcoll_last_error());
                bad = 1;
                break;
            }
            /* block r came from rank r: its inputs' block `rank` */
            for (int r = 0; r < n && !bad; r++)
                for (size_t j = 0; j < b; j++)
                    if (all[(size_t)r * b + j] !=
                        val(r, (size_t)rank * b + j, i)) {
                        printf("rank %d iteration %d: all-to-all block %d "
                               "element %zu is wrong\n",
                               rank, i, r, j);
                        bad = 1;
                        break;
                    }
        }
        if ((i + 1) % 50 == 0) {
            double t = now();
            if (rank == 0)
                printf("iterations %d-%d: %.1f ms\n", i - 49, i,
                       (t - t0) * 1e3);
            fflush(stdout);
            t0 = t;
            if (i == 49 && start && rank == 0 && !quiet_ms) {
                FILE *f = fopen(start, "w");
                if (f)
                    fclose(f);
            }
            if (endf) {
                int32_t stop = rank == 0 && access(endf, F_OK) == 0, any;
                st = rcoll_allreduce(&stop, &any, 1, RCOLL_INT32, RCOLL_MAX,
                                     c, NULL);
                if (st != RCOLL_OK) {
                    printf("rank %d iteration %d: all-reduce (end): %s\n",
                           rank, i, rcoll_last_error());
                    bad = 1;
                    break;
                }
                if (any) {
                    done = i + 1;
                    break;
                }
            }
        }
    }
    if (done)
        iters = done;
    for (int m = 0; quiet_ms > 0 && n > 1 && count >= 4096 && m < 8 && !bad;
         m++) {
        rcoll_status_t st = RCOLL_OK;
        if (rank == 0 && m == 0 && start) {
            FILE *f = fopen(start, "w");
            if (f)
                fclose(f);
            sleep(1);
        }
        if (rank == 0) {
            for (size_t j = 0; j < 4096; j++)
                out[j] = val(0, j, 1000 + m);
            st = rcoll_send(out, 4096, RCOLL_INT32, 1, c, NULL);
        } else if (rank == 1) {
            if (m == 0) {
                struct timespec ts = {quiet_ms / 1000,
                                      (long)(quiet_ms % 1000) * 1000000L};
                nanosleep(&ts, NULL);
            }
            st = rcoll_recv(out, 4096, RCOLL_INT32, 0, c, NULL);
            for (size_t j = 0; j < 4096 && st == RCOLL_OK && !bad; j++)
                if (out[j] != val(0, j, 1000 + m)) {
                    printf("rank 1: last message %d element %zu is wrong\n", m,
                           j);
                    bad = 1;
                }
        }
        if (st != RCOLL_OK) {
            printf("rank %d: last message %d: %s\n", rank, m,
                   rcoll_last_error());
            bad = 1;
        }
    }
    rcoll_status_t ae = RCOLL_OK;
    if (rcoll_comm_get_async_error(c, &ae) != RCOLL_OK || ae != RCOLL_OK) {
        printf("rank %d: asynchronous error %d\n", rank, (int)ae);
        bad = 1;
    }
    if (!bad)
        printf("rank %d: %d iterations bit-exact, asynchronous error OK\n",
               rank, iters);
    fflush(stdout);
    if (dump)
        rcoll_comm_dump(c);
    rcoll_comm_destroy(c);
    free(in);
    free(out);
    free(all);
    return bad;
}
