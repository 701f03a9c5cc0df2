/* The bootstrap's root service: a thread that admits every rank's hello
 * and entry, watches the ones that joined, and sends each the entries of
 * its ring neighbours (or a notice naming the ranks that died or never
 * came). It keeps at most half the descriptors its process has to spare:
 * the ranks beyond are answered "later" and called back on their
 * listeners when all joined. */
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


/* ---- root service ---- */

typedef struct {
    int listen_fd;
    uint8_t secret[16];
    double timeout;
} root_args_t;

rcoll_status_t rcoll_boot_table_check(rcoll_boot_peer_t *peers, int nranks)
{
    for (int i = 0; i < nranks; i++) {
        rcoll_boot_peer_t *p = &peers[i];
        /* hostnames are printed in every error message */
        p->hostname[sizeof(p->hostname) - 1] = '\0';
        if (p->rank != i ||
            (p->boot_addr.sa.sa_family != AF_INET &&
             p->boot_addr.sa.sa_family != AF_INET6))
            return rcoll__set_error(RCOLL_ERR_PROTOCOL, "bootstrap: bad "
                                    "rendezvous table: entry %d says rank "
                                    "%d, address family %d", i, (int)p->rank,
                                    (int)p->boot_addr.sa.sa_family);
    }
    return RCOLL_OK;
}

/* The root's answer to each joined rank: a status word, then the table
 * (status 0) or a failure notice naming the rank(s) at fault. */
/* The last root of this process that gave up, by its port: a rank of
 * this process that comes too late to be told (the listener is closed)
 * reads the reason here instead of "connection refused". */
static pthread_mutex_t failed_lock = PTHREAD_MUTEX_INITIALIZER;
static rcoll_sockaddr_t failed_addr; /* family 0: none */
static rcoll_status_t failed_st;
static char failed_msg[BOOT_NOTICE_LEN];

static rcoll_sockaddr_t fd_addr(int fd)
{
    rcoll_sockaddr_t a;
    socklen_t l = sizeof(a);
    memset(&a, 0, sizeof(a));
    if (getsockname(fd, &a.sa, &l) != 0)
        a.sa.sa_family = 0;
    return a;
}

static int same_addr(const rcoll_sockaddr_t *x, const rcoll_sockaddr_t *y)
{
    if (x->sa.sa_family != y->sa.sa_family || x->sa.sa_family == 0)
        return 0;
    if (x->sa.sa_family == AF_INET)
        return x->sin.sin_port == y->sin.sin_port &&
               x->sin.sin_addr.s_addr == y->sin.sin_addr.s_addr;
    return x->sin6.sin6_port == y->sin6.sin6_port &&
           !memcmp(&x->sin6.sin6_addr, &y->sin6.sin6_addr, 16);
}

static void root_record(const rcoll_sockaddr_t *addr, rcoll_status_t st,
                        const char *msg)
{
    pthread_mutex_lock(&failed_lock);
    failed_addr = *addr;
    failed_st = st;
    snprintf(failed_msg, sizeof(failed_msg), "%s", msg ? msg : "");
    pthread_mutex_unlock(&failed_lock);
}

int rcoll__boot_root_gave_up(const rcoll_sockaddr_t *root,
                             rcoll_status_t *st, char *why, size_t len)
{
    pthread_mutex_lock(&failed_lock);
    int r = same_addr(&failed_addr, root);
    if (r && st)
        *st = failed_st;
    if (r && why)
        snprintf(why, len, "%s", failed_msg);
    pthread_mutex_unlock(&failed_lock);
    return r;
}

static void root_fail(int nranks, const int *fds, rcoll_status_t st,
                      const char *msg, double deadline)
{
    boot_answer_t a = {BOOT_MAGIC, (int32_t)st};
    char notice[BOOT_NOTICE_LEN] = {0};
    snprintf(notice, sizeof(notice), "%s", msg);
    rcoll_warn("bootstrap root: %s", msg);
    for (int i = 0; i < nranks; i++)
        if (fds[i] >= 0 &&
            rcoll_sock_send_all(fds[i], &a, sizeof(a), deadline) == RCOLL_OK)
            rcoll_sock_send_all(fds[i], notice, sizeof(notice), deadline);
}

