/* Bootstrap per rank: the job id, the socket ring (all-gather, barrier,
 * failure notices) and init, which joins the rendezvous through
 * boot_join.c (a rank's side) first. The root service is boot_root.c. */
#include "boot_wire.h"
#include "util/params.h"
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>


void rcoll_boot_id_pack(const rcoll_sockaddr_t *addr, const uint8_t secret[16],
                        rcoll_unique_id_t *id)
{
    rcoll_boot_id_t *b = (rcoll_boot_id_t *)id->internal;
    memset(id, 0, sizeof(*id));
    b->magic = BOOT_MAGIC;
    b->version = BOOT_VERSION;
    b->family = addr->sa.sa_family;
    if (addr->sa.sa_family == AF_INET) {
        b->port = addr->sin.sin_port;
        memcpy(b->addr, &addr->sin.sin_addr, 4);
    } else {
        b->port = addr->sin6.sin6_port;
        memcpy(b->addr, &addr->sin6.sin6_addr, 16);
    }
    memcpy(b->secret, secret, 16);
}

rcoll_status_t rcoll_boot_id_unpack(const rcoll_unique_id_t *id,
                                    rcoll_sockaddr_t *addr,
                                    uint8_t secret[16])
{
    const rcoll_boot_id_t *b = (const rcoll_boot_id_t *)id->internal;
    if (b->magic != BOOT_MAGIC || b->version != BOOT_VERSION ||
        (b->family != AF_INET && b->family != AF_INET6) || b->port == 0)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "the unique id is not one made by "
                                "rcoll_get_unique_id (bad magic/version/"
                                "address)");
    memset(addr, 0, sizeof(*addr));
    addr->sa.sa_family = b->family;
    if (b->family == AF_INET) {
        addr->sin.sin_port = b->port;
        memcpy(&addr->sin.sin_addr, b->addr, 4);
    } else {
        addr->sin6.sin6_port = b->port;
        memcpy(&addr->sin6.sin6_addr, b->addr, 16);
    }
    memcpy(secret, b->secret, 16);
    return RCOLL_OK;
}

uint64_t rcoll_host_hash(void)
{
    char buf[512] = {0};
    uint8_t key[16] = {0};
    if (rcoll_config.hostid && rcoll_config.hostid[0]) {
        snprintf(buf, sizeof(buf), "RCOLL_HOSTID=%s", rcoll_config.hostid);
        return rcoll_siphash(key, buf, strlen(buf));
    }
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    size_t n = 0;
    if (f) {
        n = fread(buf, 1, 64, f);
        fclose(f);
    }
    snprintf(buf + n, sizeof(buf) - n, "%s", rcoll_hostname());
    /* distinct network namespaces are distinct hosts for us */
    char ns[64] = "";
    ssize_t l = readlink("/proc/self/ns/net", ns, sizeof(ns) - 1);
    if (l > 0) {
        ns[l] = '\0';
        strncat(buf, ns, sizeof(buf) - strlen(buf) - 1);
    }
    return rcoll_siphash(key, buf, strlen(buf));
}

/* ---- per rank ---- */

/* The go-ahead to the previous rank on its ring connection. */
static rcoll_status_t ring_go(rcoll_bootstrap_t *bs, int fd, double deadline)
{
    int prev = (bs->rank + bs->nranks - 1) % bs->nranks;
    uint32_t w = BOOT_DATA; /* go on: no failure to report */
    rcoll_status_t st = rcoll_sock_send_all(fd, &w, sizeof(w), deadline);
    if (st != RCOLL_OK)
        return rcoll__set_error(st, "bootstrap: rank %d (%s pid %d) closed "
                                "its ring connection to rank %d", prev,
                                bs->peers[prev].hostname,
                                (int)bs->peers[prev].pid, bs->rank);
    return RCOLL_OK;
}

