/* The TCP transport's connections on first use (RCOLL_TCP_CONNECT=lazy;
 * tcp.h). Nothing connects at init: the listener stays open in the
 * engine's epoll set, and the first send to a peer whose socket is not
 * connected starts every missing socket to it. Both ends run the
 * handshake of util/sock.h without blocking (nonce, hello with its MAC,
 * answer), so a rank busy elsewhere delays no one but the peer waiting for
 * it, and the connecting rank's sends wait as for a credit.
 *
 * Two ranks may connect the same socket to each other at once; the lower
 * rank's connection is the one kept. The lower rank answers the higher
 * one's hello "no" while its own is under way; the higher rank takes the
 * lower one's hello and drops its own. Each socket of a pair therefore
 * ends with one connection, the same on both sides, whatever the timing.
 *
 * Failures name the peer: a refused connection (its listener is gone: it
 * destroyed the communicator or died), no answer within RCOLL_TIMEOUT, a
 * handshake cut off, no descriptor left (RLIMIT_NOFILE named). A rail
 * other than the bootstrap's that fails falls back to it, as at init. */
#include "transport/tcp/tcp.h"
#include <stdarg.h>
#include <stddef.h>

/* CONN_DEAD: closed, kept until the engine's next idle turn, since the
 * batch of events being dispatched may still name it */
enum { CONN_CONNECTING, CONN_NONCE, CONN_ANSWER, CONN_HELLO, CONN_DEAD };

typedef struct tcp_conn {
    rcoll_ev_handler_t h;
    struct rcoll_tl_ctx *ctx;
    struct tcp_conn *next, *prev;
    int fd;
    int state;
    int peer, idx;        /* ours: the socket it is for */
    int pair;             /* ours: the rail pair it leaves through */
    int rejoin;           /* ours: for a socket taken down (failback) */
    uint32_t gen;         /*   the number it proposes for the connection */
    double deadline;      /* of this attempt, or of the peer's hello */
    size_t got;           /* bytes of the current step read */
    uint64_t mac;         /* ours: the MAC we sent */
    uint8_t buf[16 + sizeof(tcp_hello_t) + 8]; /* nonce, hello, MAC */
} tcp_conn_t;

/* A handshake's time when it is the peer's (accepted): a stranger or a
 * half-open connection may hold a descriptor no longer than this. */
#define TCP_HELLO_S 10.0
/* A rail other than the bootstrap's gets this long to connect. */
#define TCP_RAIL_TRY_S 4.0
/* After a "no", how long the peer's own connection may take to come
 * before ours tries again. */
#define TCP_AWAIT_S 5.0

static void conn_event(rcoll_ev_handler_t *h, uint32_t events);

static void conn_link(struct rcoll_tl_ctx *ctx, tcp_conn_t *c)
{
    c->ctx = ctx;
    c->prev = NULL;
    c->next = ctx->conns;
    if (ctx->conns)
        ctx->conns->prev = c;
    ctx->conns = c;
    ctx->nconns++;
}

/* Ends c: its fd is closed unless keep (it became a socket), it leaves
 * the list and its socket, and it is freed at the next tcp_lazy_tick. */
static void conn_free(tcp_conn_t *c, int keep)
{
    struct rcoll_tl_ctx *ctx = c->ctx;
    if (c->state == CONN_DEAD)
        return;
    if (c->fd >= 0) {
        epoll_ctl(ctx->p.epfd, EPOLL_CTL_DEL, c->fd, NULL);
        if (!keep)
            close(c->fd);
        c->fd = -1;
    }
    if (c->prev)
        c->prev->next = c->next;
    else
        ctx->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    ctx->nconns--;
    if (c->state != CONN_HELLO) {
        tcp_sock_t *s = &ctx->eps[c->peer]->socks[c->idx];
        if (s->conn == c)
            s->conn = NULL;
    }
    c->state = CONN_DEAD;
    c->prev = NULL;
    c->next = ctx->dead;
    ctx->dead = c;
}

