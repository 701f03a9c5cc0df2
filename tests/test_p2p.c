/* Point-to-point patterns that must never deadlock, tags, groups and
 * operations in flight together, run under rcoll-run or mpirun with any
 * number of ranks. Every message's bytes are a hash of (source,
 * destination, tag, round), checked byte for byte.
 *
 *   ring      isend to the next rank, then irecv from the previous one
 *   halo      isend to both neighbours, then irecv from both
 *   allpairs  isend to every rank, then irecv from every rank
 *   tags      receives posted in the reverse order of the sends' tags
 *             (non-blocking and blocking), and two sends of one tag
 *             received in order (non-overtaking)
 *   group     blocking send and receive round a ring inside a group,
 *             nested groups, a collective inside a group
 *   overlap   two non-blocking all-reduces in flight, waited for in
 *             reverse; a large isend to a rank that first runs a
 *             collective; a receive waited for before a collective that
 *             its sender started first
 *   unexpected  64 eager sends waited for before their receiver posts a
 *             receive for them, while it waits for a third rank that
 *             waits for the sender (3 ranks or more)
 *   sizes     receives larger than their message (rcoll_wait_status's
 *             count; the rest of the buffer untouched) and smaller
 *             (RCOLL_ERR_TRUNCATED for that receive alone; the sender
 *             completes; the next exchange works)
 * Sizes run from 4 bytes to -e BYTES (default 64 MiB) by factors of 16.
 *
 * With -L N it also checks that the process holds N listening TCP
 * sockets after init (the transports' listeners are closed once their
 * mesh is up; what stays is the bootstrap's, for diagnosis queries).
 *
 * usage: test_p2p [-e max_bytes] [-T ring,halo,...] [-L listeners]
 * Exits 1 if anything failed (this rank's own count decides). */
#include <rcoll.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank, n;
static rcoll_comm_t comm;
static long checks, failures;

static void pat(void *buf, size_t bytes, int src, int dst, int tag, int rnd)
{
    uint64_t x = ((uint64_t)src << 44) ^ ((uint64_t)dst << 28) ^
                 ((uint64_t)tag << 8) ^ (uint64_t)rnd * 0x9e3779b97f4a7c15ull ^
                 0x2545f4914f6cdd1dull;
    unsigned char *p = buf;
    size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(p + i, &x, 8);
    }
    for (; i < bytes; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (unsigned char)x;
    }
}

static void *xmalloc(size_t b)
{
    void *p = malloc(b ? b : 1);
    if (!p) {
        printf("rank %d: out of memory (%zu bytes)\n", rank, b);
        exit(1);
    }
    return p;
}

static void die(const char *what, rcoll_status_t st)
{
    printf("FAIL rank %d/%d: %s: %s: %s\n", rank, n, what,
           rcoll_status_string(st), rcoll_last_error());
    fflush(stdout);
    exit(1); /* the communicator is broken: nothing further is meaningful */
}

#define CK(call, what)                                                        \
    do {                                                                      \
        rcoll_status_t st_ = (call);                                          \
        if (st_ != RCOLL_OK)                                                  \
            die(what, st_);                                                   \
    } while (0)

/* buf must hold the message src -> rank with tag and round */
static void expect(const void *buf, size_t bytes, int src, int tag, int rnd,
                   const char *what)
{
    char *want = xmalloc(bytes);
    pat(want, bytes, src, rank, tag, rnd);
    checks++;
    if (bytes && memcmp(buf, want, bytes)) {
        size_t i = 0;
        while (((const char *)buf)[i] == want[i])
            i++;
        failures++;
        printf("FAIL rank %d/%d: %s: %zu bytes from rank %d tag %d: first "
               "wrong byte at %zu\n", rank, n, what, bytes, src, tag, i);
    }
    free(want);
}

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

/* Every rank isends to each rank of to[0..k), all before any receive,
 * then irecvs from each of from[0..k) (tags tt[] / tf[]), then waits for
 * the receives first, then the sends. */
