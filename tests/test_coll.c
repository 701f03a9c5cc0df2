/* The collective matrix, run under rcoll-run with any number of ranks:
 * every collective x datatype x op x count x in-place/out-of-place x root,
 * each result compared bit for bit with ref.h's independent reference.
 *
 * usage: test_coll [-C allreduce,allgather,broadcast,reduce_scatter,reduce,
 *                      barrier,sendrecv] [-N counts] [-q] [-g]
 * -g: the buffers are GPU memory (device rank mod #GPUs): the host buffers
 * below are mirrored to the device before each call, with the same
 * aliasing (in place stays in place), and copied back after it; without a
 * GPU the run skips (exit 77) saying why.
 * The default counts are 0, 1, 7, 1023, one more than a pipeline chunk of
 * the type (RCOLL_CHUNK_SIZE / size + 1) and 8 MiB worth of elements.
 * Prints one line per failure and a summary; exits 1 if anything failed. */
#include "ref.h"
#include "gpu/cudrv.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int gpu;

/* -g: the device mirror of a call's host regions. Regions inside another
 * map into that one's device copy (in-place calls stay in place). */
#define MAXR 2
static struct {
    char *host[MAXR], *dev[MAXR];
    size_t len[MAXR];
    int outer[MAXR];
    int k;
} gm;

/* Replaces each *p (len[i] bytes, NULL skipped) by its device mirror. */
static void dev_map(void **p, const size_t *len, int k)
{
    gm.k = gpu ? k : 0;
    for (int i = 0; i < gm.k; i++) {
        gm.host[i] = p[i];
        gm.len[i] = len[i];
        gm.outer[i] = -1;
        gm.dev[i] = NULL;
    }
    for (int i = 0; i < gm.k; i++) {
        if (!gm.host[i])
            continue;
        for (int j = 0; j < gm.k; j++)
            if (j != i && gm.host[j] && gm.host[i] >= gm.host[j] &&
                gm.host[i] + gm.len[i] <= gm.host[j] + gm.len[j] &&
                (gm.len[j] > gm.len[i] || j < i))
                gm.outer[i] = j;
    }
    for (int i = 0; i < gm.k; i++)
        if (gm.host[i] && gm.outer[i] < 0) {
            gm.dev[i] = gpu_alloc(gm.len[i]);
            gpu_put(gm.dev[i], gm.host[i], gm.len[i]);
        }
    for (int i = 0; i < gm.k; i++) {
        if (!gm.host[i])
            continue;
        int o = gm.outer[i];
        if (o >= 0)
            gm.dev[i] = gm.dev[o] + (gm.host[i] - gm.host[o]);
        p[i] = gm.dev[i];
    }
}

/* Copies every mirrored region back to the host and frees the mirror. */
static void dev_unmap(void)
{
    for (int i = 0; i < gm.k; i++)
        if (gm.host[i] && gm.outer[i] < 0) {
            gpu_get(gm.host[i], gm.dev[i], gm.len[i]);
            gpu_free(gm.dev[i]);
        }
    gm.k = 0;
}

static int rank, n;
static rcoll_comm_t comm;
static long checks, failures;
static int quiet;

#define MAXC 16

/* 1 if `name` is one of the comma-separated entries of `list` */
static int has(const char *list, const char *name)
{
    size_t l = strlen(name);
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == l && !strncmp(p, name, l))
            return 1;
        p = e ? e + 1 : NULL;
    }
    return 0;
}

static void fail(const char *what, rcoll_datatype_t dt, rcoll_op_t op,
                 size_t count, int inplace, int root, const char *why)
{
    failures++;
    if (failures <= 50)
        printf("FAIL rank %d/%d: %s %s %s count %zu %s root %d: %s\n", rank,
               n, what, rcoll_datatype_size(dt) ? "" : "?",
               (const char *[]){"int8", "uint8", "int32", "uint32", "int64",
                                "uint64", "half", "bfloat16", "float",
                                "double"}[dt],
               count, inplace ? "in-place" : "out-of-place", root, why);
    (void)op;
}

static void check_status(rcoll_status_t st, const char *what,
                         rcoll_datatype_t dt, rcoll_op_t op, size_t count,
                         int inplace, int root)
{
    char buf[1200];
    snprintf(buf, sizeof(buf), "%s: %s", rcoll_status_string(st),
             rcoll_last_error());
    fail(what, dt, op, count, inplace, root, buf);
    fflush(stdout);
    exit(1); /* the communicator is broken: nothing further is meaningful */
}

