/* Root-cause diagnosis of a timeout: following the chain of waits.
 *
 * When an operation makes no progress for RCOLL_TIMEOUT, the rank knows
 * whom it waits for, but that rank may itself wait for a third: if rank 2
 * is stopped, rank 0 waits for 2 and rank 1 waits for 3, which waits for 2.
 * Before failing, the timed-out rank asks the rank it waits for what that
 * rank waits for, then asks that one, and so on, until a rank answers that
 * it waits for nobody (it is idle: it has not called this collective), has
 * failed already, does not answer within DIAG_HOP_S (stopped, hung or cut
 * off), refuses the connection (gone), or the chain closes on itself (a
 * wait cycle). The error then names that rank as the root cause, with the
 * chain. Every rank that times out does this on its own, so every one names
 * the same rank; a rank that fails because a peer aborted carries the
 * peer's reason, which already names it.
 *
 * The questions and answers do not use the transports (which may be the
 * thing that broke, and whose flow control a stuck operation holds): each
 * is one fixed-size message on a new TCP connection to the rank's
 * bootstrap listener, which stays open for the communicator's life, MAC'd
 * with the job secret (a connection that fails the check is dropped). An
 * answer carries the question's nonce, so an old answer cannot be
 * replayed. Connections are non-blocking and driven by the engine's epoll
 * set, so a rank that waits on an unreachable peer still answers others.
 * The engine's holder runs all of this (c->engine); answers are given by
 * whoever drives the engine, or by the idle progress thread's look once a
 * second. */
#include "core.h"
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>

#define DIAG_IN_MAX 16
#define DIAG_OUT_MAX 16
#define DIAG_HOP_S 2.0       /* how long a rank has to answer */
#define DIAG_CHAIN_MAX 64
#define DIAG_IO_S 2.0        /* a connection's whole life */

struct diag_conn {
    int fd;                  /* -1: free */
    double deadline;
    size_t done;             /* bytes read (in) or written (out) */
    int to;                  /* out: the rank it goes to */
    rcoll_diag_msg_t m;
    rcoll_ev_handler_t h;
    struct rcoll_diag *d;
};

struct rcoll_diag {
    struct rcoll_comm *c;
    rcoll_ev_handler_t lh;   /* the bootstrap listener */
    struct diag_conn in[DIAG_IN_MAX], out[DIAG_OUT_MAX];
    unsigned long dropped;
    uint64_t nonce_ctr;
    /* the walk in progress */
    int active;
    int target;              /* the rank asked last */
    uint64_t nonce;          /* of that question */
    double hop_deadline;
    int chain[DIAG_CHAIN_MAX];
    int len;
    int done;                /* the walk ended: `cause` is the result */
    char cause[640];
    int root;                /* the rank it named, -1 */
    int found_root;          /* the last finished walk's root, for answers */
};

/* ---- messages (the parser is in core/diag_msg.c, for the fuzzer) ---- */

static void conn_close(struct diag_conn *k)
{
    struct rcoll_comm *c = k->d->c;
    if (k->fd >= 0) {
        epoll_ctl(c->epfd, EPOLL_CTL_DEL, k->fd, NULL);
        close(k->fd);
    }
    k->fd = -1;
}

static const char *who(struct rcoll_comm *c, int r, char *b, size_t l)
{
    snprintf(b, l, "rank %d (%s pid %d)", r, c->bs.peers[r].hostname,
             (int)c->bs.peers[r].pid);
    return b;
}

static void chain_str(struct rcoll_diag *d, char *b, size_t l)
{
    size_t off = 0;
    b[0] = '\0';
    for (int i = 0; i < d->len && off + 16 < l; i++)
        off += (size_t)snprintf(b + off, l - off, "%s%d", i ? " -> " : "",
                                d->chain[i]);
}

/* Ends the walk with `root` (or -1) named by `fmt`; the wait chain is
 * appended. */