static void exchange(const char *what, int k, const int *to, const int *tt,
                     const int *from, const int *tf, size_t bytes, int rnd)
{
    rcoll_request_t *rq = xmalloc(sizeof(*rq) * (size_t)(2 * k));
    char **sb = xmalloc(sizeof(char *) * (size_t)k);
    char **rb = xmalloc(sizeof(char *) * (size_t)k);
    for (int i = 0; i < k; i++) {
        sb[i] = xmalloc(bytes);
        rb[i] = xmalloc(bytes);
        pat(sb[i], bytes, rank, to[i], tt[i], rnd);
        memset(rb[i], 0x5a, bytes);
        CK(rcoll_isend_tag(sb[i], bytes, RCOLL_UINT8, to[i], tt[i], comm, NULL,
                           &rq[k + i]), what);
    }
    for (int i = 0; i < k; i++)
        CK(rcoll_irecv_tag(rb[i], bytes, RCOLL_UINT8, from[i], tf[i], comm,
                           NULL, &rq[i]), what);
    for (int i = 0; i < 2 * k; i++)
        CK(rcoll_wait(rq[i]), what);
    for (int i = 0; i < k; i++) {
        expect(rb[i], bytes, from[i], tf[i], rnd, what);
        free(sb[i]);
        free(rb[i]);
    }
    free(sb);
    free(rb);
    free(rq);
}

static void t_ring(size_t bytes, int rnd)
{
    int to = (rank + 1) % n, from = (rank - 1 + n) % n, tag = 0;
    exchange("ring", 1, &to, &tag, &from, &tag, bytes, rnd);
}

static void t_halo(size_t bytes, int rnd)
{
    /* tag 1 goes left, tag 2 goes right */
    int l = (rank - 1 + n) % n, r = (rank + 1) % n;
    int to[2] = {l, r}, tt[2] = {1, 2}, from[2] = {r, l}, tf[2] = {1, 2};
    exchange("halo", 2, to, tt, from, tf, bytes, rnd);
}

static void t_allpairs(size_t bytes, int rnd)
{
    int k = n - 1;
    int *to = xmalloc(sizeof(int) * (size_t)k), *tg = xmalloc(sizeof(int) *
                                                               (size_t)k);
    int *from = xmalloc(sizeof(int) * (size_t)k);
    for (int i = 0; i < k; i++) {
        to[i] = (rank + 1 + i) % n;
        from[i] = (rank - 1 - i + 2 * n) % n;
        tg[i] = 3;
    }
    exchange("allpairs", k, to, tg, from, tg, bytes, rnd);
    free(to);
    free(tg);
    free(from);
}

/* Pairs (even, even + 1): the even rank isends tags 5 (bytes), 6 (a
 * rendezvous-size message), 7 (empty) and 9 twice; the odd rank receives
 * 7, 6, 5 in that order (non-blocking, or blocking), then 9 twice. */