/* After giving up: ranks still in their handshake (or arriving in the
 * next 2.5 s: a loaded host starts them late) are told too, instead of
 * finding the door shut. */
static void root_fail_late(rcoll_acceptor_t *acc, rcoll_status_t st,
                           const char *msg, uint32_t info_size)
{
    double dl = rcoll_time_sec() + 2.5;
    for (;;) {
        int fd, ready;
        boot_hello_t h;
        if (rcoll_acceptor_next(acc, dl, &h, &fd, NULL, 0, &ready) !=
            RCOLL_OK)
            return;
        char *info = info_size && info_size <= 4096 ? malloc(info_size) : NULL;
        if (h.purpose == HELLO_ROOT && info &&
            h.info_size == info_size &&
            rcoll_sock_recv_all(fd, info, info_size, dl) == RCOLL_OK) {
            int tmp = fd;
            root_fail(1, &tmp, st, msg, dl);
        }
        free(info);
        close(fd);
    }
}

/* "rank 3 (host pid 42)" from a joined rank's info, when it is a peer
 * record */
static void root_who(char *buf, size_t len, int r, const char *info,
                     uint32_t info_size)
{
    if (info_size == sizeof(rcoll_boot_peer_t)) {
        rcoll_boot_peer_t p;
        memcpy(&p, info, sizeof(p));
        p.hostname[sizeof(p.hostname) - 1] = '\0';
        snprintf(buf, len, "rank %d (%s pid %d)", r, p.hostname, (int)p.pid);
    } else {
        snprintf(buf, len, "rank %d", r);
    }
}

/* Root threads still running in this process. A rank that fails its
 * rendezvous waits (briefly) for them before returning: its caller may
 * exit at once, which would cut the notices still going to other ranks. */
static pthread_mutex_t roots_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t roots_cond;
static pthread_once_t roots_once = PTHREAD_ONCE_INIT;
static int roots_running;

/* roots_cond waits on CLOCK_MONOTONIC: a step of the wall clock must not
 * stretch or cut the bound */
static void roots_cond_init(void)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&roots_cond, &ca);
    pthread_condattr_destroy(&ca);
}

void rcoll__boot_roots_wait(double secs)
{
    struct timespec ts;
    pthread_once(&roots_once, roots_cond_init);
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)secs;
    pthread_mutex_lock(&roots_lock);
    while (roots_running > 0 &&
           pthread_cond_timedwait(&roots_cond, &roots_lock, &ts) == 0)
        ;
    pthread_mutex_unlock(&roots_lock);
}

/* What the root knows of the ranks that joined so far. */
#define ROOT_CALL (-2)   /* fds[r]: joined, to be called back */
#define ROOT_CALL_S 10.0 /* the limit of one call back */
typedef struct {
    int nranks;          /* -1 until the first hello */
    int joined;
    uint32_t info_size;  /* bytes of each rank's entry */
    int *fds;            /* by rank, -1 until it joined, or ROOT_CALL */
    char *infos;         /* by rank, the entries */
    int *watch, *watch_rank; /* the joined ranks' fds, for the acceptor */
    long spare;          /* descriptors this process has to spare */
    int pend;            /* the acceptor's handshakes at most */
    int hold, held;      /* connections the root may keep, and keeps */
    const uint8_t *secret;
} root_state_t;