static void walk_end(struct rcoll_diag *d, int root, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void walk_end(struct rcoll_diag *d, int root, const char *fmt, ...)
{
    char what[512], ch[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    chain_str(d, ch, sizeof(ch));
    snprintf(d->cause, sizeof(d->cause), "%s (wait chain %s)", what, ch);
    d->done = 1;
    d->root = root;
    rcoll_info(RCOLL_SUBSYS_COLL, "timeout diagnosis: %s", d->cause);
}

/* ---- sending ---- */

static void out_event(rcoll_ev_handler_t *h, uint32_t events);

static void out_failed(struct diag_conn *k, const char *why)
{
    struct rcoll_diag *d = k->d;
    char b[128];
    /* the rank we wait on refused outright: it has no listener any more */
    if (d->active && !d->done && k->m.type == RCOLL_DIAG_QUERY &&
        k->to == d->target && k->m.nonce == d->nonce)
        walk_end(d, k->to, "root cause: %s cannot be reached: %s (it has "
                 "exited or closed its communicator, or the network to it "
                 "is down)",
                 who(d->c, k->to, b, sizeof(b)), why);
    rcoll_debug(RCOLL_SUBSYS_COLL, "diagnosis message to rank %d: %s", k->to,
                why);
    conn_close(k);
}

/* Writes what is left; 1 when the connection is done with. */
static int out_write(struct diag_conn *k)
{
    while (k->done < sizeof(k->m)) {
        ssize_t n = send(k->fd, (char *)&k->m + k->done,
                         sizeof(k->m) - k->done, MSG_NOSIGNAL);
        if (n > 0) {
            k->done += (size_t)n;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return 0;
        out_failed(k, n < 0 ? strerror(errno) : "closed");
        return 1;
    }
    conn_close(k); /* the kernel delivers the rest; the peer reads to EOF */
    return 1;
}

static void out_event(rcoll_ev_handler_t *h, uint32_t events)
{
    struct diag_conn *k =
        (struct diag_conn *)((char *)h - offsetof(struct diag_conn, h));
    if (k->fd < 0)
        return;
    if (events & (EPOLLERR | EPOLLHUP)) {
        int err = 0;
        socklen_t sl = sizeof(err);
        getsockopt(k->fd, SOL_SOCKET, SO_ERROR, &err, &sl);
        out_failed(k, strerror(err ? err : ECONNRESET));
        return;
    }
    out_write(k);
}

static void diag_send(struct rcoll_diag *d, int to, rcoll_diag_msg_t *m)
{
    struct rcoll_comm *c = d->c;
    struct diag_conn *k = NULL;
    double now = rcoll_time_sec();
    for (int i = 0; i < DIAG_OUT_MAX && !k; i++)
        if (d->out[i].fd < 0)
            k = &d->out[i];
    if (!k) { /* all busy: the oldest gives way */
        k = &d->out[0];
        for (int i = 1; i < DIAG_OUT_MAX; i++)
            if (d->out[i].deadline < k->deadline)
                k = &d->out[i];
        conn_close(k);
    }
    m->magic = RCOLL_DIAG_MAGIC;
    m->from = c->rank;
    m->to = to;
    m->mac = rcoll__diag_mac(c->bs.secret, m);
    k->m = *m;
    k->to = to;
    k->done = 0;
    k->deadline = now + DIAG_IO_S;
    const rcoll_sockaddr_t *a = &c->bs.peers[to].boot_addr;
    k->fd = socket(a->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                   0);
    if (k->fd < 0) {
        out_failed(k, strerror(errno));
        return;
    }
    if (connect(k->fd, &a->sa, rcoll_sock_addr_len(a)) != 0 &&
        errno != EINPROGRESS) {
        out_failed(k, strerror(errno));
        return;
    }
    /* a connection on a LAN completes in well under a millisecond: finish
     * here if it does (an idle rank's engine looks again only in 1 s) */
    struct pollfd pf = {.fd = k->fd, .events = POLLOUT};
    if (poll(&pf, 1, 20) == 1 && !(pf.revents & (POLLERR | POLLHUP)) &&
        out_write(k))
        return;
    if (k->fd < 0)
        return;
    struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = &k->h};
    if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, k->fd, &ev) != 0)
        out_failed(k, strerror(errno));
}