static void t_tags(size_t bytes, int blocking)
{
    if (n < 2 || (rank ^ 1) >= n)
        return;
    int peer = rank ^ 1;
    size_t big = (size_t)256 << 10;
    size_t sz[5] = {bytes, big, 0, bytes, bytes};
    int tags[5] = {5, 6, 7, 9, 9};
    char *buf[5];
    rcoll_request_t rq[5];
    for (int i = 0; i < 5; i++)
        buf[i] = xmalloc(sz[i]);
    if (!(rank & 1)) {
        for (int i = 0; i < 5; i++) {
            pat(buf[i], sz[i], rank, peer, tags[i], i);
            CK(rcoll_isend_tag(buf[i], sz[i], RCOLL_UINT8, peer, tags[i],
                               comm, NULL, &rq[i]), "tags: isend");
        }
        for (int i = 0; i < 5; i++)
            CK(rcoll_wait(rq[i]), "tags: wait(send)");
    } else {
        int order[5] = {2, 1, 0, 3, 4};
        for (int k = 0; k < 5; k++) {
            int i = order[k];
            memset(buf[i], 0x5a, sz[i]);
            if (blocking)
                CK(rcoll_recv_tag(buf[i], sz[i], RCOLL_UINT8, peer, tags[i],
                                  comm, NULL), "tags: recv");
            else
                CK(rcoll_irecv_tag(buf[i], sz[i], RCOLL_UINT8, peer, tags[i],
                                   comm, NULL, &rq[i]), "tags: irecv");
        }
        for (int k = 0; k < 5 && !blocking; k++)
            CK(rcoll_wait(rq[order[4 - k]]), "tags: wait(recv)");
        for (int i = 0; i < 5; i++)
            expect(buf[i], sz[i], peer, tags[i], i,
                   blocking ? "tags (blocking receives)" : "tags");
    }
    for (int i = 0; i < 5; i++)
        free(buf[i]);
}

static void t_group(size_t bytes, int rnd)
{
    int to = (rank + 1) % n, from = (rank - 1 + n) % n;
    char *sb = xmalloc(bytes), *rb = xmalloc(bytes);
    pat(sb, bytes, rank, to, 4, rnd);
    memset(rb, 0x5a, bytes);
    /* blocking calls round a ring, nested one level */
    CK(rcoll_group_start(), "group_start");
    CK(rcoll_group_start(), "group_start (nested)");
    CK(rcoll_send_tag(sb, bytes, RCOLL_UINT8, to, 4, comm, NULL),
       "group: send");
    CK(rcoll_group_end(), "group_end (nested: launches nothing)");
    CK(rcoll_recv_tag(rb, bytes, RCOLL_UINT8, from, 4, comm, NULL),
       "group: recv");
    CK(rcoll_group_end(), "group_end");
    expect(rb, bytes, from, 4, rnd, "group (blocking ring)");
    /* a collective and a non-blocking pair inside one group */
    double x = rank + 1, sum = 0;
    rcoll_request_t rs, rr;
    memset(rb, 0x5a, bytes);
    CK(rcoll_group_start(), "group_start");
    CK(rcoll_allreduce(&x, &sum, 1, RCOLL_FLOAT64, RCOLL_SUM, comm, NULL),
       "group: allreduce");
    CK(rcoll_isend_tag(sb, bytes, RCOLL_UINT8, to, 4, comm, NULL, &rs),
       "group: isend");
    CK(rcoll_irecv_tag(rb, bytes, RCOLL_UINT8, from, 4, comm, NULL, &rr),
       "group: irecv");
    int done = 1;
    rcoll_status_t st = rcoll_test(rr, &done);
    checks++;
    if (st != RCOLL_ERR_INVALID_ARGUMENT || done) {
        failures++;
        printf("FAIL rank %d: rcoll_test inside an open group: status %d "
               "done %d (want an argument error, not done)\n", rank, st,
               done);
    }
    CK(rcoll_group_end(), "group_end");
    CK(rcoll_wait(rr), "group: wait(irecv)");
    CK(rcoll_wait(rs), "group: wait(isend)");
    expect(rb, bytes, from, 4, rnd, "group (collective + pair)");
    checks++;
    if (sum != (double)n * (n + 1) / 2) {
        failures++;
        printf("FAIL rank %d: allreduce in a group gave %g\n", rank, sum);
    }
    free(sb);
    free(rb);
}

static void fill_f32(float *v, size_t cnt, int salt)
{
    for (size_t i = 0; i < cnt; i++)
        v[i] = (float)((rank * 7 + (int)(i % 101) + salt) % 13);
}

static float sum_f32(size_t i, int salt)
{
    float s = 0;
    for (int r = 0; r < n; r++)
        s += (float)((r * 7 + (int)(i % 101) + salt) % 13);
    return s;
}

