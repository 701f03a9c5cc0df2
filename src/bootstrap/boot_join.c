/* A rank's side of the rendezvous: its hello and entry to the root, and
 * the root's answer, at once or (when the root had no descriptor to keep
 * for it) by the root's call on its listener. bootstrap.c forms the ring
 * after it. */
#include "boot_wire.h"
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The acceptor on our listener (NULL: no memory). */
rcoll_acceptor_t *rcoll__boot_acceptor(rcoll_bootstrap_t *bs)
{
    if (!bs->acc && (bs->acc = malloc(sizeof(*bs->acc))))
        rcoll_acceptor_init(bs->acc, bs->listen_fd, bs->secret,
                            sizeof(boot_hello_t), "bootstrap listener");
    return bs->acc;
}

/* Closes the handshakes still in progress on our listener. */
void rcoll__boot_acceptor_done(rcoll_bootstrap_t *bs)
{
    if (bs->acc) {
        rcoll_acceptor_fini(bs->acc);
        free(bs->acc);
        bs->acc = NULL;
    }
}

/* Connects to the root and says hello. A connection that closes before
 * the root's first word came from a listener on its way out (the previous
 * communicator's root on a reused RCOLL_ROOT port): try again. */
rcoll_status_t rcoll__boot_root_connect(rcoll_bootstrap_t *bs,
                                        const rcoll_sockaddr_t *root,
                                        double deadline, int *fd)
{
    boot_hello_t h = {HELLO_ROOT, bs->rank, bs->nranks,
                      sizeof(rcoll_boot_peer_t)};
    rcoll_status_t st;
    char a[128];
    for (;;) {
        /* in slices of 0.5 s: between them, a root of this process that
         * gave up meanwhile is noticed (it no longer listens) */
        double slice = RCOLL_MIN(deadline, rcoll_time_sec() + 0.5);
        st = rcoll_sock_connect(root, slice, fd);
        /* not there yet, or a SYN lost on a lossy network: try again */
        if ((st == RCOLL_ERR_TIMEOUT || st == RCOLL_ERR_SYSTEM) &&
            rcoll_time_sec() < deadline &&
            !rcoll__boot_root_gave_up(root, NULL, NULL, 0))
            continue;
        if (st != RCOLL_OK) {
            char why[BOOT_NOTICE_LEN] = "";
            rcoll_status_t wst = RCOLL_OK;
            rcoll__boot_root_gave_up(root, &wst, why, sizeof(why));
            if (wst != RCOLL_OK)
                return rcoll__set_error(wst, "%s (rank %d: the root in this "
                                        "process gave up before it joined)",
                                        why, bs->rank);
            return rcoll__set_error(st, "bootstrap: rank %d cannot reach "
                                    "rank 0 (the root) at %s: %s", bs->rank,
                                    rcoll_sock_addr_str(root, a, sizeof(a)),
                                    rcoll_last_error());
        }
        st = rcoll_sock_auth_connect(*fd, bs->secret, &h, sizeof(h),
                                     deadline);
        if (st != RCOLL_ERR_REMOTE || rcoll_time_sec() >= deadline)
            return st;
        close(*fd);
        *fd = -1;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* A rendezvous that failed after the root was reached. */
rcoll_status_t rcoll__boot_rendezvous_failed(const rcoll_bootstrap_t *bs,
                                             const rcoll_sockaddr_t *root,
                                             rcoll_status_t st)
{
    char a[128];
    return rcoll__set_error(st, "bootstrap: rank %d: rendezvous at %s "
                            "failed: %s%s", bs->rank,
                            rcoll_sock_addr_str(root, a, sizeof(a)),
                            rcoll_last_error(),
                            st == RCOLL_ERR_AUTH
                                ? ""
                                : " (did every rank start, with the "
                                  "same size?)");
}

/* Reads the root's answer on fd: the entries of our ring neighbours into
 * bs->peers, or the notice of why it gave up; with `later` (and the
 * root's word "later"), *later = 1 instead. */
static rcoll_status_t boot_root_answer(rcoll_bootstrap_t *bs,
                                       const rcoll_sockaddr_t *root, int fd,
                                       double deadline, int *later)
{
    int rank = bs->rank, n = bs->nranks;
    char a[128];
    boot_answer_t ans;
    /* the root answers when every rank joined, or when it gives up */
    rcoll_status_t st = rcoll_sock_recv_all(fd, &ans, sizeof(ans),
                                            deadline + 5.0);
    if (st == RCOLL_ERR_REMOTE)
        return rcoll__set_error(RCOLL_ERR_REMOTE, "bootstrap: rank %d: "
                                "rank 0 (the root at %s) closed the "
                                "rendezvous before answering: rank 0 died "
                                "or was killed", rank,
                                rcoll_sock_addr_str(root, a, sizeof(a)));
    if (st == RCOLL_OK && ans.magic == BOOT_LATER && later) {
        *later = 1;
        return RCOLL_OK;
    }
    if (st == RCOLL_OK && (ans.magic != BOOT_MAGIC || ans.status > 0))
        st = rcoll__set_error(RCOLL_ERR_PROTOCOL, "bad answer");
    if (st == RCOLL_OK && ans.status != 0) {
        char notice[BOOT_NOTICE_LEN];
        st = rcoll_sock_recv_all(fd, notice, sizeof(notice),
                                 rcoll_time_sec() + 5.0);
        notice[sizeof(notice) - 1] = '\0';
        /* a root in this process finishes telling */
        rcoll__boot_roots_wait(4.0);
        return rcoll__set_error(st == RCOLL_OK ? (rcoll_status_t)ans.status
                                               : st,
                                "%s (rank %d, told by the root)",
                                st == RCOLL_OK ? notice : "bootstrap failed",
                                rank);
    }
    if (st == RCOLL_OK)
        st = rcoll_sock_recv_all(fd, &bs->peers[(rank + n - 1) % n],
                                 sizeof(rcoll_boot_peer_t), deadline + 5.0);
    if (st == RCOLL_OK)
        st = rcoll_sock_recv_all(fd, &bs->peers[(rank + 1) % n],
                                 sizeof(rcoll_boot_peer_t), deadline + 5.0);
    return st == RCOLL_OK ? RCOLL_OK
                          : rcoll__boot_rendezvous_failed(bs, root, st);
}

/* 1 when nobody listens at the root any more (it died or finished);
 * else it is alive or busy. Only connects (at most 1 s) and closes: the
 * root's acceptor drops a connection that sent nothing silently, and a
 * root busy calling ranks back is not held up by a handshake. */
static int boot_root_gone(const rcoll_sockaddr_t *root)
{
    int fd = socket(root->sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    rcoll_sock_set_nonblock(fd, 1);
    int rc = connect(fd, &root->sa, rcoll_sock_addr_len(root));
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
        struct pollfd pf = {fd, POLLOUT, 0};
        socklen_t el = sizeof(err);
        err = poll(&pf, 1, 1000) == 1 &&
                      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0
                  ? err
                  : ETIMEDOUT;
    }
    close(fd);
    return err == ECONNREFUSED;
}

/* The root kept no connection for us: it calls back on our listener when
 * all ranks joined. Meanwhile the previous rank may connect for the ring
 * (kept for ring_accept), and every 2 s we check that the root still
 * listens. Returns the call's connection. */
static rcoll_status_t boot_await_call(rcoll_bootstrap_t *bs,
                                      const rcoll_sockaddr_t *root,
                                      double deadline, int *fd_p)
{
    int prev = (bs->rank + bs->nranks - 1) % bs->nranks;
    char a[128];
    double ping = rcoll_time_sec() + 2.0, gone = 0;
    rcoll_acceptor_t *acc = rcoll__boot_acceptor(bs);
    rcoll_status_t st;
    if (!acc)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "bootstrap: no memory");
    rcoll_info(RCOLL_SUBSYS_BOOT, "bootstrap: rank %d waits for the root's "
               "call (it has no descriptor to keep for us)", bs->rank);
    for (;;) {
        int fd, ready;
        boot_hello_t h;
        double until = RCOLL_MIN(deadline + 5.0, gone ? gone : ping);
        st = rcoll_acceptor_next(acc, until, &h, &fd, NULL, 0, &ready);
        if (st == RCOLL_OK && h.purpose == HELLO_CALL && h.rank == bs->rank &&
            h.nranks == bs->nranks) {
            *fd_p = fd;
            break;
        }
        if (st == RCOLL_OK && h.purpose == HELLO_RING && h.rank == prev &&
            bs->prev_fd < 0) {
            bs->prev_fd = fd; /* its go-ahead comes in ring_accept */
            bs->prev_early = 1;
            continue;
        }
        if (st == RCOLL_OK) {
            close(fd);
            continue;
        }
        if (st != RCOLL_ERR_TIMEOUT)
            break;
        double now = rcoll_time_sec();
        if (gone || now >= deadline + 5.0) {
            char why[BOOT_NOTICE_LEN] = "";
            rcoll_status_t wst = RCOLL_OK;
            rcoll__boot_root_gave_up(root, &wst, why, sizeof(why));
            if (wst != RCOLL_OK)
                st = rcoll__set_error(wst, "%s (rank %d: the root in this "
                                      "process gave up)", why, bs->rank);
            else if (gone)
                st = rcoll__set_error(RCOLL_ERR_REMOTE, "bootstrap: rank %d: "
                                      "rank 0 (the root at %s) stopped "
                                      "listening before calling back: "
                                      "rank 0 died or was killed", bs->rank,
                                      rcoll_sock_addr_str(root, a, sizeof(a)));
            else
                st = rcoll__set_error(RCOLL_ERR_TIMEOUT, "bootstrap: rank %d: "
                                      "rank 0 (the root at %s) did not call "
                                      "back within RCOLL_TIMEOUT", bs->rank,
                                      rcoll_sock_addr_str(root, a, sizeof(a)));
            break;
        }
        /* gone: a call it made just before may still be in our backlog */
        if (boot_root_gone(root))
            gone = rcoll_time_sec() + 0.5;
        ping = rcoll_time_sec() + 2.0;
    }
    return st;
}

/* Sends our entry to the root and waits for its answer, at once or by
 * its call. Closes fd. */
rcoll_status_t rcoll__boot_root_exchange(rcoll_bootstrap_t *bs,
                                         const rcoll_sockaddr_t *root,
                                         const rcoll_boot_peer_t *me, int fd,
                                         double deadline)
{
    int later = 0;
    rcoll_status_t st = rcoll_sock_send_all(fd, me, sizeof(*me), deadline);
    if (st != RCOLL_OK) {
        close(fd);
        return rcoll__boot_rendezvous_failed(bs, root, st);
    }
    st = boot_root_answer(bs, root, fd, deadline, &later);
    close(fd);
    if (st != RCOLL_OK || !later)
        return st;
    if ((st = boot_await_call(bs, root, deadline, &fd)) != RCOLL_OK)
        return st;
    st = boot_root_answer(bs, root, fd, deadline, NULL);
    close(fd);
    return st;
}