/* The peer's failure for our connection c (which is freed). */
static void conn_fail(tcp_conn_t *c, rcoll_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void conn_fail(tcp_conn_t *c, rcoll_status_t st, const char *fmt, ...)
{
    tcp_ep_t *ep = c->ctx->eps[c->peer];
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    int lost = c->rejoin ||
               (ep->socks[c->idx].ended && ep->nended < c->ctx->nsocks);
    conn_free(c, 0);
    if (!lost) /* (a socket lost to a failover may fail to connect) */
        tcp_ep_fail_st(ep, st, what);
}

/* Opens c's socket and starts its connect over rail pair c->pair; 0 or an
 * errno. */
static int conn_open(tcp_conn_t *c)
{
    struct rcoll_tl_ctx *ctx = c->ctx;
    const tcp_rails_t *me = &ctx->rails[ctx->p.rank];
    const tcp_rails_t *them = &ctx->rails[c->peer];
    uint8_t pairs[TCP_MAX_RAILS][2];
    rcoll_sockaddr_t to, from;
    tcp_rails_pair(me, them, pairs);
    tcp_rail_addr(&them->rail[pairs[c->pair][1]], them->port, &to);
    int fd = socket(to.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC |
                                         SOCK_NONBLOCK, 0);
    if (fd < 0)
        return errno;
    if (c->pair) {
        int one = 1;
#ifdef IP_BIND_ADDRESS_NO_PORT
        setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one,
                   sizeof(one));
#endif
        (void)one;
        tcp_rail_addr(&me->rail[pairs[c->pair][0]], 0, &from);
        if (bind(fd, &from.sa, rcoll_sock_addr_len(&from)) != 0) {
            int e = errno;
            close(fd);
            return e;
        }
    }
    if (connect(fd, &to.sa, rcoll_sock_addr_len(&to)) != 0 &&
        errno != EINPROGRESS) {
        int e = errno;
        close(fd);
        return e;
    }
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP,
                             .data.ptr = &c->h};
    if (epoll_ctl(ctx->p.epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        int e = errno;
        close(fd);
        return e;
    }
    c->fd = fd;
    c->state = CONN_CONNECTING;
    c->got = 0;
    /* a rail gets a few seconds to connect; once connected, the
     * handshake waits on the peer's engine, as long as any operation */
    c->deadline = rcoll_time_sec() +
                  (c->pair || c->rejoin ? RCOLL_MIN(TCP_RAIL_TRY_S,
                                                    ctx->p.timeout)
                                        : ctx->p.timeout);
    return 0;
}

/* Our connection c failed with err: over another rail than the
 * bootstrap's, that rail is marked bad (warned once) and c starts again
 * over the bootstrap's; over the bootstrap's, the peer fails. */