static void compare(const void *got, const void *want, size_t cnt,
                    const char *what, rcoll_datatype_t dt, rcoll_op_t op,
                    size_t count, int inplace, int root)
{
    checks++;
    size_t w = ref_count_wrong(got, want, cnt, dt);
    if (w) {
        char buf[128];
        snprintf(buf, sizeof(buf), "%zu of %zu elements wrong (op %d)", w, cnt,
                 (int)op);
        fail(what, dt, op, count, inplace, root, buf);
    }
}

static char *xmalloc(size_t b)
{
    char *p = malloc(b ? b : 1);
    if (!p) {
        printf("rank %d: out of memory (%zu bytes)\n", rank, b);
        exit(1);
    }
    return p;
}

#define SENTINEL 0x5a

static void t_allreduce(rcoll_datatype_t dt, rcoll_op_t op, size_t c, int ip)
{
    size_t s = rcoll_datatype_size(dt);
    char *sb = xmalloc(c * s), *rb = xmalloc(c * s), *ex = xmalloc(c * s);
    ref_fill(ip ? rb : sb, c, 0, dt, op, rank, 1);
    if (!ip)
        memset(rb, SENTINEL, c * s);
    ref_reduce(ex, c, 0, dt, op, n, 1);
    void *p[2] = {ip ? rb : sb, rb};
    size_t l[2] = {c * s, c * s};
    dev_map(p, l, 2);
    rcoll_status_t st = rcoll_allreduce(p[0], p[1], c, dt, op, comm, NULL);
    dev_unmap();
    if (st != RCOLL_OK)
        check_status(st, "allreduce", dt, op, c, ip, -1);
    compare(rb, ex, c, "allreduce", dt, op, c, ip, -1);
    free(sb); free(rb); free(ex);
}

static void t_reduce(rcoll_datatype_t dt, rcoll_op_t op, size_t c, int ip,
                     int root)
{
    size_t s = rcoll_datatype_size(dt);
    char *sb = xmalloc(c * s), *rb = xmalloc(c * s), *ex = xmalloc(c * s);
    char *guard = xmalloc(c * s);
    ref_fill(ip ? rb : sb, c, 0, dt, op, rank, 2);
    if (!ip)
        memset(rb, SENTINEL, c * s);
    memcpy(guard, rb, c * s);
    ref_reduce(ex, c, 0, dt, op, n, 2);
    void *p[2] = {ip ? rb : sb, rb};
    size_t l[2] = {c * s, c * s};
    dev_map(p, l, 2);
    rcoll_status_t st = rcoll_reduce(p[0], p[1], c, dt, op, root, comm,
                                     NULL);
    dev_unmap();
    if (st != RCOLL_OK)
        check_status(st, "reduce", dt, op, c, ip, root);
    if (rank == root)
        compare(rb, ex, c, "reduce", dt, op, c, ip, root);
    else /* non-root recvbuf (and in-place sendbuf) must be untouched */
        compare(rb, guard, c, "reduce(non-root untouched)", dt, op, c, ip,
                root);
    free(sb); free(rb); free(ex); free(guard);
}

static void t_reduce_scatter(rcoll_datatype_t dt, rcoll_op_t op, size_t c,
                             int ip)
{
    size_t s = rcoll_datatype_size(dt), tot = c * (size_t)n;
    char *sb = xmalloc(tot * s), *rb = xmalloc(c * s), *ex = xmalloc(c * s);
    ref_fill(sb, tot, 0, dt, op, rank, 3);
    memset(rb, SENTINEL, c * s);
    ref_reduce(ex, c, (size_t)rank * c, dt, op, n, 3);
    char *out = ip ? sb + (size_t)rank * c * s : rb;
    void *p[2] = {sb, out};
    size_t l[2] = {tot * s, c * s};
    dev_map(p, l, 2);
    rcoll_status_t st = rcoll_reduce_scatter(p[0], p[1], c, dt, op, comm, NULL);
    dev_unmap();
    if (st != RCOLL_OK)
        check_status(st, "reduce_scatter", dt, op, c, ip, -1);
    compare(out, ex, c, "reduce_scatter", dt, op, c, ip, -1);
    free(sb); free(rb); free(ex);
}