static rcoll_status_t ring_accept(rcoll_bootstrap_t *bs, double deadline)
{
    int prev = (bs->rank + bs->nranks - 1) % bs->nranks;
    rcoll_acceptor_t *acc;
    rcoll_status_t st = RCOLL_ERR_NO_MEMORY;
    if (bs->prev_early) { /* it connected while we waited for the root */
        bs->prev_early = 0;
        return ring_go(bs, bs->prev_fd, deadline);
    }
    if (!(acc = rcoll__boot_acceptor(bs)))
        return rcoll__set_error(st, "bootstrap: no memory");
    for (;;) {
        int fd, ready;
        boot_hello_t h;
        st = rcoll_acceptor_next(acc, deadline, &h, &fd, NULL, 0, &ready);
        if (st != RCOLL_OK) {
            st = rcoll__set_error(st, "bootstrap: rank %d (%s pid %d) did "
                                  "not connect to rank %d: %s", prev,
                                  bs->peers[prev].hostname,
                                  (int)bs->peers[prev].pid, bs->rank,
                                  rcoll_last_error());
            break;
        }
        if (h.purpose != HELLO_RING || h.rank != prev) {
            rcoll_warn("bootstrap: dropped a ring connection: wrong rank");
            close(fd);
            continue;
        }
        if ((st = ring_go(bs, fd, deadline)) != RCOLL_OK) {
            close(fd);
            break;
        }
        bs->prev_fd = fd;
        break;
    }
    return st;
}

static rcoll_status_t ring_connect(rcoll_bootstrap_t *bs, double deadline)
{
    int next = (bs->rank + 1) % bs->nranks;
    boot_hello_t h = {HELLO_RING, bs->rank, bs->nranks, 0};
    char a[128];
    /* its listener was up before it joined the rendezvous: a refused
     * connection means it died, so no retrying until the deadline (1 s
     * covers a full accept queue) */
    rcoll_status_t st = rcoll_sock_connect_peer(
        &bs->peers[next].boot_addr, deadline,
        RCOLL_MIN(deadline, rcoll_time_sec() + 1.0), &bs->next_fd);
    if (st != RCOLL_OK)
        return rcoll__set_error(st == RCOLL_ERR_TIMEOUT ? RCOLL_ERR_REMOTE : st,
                                "bootstrap: rank %d cannot connect to rank %d "
                                "(%s pid %d), which was listening: it died or "
                                "was killed (%s)", bs->rank, next,
                                bs->peers[next].hostname,
                                (int)bs->peers[next].pid, rcoll_last_error());
    if (st == RCOLL_OK)
        st = rcoll_sock_auth_connect(bs->next_fd, bs->secret, &h, sizeof(h),
                                     deadline);
    uint32_t w = 0;
    if (st == RCOLL_OK)
        st = rcoll_sock_recv_all(bs->next_fd, &w, sizeof(w), deadline);
    if (st == RCOLL_OK && w == BOOT_NOTICE) {
        /* the next rank failed before us and says why */
        char notice[BOOT_NOTICE_LEN];
        st = rcoll_sock_recv_all(bs->next_fd, notice, sizeof(notice),
                                 rcoll_time_sec() + 2.0);
        if (st == RCOLL_OK) {
            notice[sizeof(notice) - 1] = '\0';
            return rcoll__set_error(RCOLL_ERR_REMOTE, "%s (rank %d, told by "
                                    "rank %d)", notice, bs->rank, next);
        }
    } else if (st == RCOLL_OK && w != BOOT_DATA) {
        st = rcoll__set_error(RCOLL_ERR_PROTOCOL, "bad ring word %08x", w);
    }
    if (st != RCOLL_OK)
        return rcoll__set_error(st, "bootstrap: rank %d cannot connect to "
                                "rank %d at %s: %s", bs->rank, next,
                                rcoll_sock_addr_str(&bs->peers[next].boot_addr,
                                                    a, sizeof(a)),
                                rcoll_last_error());
    return RCOLL_OK;
}

static void ring_notice(rcoll_bootstrap_t *bs, const char *msg);

/* The previous rank connected while we waited for the root and waits for
 * its go-ahead: it gets the notice instead. */
static void ring_tell_early(rcoll_bootstrap_t *bs, const char *msg)
{
    uint32_t w = BOOT_NOTICE;
    char notice[BOOT_NOTICE_LEN] = {0};
    double dl = rcoll_time_sec() + 1.0;
    snprintf(notice, sizeof(notice), "%s", msg);
    if (rcoll_sock_send_all(bs->prev_fd, &w, sizeof(w), dl) == RCOLL_OK)
        rcoll_sock_send_all(bs->prev_fd, notice, sizeof(notice), dl);
    bs->prev_early = 0;
}