/* The ranks that did not join (the first 8) after a timeout. */
static void root_missing_msg(const root_state_t *rs, double timeout,
                             char *msg, size_t len)
{
    int off = snprintf(msg, len, "bootstrap: %d of %d ranks joined within "
                       "RCOLL_TIMEOUT (%g s); missing:", rs->joined,
                       rs->nranks, timeout);
    for (int i = 0, k = 0; i < rs->nranks && off < (int)len; i++)
        if (rs->fds[i] == -1) {
            if (k++ == 8) {
                snprintf(msg + off, len - (size_t)off, " ...");
                break;
            }
            off += snprintf(msg + off, len - (size_t)off, " rank %d", i);
        }
    if (off < (int)len)
        snprintf(msg + off, len - (size_t)off, " (not started, died, or a "
                 "different RCOLL_ROOT/size)");
}

/* The soft RLIMIT_NOFILE, raised toward `want`; -1 if unknown or
 * unbounded (then the root keeps every connection). */
static long root_fd_limit(unsigned long want)
{
    unsigned long lim = rcoll_fd_limit_raise(want);
    return lim == 0 || lim > (unsigned long)(1L << 40) ? -1 : (long)lim;
}

/* Takes a rendezvous hello on fd: 0 when the rank joined, -1 when the
 * connection was dropped, -2 when out of memory. */
static int root_admit(root_state_t *rs, const boot_hello_t *h, int fd,
                      double deadline)
{
    if (h->purpose == HELLO_ROOT_V1) {
        rcoll_warn("bootstrap root: dropped a connection: rank %d runs an "
                   "older rcoll (bootstrap version 1; this is %d)", h->rank,
                   BOOT_VERSION);
        close(fd);
        return -1;
    }
    if (h->purpose != HELLO_ROOT) {
        rcoll_warn("bootstrap root: dropped a connection: not a rendezvous "
                   "hello");
        close(fd);
        return -1;
    }
    if (rs->nranks < 0) {
        /* the entry is a peer record: the root calls ranks back at its
         * address and names them by it */
        if (h->nranks < 1 || h->nranks > (1 << 20) ||
            h->info_size != sizeof(rcoll_boot_peer_t)) {
            close(fd);
            return -1;
        }
        rs->nranks = h->nranks;
        rs->info_size = h->info_size;
        rs->fds = malloc((size_t)rs->nranks * sizeof(int));
        for (int i = 0; rs->fds && i < rs->nranks; i++)
            rs->fds[i] = -1; /* before anything can fail: the cleanup reads it */
        rs->infos = calloc((size_t)rs->nranks, rs->info_size);
        rs->watch = calloc((size_t)rs->nranks, sizeof(int));
        rs->watch_rank = calloc((size_t)rs->nranks, sizeof(int));
        if (!rs->fds || !rs->infos || !rs->watch || !rs->watch_rank) {
            close(fd);
            return -2;
        }
        /* half of what the process has to spare is kept for rank 0's own
         * sockets; the ranks beyond the rest are called back. The soft
         * limit is raised first, as rank 0's init is about to (up to the
         * hard limit) */
        long open = rcoll_fd_open_count();
        long lim = root_fd_limit((unsigned long)RCOLL_MAX(open, 0) +
                                 (unsigned long)rs->nranks + 256);
        if (open >= 0 && lim > 0)
            rs->spare = lim - open - rs->pend;
        long hold = rs->spare / 2;
        rs->hold = (int)RCOLL_MAX(1, RCOLL_MIN(hold, (long)rs->nranks));
        if (rs->hold < rs->nranks)
            rcoll_info(RCOLL_SUBSYS_BOOT, "bootstrap root: %ld descriptors "
                       "to spare: keeps the connections of %d of %d ranks, "
                       "calls the others back", rs->spare, rs->hold,
                       rs->nranks);
    }
    if (h->nranks != rs->nranks || h->info_size != rs->info_size ||
        h->rank < 0 || h->rank >= rs->nranks || rs->fds[h->rank] != -1) {
        rcoll_warn("bootstrap root: rank %d says nranks %d (expected %d) or "
                   "joined twice; dropped", h->rank, h->nranks, rs->nranks);
        close(fd);
        return -1;
    }
    if (rcoll_sock_recv_all(fd, rs->infos + (size_t)h->rank * rs->info_size,
                            rs->info_size, deadline) != RCOLL_OK) {
        close(fd);
        return -1;
    }
    if (rs->held >= rs->hold) { /* no descriptor to keep: call it back */
        boot_answer_t later = {BOOT_LATER, 0};
        rcoll_status_t st = rcoll_sock_send_all(fd, &later, sizeof(later),
                                                deadline);
        close(fd);
        if (st != RCOLL_OK)
            return -1;
        fd = ROOT_CALL;
    } else {
        rs->held++;
    }
    rs->fds[h->rank] = fd;
    rs->joined++;
    return 0;
}