/* ---- answering ---- */

static void answer(struct rcoll_diag *d, const rcoll_diag_msg_t *q)
{
    struct rcoll_comm *c = d->c;
    rcoll_diag_msg_t a;
    memset(&a, 0, sizeof(a));
    a.type = RCOLL_DIAG_ANSWER;
    a.nonce = q->nonce;
    a.peer = -1;
    pthread_mutex_lock(&c->lock);
    struct rcoll_request *r = rcoll__comm_stalled_req(c);
    if (c->error != RCOLL_OK) {
        a.state = RCOLL_DIAG_FAILED;
        a.peer = d->found_root;
        size_t n = strnlen(c->errmsg, sizeof(a.text) - 1);
        memcpy(a.text, c->errmsg, n); /* truncated if need be */
    } else if (r || c->inline_s) {
        /* the engine's holder is us: the schedule is ours to read (a
         * queued one, or the blocking call run inline, core/comm.c) */
        coll_sched_t *s = r ? &r->sched : c->inline_s;
        int step = s->r_step < s->nsteps ? s->r_step : s->s_step;
        a.seq = s->seq;
        a.stalled_ms = (uint32_t)((rcoll_time_sec() -
                                   (r ? r->last_progress : c->last_progress)) *
                                  1e3);
        a.state = s->waiting_peer >= 0 ? RCOLL_DIAG_WAITING : RCOLL_DIAG_BUSY;
        a.peer = s->waiting_peer;
        snprintf(a.what, sizeof(a.what), "%s #%llu step %d",
                 coll_kind_name(s->kind), (unsigned long long)s->seq, step);
    } else {
        a.state = RCOLL_DIAG_IDLE;
        a.seq = __atomic_load_n(&c->coll_seq, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&c->lock);
    rcoll_debug(RCOLL_SUBSYS_COLL, "diagnosis: rank %d asks; state %u peer %d",
                q->from, a.state, a.peer);
    diag_send(d, q->from, &a);
}

/* ---- the walk ---- */

static void ask(struct rcoll_diag *d, int r)
{
    rcoll_diag_msg_t q;
    memset(&q, 0, sizeof(q));
    q.type = RCOLL_DIAG_QUERY;
    uint64_t salt[3] = {++d->nonce_ctr, (uint64_t)d->c->rank,
                        (uint64_t)(rcoll_time_sec() * 1e9)};
    d->nonce = q.nonce = rcoll_siphash(d->c->bs.secret, salt, sizeof(salt));
    d->target = r;
    d->chain[d->len++] = r;
    d->hop_deadline = rcoll_time_sec() + DIAG_HOP_S;
    rcoll_info(RCOLL_SUBSYS_COLL, "timeout diagnosis: asking rank %d what it "
               "waits for", r);
    diag_send(d, r, &q);
}

static void got_answer(struct rcoll_diag *d, const rcoll_diag_msg_t *a)
{
    struct rcoll_comm *c = d->c;
    char b[128];
    if (!d->active || d->done || a->from != d->target || a->nonce != d->nonce)
        return; /* late, or for a walk that is over */
    who(c, a->from, b, sizeof(b));
    switch (a->state) {
    case RCOLL_DIAG_WAITING:
        for (int i = 0; i < d->len; i++)
            if (d->chain[i] == a->peer) {
                d->chain[d->len++] = a->peer;
                walk_end(d, -1, "no single root cause: the ranks wait for "
                         "each other in a cycle (did they call collectives "
                         "or send/recv in different orders?)");
                return;
            }
        if (d->len >= DIAG_CHAIN_MAX - 1) {
            walk_end(d, -1, "no root cause found within %d ranks",
                     DIAG_CHAIN_MAX);
            return;
        }
        ask(d, a->peer);
        return;
    case RCOLL_DIAG_BUSY:
        walk_end(d, a->from, "root cause: %s is in %s but waits for no peer "
                 "(busy for %.1f s)", b, a->what, a->stalled_ms * 1e-3);
        return;
    case RCOLL_DIAG_IDLE: {
        uint64_t want = 0;
        pthread_mutex_lock(&c->lock);
        for (struct rcoll_request *q = c->qhead; q && !want; q = q->next)
            if (q->sched.kind != COLL_SEND && q->sched.kind != COLL_RECV)
                want = q->sched.seq; /* the first collective in flight */
        if (!want && c->inline_s) /* a blocking call run inline */
            want = c->inline_s->seq;
        pthread_mutex_unlock(&c->lock);
        if (want && a->seq < want)
            walk_end(d, a->from, "root cause: %s is alive but has not called "
                     "operation #%llu (it has posted %llu)", b,
                     (unsigned long long)want, (unsigned long long)a->seq);
        else
            walk_end(d, a->from, "root cause: %s is alive but has no "
                     "operation in progress (it has posted %llu)", b,
                     (unsigned long long)a->seq);
        return;
    }
    case RCOLL_DIAG_FAILED:
        if (a->peer >= 0 && a->peer < c->nranks)
            walk_end(d, a->peer, "root cause: rank %d, as found by %s, which "
                     "failed already: %s", a->peer, b, a->text);
        else /* it found none itself (a cycle), or failed otherwise */
            walk_end(d, -1, "%s had failed already: %s", b, a->text);
        return;
    }
}

/* ---- receiving ---- */

static void in_event(rcoll_ev_handler_t *h, uint32_t events)
{
    struct diag_conn *k =
        (struct diag_conn *)((char *)h - offsetof(struct diag_conn, h));
    struct rcoll_diag *d = k->d;
    (void)events;
    if (k->fd < 0)
        return;
    while (k->done < sizeof(k->m)) {
        ssize_t n = recv(k->fd, (char *)&k->m + k->done,
                         sizeof(k->m) - k->done, 0);
        if (n > 0) {
            k->done += (size_t)n;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        break; /* closed early */
    }
    rcoll_diag_msg_t m;
    int ok = k->done == sizeof(k->m) &&
             rcoll__diag_msg_check(&k->m, sizeof(k->m), d->c->bs.secret,
                                   d->c->nranks, d->c->rank, &m) == 0;
    conn_close(k);
    if (!ok) {
        if (d->dropped++ < 8)
            rcoll_warn("rank %d: dropped a connection to its bootstrap "
                       "listener that was not a diagnosis message of this "
                       "job", d->c->rank);
        return;
    }
    if (m.type == RCOLL_DIAG_QUERY)
        answer(d, &m);
    else
        got_answer(d, &m);
}

static void sweep(struct rcoll_diag *d, double now)
{
    for (int i = 0; i < DIAG_IN_MAX; i++)
        if (d->in[i].fd >= 0 && now > d->in[i].deadline)
            conn_close(&d->in[i]);
    for (int i = 0; i < DIAG_OUT_MAX; i++)
        if (d->out[i].fd >= 0 && now > d->out[i].deadline)
            out_failed(&d->out[i], "timed out");
}

static void listen_event(rcoll_ev_handler_t *h, uint32_t events)
{
    struct rcoll_diag *d =
        (struct rcoll_diag *)((char *)h - offsetof(struct rcoll_diag, lh));
    struct rcoll_comm *c = d->c;
    double now = rcoll_time_sec();
    (void)events;
    sweep(d, now);
    for (;;) {
        int fd = accept4(c->bs.listen_fd, NULL, NULL,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        struct diag_conn *k = NULL;
        for (int i = 0; i < DIAG_IN_MAX && !k; i++)
            if (d->in[i].fd < 0)
                k = &d->in[i];
        if (!k) { /* full (strangers holding connections?): oldest goes */
            k = &d->in[0];
            for (int i = 1; i < DIAG_IN_MAX; i++)
                if (d->in[i].deadline < k->deadline)
                    k = &d->in[i];
            conn_close(k);
            d->dropped++;
        }
        k->fd = fd;
        k->done = 0;
        k->deadline = now + DIAG_IO_S;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &k->h};
        if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
            conn_close(k);
        else
            in_event(&k->h, EPOLLIN);
    }
}

/* ---- the engine's side ---- */

rcoll_status_t rcoll__diag_init(struct rcoll_comm *c)
{
    struct rcoll_diag *d = calloc(1, sizeof(*d));
    if (!d)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "no memory");
    d->c = c;
    d->root = d->found_root = -1;
    d->lh.cb = listen_event;
    for (int i = 0; i < DIAG_IN_MAX; i++) {
        d->in[i] = (struct diag_conn){.fd = -1, .d = d};
        d->in[i].h.cb = in_event;
    }
    for (int i = 0; i < DIAG_OUT_MAX; i++) {
        d->out[i] = (struct diag_conn){.fd = -1, .d = d};
        d->out[i].h.cb = out_event;
    }
    c->diag = d;
    if (c->bs.listen_fd < 0)
        return RCOLL_OK; /* one rank: nobody to ask */
    int fl = fcntl(c->bs.listen_fd, F_GETFL);
    fcntl(c->bs.listen_fd, F_SETFL, fl | O_NONBLOCK);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &d->lh};
    if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, c->bs.listen_fd, &ev) != 0)
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "epoll_ctl: %s",
                                strerror(errno));
    return RCOLL_OK;
}