static void t_overlap(size_t bytes, int rnd)
{
    /* two all-reduces in flight (DDP buckets), waited for in reverse */
    size_t cnt = bytes / 4 ? bytes / 4 : 1;
    float *a = xmalloc(cnt * 4), *b = xmalloc(cnt * 4);
    fill_f32(a, cnt, 1);
    fill_f32(b, cnt, 2);
    rcoll_request_t ra, rb;
    CK(rcoll_iallreduce(a, a, cnt, RCOLL_FLOAT32, RCOLL_SUM, comm, NULL, &ra),
       "overlap: iallreduce a");
    CK(rcoll_iallreduce(b, b, cnt, RCOLL_FLOAT32, RCOLL_SUM, comm, NULL, &rb),
       "overlap: iallreduce b");
    CK(rcoll_wait(rb), "overlap: wait b");
    CK(rcoll_wait(ra), "overlap: wait a");
    size_t wrong = 0;
    for (size_t i = 0; i < cnt; i++)
        wrong += a[i] != sum_f32(i, 1) || b[i] != sum_f32(i, 2);
    checks++;
    if (wrong) {
        failures++;
        printf("FAIL rank %d: two all-reduces in flight: %zu of %zu wrong\n",
               rank, wrong, cnt);
    }
    free(a);
    free(b);
    if (n < 2)
        return;
    /* rank 0 isends to rank 1, then all-reduces; rank 1 all-reduces
     * first, then receives: the send must not hold up the collective */
    char *m = xmalloc(bytes);
    double x = 1, s = 0;
    if (rank == 0) {
        rcoll_request_t rq;
        pat(m, bytes, 0, 1, 11, rnd);
        CK(rcoll_isend_tag(m, bytes, RCOLL_UINT8, 1, 11, comm, NULL, &rq),
           "overlap: isend");
        CK(rcoll_allreduce(&x, &s, 1, RCOLL_FLOAT64, RCOLL_SUM, comm, NULL),
           "overlap: allreduce after isend");
        CK(rcoll_wait(rq), "overlap: wait(isend)");
    } else {
        CK(rcoll_allreduce(&x, &s, 1, RCOLL_FLOAT64, RCOLL_SUM, comm, NULL),
           "overlap: allreduce before recv");
        if (rank == 1) {
            memset(m, 0x5a, bytes);
            CK(rcoll_recv_tag(m, bytes, RCOLL_UINT8, 0, 11, comm, NULL),
               "overlap: recv after allreduce");
            expect(m, bytes, 0, 11, rnd, "overlap (isend, then collective)");
        }
    }
    /* rank 1 waits for a receive before it joins an all-reduce that rank 0
     * started (non-blocking) before sending */
    if (rank == 0) {
        rcoll_request_t rq;
        pat(m, bytes, 0, 1, 12, rnd);
        CK(rcoll_iallreduce(&x, &s, 1, RCOLL_FLOAT64, RCOLL_SUM, comm, NULL,
                            &rq), "overlap: iallreduce");
        CK(rcoll_send_tag(m, bytes, RCOLL_UINT8, 1, 12, comm, NULL),
           "overlap: send during iallreduce");
        CK(rcoll_wait(rq), "overlap: wait(iallreduce)");
    } else {
        if (rank == 1) {
            rcoll_request_t rq;
            memset(m, 0x5a, bytes);
            CK(rcoll_irecv_tag(m, bytes, RCOLL_UINT8, 0, 12, comm, NULL, &rq),
               "overlap: irecv");
            CK(rcoll_wait(rq), "overlap: wait(irecv) before allreduce");
            expect(m, bytes, 0, 12, rnd, "overlap (recv, then collective)");
        }
        CK(rcoll_allreduce(&x, &s, 1, RCOLL_FLOAT64, RCOLL_SUM, comm, NULL),
           "overlap: allreduce");
    }
    checks++;
    if (s != n) {
        failures++;
        printf("FAIL rank %d: all-reduce beside point-to-point gave %g\n",
               rank, s);
    }
    free(m);
}