static void t_allgather(rcoll_datatype_t dt, size_t c, int ip)
{
    size_t s = rcoll_datatype_size(dt), tot = c * (size_t)n;
    char *sb = xmalloc(c * s), *rb = xmalloc(tot * s), *ex = xmalloc(tot * s);
    memset(rb, SENTINEL, tot * s);
    char *mine = ip ? rb + (size_t)rank * c * s : sb;
    ref_fill(mine, c, (size_t)rank * c, dt, RCOLL_SUM, rank, 4);
    for (int q = 0; q < n; q++)
        ref_fill(ex + (size_t)q * c * s, c, (size_t)q * c, dt, RCOLL_SUM, q, 4);
    void *p[2] = {mine, rb};
    size_t l[2] = {c * s, tot * s};
    dev_map(p, l, 2);
    rcoll_status_t st = rcoll_allgather(p[0], p[1], c, dt, comm, NULL);
    dev_unmap();
    if (st != RCOLL_OK)
        check_status(st, "allgather", dt, RCOLL_SUM, c, ip, -1);
    compare(rb, ex, tot, "allgather", dt, RCOLL_SUM, c, ip, -1);
    free(sb); free(rb); free(ex);
}

static void t_broadcast(rcoll_datatype_t dt, size_t c, int ip, int root)
{
    size_t s = rcoll_datatype_size(dt);
    char *sb = xmalloc(c * s), *rb = xmalloc(c * s), *ex = xmalloc(c * s);
    memset(rb, SENTINEL, c * s);
    memset(sb, SENTINEL, c * s);
    if (rank == root)
        ref_fill(ip ? rb : sb, c, 0, dt, RCOLL_SUM, root, 5);
    ref_fill(ex, c, 0, dt, RCOLL_SUM, root, 5);
    /* non-roots pass NULL sendbuf when not in place: it must not be read */
    const void *snd = ip ? rb : (rank == root ? sb : NULL);
    void *p[2] = {(void *)snd, rb};
    size_t l[2] = {c * s, c * s};
    dev_map(p, l, 2);
    rcoll_status_t st = rcoll_broadcast(p[0], p[1], c, dt, root, comm, NULL);
    dev_unmap();
    if (st != RCOLL_OK)
        check_status(st, "broadcast", dt, RCOLL_SUM, c, ip, root);
    compare(rb, ex, c, "broadcast", dt, RCOLL_SUM, c, ip, root);
    free(sb); free(rb); free(ex);
}

/* Every rank sends to every other in a fixed global order: for each ordered
 * pair (a, b) rank a sends, rank b receives; the others skip. */
static void t_sendrecv(rcoll_datatype_t dt, size_t c)
{
    size_t s = rcoll_datatype_size(dt);
    char *buf = xmalloc(c * s), *ex = xmalloc(c * s);
    for (int a = 0; a < n; a++) {
        for (int b = 0; b < n; b++) {
            if (a == b || (rank != a && rank != b))
                continue;
            rcoll_status_t st;
            if (rank == a) {
                ref_fill(buf, c, 0, dt, RCOLL_SUM, a * n + b, 6);
                void *p[1] = {buf};
                size_t l[1] = {c * s};
                dev_map(p, l, 1);
                st = rcoll_send(p[0], c, dt, b, comm, NULL);
                dev_unmap();
            } else {
                memset(buf, SENTINEL, c * s);
                void *p[1] = {buf};
                size_t l[1] = {c * s};
                dev_map(p, l, 1);
                st = rcoll_recv(p[0], c, dt, a, comm, NULL);
                dev_unmap();
                ref_fill(ex, c, 0, dt, RCOLL_SUM, a * n + b, 6);
            }
            if (st != RCOLL_OK)
                check_status(st, rank == a ? "send" : "recv", dt, RCOLL_SUM,
                             c, 0, rank == a ? b : a);
            if (rank == b)
                compare(buf, ex, c, "recv", dt, RCOLL_SUM, c, 0, a);
        }
    }
    free(buf); free(ex);
}