/* The answer for rank r: its status word, then the entries of its ring
 * neighbours (it learns the others from them over the ring), or a
 * notice. */
static rcoll_status_t root_answer(const root_state_t *rs, int fd, int r,
                                  rcoll_status_t status, const char *msg,
                                  double deadline)
{
    boot_answer_t a = {BOOT_MAGIC, (int32_t)status};
    rcoll_status_t st = rcoll_sock_send_all(fd, &a, sizeof(a), deadline);
    if (st == RCOLL_OK && status != RCOLL_OK) {
        char notice[BOOT_NOTICE_LEN] = {0};
        snprintf(notice, sizeof(notice), "%s", msg);
        return rcoll_sock_send_all(fd, notice, sizeof(notice), deadline);
    }
    int n = rs->nranks;
    for (int k = 0; st == RCOLL_OK && k < 2; k++) {
        int q = k == 0 ? (r + n - 1) % n : (r + 1) % n;
        st = rcoll_sock_send_all(fd, rs->infos + (size_t)q * rs->info_size,
                                 rs->info_size, deadline);
    }
    return st;
}

/* Calls rank r back on its bootstrap listener with its answer; with
 * HELLO_PING, only checks that it is there. */
static rcoll_status_t root_call(const root_state_t *rs, int r,
                                uint32_t purpose, rcoll_status_t status,
                                const char *msg, double deadline)
{
    rcoll_boot_peer_t p;
    boot_hello_t h = {purpose, r, rs->nranks, rs->info_size};
    int fd = -1;
    memcpy(&p, rs->infos + (size_t)r * rs->info_size, sizeof(p));
    if (p.boot_addr.sa.sa_family != AF_INET &&
        p.boot_addr.sa.sa_family != AF_INET6)
        return rcoll__set_error(RCOLL_ERR_PROTOCOL, "its entry has no "
                                "address");
    /* it listens until called: refused means it is gone */
    rcoll_status_t st = rcoll_sock_connect_peer(
        &p.boot_addr, deadline, RCOLL_MIN(deadline, rcoll_time_sec() + 1.0),
        &fd);
    if (st == RCOLL_OK)
        st = rcoll_sock_auth_connect(fd, rs->secret, &h, sizeof(h), deadline);
    if (st == RCOLL_OK && purpose == HELLO_CALL)
        st = root_answer(rs, fd, r, status, msg, deadline);
    if (fd >= 0)
        close(fd);
    return st;
}

/* The root gives up: recorded for ranks of this process that come later,
 * told to the ranks that joined and to those still arriving. */