/* Eager sends that nobody receives yet, waited for before the sender
 * goes on: rank 0 isends 64 small messages to rank 1 and waits for all
 * of them, and only then sends to rank 2; rank 1 first waits for rank 2,
 * which waits for rank 0. The sends fill rank 1's slots long before they
 * finish, and no operation of rank 1 asks rank 0 for anything: only its
 * stalled engine setting them aside (coll_match_unblock) lets rank 0's
 * sends complete. Open MPI's eager protocol runs this program too. */
static void t_unexpected(int rnd)
{
    enum { K = 64, B = 64 };
    unsigned char (*m)[B] = xmalloc(K * B), one[B];
    rcoll_request_t rq[K];
    if (rank == 0) {
        for (int i = 0; i < K; i++) {
            pat(m[i], B, 0, 1, 20 + i, rnd);
            CK(rcoll_isend_tag(m[i], B, RCOLL_UINT8, 1, 20 + i, comm, NULL,
                               &rq[i]), "unexpected: isend");
        }
        for (int i = 0; i < K; i++)
            CK(rcoll_wait(rq[i]), "unexpected: wait(isend) before rank 1 "
               "posts its receives");
        pat(one, B, 0, 2, 19, rnd);
        CK(rcoll_send_tag(one, B, RCOLL_UINT8, 2, 19, comm, NULL),
           "unexpected: send to rank 2");
    } else if (rank == 2) {
        CK(rcoll_recv_tag(one, B, RCOLL_UINT8, 0, 19, comm, NULL),
           "unexpected: recv from rank 0");
        expect(one, B, 0, 19, rnd, "unexpected (0 -> 2)");
        pat(one, B, 2, 1, 19, rnd);
        CK(rcoll_send_tag(one, B, RCOLL_UINT8, 1, 19, comm, NULL),
           "unexpected: send to rank 1");
    } else if (rank == 1) {
        CK(rcoll_recv_tag(one, B, RCOLL_UINT8, 2, 19, comm, NULL),
           "unexpected: recv from rank 2 (rank 0's sends fill the slots)");
        expect(one, B, 2, 19, rnd, "unexpected (2 -> 1)");
        for (int i = K - 1; i >= 0; i--) /* any order: tags tell */
            CK(rcoll_recv_tag(m[i], B, RCOLL_UINT8, 0, 20 + i, comm, NULL),
               "unexpected: recv from rank 0");
        for (int i = 0; i < K; i++)
            expect(m[i], B, 0, 20 + i, rnd, "unexpected (0 -> 1)");
    }
    free(m);
}

/* Listening TCP sockets among this process's descriptors: the socket
 * inodes of /proc/self/fd matched against /proc/net/tcp{,6} in state 0A
 * (LISTEN). */
static int count_listeners(void)
{
    unsigned long inodes[1024];
    int ni = 0, found = 0;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    while (d && (e = readdir(d)) && ni < 1024) {
        char path[300], link[64];
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        ssize_t k = readlink(path, link, sizeof(link) - 1);
        if (k <= 0)
            continue;
        link[k] = '\0';
        unsigned long ino;
        if (sscanf(link, "socket:[%lu]", &ino) == 1)
            inodes[ni++] = ino;
    }
    if (d)
        closedir(d);
    const char *files[] = {"/proc/net/tcp", "/proc/net/tcp6"};
    for (int f = 0; f < 2; f++) {
        FILE *fp = fopen(files[f], "r");
        char line[512];
        while (fp && fgets(line, sizeof(line), fp)) {
            unsigned st;
            unsigned long ino;
            if (sscanf(line, " %*d: %*s %*s %x %*s %*s %*s %*s %*s %lu", &st,
                       &ino) != 2 || st != 0x0A)
                continue;
            for (int i = 0; i < ni; i++)
                if (inodes[i] == ino)
                    found++;
        }
        if (fp)
            fclose(fp);
    }
    return found;
}