static void conn_retry(tcp_conn_t *c, int err)
{
    struct rcoll_tl_ctx *ctx = c->ctx;
    const tcp_rails_t *me = &ctx->rails[ctx->p.rank];
    const tcp_rails_t *them = &ctx->rails[c->peer];
    uint8_t pairs[TCP_MAX_RAILS][2];
    rcoll_sockaddr_t to;
    char a[128], hint[320];
    if (c->state == CONN_DEAD)
        return;
    if (ctx->eps[c->peer]->failed || c->rejoin) {
        /* (failback: the rail is still down; tried again later) */
        if (c->rejoin)
            rcoll_debug(RCOLL_SUBSYS_NET, "tcp: rank %d: socket %d to rank "
                        "%d does not connect again yet: %s", ctx->p.rank,
                        c->idx, c->peer, strerror(err));
        conn_free(c, 0);
        return;
    }
    tcp_rails_pair(me, them, pairs);
    tcp_rail_addr(&them->rail[pairs[c->pair][1]], them->port, &to);
    rcoll_sock_addr_str(&to, a, sizeof(a));
    if (c->fd >= 0) {
        epoll_ctl(ctx->p.epfd, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
        c->fd = -1;
    }
    if (c->pair) {
        int bit = pairs[c->pair][0];
        if (!(ctx->rails_bad >> bit & 1))
            rcoll_warn("tcp: rank %d: rail %s to rank %d at %s failed (%s): "
                       "socket %d goes over rail %s, and so will later "
                       "sockets", ctx->p.rank, me->rail[bit].ifname, c->peer,
                       a, strerror(err), c->idx, me->rail[0].ifname);
        ctx->rails_bad |= 1u << bit;
        c->pair = 0;
        int e = conn_open(c);
        if (e == 0)
            return;
        err = e;
        tcp_rail_addr(&them->rail[pairs[0][1]], them->port, &to);
        rcoll_sock_addr_str(&to, a, sizeof(a));
    }
    conn_fail(c, err == EMFILE || err == ENFILE ? RCOLL_ERR_SYSTEM
                 : err == ETIMEDOUT              ? RCOLL_ERR_TIMEOUT
                                                 : RCOLL_ERR_REMOTE,
              "tcp: rank %d cannot connect socket %d to it at %s: %s%s%s",
              ctx->p.rank, c->idx, a, strerror(err),
              err == ECONNREFUSED ? " (nobody listens there: it has "
                                    "destroyed the communicator or died)"
                                  : "",
              rcoll_fd_limit_hint(err, hint, sizeof(hint)));
}

/* Starts our connection for socket k of ep over the rail pair it uses (a
 * rail that failed at set-up sends it over the bootstrap's); -1 out of
 * memory. */
static int conn_start(tcp_ep_t *ep, int k, int rejoin)
{
    struct rcoll_tl_ctx *ctx = ep->ctx;
    const tcp_rails_t *me = &ctx->rails[ctx->p.rank];
    uint8_t pairs[TCP_MAX_RAILS][2];
    int np = tcp_rails_pair(me, &ctx->rails[ep->peer], pairs);
    tcp_conn_t *c = calloc(1, sizeof(*c));
    if (!c)
        return -1;
    c->h.cb = conn_event;
    c->fd = -1;
    c->peer = ep->peer;
    c->idx = k;
    c->rejoin = rejoin;
    c->pair = k % np;
    if (c->pair && (ctx->rails_bad >> pairs[c->pair][0] & 1))
        c->pair = 0;
    conn_link(ctx, c);
    ep->socks[k].conn = c;
    int e = conn_open(c);
    if (e)
        conn_retry(c, e);
    return 0;
}

void tcp_lazy_connect(tcp_ep_t *ep)
{
    struct rcoll_tl_ctx *ctx = ep->ctx;
    for (int k = 0; k < ctx->nsocks && !ep->failed; k++) {
        tcp_sock_t *s = &ep->socks[k];
        if (s->fd >= 0 || s->conn || s->ended ||
            (s->await > 0 && rcoll_time_sec() < s->await))
            continue;
        if (tcp_sock_alloc(ctx, s) != 0 || conn_start(ep, k, 0) != 0) {
            tcp_ep_fail_st(ep, RCOLL_ERR_NO_MEMORY, "tcp: no memory for a "
                           "socket to it");
            return;
        }
    }
}

void tcp_lazy_rejoin(tcp_ep_t *ep, int k)
{
    if (conn_start(ep, k, 1) != 0)
        return; /* (no memory: tried again later) */
}

/* Socket s of ep, taken down after a failover, is connected again over
 * fd as connection gen (failback): made new on this side, taken into use,
 * and said. */
static void rejoined(tcp_ep_t *ep, tcp_sock_t *s, int fd, uint32_t gen)
{
    struct rcoll_tl_ctx *ctx = ep->ctx;
    const rcoll_boot_peer_t *pi = &ctx->p.bs->peers[ep->peer];
    if (s->conn) /* ours for it on first use, from before the loss */
        conn_free(s->conn, 0);
    if (tcp_sock_alloc(ctx, s) != 0) {
        close(fd);
        tcp_ep_fail_st(ep, RCOLL_ERR_NO_MEMORY, "tcp: no memory for a "
                       "socket to it");
        return;
    }
    tcp_sock_renew(s, gen);
    rcoll_sock_set_nonblock(fd, 1);
    rcoll_sock_tune(fd);
    if (tcp_sock_setup(ctx, ep->peer, s->idx, fd) != RCOLL_OK) {
        tcp_ep_fail_st(ep, RCOLL_ERR_SYSTEM, rcoll_last_error());
        return;
    }
    char rn[32] = "";
    const tcp_rails_t *me = ctx->rails ? &ctx->rails[ctx->p.rank] : NULL;
    if (me && s->rail >= 0 && s->rail < me->nrails)
        snprintf(rn, sizeof(rn), "%s", me->rail[s->rail].ifname);
    rcoll_warn("tcp: rank %d: rail %s to rank %d (%s pid %d) is back: "
               "socket %d carries its share again", ctx->p.rank,
               rn[0] ? rn : "?", ep->peer, pi->hostname, (int)pi->pid,
               s->idx);
}

/* Our connection c is authenticated and taken: it becomes socket idx. */
static void conn_done(tcp_conn_t *c)
{
    struct rcoll_tl_ctx *ctx = c->ctx;
    tcp_ep_t *ep = ctx->eps[c->peer];
    int fd = c->fd, idx = c->idx, rejoin = c->rejoin;
    uint32_t gen = c->gen;
    conn_free(c, 1);
    if (rejoin && ep->socks[idx].peer_lost == gen + 1) {
        close(fd); /* the peer lost it already: tried again later */
        return;
    }
    if (rejoin) {
        rejoined(ep, &ep->socks[idx], fd, gen);
        return;
    }
    rcoll_sock_tune(fd);
    if (tcp_sock_setup(ctx, ep->peer, idx, fd) != RCOLL_OK)
        tcp_ep_fail_st(ep, RCOLL_ERR_SYSTEM, rcoll_last_error());
    else
        rcoll_debug(RCOLL_SUBSYS_NET, "tcp: rank %d connected socket %d to "
                    "rank %d on first use", ctx->p.rank, idx, ep->peer);
}

/* Reads what is missing of want bytes into c->buf + at: 1 when complete,
 * 0 not yet, -1 closed or failed (errno, 0 for EOF). */
static int conn_read(tcp_conn_t *c, size_t at, size_t want)
{
    while (c->got < want) {
        ssize_t r = recv(c->fd, c->buf + at + c->got, want - c->got,
                         MSG_DONTWAIT);
        if (r > 0) {
            c->got += (size_t)r;
            continue;
        }
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK ||
                      errno == EINTR))
            return 0;
        if (r == 0)
            errno = 0;
        return -1;
    }
    return 1;
}