static void root_abandon(const rcoll_sockaddr_t *port, rcoll_acceptor_t *acc,
                         root_state_t *rs, rcoll_status_t st, const char *msg)
{
    root_record(port, st, msg);
    root_fail(rs->nranks, rs->fds, st, msg, rcoll_time_sec() + 2.0);
    /* those waiting for a call: 5 s for all of them (a dead one refuses
     * at once) */
    double end = rcoll_time_sec() + 5.0;
    for (int i = 0; rs->fds && i < rs->nranks; i++)
        if (rs->fds[i] == ROOT_CALL) {
            double now = rcoll_time_sec();
            if (now < end)
                root_call(rs, i, HELLO_CALL, st, msg,
                          RCOLL_MIN(end, now + 1.0));
            rs->fds[i] = -1;
        }
    /* told: their descriptors go, so that the ranks still arriving can be
     * accepted and told too (after EMFILE as well) */
    for (int i = 0; rs->fds && i < rs->nranks; i++)
        if (rs->fds[i] >= 0) {
            close(rs->fds[i]);
            rs->fds[i] = -1;
        }
    acc->nofile = 0;
    root_fail_late(acc, st, msg, rs->info_size);
}

/* The rendezvous: accepts every rank's hello and entry, watching those
 * that joined (they send nothing more, so readable means closed: died),
 * then sends every rank the whole table. */
static void root_serve(root_args_t *a, rcoll_acceptor_t *acc,
                       const rcoll_sockaddr_t *port, root_state_t *rs)
{
    char msg[BOOT_NOTICE_LEN];
    double deadline = rcoll_time_sec() + a->timeout;
    while (rs->nranks < 0 || rs->joined < rs->nranks) {
        int fd, nw = 0, ready = -1;
        boot_hello_t h;
        for (int i = 0; i < (rs->nranks > 0 ? rs->nranks : 0); i++)
            if (rs->fds[i] >= 0) {
                rs->watch[nw] = rs->fds[i];
                rs->watch_rank[nw++] = i;
            }
        rcoll_status_t st = rcoll_acceptor_next(acc, deadline, &h, &fd,
                                                rs->watch, nw, &ready);
        if (st == RCOLL_INPROGRESS) {
            int r = rs->watch_rank[ready];
            char who[128];
            root_who(who, sizeof(who), r,
                     rs->infos + (size_t)r * rs->info_size, rs->info_size);
            snprintf(msg, sizeof(msg), "bootstrap: %s closed its connection "
                     "to the root before all %d ranks joined (it died or "
                     "was killed)", who, rs->nranks);
            close(rs->fds[r]);
            rs->fds[r] = -1;
            root_abandon(port, acc, rs, RCOLL_ERR_REMOTE, msg);
            return;
        }
        if (st == RCOLL_ERR_TIMEOUT) {
            if (rs->nranks < 0) {
                rcoll_warn("bootstrap root: no rank joined before "
                           "RCOLL_TIMEOUT; giving up");
                return;
            }
            root_missing_msg(rs, a->timeout, msg, sizeof(msg));
            root_abandon(port, acc, rs, RCOLL_ERR_TIMEOUT, msg);
            return;
        }
        /* out of descriptors (the acceptor names RLIMIT_NOFILE) or of
         * memory: every rank is told why, not left to read "rank 0 died" */
        if (st == RCOLL_OK && root_admit(rs, &h, fd, deadline) == -2)
            st = rcoll__set_error(RCOLL_ERR_NO_MEMORY, "no memory for the "
                                  "table of %d ranks", rs->nranks);
        else if (st == RCOLL_OK)
            continue;
        snprintf(msg, sizeof(msg), "bootstrap: the root (in rank 0's "
                 "process) gave up: %s", rcoll_last_error());
        root_abandon(port, acc, rs, st, msg);
        return;
    }
    /* all joined: the ranks to call back are checked first (each takes
     * a descriptor only while it is checked), so that if one died since
     * it joined, all are told before any is answered */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < rs->nranks; i++) {
            if (rs->fds[i] != ROOT_CALL)
                continue;
            /* its own limit: the rendezvous may have taken most of
             * RCOLL_TIMEOUT already */
            rcoll_status_t st = root_call(rs, i, pass ? HELLO_CALL : HELLO_PING,
                                          RCOLL_OK, NULL,
                                          rcoll_time_sec() + ROOT_CALL_S);
            if (st == RCOLL_OK) {
                if (pass)
                    rs->fds[i] = -1;
                continue;
            }
            char who[128];
            root_who(who, sizeof(who), i,
                     rs->infos + (size_t)i * rs->info_size, rs->info_size);
            snprintf(msg, sizeof(msg), "bootstrap: the root cannot call back "
                     "%s, which joined: %s (%s)", who,
                     st == RCOLL_ERR_TIMEOUT
                         ? "it did not answer within 10 s (stopped, or its "
                           "host overloaded?)"
                         : "it died or was killed",
                     rcoll_last_error());
            rs->fds[i] = -1;
            root_abandon(port, acc, rs,
                         st == RCOLL_ERR_TIMEOUT ? RCOLL_ERR_TIMEOUT
                                                 : RCOLL_ERR_REMOTE,
                         msg);
            return;
        }
    for (int i = 0; i < rs->nranks; i++)
        if (rs->fds[i] >= 0)
            root_answer(rs, rs->fds[i], i, RCOLL_OK, NULL, deadline);
}