/* The ring could not form here: tell the neighbours why, for up to 1.5 s,
 * so that they report this root cause instead of "rank X closed": the
 * next rank over our connection to it (made now if need be; it reads the
 * notice where it expects data), the previous one when it connects (it
 * reads the notice where it expects the go-ahead). */
static void ring_tell(rcoll_bootstrap_t *bs, const char *msg)
{
    /* forward: a short try (the next rank may be the dead one) */
    double dl = rcoll_time_sec() + 0.3;
    int next = (bs->rank + 1) % bs->nranks;
    int prev = (bs->rank + bs->nranks - 1) % bs->nranks;
    if (bs->next_fd < 0 && next != bs->rank) {
        boot_hello_t h = {HELLO_RING, bs->rank, bs->nranks, 0};
        uint32_t w;
        int fd;
        if (rcoll_sock_connect(&bs->peers[next].boot_addr, dl, &fd) ==
            RCOLL_OK) {
            if (rcoll_sock_auth_connect(fd, bs->secret, &h, sizeof(h), dl) ==
                    RCOLL_OK &&
                rcoll_sock_recv_all(fd, &w, sizeof(w), dl) == RCOLL_OK &&
                w == BOOT_DATA)
                bs->next_fd = fd;
            else
                close(fd);
        }
    }
    ring_notice(bs, msg);
    dl = rcoll_time_sec() + 1.5; /* backward: the previous rank's connect */
    if (bs->prev_early) {
        ring_tell_early(bs, msg);
    } else if (bs->prev_fd < 0 && bs->listen_fd >= 0) {
        rcoll_acceptor_t *acc = rcoll__boot_acceptor(bs);
        if (!acc)
            return;
        for (;;) {
            int fd, ready;
            boot_hello_t h;
            if (rcoll_acceptor_next(acc, dl, &h, &fd, NULL, 0, &ready) !=
                RCOLL_OK)
                break;
            if (h.purpose == HELLO_RING && h.rank == prev) {
                uint32_t w = BOOT_NOTICE;
                char notice[BOOT_NOTICE_LEN] = {0};
                snprintf(notice, sizeof(notice), "%s", msg);
                if (rcoll_sock_send_all(fd, &w, sizeof(w), dl) == RCOLL_OK)
                    rcoll_sock_send_all(fd, notice, sizeof(notice), dl);
                close(fd);
                break;
            }
            close(fd);
        }
            }
}

/* The ring: each rank connects to the next and accepts the previous; rank
 * 0 accepts first so that the connect chain unwinds. A failure is told
 * along the ring. */
static rcoll_status_t boot_ring_setup(rcoll_bootstrap_t *bs, double deadline)
{
    rcoll_status_t st;
    if (bs->nranks < 2)
        return RCOLL_OK;
    if (bs->rank == 0) {
        st = ring_accept(bs, deadline);
        if (st == RCOLL_OK)
            st = ring_connect(bs, deadline);
    } else {
        st = ring_connect(bs, deadline);
        if (st == RCOLL_OK)
            st = ring_accept(bs, deadline);
    }
    if (st != RCOLL_OK) {
        char why[BOOT_NOTICE_LEN];
        snprintf(why, sizeof(why), "%s", rcoll_last_error());
        ring_tell(bs, why); /* it overwrites the last error */
        st = rcoll__set_error(st, "%s", why);
    }
    rcoll__boot_acceptor_done(bs);
    return st;
}

/* Every rank's entry, gathered over the ring into a copy (the error
 * paths print the neighbours' entries in bs->peers), checked, then
 * taken. */
static rcoll_status_t boot_table_gather(rcoll_bootstrap_t *bs)
{
    size_t sz = (size_t)bs->nranks * sizeof(*bs->peers);
    rcoll_boot_peer_t *t = malloc(sz);
    rcoll_status_t st;
    if (!t)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "bootstrap: no memory");
    t[bs->rank] = bs->peers[bs->rank];
    if ((st = rcoll_bootstrap_allgather(bs, t, sizeof(*t))) == RCOLL_OK &&
        (st = rcoll_boot_table_check(t, bs->nranks)) == RCOLL_OK)
        memcpy(bs->peers, t, sz);
    free(t);
    return st;
}