/* Counts that differ (MPI's rules): each rank sends `bytes` to the next
 * with tag 11; the receiver posts a buffer 3 KiB larger (the message
 * lands, rcoll_wait_status says how many bytes, source and tag, and the
 * rest of the buffer is untouched), then with tag 12 a buffer one byte
 * smaller (only that receive fails, RCOLL_ERR_TRUNCATED naming the
 * sender, the tag and both sizes; the sender's side completes), then a
 * blocking receive the same way, then a matching exchange that must work:
 * the communicator goes on. Eager and rendezvous sizes both. */
static void t_sizes(size_t bytes, int rnd)
{
    if (n < 2 || bytes == 0)
        return;
    int to = (rank + 1) % n, from = (rank - 1 + n) % n;
    size_t extra = 3072;
    char *sb = xmalloc(bytes), *rb = xmalloc(bytes + extra);
    char *sent = xmalloc(bytes);
    rcoll_request_t rs, rr;
    rcoll_req_status_t rst = RCOLL_REQ_STATUS_INIT;
    pat(sb, bytes, rank, to, 11, rnd);
    /* a larger receive buffer */
    memset(rb, 0x77, bytes + extra);
    CK(rcoll_isend_tag(sb, bytes, RCOLL_UINT8, to, 11, comm, NULL, &rs),
       "sizes: isend");
    CK(rcoll_irecv_tag(rb, bytes + extra, RCOLL_UINT8, from, 11, comm, NULL,
                       &rr), "sizes: irecv (larger)");
    CK(rcoll_wait_status(rr, &rst), "sizes: wait (larger)");
    CK(rcoll_wait(rs), "sizes: wait (send)");
    expect(rb, bytes, from, 11, rnd, "sizes: larger buffer");
    checks++;
    size_t k = 0;
    while (k < extra && (unsigned char)rb[bytes + k] == 0x77)
        k++;
    if (rst.count != bytes || rst.source != from || rst.tag != 11 ||
        rst.error != RCOLL_OK || k != extra) {
        failures++;
        printf("FAIL rank %d/%d: sizes: %zu-byte message into %zu bytes: "
               "status count %zu source %d tag %d error %d, %zu of the %zu "
               "bytes past it untouched\n", rank, n, bytes, bytes + extra,
               rst.count, rst.source, rst.tag, (int)rst.error, k, extra);
    }
    /* a smaller one: truncated, non-blocking then blocking */
    for (int blocking = 0; blocking < 2; blocking++) {
        rcoll_status_t st;
        pat(sb, bytes, rank, to, 12, rnd + blocking);
        CK(rcoll_isend_tag(sb, bytes, RCOLL_UINT8, to, 12, comm, NULL, &rs),
           "sizes: isend (truncated)");
        rcoll_req_status_t ts = RCOLL_REQ_STATUS_INIT;
        if (blocking) {
            st = rcoll_recv_tag(rb, bytes - 1, RCOLL_UINT8, from, 12, comm,
                                NULL);
        } else {
            CK(rcoll_irecv_tag(rb, bytes - 1, RCOLL_UINT8, from, 12, comm,
                               NULL, &rr), "sizes: irecv (smaller)");
            st = rcoll_wait_status(rr, &ts);
        }
        char msg[1024], want[96];
        snprintf(msg, sizeof(msg), "%s", rcoll_last_error());
        snprintf(want, sizeof(want), "the message is %zu uint8 (%zu bytes)",
                 bytes, bytes);
        char pr[32], tg[16];
        snprintf(pr, sizeof(pr), "rank %d ", from);
        snprintf(tg, sizeof(tg), "tag 12");
        checks++;
        if (st != RCOLL_ERR_TRUNCATED || !strstr(msg, want) ||
            !strstr(msg, pr) || !strstr(msg, tg) ||
            (!blocking && (ts.error != RCOLL_ERR_TRUNCATED ||
                           ts.count != bytes || ts.source != from))) {
            failures++;
            printf("FAIL rank %d/%d: sizes: %zu-byte message into %zu bytes "
                   "(%s): %s: %s (status count %zu)\n", rank, n, bytes,
                   bytes - 1, blocking ? "blocking" : "non-blocking",
                   rcoll_status_string(st), msg, ts.count);
        }
        CK(rcoll_wait(rs), "sizes: the truncated message's send");
    }
    /* the communicator goes on: the same tag again, matching counts */
    pat(sb, bytes, rank, to, 12, rnd + 7);
    memcpy(sent, sb, bytes);
    CK(rcoll_isend_tag(sb, bytes, RCOLL_UINT8, to, 12, comm, NULL, &rs),
       "sizes: isend after");
    CK(rcoll_recv_tag(rb, bytes, RCOLL_UINT8, from, 12, comm, NULL),
       "sizes: recv after the truncation");
    CK(rcoll_wait(rs), "sizes: wait after");
    expect(rb, bytes, from, 12, rnd + 7, "sizes: after a truncation");
    free(sb);
    free(rb);
    free(sent);
}