static void *root_thread(void *arg)
{
    root_args_t *a = arg;
    root_state_t rs = {.nranks = -1, .secret = a->secret};
    rcoll_acceptor_t *acc = malloc(sizeof(*acc));
    long open = rcoll_fd_open_count(), lim = root_fd_limit(0);

    /* the descriptors it may use: a connection in its handshake or kept
     * until all joined takes one each (under a low RLIMIT_NOFILE, the
     * ranks beyond are called back); unknown: no bound */
    rs.spare = open < 0 || lim < 0 ? 1L << 30 : lim - open;
    if (acc) {
        rcoll_acceptor_init(acc, a->listen_fd, a->secret,
                            sizeof(boot_hello_t), "bootstrap root");
        acc->maxpend = (int)RCOLL_MAX(2, RCOLL_MIN(rs.spare / 8,
                                                   RCOLL_AUTH_PENDING_MAX));
        rs.pend = acc->maxpend;
        rs.spare -= acc->maxpend;
        rcoll_sockaddr_t port = fd_addr(a->listen_fd);
        pthread_mutex_lock(&failed_lock);
        if (same_addr(&failed_addr, &port))
            failed_addr.sa.sa_family = 0; /* a new root there: old news */
        pthread_mutex_unlock(&failed_lock);
        root_serve(a, acc, &port, &rs);
        rcoll_acceptor_fini(acc);
    }
    if (rs.fds)
        for (int i = 0; i < rs.nranks; i++)
            if (rs.fds[i] >= 0)
                close(rs.fds[i]);
    free(rs.fds);
    free(rs.infos);
    free(rs.watch);
    free(rs.watch_rank);
    free(acc);
    close(a->listen_fd);
    free(a);
    pthread_once(&roots_once, roots_cond_init);
    pthread_mutex_lock(&roots_lock);
    roots_running--;
    pthread_cond_broadcast(&roots_cond);
    pthread_mutex_unlock(&roots_lock);
    return NULL;
}

rcoll_status_t rcoll_boot_root_start(int listen_fd, const uint8_t secret[16],
                                     double timeout)
{
    pthread_t t;
    pthread_attr_t attr;
    root_args_t *a = malloc(sizeof(*a));
    if (!a) {
        close(listen_fd);
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "bootstrap root: no memory");
    }
    a->listen_fd = listen_fd;
    memcpy(a->secret, secret, 16);
    a->timeout = timeout;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_mutex_lock(&roots_lock);
    roots_running++;
    pthread_mutex_unlock(&roots_lock);
    int rc = pthread_create(&t, &attr, root_thread, a);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        pthread_mutex_lock(&roots_lock);
        roots_running--;
        pthread_mutex_unlock(&roots_lock);
        close(listen_fd);
        free(a);
        return rcoll__set_error(RCOLL_ERR_SYSTEM,
                                "bootstrap root: pthread_create: %s",
                                strerror(rc));
    }
    return RCOLL_OK;
}