rcoll_status_t rcoll_bootstrap_init(rcoll_bootstrap_t *bs,
                                    const rcoll_sockaddr_t *root,
                                    const uint8_t secret[16], int rank,
                                    int nranks, double timeout)
{
    rcoll_boot_peer_t me;
    rcoll_status_t st;
    char ifname[64], a[128];
    int fd = -1;
    double deadline;

    memset(bs, 0, sizeof(*bs));
    bs->rank = rank;
    bs->nranks = nranks;
    bs->listen_fd = bs->next_fd = bs->prev_fd = -1;
    bs->timeout = timeout;
    bs->root_addr = *root;
    memcpy(bs->secret, secret, 16);
    deadline = rcoll_time_sec() + bs->timeout;

    memset(&me, 0, sizeof(me));
    st = rcoll_sock_pick_addr(root, &me.boot_addr, ifname, sizeof(ifname));
    if (st != RCOLL_OK)
        return st;
    st = rcoll_sock_listen(&me.boot_addr, 0, &bs->listen_fd);
    if (st != RCOLL_OK)
        return st;
    me.host_hash = rcoll_host_hash();
    me.pid = (int32_t)getpid();
    me.rank = rank;
    snprintf(me.hostname, sizeof(me.hostname), "%s", rcoll_hostname());
    rcoll_info(RCOLL_SUBSYS_BOOT, "bootstrap: rank %d listens on %s (%s)",
                rank, rcoll_sock_addr_str(&me.boot_addr, a, sizeof(a)), ifname);

    bs->peers = calloc((size_t)nranks, sizeof(*bs->peers));
    if (!bs->peers) {
        st = rcoll__set_error(RCOLL_ERR_NO_MEMORY, "bootstrap: no memory");
        goto err;
    }
    st = rcoll__boot_root_connect(bs, root, deadline, &fd);
    if (st != RCOLL_OK) {
        if (fd >= 0) { /* reached, but the hello failed */
            close(fd);
            st = rcoll__boot_rendezvous_failed(bs, root, st);
        }
        goto err;
    }
    st = rcoll__boot_root_exchange(bs, root, &me, fd, deadline);
    if (st != RCOLL_OK) {
        if (bs->prev_early) { /* it waits on us: the reason, not an EOF */
            char why[BOOT_NOTICE_LEN];
            snprintf(why, sizeof(why), "%s", rcoll_last_error());
            ring_tell_early(bs, why);
            st = rcoll__set_error(st, "%s", why);
        }
        goto err;
    }
    bs->peers[rank] = me;
    /* a call that came late (the last rank joined near the end) still
     * leaves the ring time to form */
    deadline = RCOLL_MAX(deadline, rcoll_time_sec() + 10.0);
    /* the neighbours' entries, checked before the ring connects to them;
     * then everyone's, gathered over the ring */
    int nb[2] = {(rank + nranks - 1) % nranks, (rank + 1) % nranks};
    for (int k = 0; k < 2; k++) {
        rcoll_boot_peer_t *q = &bs->peers[nb[k]];
        q->hostname[sizeof(q->hostname) - 1] = '\0'; /* in messages */
        if (nb[k] != rank &&
            (q->rank != nb[k] ||
             (q->boot_addr.sa.sa_family != AF_INET &&
              q->boot_addr.sa.sa_family != AF_INET6))) {
            st = rcoll__set_error(RCOLL_ERR_PROTOCOL, "bootstrap: rank %d: "
                                  "bad entry from the root for rank %d",
                                  rank, nb[k]);
            goto err;
        }
    }
    if ((st = boot_ring_setup(bs, deadline)) != RCOLL_OK ||
        (st = boot_table_gather(bs)) != RCOLL_OK)
        goto err;
    return RCOLL_OK;
err:
    rcoll_bootstrap_finalize(bs);
    return st;
}

/* Ring all-gather. Each block travels behind a word: BOOT_DATA, or
 * BOOT_NOTICE followed by a failure notice that the rank which saw the
 * failure first sends forward, so that every rank names the root cause
 * (the rank that died), not merely its neighbour. */

static void ring_notice(rcoll_bootstrap_t *bs, const char *msg)
{
    uint32_t w = BOOT_NOTICE;
    char notice[BOOT_NOTICE_LEN] = {0};
    double dl = rcoll_time_sec() + 1.0;
    snprintf(notice, sizeof(notice), "%s", msg);
    if (bs->next_fd >= 0 &&
        rcoll_sock_send_all(bs->next_fd, &w, sizeof(w), dl) == RCOLL_OK)
        rcoll_sock_send_all(bs->next_fd, notice, sizeof(notice), dl);
}