int main(int argc, char **argv)
{
    size_t emax = (size_t)64 << 20;
    int want_listeners = -1;
    const char *tests =
        "ring,halo,allpairs,tags,group,overlap,unexpected,sizes";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-e") && i + 1 < argc)
            emax = (size_t)strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "-T") && i + 1 < argc)
            tests = argv[++i];
        else if (!strcmp(argv[i], "-L") && i + 1 < argc)
            want_listeners = atoi(argv[++i]);
    }
    rcoll_status_t st = rcoll_comm_init_env(&comm);
    if (st != RCOLL_OK) {
        printf("init failed: %s: %s\n", rcoll_status_string(st),
               rcoll_last_error());
        return 1;
    }
    rcoll_comm_rank(comm, &rank);
    rcoll_comm_size(comm, &n);
    if (want_listeners >= 0) {
        int got = count_listeners();
        checks++;
        if (got != want_listeners) {
            failures++;
            printf("FAIL rank %d: %d listening TCP sockets after init, "
                   "expected %d (a transport's listener left open)\n", rank,
                   got, want_listeners);
        }
    }
    if (n > 2 && has(tests, "unexpected"))
        t_unexpected(99);
    int rnd = 0;
    for (size_t b = 4; b <= emax; b *= 16, rnd++) {
        if (n > 1 && has(tests, "ring"))
            t_ring(b, rnd);
        if (n > 1 && has(tests, "halo"))
            t_halo(b, rnd);
        if (n > 1 && has(tests, "allpairs") && b <= emax / 4)
            t_allpairs(b, rnd);
        if (n > 1 && has(tests, "group"))
            t_group(b, rnd);
        if (has(tests, "overlap"))
            t_overlap(b, rnd);
        if (has(tests, "sizes") && b <= ((size_t)16 << 20))
            t_sizes(b, rnd);
        if (has(tests, "tags") && b <= ((size_t)1 << 20)) {
            t_tags(b, 0);
            t_tags(b, 1);
        }
    }
    int64_t f = failures, ftot = 0;
    st = rcoll_allreduce(&f, &ftot, 1, RCOLL_INT64, RCOLL_SUM, comm, NULL);
    if (st != RCOLL_OK)
        die("allreduce(verdict)", st);
    if (rank == 0)
        printf("test_p2p: %d ranks, %ld checks on rank 0, %lld failures on "
               "all ranks\n", n, checks, (long long)ftot);
    if ((st = rcoll_comm_destroy(comm)) != RCOLL_OK) {
        printf("rank %d: destroy: %s\n", rank, rcoll_last_error());
        return 1;
    }
    return failures || ftot ? 1 : 0;
}