void rcoll__diag_fini(struct rcoll_comm *c)
{
    struct rcoll_diag *d = c->diag;
    if (!d)
        return;
    for (int i = 0; i < DIAG_IN_MAX; i++)
        conn_close(&d->in[i]);
    for (int i = 0; i < DIAG_OUT_MAX; i++)
        if (d->out[i].fd >= 0) /* an answer on its way: a last chance */
            out_write(&d->out[i]);
    for (int i = 0; i < DIAG_OUT_MAX; i++)
        conn_close(&d->out[i]);
    if (c->bs.listen_fd >= 0)
        epoll_ctl(c->epfd, EPOLL_CTL_DEL, c->bs.listen_fd, NULL);
    free(d);
    c->diag = NULL;
}

void rcoll__diag_cancel(struct rcoll_comm *c)
{
    struct rcoll_diag *d = c->diag;
    if (d && d->active) {
        rcoll_info(RCOLL_SUBSYS_COLL, "timeout diagnosis abandoned: the "
                   "operation moved again");
        d->active = 0;
        c->diag_walking = 0;
    }
}

int rcoll__diag_walk(struct rcoll_comm *c, int waiting_peer, char *cause,
                     size_t len)
{
    struct rcoll_diag *d = c->diag;
    double now = rcoll_time_sec();
    cause[0] = '\0';
    if (!d || waiting_peer < 0 || waiting_peer >= c->nranks ||
        c->bs.listen_fd < 0)
        return 1;
    sweep(d, now);
    if (!d->active) {
        d->active = 1;
        c->diag_walking = 1;
        d->done = 0;
        d->root = -1;
        d->len = 0;
        d->chain[d->len++] = c->rank;
        ask(d, waiting_peer);
    }
    if (!d->done && now >= d->hop_deadline) {
        char b[128];
        walk_end(d, d->target, "root cause: %s did not answer within %g s "
                 "(stopped, hung, or its host unreachable)",
                 who(c, d->target, b, sizeof(b)), DIAG_HOP_S);
    }
    if (!d->done)
        return 0;
    snprintf(cause, len, "%s", d->cause);
    d->found_root = d->root;
    d->active = 0;
    c->diag_walking = 0;
    return 1;
}

struct rcoll_request *rcoll__comm_stalled_req(struct rcoll_comm *c)
{
    struct rcoll_request *first = NULL;
    for (struct rcoll_request *r = c->qhead; r; r = r->next) {
        if (!r->started)
            break; /* started in posting order */
        if (r->sched.waiting_peer >= 0)
            return r;
        if (!first)
            first = r;
    }
    return first;
}
