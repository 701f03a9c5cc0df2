/* 1,000 communicators created and destroyed one after the other (the id
 * broadcast over a parent communicator, as NCCL users do with MPI_Bcast),
 * each checked with an all-reduce: after a warm-up of 100, the process's
 * open file descriptors and threads must come back to the same count and
 * its resident memory must not grow by more than 4 MiB, so nothing leaks
 * per communicator (segments, sockets, threads, registrations).
 * Run under rcoll-run -n 2 (or more). Usage: test_many_comms [N] */
#include <dirent.h>
#include <rcoll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int count_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    while (readdir(d))
        n++;
    closedir(d);
    return n - 3; /* ., .. and the DIR's own fd */
}

static long status_field(const char *key)
{
    char line[256];
    long v = -1;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (!strncmp(line, key, strlen(key)))
            v = atol(line + strlen(key));
    fclose(f);
    return v;
}

/* threads settle: a bootstrap root thread of the last id may still be on
 * its way out */
static long threads_settled(long want)
{
    long t = status_field("Threads:");
    for (int i = 0; i < 100 && t != want; i++) {
        usleep(10 * 1000);
        t = status_field("Threads:");
    }
    return t;
}

int main(int argc, char **argv)
{
    int total = argc > 1 ? atoi(argv[1]) : 1000, warm = total / 10;
    rcoll_comm_t parent;
    if (rcoll_comm_init_env(&parent) != RCOLL_OK) {
        printf("init: %s\n", rcoll_last_error());
        return 1;
    }
    int rank, n;
    rcoll_comm_rank(parent, &rank);
    rcoll_comm_size(parent, &n);
    int fds0 = 0;
    long thr0 = 0, rss0 = 0;
    for (int i = 0; i < total; i++) {
        rcoll_unique_id_t id;
        if (rank == 0 && rcoll_get_unique_id(&id) != RCOLL_OK) {
            printf("get id %d: %s\n", i, rcoll_last_error());
            return 1;
        }
        if (rcoll_broadcast(&id, &id, sizeof(id), RCOLL_UINT8, 0, parent,
                            NULL) != RCOLL_OK) {
            printf("broadcast id %d: %s\n", i, rcoll_last_error());
            return 1;
        }
        rcoll_comm_t c;
        if (rcoll_comm_init_rank(&c, n, &id, rank) != RCOLL_OK) {
            printf("rank %d: init #%d: %s\n", rank, i, rcoll_last_error());
            return 1;
        }
        int64_t x = rank + i, y = 0;
        if (rcoll_allreduce(&x, &y, 1, RCOLL_INT64, RCOLL_SUM, c, NULL) !=
                RCOLL_OK ||
            y != (int64_t)n * i + (int64_t)n * (n - 1) / 2) {
            printf("rank %d: allreduce on #%d: %s (got %lld)\n", rank, i,
                   rcoll_last_error(), (long long)y);
            return 1;
        }
        if (rcoll_comm_destroy(c) != RCOLL_OK) {
            printf("rank %d: destroy #%d: %s\n", rank, i, rcoll_last_error());
            return 1;
        }
        if (i == warm - 1) {
            thr0 = threads_settled(-1);
            fds0 = count_fds();
            rss0 = status_field("VmRSS:");
        }
    }
    long thr1 = threads_settled(thr0);
    int fds1 = count_fds();
    long rss1 = status_field("VmRSS:");
    printf("rank %d: after %d and %d communicators: fds %d -> %d, threads "
           "%ld -> %ld, RSS %ld -> %ld KiB\n", rank, warm, total, fds0, fds1,
           thr0, thr1, rss0, rss1);
    int ok = fds1 == fds0 && thr1 == thr0 && rss1 - rss0 <= 4096;
    rcoll_comm_destroy(parent);
    return ok ? 0 : 1;
}