/* One ring step, both ways at once: sends BOOT_DATA and `size` bytes of
 * sbuf to the next rank while it receives a word from the previous one
 * and what follows it (a block into rbuf, or a notice), so that a block
 * larger than the sockets' buffers cannot stop the ring (every rank
 * blocked in its send). Each direction runs to its end or its error
 * (*sst, *rst); once the send has failed, the receive has 1 s more. */
typedef struct {
    uint32_t w;                 /* the word received */
    char notice[BOOT_NOTICE_LEN];
    char send_err[160];         /* why the send failed */
} ring_in_t;

static void ring_step(rcoll_bootstrap_t *bs, const char *sbuf, char *rbuf,
                      size_t size, ring_in_t *in, double deadline,
                      rcoll_status_t *sst, rcoll_status_t *rst)
{
    uint32_t w = BOOT_DATA;
    size_t so = 0, ro = 0, rtot = sizeof(in->w);
    *sst = *rst = RCOLL_OK;
    for (;;) {
        int sdone = *sst != RCOLL_OK || so == sizeof(w) + size;
        int rdone = *rst != RCOLL_OK || ro == rtot;
        if (sdone && rdone)
            return;
        int moved = 0;
        if (!sdone) {
            const char *p = so < sizeof(w) ? (const char *)&w + so
                                           : sbuf + (so - sizeof(w));
            size_t len = so < sizeof(w) ? sizeof(w) - so
                                        : size - (so - sizeof(w));
            ssize_t k = send(bs->next_fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (k > 0) {
                so += (size_t)k;
                moved = 1;
            } else if (k < 0 && errno != EAGAIN && errno != EINTR) {
                *sst = rcoll__set_error(RCOLL_ERR_REMOTE, "send: %s",
                                        strerror(errno));
                snprintf(in->send_err, sizeof(in->send_err), "%s",
                         rcoll_last_error());
                deadline = RCOLL_MIN(deadline, rcoll_time_sec() + 1.0);
            }
        }
        if (!rdone) {
            char *p = ro < sizeof(in->w) ? (char *)&in->w + ro
                      : in->w == BOOT_DATA
                          ? rbuf + (ro - sizeof(in->w))
                          : in->notice + (ro - sizeof(in->w));
            ssize_t k = recv(bs->prev_fd, p, rtot - ro, MSG_DONTWAIT);
            if (k > 0) {
                ro += (size_t)k;
                moved = 1;
                if (ro == sizeof(in->w)) { /* the word: what follows */
                    if (in->w == BOOT_DATA)
                        rtot += size;
                    else if (in->w == BOOT_NOTICE)
                        rtot += sizeof(in->notice);
                    else
                        *rst = rcoll__set_error(RCOLL_ERR_PROTOCOL,
                                                "bad block word %08x", in->w);
                }
            } else if (k == 0) {
                *rst = rcoll__set_error(RCOLL_ERR_REMOTE,
                                        "connection closed by peer");
            } else if (errno != EAGAIN && errno != EINTR) {
                *rst = rcoll__set_error(RCOLL_ERR_REMOTE, "recv: %s",
                                        strerror(errno));
            }
        }
        if (moved)
            continue;
        double left = deadline - rcoll_time_sec();
        if (left <= 0) {
            if (*sst == RCOLL_OK && so < sizeof(w) + size) {
                *sst = rcoll__set_error(RCOLL_ERR_TIMEOUT, "send timed out");
                snprintf(in->send_err, sizeof(in->send_err), "send timed out");
            }
            if (*rst == RCOLL_OK && ro < rtot)
                *rst = rcoll__set_error(RCOLL_ERR_TIMEOUT,
                                        "receive timed out");
            return;
        }
        struct pollfd pf[2];
        int np = 0;
        if (*sst == RCOLL_OK && so < sizeof(w) + size)
            pf[np++] = (struct pollfd){.fd = bs->next_fd, .events = POLLOUT};
        if (*rst == RCOLL_OK && ro < rtot)
            pf[np++] = (struct pollfd){.fd = bs->prev_fd, .events = POLLIN};
        if (!np)
            continue; /* both ended this pass (an error): the top returns */
        if (poll(pf, (nfds_t)np, left > 0.1 ? 100 : (int)(left * 1000) + 1) <
                0 && errno != EINTR) {
            *sst = *rst = rcoll__set_error(RCOLL_ERR_SYSTEM, "poll: %s",
                                           strerror(errno));
            snprintf(in->send_err, sizeof(in->send_err), "%s",
                     rcoll_last_error());
            return;
        }
    }
}

rcoll_status_t rcoll_bootstrap_allgather(rcoll_bootstrap_t *bs, void *buf,
                                         size_t size)
{
    char *b = buf;
    int n = bs->nranks, r = bs->rank;
    int next = (r + 1) % n, prev = (r + n - 1) % n;
    double deadline = rcoll_time_sec() + bs->timeout;
    ring_in_t in;
    for (int s = 0; s < n - 1; s++) {
        size_t sb = (size_t)((r - s + n) % n), rb = (size_t)((r - s - 1 + n) % n);
        rcoll_status_t sst, rst;
        ring_step(bs, b + sb * size, b + rb * size, size, &in, deadline, &sst,
                  &rst);
        if (rst == RCOLL_OK && in.w == BOOT_NOTICE) {
            /* news from behind: pass it on (after our whole block, so the
             * next rank's stream stays in step) */
            in.notice[sizeof(in.notice) - 1] = '\0';
            if (sst == RCOLL_OK)
                ring_notice(bs, in.notice);
            return rcoll__set_error(RCOLL_ERR_REMOTE, "%s (rank %d, told "
                                    "by rank %d)", in.notice, r, prev);
        }
        if (sst != RCOLL_OK) {
            /* the next rank is gone; if it failed because of another one,
             * that news comes round the ring from our previous rank */
            const char *why = in.send_err;
            double dl = rcoll_time_sec() + 1.0;
            rcoll_status_t st2 = rst;
            char *skip = malloc(size ? size : 1);
            while (st2 == RCOLL_OK && in.w == BOOT_DATA && skip) {
                st2 = rcoll_sock_recv_all(bs->prev_fd, &in.w, sizeof(in.w),
                                          dl);
                if (st2 == RCOLL_OK && in.w == BOOT_DATA)
                    st2 = rcoll_sock_recv_all(bs->prev_fd, skip, size, dl);
                else if (st2 == RCOLL_OK && in.w == BOOT_NOTICE)
                    st2 = rcoll_sock_recv_all(bs->prev_fd, in.notice,
                                              sizeof(in.notice), dl);
            }
            free(skip);
            if (st2 == RCOLL_OK && in.w == BOOT_NOTICE) {
                in.notice[sizeof(in.notice) - 1] = '\0';
                return rcoll__set_error(RCOLL_ERR_REMOTE, "%s (rank %d, told "
                                        "by rank %d)", in.notice, r, prev);
            }
            return rcoll__set_error(sst, "bootstrap all-gather: rank %d, step "
                                    "%d: sending to rank %d (%s pid %d): %s",
                                    r, s, next, bs->peers[next].hostname,
                                    (int)bs->peers[next].pid, why);
        }
        if (rst != RCOLL_OK) {
            char msg[BOOT_NOTICE_LEN];
            snprintf(msg, sizeof(msg), "bootstrap all-gather: rank %d (%s pid "
                     "%d) failed or went silent (seen by rank %d: %s)", prev,
                     bs->peers[prev].hostname, (int)bs->peers[prev].pid, r,
                     rcoll_last_error());
            ring_notice(bs, msg);
            return rcoll__set_error(rst, "%s", msg);
        }
    }
    return RCOLL_OK;
}

rcoll_status_t rcoll_bootstrap_barrier(rcoll_bootstrap_t *bs)
{
    char *tmp = calloc((size_t)bs->nranks, 1);
    if (!tmp)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "bootstrap: no memory");
    rcoll_status_t st = rcoll_bootstrap_allgather(bs, tmp, 1);
    free(tmp);
    return st;
}

void rcoll_bootstrap_finalize(rcoll_bootstrap_t *bs)
{
    rcoll__boot_acceptor_done(bs);
    if (bs->next_fd >= 0)
        close(bs->next_fd);
    if (bs->prev_fd >= 0)
        close(bs->prev_fd);
    if (bs->listen_fd >= 0)
        close(bs->listen_fd);
    bs->next_fd = bs->prev_fd = bs->listen_fd = -1;
    free(bs->peers);
    bs->peers = NULL;
}