int main(int argc, char **argv)
{
    const char *colls = "allreduce,allgather,broadcast,reduce_scatter,reduce,"
                        "barrier,sendrecv";
    long user_counts[MAXC];
    int nuser = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-C") && i + 1 < argc)
            colls = argv[++i];
        else if (!strcmp(argv[i], "-N") && i + 1 < argc) {
            char *p = argv[++i];
            while (*p && nuser < MAXC) {
                user_counts[nuser++] = strtol(p, &p, 10);
                if (*p == ',')
                    p++;
            }
        } else if (!strcmp(argv[i], "-q"))
            quiet = 1;
        else if (!strcmp(argv[i], "-g"))
            gpu = 1;
    }
    rcoll_status_t st = rcoll_comm_init_env(&comm);
    if (st != RCOLL_OK) {
        printf("init failed: %s: %s\n", rcoll_status_string(st),
               rcoll_last_error());
        return 1;
    }
    rcoll_comm_rank(comm, &rank);
    rcoll_comm_size(comm, &n);
    if (gpu) {
        char why[256];
        if (gpu_init(rank, why, sizeof(why)) != 0) {
            printf("SKIP: GPU buffers: %s\n", why);
            rcoll_comm_destroy(comm);
            return 77;
        }
    }
    const char *cs = getenv("RCOLL_CHUNK_SIZE");
    size_t chunk = cs ? (size_t)atol(cs) : 512 * 1024;
    if (chunk < 64)
        chunk = 512 * 1024;

    for (int dt = 0; dt < RCOLL_DATATYPE_COUNT; dt++) {
        size_t s = rcoll_datatype_size((rcoll_datatype_t)dt);
        size_t counts[MAXC];
        int nc = 0;
        if (nuser) {
            for (int k = 0; k < nuser; k++)
                counts[nc++] = (size_t)user_counts[k];
        } else {
            size_t def[] = {0, 1, 7, 1023, chunk / s + 1, (8u << 20) / s};
            for (int k = 0; k < 6; k++)
                counts[nc++] = def[k];
        }
        rcoll_datatype_t d = (rcoll_datatype_t)dt;
        for (int k = 0; k < nc; k++) {
            size_t c = counts[k];
            /* The 8 MiB count bounds the suite's time: one datatype per
             * element size (uint8, bfloat16, float32, int64), every op for
             * float32 and sum/max/avg for the others, roots 0 and n-1. The
             * smaller counts run the full matrix. */
            int big = c * s >= (4u << 20);
            if (big && d != RCOLL_UINT8 && d != RCOLL_BFLOAT16 &&
                d != RCOLL_FLOAT32 && d != RCOLL_INT64)
                continue;
            for (int ip = 0; ip < 2; ip++) {
                for (int op = 0; op < RCOLL_OP_COUNT; op++) {
                    rcoll_op_t o = (rcoll_op_t)op;
                    if (big && d != RCOLL_FLOAT32 && o != RCOLL_SUM &&
                        o != RCOLL_MAX && o != RCOLL_AVG)
                        continue;
                    if (has(colls, "allreduce"))
                        t_allreduce(d, o, c, ip);
                    if (has(colls, "reduce_scatter")) {
                        /* reduce-scatter counts are per rank */
                        size_t rc = big ? c / (size_t)n : c;
                        t_reduce_scatter(d, o, rc, ip);
                    }
                    if (has(colls, "reduce"))
                        for (int root = 0; root < n; root++)
                            if (!big || root == 0 || root == n - 1)
                                t_reduce(d, o, c, ip, root);
                }
                if (has(colls, "allgather"))
                    t_allgather(d, big ? c / (size_t)n : c, ip);
                if (has(colls, "broadcast"))
                    for (int root = 0; root < n; root++)
                        if (!big || root == 0 || root == n - 1)
                            t_broadcast(d, c, ip, root);
            }
            if (has(colls, "sendrecv") && n > 1)
                t_sendrecv(d, c);
        }
    }
    if (has(colls, "barrier")) {
        for (int i = 0; i < 20; i++) {
            if ((st = rcoll_barrier(comm)) != RCOLL_OK)
                check_status(st, "barrier", RCOLL_INT8, RCOLL_SUM, 0, 0, -1);
            checks++;
        }
    }
    /* everyone's verdict, through the library itself */
    int64_t f = failures, ftot = 0;
    if ((st = rcoll_allreduce(&f, &ftot, 1, RCOLL_INT64, RCOLL_SUM, comm,
                              NULL)) != RCOLL_OK)
        check_status(st, "allreduce(verdict)", RCOLL_INT64, RCOLL_SUM, 1, 0,
                     -1);
    if (rank == 0)
        printf("test_coll: %d ranks, %ld checks on rank 0, %lld failures on "
               "all ranks\n", n, checks, (long long)ftot);
    st = rcoll_comm_destroy(comm);
    if (st != RCOLL_OK) {
        printf("rank %d: destroy: %s\n", rank, rcoll_last_error());
        return 1;
    }
    return ftot ? 1 : 0;
}