/* Our connection's steps: connected, the nonce read and our hello sent,
 * the answer read. */
static void conn_out_step(tcp_conn_t *c, uint32_t events)
{
    struct rcoll_tl_ctx *ctx = c->ctx;
    tcp_ep_t *ep = ctx->eps[c->peer];
    const rcoll_tl_params_t *p = &ctx->p;
    if (ep->failed) {
        conn_free(c, 0);
        return;
    }
    if (c->state == CONN_CONNECTING) {
        int err = 0;
        socklen_t el = sizeof(err);
        if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
            return;
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0)
            err = errno;
        if (err) {
            conn_retry(c, err);
            return;
        }
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP,
                                 .data.ptr = &c->h};
        if (epoll_ctl(p->epfd, EPOLL_CTL_MOD, c->fd, &ev) != 0) {
            conn_retry(c, errno);
            return;
        }
        c->state = CONN_NONCE;
        c->got = 0;
        c->deadline = rcoll_time_sec() + p->timeout;
    }
    int r;
    if (c->state == CONN_NONCE) {
        if ((r = conn_read(c, 0, 16)) == 0)
            return;
        if (r < 0) {
            conn_retry(c, errno ? errno : ECONNRESET);
            return;
        }
        if (c->rejoin) {
            /* a number above any either side may have taken (an answer
             * that never reached us may have given the peer the last one
             * we proposed), counted per hello sent */
            tcp_sock_t *s = &ep->socks[c->idx];
            s->gen_tried = (RCOLL_MAX(s->gen, s->gen_tried) + 1) & 0xffffffu;
            c->gen = s->gen_tried;
        }
        tcp_hello_t h = {TCP_HELLO_MAGIC, p->rank, c->idx, ctx->nsocks,
                         p->chunk_size, p->nslots, c->peer, c->gen, 0};
        memcpy(c->buf + 16, &h, sizeof(h));
        c->mac = rcoll_auth_mac(p->secret, c->buf, &h, sizeof(h));
        memcpy(c->buf + 16 + sizeof(h), &c->mac, 8);
        /* 40 bytes on a fresh connection: the socket buffer takes them */
        size_t len = sizeof(h) + 8;
        if (send(c->fd, c->buf + 16, len, MSG_NOSIGNAL | MSG_DONTWAIT) !=
            (ssize_t)len) {
            conn_retry(c, errno ? errno : EAGAIN);
            return;
        }
        c->state = CONN_ANSWER;
        c->got = 0;
    }
    /* exactly the answer's 8 bytes: data may follow it on the stream */
    if ((r = conn_read(c, 0, 8)) == 0)
        return;
    if (r < 0) {
        conn_fail(c, RCOLL_ERR_REMOTE, "tcp: rank %d's socket %d to it "
                  "closed in the middle of the handshake (it died, or was "
                  "out of descriptors?)", p->rank, c->idx);
        return;
    }
    uint64_t ans;
    memcpy(&ans, c->buf, 8);
    if (ans == rcoll_auth_reply(p->secret, c->mac, 1)) {
        conn_done(c);
    } else if (ans == rcoll_auth_reply(p->secret, c->mac, 0)) {
        /* it connects this socket to us itself (the lower rank's wins);
         * if that has not come in a while, ours goes again: a peer that
         * failed meanwhile then refuses it, and we say so */
        if (!c->rejoin) /* (a failback tries again at RCOLL_RAIL_RETRY) */
            ep->socks[c->idx].await = rcoll_time_sec() + TCP_AWAIT_S;
        conn_free(c, 0);
    } else {
        conn_fail(c, RCOLL_ERR_AUTH, "tcp: rank %d's handshake on socket %d "
                  "%s", p->rank, c->idx, ans == RCOLL_AUTH_REFUSED
                      ? "was refused (is the secret the same on all ranks?)"
                      : "got an answer without the job secret");
    }
}

