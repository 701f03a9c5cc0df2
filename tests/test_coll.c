/* The collective matrix, run under rcoll-run with any number of ranks:
 * every collective x datatype x op x count x in-place/out-of-place x root,
 * each result compared bit for bit with ref.h's independent reference.
 *
 * usage: test_coll [-C allreduce,allgather,broadcast,reduce_scatter,reduce,
 *                      barrier,sendrecv,alltoall,alltoallv,gather,scatter]
 *                  [-N counts] [-q] [-g] [-T]
 * -T: the transport subset: one datatype per element size (uint8,
 * bfloat16, float32, int64) and the ops sum, max and avg, at every count.
 * Datatypes and ops run the same code over every transport, and the shm
 * matrices run them all; a run that tests how bytes move (tcp, ib, rails,
 * hosts, faults) needs only the sizes, at about a quarter of the time.
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
static int tsubset; /* -T */
/* Which inputs the reductions get: 0 the exact small integers of ref.h,
 * 1 full-range integers (unsigned high bits, the extremes), 2 floats whose
 * result depends on the order of reduction, checked within ref.h's bound
 * instead of bit-exact. */
static int inputs;

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
        printf("FAIL rank %d/%d: %s%s %s %s count %zu %s root %d: %s\n", rank,
               n, what, (const char *[]){"", " (full-range integers)",
                                         " (order-sensitive floats)"}[inputs],
               rcoll_datatype_size(dt) ? "" : "?",
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

/* The roots a rooted collective is tested at: every rank up to 5 ranks;
 * past that 0, 1, n/2 and n-1 (no rotation, off by one, the middle, the
 * wrap: what a tree or chain's rotation by the root can get wrong; all 8
 * roots of 8 ranks took a forced reduce 27 s); the 8 MiB counts only 0
 * and n-1. */
static int root_ok(int root, int big)
{
    if (big)
        return root == 0 || root == n - 1;
    return n <= 5 || root == 0 || root == 1 || root == n / 2 || root == n - 1;
}


static void fill(void *buf, size_t c, size_t first, rcoll_datatype_t dt,
                 rcoll_op_t op, int salt)
{
    if (inputs == 2)
        ref_fp_fill(buf, c, first, dt, op, rank, salt);
    else if (inputs == 1)
        ref_fill_wide(buf, c, first, dt, op, rank, salt);
    else
        ref_fill(buf, c, first, dt, op, rank, salt);
}

static void expect(void *buf, size_t c, size_t first, rcoll_datatype_t dt,
                   rcoll_op_t op, int salt)
{
    if (inputs == 1)
        ref_reduce_wide(buf, c, first, dt, op, n, salt);
    else if (inputs == 0)
        ref_reduce(buf, c, first, dt, op, n, salt);
    /* inputs == 2: compare_red checks against the bound */
}

/* a reduction's result: bit-exact, or (inputs == 2) within the bound */
static void compare_red(const void *got, const void *want, size_t cnt,
                        size_t first, int salt, const char *what,
                        rcoll_datatype_t dt, rcoll_op_t op, size_t count,
                        int inplace, int root)
{
    if (inputs != 2) {
        compare(got, want, cnt, what, dt, op, count, inplace, root);
        return;
    }
    checks++;
    size_t bad = 0, w = ref_fp_check(got, cnt, first, dt, op, n, salt, &bad);
    if (w) {
        char buf[200];
        snprintf(buf, sizeof(buf), "%zu of %zu elements outside the rounding "
                 "bound (op %d), first at %zu: %.17g", w, cnt, (int)op, bad,
                 ref_fp_load(got, bad, dt));
        fail(what, dt, op, count, inplace, root, buf);
    }
}

static void t_allreduce(rcoll_datatype_t dt, rcoll_op_t op, size_t c, int ip)
{
    size_t s = rcoll_datatype_size(dt);
    char *sb = xmalloc(c * s), *rb = xmalloc(c * s), *ex = xmalloc(c * s);
    fill(ip ? rb : sb, c, 0, dt, op, 1);
    if (!ip)
        memset(rb, SENTINEL, c * s);
    expect(ex, c, 0, dt, op, 1);
    void *p[2] = {ip ? rb : sb, rb};
    size_t l[2] = {c * s, c * s};
    dev_map(p, l, 2);
    rcoll_status_t st = rcoll_allreduce(p[0], p[1], c, dt, op, comm, NULL);
    dev_unmap();
    if (st != RCOLL_OK)
        check_status(st, "allreduce", dt, op, c, ip, -1);
    compare_red(rb, ex, c, 0, 1, "allreduce", dt, op, c, ip, -1);
    if (inputs == 2 && n > 1) {
        /* rounding may differ from the exact value, never between ranks:
         * every rank holds the same bits (the hashes are compared through
         * an all-gather, itself checked bit-exact by the matrix) */
        uint64_t h = 1469598103934665603ull, *all = calloc((size_t)n, 8);
        for (size_t i = 0; i < c * s; i++)
            h = (h ^ (unsigned char)rb[i]) * 1099511628211ull;
        rcoll_status_t st2 = all ? rcoll_allgather(&h, all, 1, RCOLL_UINT64,
                                                   comm, NULL) : RCOLL_OK;
        if (st2 != RCOLL_OK)
            check_status(st2, "allgather(result hashes)", dt, op, c, ip, -1);
        checks++;
        for (int q = 0; all && q < n; q++)
            if (all[q] != all[0]) {
                char why[96];
                snprintf(why, sizeof(why), "rank %d's result differs from "
                         "rank 0's (op %d)", q, (int)op);
                fail("allreduce(same on every rank)", dt, op, c, ip, -1, why);
                break;
            }
        free(all);
    }
    free(sb); free(rb); free(ex);
}

static void t_reduce(rcoll_datatype_t dt, rcoll_op_t op, size_t c, int ip,
                     int root)
{
    size_t s = rcoll_datatype_size(dt);
    char *sb = xmalloc(c * s), *rb = xmalloc(c * s), *ex = xmalloc(c * s);
    char *guard = xmalloc(c * s);
    fill(ip ? rb : sb, c, 0, dt, op, 2);
    if (!ip)
        memset(rb, SENTINEL, c * s);
    memcpy(guard, rb, c * s);
    if (rank == root) /* (only the root checks: the reference costs) */
        expect(ex, c, 0, dt, op, 2);
    void *p[2] = {ip ? rb : sb, rb};
    size_t l[2] = {c * s, c * s};
    dev_map(p, l, 2);
    rcoll_status_t st = rcoll_reduce(p[0], p[1], c, dt, op, root, comm,
                                     NULL);
    dev_unmap();
    if (st != RCOLL_OK)
        check_status(st, "reduce", dt, op, c, ip, root);
    if (rank == root)
        compare_red(rb, ex, c, 0, 2, "reduce", dt, op, c, ip, root);
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
    fill(sb, tot, 0, dt, op, 3);
    memset(rb, SENTINEL, c * s);
    expect(ex, c, (size_t)rank * c, dt, op, 3);
    char *out = ip ? sb + (size_t)rank * c * s : rb;
    void *p[2] = {sb, out};
    size_t l[2] = {tot * s, c * s};
    dev_map(p, l, 2);
    rcoll_status_t st = rcoll_reduce_scatter(p[0], p[1], c, dt, op, comm, NULL);
    dev_unmap();
    if (st != RCOLL_OK)
        check_status(st, "reduce_scatter", dt, op, c, ip, -1);
    compare_red(out, ex, c, (size_t)rank * c, 3, "reduce_scatter", dt, op, c,
                ip, -1);
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

/* ---- data movement (all-to-all, gather, scatter): the bytes of block
 * (src -> dst) are a hash of (src, dst, salt, byte index), so any block
 * landing in the wrong place, shifted or cut short shows ---- */

static void pat(void *buf, size_t bytes, int src, int dst, int salt)
{
    uint64_t x = ((uint64_t)src << 40) ^ ((uint64_t)dst << 20) ^
                 (uint64_t)salt * 0x9e3779b97f4a7c15ull ^ 0x5bd1e995u;
    unsigned char *p = buf;
    for (size_t i = 0; i < bytes; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (unsigned char)(x >> 24);
    }
}

static void compare_bytes(const void *got, const void *want, size_t bytes,
                          const char *what, rcoll_datatype_t dt, size_t c,
                          int ip, int root)
{
    checks++;
    if (bytes && memcmp(got, want, bytes)) {
        size_t i = 0;
        while (((const char *)got)[i] == ((const char *)want)[i])
            i++;
        char buf[128];
        snprintf(buf, sizeof(buf), "first wrong byte at %zu of %zu", i,
                 bytes);
        fail(what, dt, RCOLL_SUM, c, ip, root, buf);
    }
}

static void t_alltoall(rcoll_datatype_t dt, size_t c, int ip)
{
    size_t b = c * rcoll_datatype_size(dt), tot = b * (size_t)n;
    char *sb = xmalloc(tot), *rb = xmalloc(tot), *ex = xmalloc(tot);
    char *in = ip ? rb : sb;
    for (int q = 0; q < n; q++) {
        pat(in + (size_t)q * b, b, rank, q, 7);
        pat(ex + (size_t)q * b, b, q, rank, 7);
    }
    if (!ip)
        memset(rb, SENTINEL, tot);
    void *p[2] = {in, rb};
    size_t l[2] = {tot, tot};
    dev_map(p, l, 2);
    rcoll_status_t st = rcoll_alltoall(p[0], p[1], c, dt, comm, NULL);
    dev_unmap();
    if (st != RCOLL_OK)
        check_status(st, "alltoall", dt, RCOLL_SUM, c, ip, -1);
    compare_bytes(rb, ex, tot, "alltoall", dt, c, ip, -1);
    free(sb); free(rb); free(ex);
}

/* Uneven counts (a quarter of them 0), blocks in a shuffled order with
 * gaps between them that must stay untouched. Every rank computes every
 * rank's counts, so they agree. */
static size_t v_count(int src, int dst, size_t c)
{
    uint64_t h = ((uint64_t)src * 2654435761u) ^ ((uint64_t)dst * 40503u) ^ c;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    return (h & 3) == 0 ? 0 : (size_t)(h % (2 * c + 1));
}

/* displacements of the n blocks of sizes cnt[] laid out in the order
 * q = (k * step + shift) mod n with a gap of (q % 3) elements after each;
 * returns the extent */
static size_t v_layout(const size_t *cnt, size_t *disp, int shift)
{
    int step = 1;
    for (int t = n / 2 + 1; t < n; t++) /* a stride coprime to n */
        if (t > 1) {
            int a = t, bb = n;
            while (bb) {
                int r = a % bb;
                a = bb;
                bb = r;
            }
            if (a == 1) {
                step = t;
                break;
            }
        }
    size_t off = 0;
    for (int k = 0; k < n; k++) {
        int q = (int)(((long)k * step + shift) % n);
        disp[q] = off;
        off += cnt[q] + (size_t)(q % 3);
    }
    return off;
}

static void t_alltoallv(rcoll_datatype_t dt, size_t c, int ip)
{
    size_t s = rcoll_datatype_size(dt);
    size_t *sc = calloc((size_t)n * 4, sizeof(size_t));
    size_t *sd = sc + n, *rc = sc + 2 * n, *rd = sc + 3 * n;
    for (int q = 0; q < n; q++) {
        sc[q] = v_count(rank, q, c);
        rc[q] = v_count(q, rank, c);
    }
    size_t sext = v_layout(sc, sd, rank), rext = v_layout(rc, rd, rank + 1);
    if (ip) { /* one buffer: the receive layout, big enough for both */
        sext = v_layout(sc, sd, rank + 1);
        if (sext > rext)
            rext = sext;
    }
    char *sb = xmalloc(sext * s), *rb = xmalloc(rext * s),
         *ex = xmalloc(rext * s);
    memset(rb, SENTINEL, rext * s);
    memset(ex, SENTINEL, rext * s);
    char *in = ip ? rb : sb;
    for (int q = 0; q < n; q++)
        pat(in + sd[q] * s, sc[q] * s, rank, q, 8);
    if (ip) /* in place: the input's bytes are all that is left in gaps */
        memcpy(ex, rb, rext * s);
    for (int q = 0; q < n; q++)
        pat(ex + rd[q] * s, rc[q] * s, q, rank, 8);
    void *p[2] = {in, rb};
    size_t l[2] = {ip ? rext * s : sext * s, rext * s};
    dev_map(p, l, 2);
    rcoll_status_t st = rcoll_alltoallv(p[0], sc, sd, p[1], rc, rd, dt, comm,
                                        NULL);
    dev_unmap();
    if (st != RCOLL_OK)
        check_status(st, "alltoallv", dt, RCOLL_SUM, c, ip, -1);
    compare_bytes(rb, ex, rext * s, "alltoallv", dt, c, ip, -1);
    free(sb); free(rb); free(ex); free(sc);
}

static void t_gather(rcoll_datatype_t dt, size_t c, int ip, int root)
{
    size_t b = c * rcoll_datatype_size(dt), tot = b * (size_t)n;
    char *sb = xmalloc(b), *rb = xmalloc(tot), *ex = xmalloc(tot);
    memset(rb, SENTINEL, tot);
    int inp = ip && rank == root;
    char *mine = inp ? rb + (size_t)rank * b : sb;
    pat(mine, b, rank, root, 9);
    memset(ex, SENTINEL, tot);
    if (rank == root)
        for (int q = 0; q < n; q++)
            pat(ex + (size_t)q * b, b, q, root, 9);
    void *p[2] = {mine, rb};
    size_t l[2] = {b, tot};
    dev_map(p, l, 2);
    rcoll_status_t st = rcoll_gather(p[0], rank == root ? p[1] : NULL, c, dt,
                                     root, comm, NULL);
    dev_unmap();
    if (st != RCOLL_OK)
        check_status(st, "gather", dt, RCOLL_SUM, c, ip, root);
    /* off the root, recvbuf is not touched */
    compare_bytes(rb, ex, tot, "gather", dt, c, ip, root);
    free(sb); free(rb); free(ex);
}

static void t_scatter(rcoll_datatype_t dt, size_t c, int ip, int root)
{
    size_t b = c * rcoll_datatype_size(dt), tot = b * (size_t)n;
    char *sb = xmalloc(tot), *rb = xmalloc(b), *ex = xmalloc(b);
    memset(rb, SENTINEL, b);
    memset(sb, SENTINEL, tot);
    if (rank == root)
        for (int q = 0; q < n; q++)
            pat(sb + (size_t)q * b, b, root, q, 10);
    pat(ex, b, root, rank, 10);
    int inp = ip && rank == root;
    char *out = inp ? sb + (size_t)rank * b : rb;
    void *p[2] = {sb, out};
    size_t l[2] = {tot, b};
    dev_map(p, l, 2);
    rcoll_status_t st = rcoll_scatter(rank == root ? p[0] : NULL, p[1], c, dt,
                                      root, comm, NULL);
    dev_unmap();
    if (st != RCOLL_OK)
        check_status(st, "scatter", dt, RCOLL_SUM, c, ip, root);
    compare_bytes(out, ex, b, "scatter", dt, c, ip, root);
    if (rank == root) { /* the input is left as it was */
        char *orig = xmalloc(tot);
        for (int q = 0; q < n; q++)
            pat(orig + (size_t)q * b, b, root, q, 10);
        compare_bytes(sb, orig, tot, "scatter(input untouched)", dt, c, ip,
                      root);
        free(orig);
    }
    free(sb); free(rb); free(ex);
}

/* One datatype per element size: what the 8 MiB counts and -T run. */
static int size_rep(rcoll_datatype_t d)
{
    return d == RCOLL_UINT8 || d == RCOLL_BFLOAT16 || d == RCOLL_FLOAT32 ||
           d == RCOLL_INT64;
}

int main(int argc, char **argv)
{
    const char *colls = "allreduce,allgather,broadcast,reduce_scatter,reduce,"
                        "barrier,sendrecv,alltoall,alltoallv,gather,scatter";
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
        else if (!strcmp(argv[i], "-T"))
            tsubset = 1;
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
        if (tsubset && !size_rep(d))
            continue;
        for (int k = 0; k < nc; k++) {
            size_t c = counts[k];
            /* The 8 MiB count bounds the suite's time: one datatype per
             * element size (uint8, bfloat16, float32, int64), every op for
             * float32 and sum/max/avg for the others, roots 0 and n-1. The
             * smaller counts run the full matrix. */
            int big = c * s >= (4u << 20);
            if (big && !size_rep(d))
                continue;
            for (int ip = 0; ip < 2; ip++) {
                for (int op = 0; op < RCOLL_OP_COUNT; op++) {
                    rcoll_op_t o = (rcoll_op_t)op;
                    int few = tsubset || (big && d != RCOLL_FLOAT32);
                    if (few && o != RCOLL_SUM && o != RCOLL_MAX &&
                        o != RCOLL_AVG)
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
                            if (root_ok(root, big))
                                t_reduce(d, o, c, ip, root);
                }
                if (has(colls, "allgather"))
                    t_allgather(d, big ? c / (size_t)n : c, ip);
                if (has(colls, "broadcast"))
                    for (int root = 0; root < n; root++)
                        if (root_ok(root, big))
                            t_broadcast(d, c, ip, root);
                /* data movement: the type only sets the element size, so
                 * one type per size past the small counts */
                int mv = c < 2000 || d == RCOLL_UINT8 ||
                         d == RCOLL_BFLOAT16 || d == RCOLL_FLOAT32 ||
                         d == RCOLL_FLOAT64;
                size_t bc = big ? c / (size_t)n : c;
                if (mv && has(colls, "alltoall"))
                    t_alltoall(d, bc, ip);
                if (mv && has(colls, "alltoallv"))
                    t_alltoallv(d, bc, ip);
                if (mv && has(colls, "gather"))
                    for (int root = 0; root < n; root++)
                        if (root_ok(root, big))
                            t_gather(d, bc, ip, root);
                if (mv && has(colls, "scatter"))
                    for (int root = 0; root < n; root++)
                        if (root_ok(root, big))
                            t_scatter(d, bc, ip, root);
            }
            if (has(colls, "sendrecv") && n > 1)
                t_sendrecv(d, c);
        }
    }
    /* The stronger inputs of ref.h through every reduction, out of place:
     * full-range integers (unsigned high bits, the extremes) and floats
     * whose result depends on the order (within the rounding bound, and
     * the same bits on every rank), at two prime counts, so that the
     * ranks' blocks are uneven (not with -T: values, not transfers) */
    for (int mode = 1; mode <= 2 && !tsubset; mode++) {
        inputs = mode;
        for (int dt = 0; dt < RCOLL_DATATYPE_COUNT; dt++) {
            rcoll_datatype_t d = (rcoll_datatype_t)dt;
            if ((mode == 1) != ref_is_int(d))
                continue;
            /* (small counts: these inputs aim at values and orders; the
             * exact inputs above cover chunking at every count) */
            const size_t sc[2] = {13, 1031};
            for (int k = 0; k < 2; k++) {
                for (int op = 0; op < RCOLL_OP_COUNT; op++) {
                    rcoll_op_t o = (rcoll_op_t)op;
                    if (has(colls, "allreduce"))
                        t_allreduce(d, o, sc[k], 0);
                    if (has(colls, "reduce_scatter"))
                        t_reduce_scatter(d, o, sc[k], 0);
                    if (has(colls, "reduce"))
                        t_reduce(d, o, sc[k], 0, n - 1);
                }
            }
        }
    }
    inputs = 0;
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
    /* our own count decides too: a library that loses the verdict (or
     * sums it wrong) must not turn this rank's failures into a pass */
    return ftot || failures ? 1 : 0;
}