/* An accepted connection's hello, read and checked: sealed with the job's
 * secret, for this rank, from a peer we have a live endpoint for. Returns
 * that endpoint, or NULL (not all there yet, or the connection dropped). */
static tcp_ep_t *conn_in_hello(tcp_conn_t *c, tcp_hello_t *h, uint64_t *mac)
{
    struct rcoll_tl_ctx *ctx = c->ctx;
    const rcoll_tl_params_t *p = &ctx->p;
    int r = conn_read(c, 16, sizeof(*h) + 8);
    if (r == 0)
        return NULL;
    if (r < 0) {
        /* a higher rank that took our connection instead drops its own */
        rcoll_debug(RCOLL_SUBSYS_NET, "tcp: rank %d: a connection closed "
                    "during its handshake", p->rank);
        conn_free(c, 0);
        return NULL;
    }
    memcpy(h, c->buf + 16, sizeof(*h));
    memcpy(mac, c->buf + 16 + sizeof(*h), 8);
    if (*mac != rcoll_auth_mac(p->secret, c->buf, h, sizeof(*h))) {
        uint64_t no = RCOLL_AUTH_REFUSED;
        if (send(c->fd, &no, sizeof(no), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
            /* it learns from the close instead */
        }
        rcoll_warn("tcp: rank %d dropped a connection: it presented a wrong "
                   "secret (another job, or not rcoll)", p->rank);
        conn_free(c, 0);
        return NULL;
    }
    if (h->magic != TCP_HELLO_MAGIC || h->rank < 0 || h->rank >= p->nranks ||
        h->rank == p->rank || h->to != p->rank || h->idx < 0 ||
        h->idx >= ctx->nsocks || !ctx->eps[h->rank]) {
        rcoll_warn("tcp: rank %d dropped a connection: bad hello", p->rank);
        conn_free(c, 0);
        return NULL;
    }
    tcp_ep_t *ep = ctx->eps[h->rank];
    tcp_sock_t *s = &ep->socks[h->idx];
    if (ep->failed || (s->ended && !s->down)) {
        conn_free(c, 0);
        return NULL;
    }
    if (tcp_hello_agree(ctx, h) != RCOLL_OK) {
        char why[512];
        snprintf(why, sizeof(why), "%s", rcoll_last_error());
        conn_free(c, 0);
        tcp_ep_fail_st(ep, RCOLL_ERR_INVALID_ARGUMENT, why);
        return NULL;
    }
    return ep;
}

/* Failback: the lower rank connects a socket taken down again; taken when
 * it is quiet here too and the connection's number is new, else "no" (it
 * tries again later). */
static void conn_in_rejoin(tcp_conn_t *c, tcp_ep_t *ep, tcp_sock_t *s,
                           const tcp_hello_t *h, uint64_t mac)
{
    const rcoll_tl_params_t *p = &c->ctx->p;
    int take = h->rank < p->rank && h->gen > s->gen && h->gen <= 0xffffffu &&
               tcp_sock_quiet(s);
    uint64_t ans = rcoll_auth_reply(p->secret, mac, take);
    int fd = c->fd;
    /* (tests: our yes lost, and the new connection with it, once this
     * side took the new number) */
    int cut = take && rcoll_fault("tcp_rejoin_cut");
    if (!cut && (send(fd, &ans, sizeof(ans), MSG_NOSIGNAL | MSG_DONTWAIT) !=
                     (ssize_t)sizeof(ans) || !take)) {
        conn_free(c, 0);
        return;
    }
    conn_free(c, 1);
    rejoined(ep, s, fd, h->gen);
    if (cut && !ep->failed) {
        shutdown(fd, SHUT_RDWR);
        tcp_sock_end(s, "cut for RCOLL_FAULT=tcp_rejoin_cut", 0);
    }
}

/* A first connection of socket h->idx from its peer: ours for it, if
 * under way, loses unless we are the lower rank ("no" then). */
static void conn_in_take(tcp_conn_t *c, tcp_ep_t *ep, tcp_sock_t *s,
                         const tcp_hello_t *h, uint64_t mac)
{
    struct rcoll_tl_ctx *ctx = c->ctx;
    const rcoll_tl_params_t *p = &ctx->p;
    int take = !(s->conn && p->rank < h->rank);
    uint64_t ans = rcoll_auth_reply(p->secret, mac, take);
    if (send(c->fd, &ans, sizeof(ans), MSG_NOSIGNAL | MSG_DONTWAIT) !=
        (ssize_t)sizeof(ans)) {
        conn_free(c, 0); /* the peer fails its side on the close */
        return;
    }
    if (!take) {
        rcoll_debug(RCOLL_SUBSYS_NET, "tcp: rank %d keeps its own "
                    "connection of socket %d to rank %d (they crossed)",
                    p->rank, h->idx, h->rank);
        conn_free(c, 0);
        return;
    }
    if (s->conn)
        conn_free(s->conn, 0); /* ours loses to the lower rank's */
    if (tcp_sock_alloc(ctx, s) != 0) {
        conn_free(c, 0);
        tcp_ep_fail_st(ep, RCOLL_ERR_NO_MEMORY, "tcp: no memory for a "
                       "socket from it");
        return;
    }
    int fd = c->fd, peer = h->rank;
    conn_free(c, 1);
    s->await = 0;
    rcoll_sock_set_nonblock(fd, 1);
    rcoll_sock_tune(fd);
    if (tcp_sock_setup(ctx, peer, h->idx, fd) != RCOLL_OK)
        tcp_ep_fail_st(ep, RCOLL_ERR_SYSTEM, rcoll_last_error());
    else
        rcoll_debug(RCOLL_SUBSYS_NET, "tcp: rank %d accepted socket %d from "
                    "rank %d on first use", p->rank, h->idx, peer);
}

/* Answers an accepted connection's hello: the socket it is for becomes
 * this connection, unless ours for it is under way and we are the lower
 * rank ("no"). */
static void conn_in_step(tcp_conn_t *c)
{
    tcp_hello_t h;
    uint64_t mac;
    tcp_ep_t *ep = conn_in_hello(c, &h, &mac);
    if (!ep)
        return;
    tcp_sock_t *s = &ep->socks[h.idx];
    if (s->down) {
        conn_in_rejoin(c, ep, s, &h, mac);
        return;
    }
    if (s->fd >= 0) {
        /* a higher rank's connection that lost to ours: its hello was on
         * the way when our answer came (it has closed it since) */
        rcoll_debug(RCOLL_SUBSYS_NET, "tcp: rank %d dropped a second "
                    "connection of socket %d from rank %d", c->ctx->p.rank,
                    h.idx, h.rank);
        conn_free(c, 0);
        return;
    }
    conn_in_take(c, ep, s, &h, mac);
}

static void conn_event(rcoll_ev_handler_t *h, uint32_t events)
{
    tcp_conn_t *c = (tcp_conn_t *)h;
    if (c->state == CONN_DEAD)
        return;
    if (c->state == CONN_HELLO)
        conn_in_step(c);
    else
        conn_out_step(c, events);
}

/* The listener is readable: each connection gets its nonce at once and
 * waits for its hello in the engine's set. */
static void lazy_accept(rcoll_ev_handler_t *h, uint32_t events)
{
    struct rcoll_tl_ctx *ctx =
        (struct rcoll_tl_ctx *)((char *)h - offsetof(struct rcoll_tl_ctx,
                                                     lh));
    (void)events;
    while (ctx->listen_fd >= 0) {
        int fd = accept4(ctx->listen_fd, NULL, NULL,
                         SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            int e = errno;
            char hint[320], msg[512];
            if (e != EMFILE && e != ENFILE)
                return; /* EAGAIN: all taken; others: the peer gave up */
            /* the listener would stay readable (a busy loop) and the
             * connecting rank would wait to its timeout: fail now */
            /* closed, so that connecting peers are refused at once
             * rather than wait for a nonce to their timeout */
            close(ctx->listen_fd);
            ctx->listen_fd = -1;
            snprintf(msg, sizeof(msg), "connections to rank %d cannot be "
                     "accepted: accept: %s%s", ctx->p.rank, strerror(e),
                     rcoll_fd_limit_hint(e, hint, sizeof(hint)));
            ctx->p.ev->peer_failed(ctx->p.ev->arg, -1, RCOLL_ERR_SYSTEM, msg);
            return;
        }
        tcp_conn_t *c = calloc(1, sizeof(*c));
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP};
        if (!c || rcoll_random_bytes(c->buf, 16) != RCOLL_OK ||
            send(fd, c->buf, 16, MSG_NOSIGNAL | MSG_DONTWAIT) != 16) {
            free(c);
            close(fd);
            continue;
        }
        c->h.cb = conn_event;
        c->fd = fd;
        c->state = CONN_HELLO;
        c->peer = -1;
        c->deadline = rcoll_time_sec() + TCP_HELLO_S;
        ev.data.ptr = &c->h;
        if (epoll_ctl(ctx->p.epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            free(c);
            close(fd);
            continue;
        }
        conn_link(ctx, c);
    }
}

rcoll_status_t tcp_lazy_listen(struct rcoll_tl_ctx *ctx)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &ctx->lh};
    ctx->lh.cb = lazy_accept;
    rcoll_sock_set_nonblock(ctx->listen_fd, 1);
    if (epoll_ctl(ctx->p.epfd, EPOLL_CTL_ADD, ctx->listen_fd, &ev) != 0)
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "tcp: epoll_ctl "
                                "(listener): %s", strerror(errno));
    return RCOLL_OK;
}

static void conn_reap(struct rcoll_tl_ctx *ctx)
{
    while (ctx->dead) {
        tcp_conn_t *c = ctx->dead;
        ctx->dead = c->next;
        free(c);
    }
}

/* A failback's handshake whose connection the peer said it lost (it took
 * it, and the rail failed again before our answer came). */
static int rejoin_lost(const struct rcoll_tl_ctx *ctx, const tcp_conn_t *c)
{
    return c->state != CONN_HELLO && c->rejoin && c->gen &&
           ctx->eps[c->peer]->socks[c->idx].peer_lost == c->gen + 1;
}

/* Handshakes past their deadline, or of a peer that failed, or failbacks
 * the peer lost. Ending one may end others (a peer that fails), so the
 * scan starts over after each: each step ends the handshake or moves its
 * deadline on. */
void tcp_lazy_tick(struct rcoll_tl_ctx *ctx)
{
    double now = rcoll_time_sec();
    conn_reap(ctx); /* no event batch is being dispatched now */
    for (;;) {
        tcp_conn_t *c = ctx->conns;
        while (c && now < c->deadline && !rejoin_lost(ctx, c) &&
               (c->state == CONN_HELLO || !ctx->eps[c->peer]->failed))
            c = c->next;
        if (!c)
            break;
        if (rejoin_lost(ctx, c)) {
            conn_free(c, 0); /* tried again later */
        } else if (c->state != CONN_HELLO && ctx->eps[c->peer]->failed) {
            conn_free(c, 0); /* the peer failed: no retry, no warning */
        } else if (c->state == CONN_HELLO) {
            rcoll_warn("tcp: rank %d dropped a connection: no valid hello "
                       "within %.0f s (half-open or silent)", ctx->p.rank,
                       TCP_HELLO_S);
            conn_free(c, 0);
        } else if (c->state == CONN_CONNECTING) {
            conn_retry(c, ETIMEDOUT); /* another rail, or the peer fails */
        } else {
            conn_fail(c, RCOLL_ERR_TIMEOUT, "tcp: rank %d's socket %d to it "
                      "got no answer to its handshake within RCOLL_TIMEOUT",
                      ctx->p.rank, c->idx);
        }
    }
}

void tcp_lazy_fini(struct rcoll_tl_ctx *ctx)
{
    while (ctx->conns)
        conn_free(ctx->conns, 0);
    conn_reap(ctx);
}
