/* The TCP transport's context (tcp.h): sockets to every peer set up
 * (listen, accept from lower ranks, connect to higher ones, hello) and
 * torn down (goodbye or abort), the lanes and counters, the ops table. */
#include "transport/tcp/tcp.h"

static int tcp_usable(char *why, size_t len)
{
    (void)why; /* TCP works wherever sockets do */
    (void)len;
    return 1;
}


/* ---- setup and teardown ---- */

static void tcp_ep_free(tcp_ep_t *ep, int nsocks)
{
    if (!ep)
        return;
    for (int i = 0; i < nsocks; i++) {
        tcp_sock_t *s = &ep->socks[i];
        for (int j = 0; j < s->nalloc; j++)
            free(s->pool_all[j]);
        free(s->ring);
        free(s->slot_off);
        free(s->slot_ring);
        free(s->tx_ring);
        free(s->slot_big);
        free(s->slot_isbig);
        free(s->pool);
        free(s->pool_all);
        free(s->tx_isbig);
        free(s->slot_pay);
        free(s->slot_hdr);
        free(s->slot_lseq);
        tcp_keep_free(s);
        for (int j = 0; s->txq && j < s->txq_count; j++)
            free(s->txq[(s->txq_head + j) % s->txq_cap].own);
        free(s->txq);
        free(s->rb);
    }
    tcp_fo_free(ep);
    free(ep->socks);
    free(ep);
}

/* A socket before it is connected: no fd, no buffers yet. */
static void tcp_sock_shell(tcp_ep_t *ep, tcp_sock_t *s, int k)
{
    s->h.cb = tcp_fo_event;
    s->ep = ep;
    s->fd = -1;
    s->closed = 1;
    s->idx = k;
    s->rail = -1;
}

static void tcp_ctx_destroy(rcoll_tl_ctx_t *ctx, int abort,
                            const char *reason);

/* A socket with its buffers, not connected: -1 out of memory
 * (tcp_ep_free frees what was allocated). */
static int tcp_sock_init(struct rcoll_tl_ctx *ctx, tcp_ep_t *ep,
                         tcp_sock_t *s, int k)
{
    tcp_sock_shell(ep, s, k);
    return tcp_sock_alloc(ctx, s);
}

/* An endpoint with its sockets for every peer this rank talks to; their
 * buffers too unless they connect on first use. */
static rcoll_status_t tcp_alloc_eps(struct rcoll_tl_ctx *ctx,
                                    const uint8_t *use)
{
    for (int i = 0; i < ctx->p.nranks; i++) {
        if (i == ctx->p.rank || !use[i])
            continue;
        tcp_ep_t *ep = calloc(1, sizeof(*ep));
        if (!ep || !(ep->socks = calloc((size_t)ctx->nsocks,
                                        sizeof(tcp_sock_t)))) {
            free(ep);
            return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "tcp: no memory");
        }
        ctx->eps[i] = ep;
        ep->ctx = ctx;
        ep->peer = i;
        ep->fo = -1; /* known once the rails are */
        for (int k = 0; k < ctx->nsocks; k++) {
            tcp_sock_shell(ep, &ep->socks[k], k);
            if (!ctx->lazy && tcp_sock_init(ctx, ep, &ep->socks[k], k) != 0)
                return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "tcp: no memory");
        }
    }
    return RCOLL_OK;
}

/* Finds this rank's rails and listens on them (on the bootstrap's address
 * when it has one rail, else on every address of its family: a peer
 * connects to any of its rails at one port); every rank's rails then go
 * to ctx->rails. */
static rcoll_status_t tcp_listen_exchange(struct rcoll_tl_ctx *ctx)
{
    const rcoll_tl_params_t *p = &ctx->p;
    tcp_rails_t *me = &ctx->rails[p->rank];
    rcoll_sockaddr_t at;
    char a[512];
    rcoll_status_t st;
    tcp_rails_find(&p->bs->peers[p->rank].boot_addr, rcoll_config.tcp_rails,
                   me);
    tcp_rail_addr(&me->rail[0], 0, &at);
    if (me->nrails > 1) {
        memset(&at, 0, sizeof(at));
        at.sa.sa_family = me->rail[0].family == 4 ? AF_INET : AF_INET6;
        if (at.sa.sa_family == AF_INET6)
            at.sin6.sin6_addr = in6addr_any;
    }
    if ((st = rcoll_sock_listen(&at, 0, &ctx->listen_fd)) != RCOLL_OK)
        return st;
    me->port = ntohs(at.sa.sa_family == AF_INET ? at.sin.sin_port
                                                : at.sin6.sin6_port);
    if ((st = rcoll_bootstrap_allgather(p->bs, ctx->rails,
                                        sizeof(*ctx->rails))) != RCOLL_OK)
        return st;
    tcp_rails_str(me, a, sizeof(a));
    rcoll_debug(RCOLL_SUBSYS_NET, "tcp: rank %d listens at port %u, %d "
                "sockets per peer, rails: %s", p->rank, me->port, ctx->nsocks,
                a);
    return RCOLL_OK;
}

/* The lower ranks whose connections have not all arrived: the culprits
 * when the accept loop times out. */
static void tcp_missing_lower(const struct rcoll_tl_ctx *ctx,
                              const uint8_t *use, char *miss, size_t len)
{
    size_t off = 0;
    miss[0] = 0;
    for (int q = 0; q < ctx->p.rank && off < len - 16; q++) {
        if (!use[q] || !ctx->eps[q])
            continue;
        for (int k = 0; k < ctx->nsocks; k++)
            if (ctx->eps[q]->socks[k].fd < 0) {
                off += (size_t)snprintf(miss + off, len - off,
                                        " rank %d (%s pid %d)", q,
                                        ctx->p.bs->peers[q].hostname,
                                        (int)ctx->p.bs->peers[q].pid);
                break;
            }
    }
}

/* A bootstrap ring neighbour's socket became readable while we wait for
 * connections. EOF or a reset from a lower rank whose sockets to us have
 * not all come means that rank gave up the set-up (it failed or died: it
 * cannot have finished without connecting to us), so we fail now rather
 * than at RCOLL_TIMEOUT, and our own exit tells our higher neighbour the
 * same (the failure goes up the ring). Anything else (data: the
 * neighbour's next bootstrap step; a higher rank, which we call later and
 * find gone then; a rank done with us) is not watched any more (*fd =
 * -1). */
static rcoll_status_t tcp_neighbour_check(const struct rcoll_tl_ctx *ctx,
                                          const uint8_t *use, int *fd,
                                          int who)
{
    const rcoll_tl_params_t *p = &ctx->p;
    char c;
    int waiting = 0;
    ssize_t r = recv(*fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    for (int k = 0; who < p->rank && use[who] && k < ctx->nsocks; k++)
        waiting |= ctx->eps[who]->socks[k].fd < 0;
    if (r > 0 || (r < 0 && (errno == EAGAIN || errno == EINTR)) || !waiting) {
        *fd = -1;
        return RCOLL_OK;
    }
    return rcoll__set_error(RCOLL_ERR_REMOTE, "tcp: rank %d: rank %d (%s pid "
                            "%d) left the set-up (its bootstrap connection "
                            "%s): it failed or died", p->rank, who,
                            p->bs->peers[who].hostname,
                            (int)p->bs->peers[who].pid,
                            r == 0 ? "closed" : strerror(errno));
}

/* Accepts every socket of every lower peer (`lower` of them). */
static rcoll_status_t tcp_accept_lower(struct rcoll_tl_ctx *ctx,
                                       const uint8_t *use, int lower,
                                       double deadline)
{
    const rcoll_tl_params_t *p = &ctx->p;
    int r = p->rank;
    rcoll_status_t st = RCOLL_OK;
    rcoll_acceptor_t *acc = malloc(sizeof(*acc));
    if (!acc)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "tcp: no memory");
    rcoll_acceptor_init(acc, ctx->listen_fd, p->secret, sizeof(tcp_hello_t),
                        "tcp");
    /* the bootstrap ring's neighbours: whether they are still in it */
    int nb[2] = {p->bs->prev_fd, p->bs->next_fd};
    int who[2] = {(r + p->nranks - 1) % p->nranks, (r + 1) % p->nranks};
    for (int got = 0; got < lower * ctx->nsocks;) {
        int fd, ready, extra[2], ne = 0, widx[2];
        tcp_hello_t h;
        for (int i = 0; i < 2; i++)
            if (nb[i] >= 0 && who[i] != r) {
                widx[ne] = i;
                extra[ne++] = nb[i];
            }
        st = rcoll_acceptor_next(acc, deadline, &h, &fd, extra, ne, &ready);
        if (st == RCOLL_INPROGRESS) {
            int i = widx[ready];
            if ((st = tcp_neighbour_check(ctx, use, &nb[i], who[i])) !=
                RCOLL_OK)
                break;
            continue;
        }
        if (st != RCOLL_OK) {
            char miss[256];
            tcp_missing_lower(ctx, use, miss, sizeof(miss));
            st = rcoll__set_error(st, "tcp: rank %d: only %d of %d "
                                  "connections from lower ranks arrived; "
                                  "missing from:%s: %s", r, got,
                                  lower * ctx->nsocks, miss,
                                  rcoll_last_error());
            break;
        }
        if (h.magic != TCP_HELLO_MAGIC || h.rank < 0 || h.rank >= r ||
            !use[h.rank] || h.idx < 0 || h.idx >= ctx->nsocks ||
            h.to != r) {
            rcoll_warn("tcp: rank %d dropped a connection: bad hello", r);
            close(fd);
            continue;
        }
        if ((st = tcp_hello_agree(ctx, &h)) != RCOLL_OK) {
            close(fd);
            break;
        }
        if ((st = tcp_sock_setup(ctx, h.rank, h.idx, fd)) != RCOLL_OK)
            break;
        got++;
    }
    rcoll_acceptor_fini(acc);
    free(acc);
    return st;
}

/* Connects socket k to `peer` over rail pair k (mod the pairs). A rail
 * of ours other than the bootstrap's that does not connect within a few
 * seconds is named in a warning and left for the rest of the set-up (one
 * wait, not one per peer), and the socket goes over the bootstrap's pair
 * instead. */
static rcoll_status_t tcp_connect_one(struct rcoll_tl_ctx *ctx, int peer,
                                      int k, const tcp_hello_t *h,
                                      double deadline, int *fd)
{
    const rcoll_tl_params_t *p = &ctx->p;
    const tcp_rails_t *me = &ctx->rails[p->rank], *them = &ctx->rails[peer];
    uint8_t pairs[TCP_MAX_RAILS][2];
    int np = tcp_rails_pair(me, them, pairs), pi = k % np;
    rcoll_sockaddr_t to, from;
    char a[128];
    rcoll_status_t st;
    /* its listener was up before the address exchange: refused means it
     * died (1 s covers a full accept queue) */
    double refused = RCOLL_MIN(deadline, rcoll_time_sec() + 1.0);
    if (pi && !(ctx->rails_bad >> pairs[pi][0] & 1)) {
        tcp_rail_addr(&them->rail[pairs[pi][1]], them->port, &to);
        tcp_rail_addr(&me->rail[pairs[pi][0]], 0, &from);
        double until = RCOLL_MIN(deadline, rcoll_time_sec() + 4.0);
        st = rcoll_sock_connect_from(&to, &from, until, refused, fd);
        if (st == RCOLL_OK) {
            /* the handshake too: an address that reached another process
             * (another job, another service) falls back like a timeout */
            st = rcoll_sock_auth_connect(*fd, p->secret, h, sizeof(*h), until);
            if (st == RCOLL_OK)
                return st;
            close(*fd);
        }
        ctx->rails_bad |= 1u << pairs[pi][0];
        rcoll_warn("tcp: rank %d: rail %s to rank %d at %s failed (%s): "
                   "socket %d goes over rail %s, and so will the sockets "
                   "to later peers", p->rank,
                   me->rail[pairs[pi][0]].ifname, peer,
                   rcoll_sock_addr_str(&to, a, sizeof(a)), rcoll_last_error(),
                   k, me->rail[0].ifname);
        refused = RCOLL_MIN(deadline, rcoll_time_sec() + 1.0);
    }
    tcp_rail_addr(&them->rail[0], them->port, &to);
    st = rcoll_sock_connect_peer(&to, deadline, refused, fd);
    if (st == RCOLL_OK) {
        st = rcoll_sock_auth_connect(*fd, p->secret, h, sizeof(*h), deadline);
        if (st != RCOLL_OK)
            close(*fd);
    }
    if (st != RCOLL_OK)
        return rcoll__set_error(st, "tcp: rank %d cannot connect to rank %d "
                                "at %s: %s", p->rank, peer,
                                rcoll_sock_addr_str(&to, a, sizeof(a)),
                                rcoll_last_error());
    return st;
}

/* Connects every socket to every higher peer. */
static rcoll_status_t tcp_connect_higher(struct rcoll_tl_ctx *ctx,
                                         const uint8_t *use, double deadline)
{
    const rcoll_tl_params_t *p = &ctx->p;
    int r = p->rank;
    rcoll_status_t st;
    for (int peer = r + 1; peer < p->nranks; peer++) {
        for (int k = 0; use[peer] && k < ctx->nsocks; k++) {
            int fd;
            tcp_hello_t h = {TCP_HELLO_MAGIC, r, k, ctx->nsocks,
                             p->chunk_size, p->nslots, peer, 0, 0};
            if ((st = tcp_connect_one(ctx, peer, k, &h, deadline, &fd)) !=
                RCOLL_OK)
                return st;
            if ((st = tcp_sock_setup(ctx, peer, k, fd)) != RCOLL_OK)
                return st;
        }
    }
    return RCOLL_OK;
}

/* RCOLL_TCP_CONNECT: 1 connections on first use, 0 at init, -1 not a mode
 * (auto: on first use from 33 ranks) */
static int tcp_connect_lazy(int n)
{
    const char *mode = rcoll_config.tcp_connect ? rcoll_config.tcp_connect
                                                : "auto";
    if (!strcmp(mode, "lazy") || (!strcmp(mode, "auto") && n > 32))
        return 1;
    return !strcmp(mode, "eager") || !strcmp(mode, "auto") ? 0 : -1;
}

static int tcp_fd_lanes(int n)
{
    return tcp_connect_lazy(n) == 1 ? rcoll_config.tcp_nsocks : 0;
}

/* Sockets to every peer of this rank: listen and exchange addresses, then
 * a full mesh among the peers, accepting everything from lower ranks
 * before connecting to higher ones (no cycle, so no deadlock). */
static rcoll_status_t tcp_ctx_create(const rcoll_tl_params_t *p,
                                     rcoll_tl_ctx_t **ctx_p,
                                     rcoll_tl_ep_t **eps)
{
    struct rcoll_tl_ctx *ctx = calloc(1, sizeof(*ctx));
    rcoll_status_t st;
    int n = p->nranks, r = p->rank;
    double deadline = rcoll_time_sec() + p->timeout;
    uint8_t *use = NULL; /* our peers */

    if (!ctx)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "tcp: no memory");
    ctx->p = *p;
    memcpy(ctx->secret, p->secret, sizeof(ctx->secret));
    ctx->p.secret = ctx->secret;
    ctx->nsocks = rcoll_config.tcp_nsocks;
    ctx->nbig = p->nslots;
    ctx->nslots = tcp_window(p->nslots, n, ctx->nsocks);
    tcp_ring_sizes(p->nslots, n, ctx->nsocks, &ctx->small, &ctx->ring_size);
    ctx->listen_fd = -1;
    ctx->eps = calloc((size_t)n, sizeof(*ctx->eps));
    ctx->rails = calloc((size_t)n, sizeof(*ctx->rails));
    if (!ctx->eps || !ctx->rails) {
        st = rcoll__set_error(RCOLL_ERR_NO_MEMORY, "tcp: no memory");
        goto err;
    }
    if (!(use = rcoll_tl_row(p))) {
        st = rcoll__set_error(RCOLL_ERR_NO_MEMORY, "tcp: no memory");
        goto err;
    }
    if ((ctx->lazy = tcp_connect_lazy(n)) < 0) {
        st = rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT, "tcp: "
                              "RCOLL_TCP_CONNECT=%s: use auto, eager or lazy",
                              rcoll_config.tcp_connect);
        goto err;
    }
    if (ctx->lazy) {
        /* nothing connects now: the listener waits in the engine's set */
        if ((st = tcp_alloc_eps(ctx, use)) != RCOLL_OK ||
            (st = tcp_listen_exchange(ctx)) != RCOLL_OK ||
            (st = tcp_lazy_listen(ctx)) != RCOLL_OK)
            goto err;
        for (int i = 0; i < n; i++)
            eps[i] = (rcoll_tl_ep_t *)ctx->eps[i];
        free(use);
        *ctx_p = ctx;
        return RCOLL_OK;
    }
    int lower = 0;
    for (int i = 0; i < r; i++)
        lower += use[i];
    if ((st = tcp_alloc_eps(ctx, use)) != RCOLL_OK ||
        (st = tcp_listen_exchange(ctx)) != RCOLL_OK ||
        (st = tcp_accept_lower(ctx, use, lower, deadline)) != RCOLL_OK)
        goto err;
    if ((st = tcp_connect_higher(ctx, use, deadline)) != RCOLL_OK)
        goto err;
    /* every peer is connected: the listener has done its work (left open,
     * a stranger could still connect to it for the communicator's life),
     * unless a peer's sockets may fail over - a lost one is connected
     * again through it (failback, tcp_lazy.c) */
    int fo = 0;
    for (int i = 0; i < n && !fo; i++)
        fo = ctx->eps[i] && tcp_ep_fo(ctx->eps[i]) == 1;
    if (fo && rcoll_config.rail_retry > 0) {
        if ((st = tcp_lazy_listen(ctx)) != RCOLL_OK)
            goto err;
    } else {
        close(ctx->listen_fd);
        ctx->listen_fd = -1;
    }
    for (int i = 0; i < n; i++)
        eps[i] = (rcoll_tl_ep_t *)ctx->eps[i];
    free(use);
    *ctx_p = ctx;
    return RCOLL_OK;
err:
    free(use);
    return rcoll_tl_create_failed(ctx, tcp_ctx_destroy, st);
}

static void tcp_ctx_destroy(rcoll_tl_ctx_t *ctx, int abort,
                            const char *reason)
{
    size_t rlen = reason ? RCOLL_MIN(strlen(reason), RCOLL_TL_REASON - 1) : 0;
    int n = ctx->p.nranks;

    /* a rail lost now would take the messages the peer's kernel has not
     * acknowledged with it: wait for them (as ib_ctx_destroy does), at
     * most min(RCOLL_TIMEOUT, 30 s) */
    if (!abort)
        tcp_fo_settle(ctx, rcoll_time_sec() + RCOLL_MIN(30.0, ctx->p.timeout));
    double deadline = rcoll_time_sec() + RCOLL_MIN(2.0, ctx->p.timeout);
    tcp_lazy_fini(ctx);
    /* goodbye (or abort notice) on every open socket, then wait briefly for
     * the peers to close their side, so no data of ours is cut off */
    for (int i = 0; ctx->eps && i < n; i++) {
        tcp_ep_t *ep = ctx->eps[i];
        for (int k = 0; ep && k < ctx->nsocks; k++) {
            tcp_sock_t *s = &ep->socks[k];
            if (s->closed)
                continue;
            tcp_wire_t w = {.type = abort ? TCP_ABORT : TCP_BYE};
            w.hdr.len = abort ? (uint32_t)rlen : 0;
            /* flush what is queued, then the goodbye */
            rcoll_sock_set_nonblock(s->fd, 1);
            while (s->txq_count && !s->closed && rcoll_time_sec() < deadline) {
                tcp_sock_write(s);
                if (s->txq_count) {
                    struct pollfd pf = {.fd = s->fd, .events = POLLOUT};
                    poll(&pf, 1, 10);
                }
            }
            if (s->closed)
                continue;
            if (rcoll_sock_send_all(s->fd, &w, sizeof(w), deadline) != RCOLL_OK ||
                (w.hdr.len && rcoll_sock_send_all(s->fd, reason, w.hdr.len,
                                                  deadline) != RCOLL_OK))
                continue;
            shutdown(s->fd, SHUT_WR);
        }
    }
    for (int i = 0; ctx->eps && i < n; i++) {
        tcp_ep_t *ep = ctx->eps[i];
        for (int k = 0; ep && k < ctx->nsocks; k++) {
            tcp_sock_t *s = &ep->socks[k];
            if (s->closed)
                continue;
            char junk[4096];
            for (;;) {
                ssize_t r = recv(s->fd, junk, sizeof(junk), MSG_DONTWAIT);
                if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
                    break;
                if (r > 0)
                    continue;
                double left = deadline - rcoll_time_sec();
                if (left <= 0)
                    break;
                struct pollfd pf = {.fd = s->fd, .events = POLLIN};
                poll(&pf, 1, (int)(left * 1000) + 1);
            }
            tcp_sock_close(s);
        }
        tcp_ep_free(ep, ctx->nsocks);
    }
    if (ctx->listen_fd >= 0)
        close(ctx->listen_fd);
    free(ctx->eps);
    free(ctx->rails);
    free(ctx);
}

static size_t tcp_peer_bytes(size_t chunk, int nslots, char *what,
                             size_t len)
{
    int k = rcoll_config.tcp_nsocks;
    snprintf(what, len, "%d socket(s) x (%d receive buffers of the chunk "
             "size + a %u-%u KiB ring for messages up to 4-16 KiB, the "
             "bigger in smaller communicators, %u KiB per rank in all up to "
             "17 ranks; malloc, on first use); sends go from the caller's "
             "buffer, or, to a peer over two rails or more, from copies "
             "(as much again: RCOLL_RAIL_FAILOVER); per peer connected: every TCP peer, or from 33 ranks "
             "only those it talks to (RCOLL_TCP_CONNECT)", k, nslots,
             TCP_RING_MUL * (unsigned)nslots * TCP_SMALL / 1024,
             TCP_RING_MUL * (unsigned)nslots * TCP_SMALL_MAX / 1024,
             TCP_RING_BUDGET / 1024);
    /* (the ring at its biggest: a bound, over by at most 3 x 64 KiB per
     * socket in a communicator of more than 5 ranks) */
    return (size_t)k * (size_t)nslots *
           (chunk + (size_t)TCP_RING_MUL * TCP_SMALL_MAX);
}

static int tcp_lanes(char *what, size_t len)
{
    snprintf(what, len, "sockets per peer (RCOLL_TCP_NSOCKS), message i on "
             "socket i mod %d; socket k over the k-th (mod their number) "
             "pair of rails in one subnet, of up to RCOLL_TCP_RAILS=%d "
             "interfaces per rank", rcoll_config.tcp_nsocks,
             rcoll_config.tcp_rails);
    return rcoll_config.tcp_nsocks;
}

/* Each rail of ours with the bytes its sockets carried, every peer's. */
static void tcp_rails_stats(rcoll_tl_ctx_t *ctx, FILE *f)
{
    const tcp_rails_t *me = ctx->rails ? &ctx->rails[ctx->p.rank] : NULL;
    rcoll_lane_stats_t sum[TCP_MAX_RAILS + 1] = {{0}};
    int nsock[TCP_MAX_RAILS + 1] = {0};
    if (!me)
        return;
    for (int i = 0; ctx->eps && i < ctx->p.nranks; i++) {
        tcp_ep_t *ep = ctx->eps[i];
        for (int k = 0; ep && k < ctx->nsocks; k++) {
            int r = ep->socks[k].rail < 0 ? TCP_MAX_RAILS : ep->socks[k].rail;
            rcoll_lanes_sum(&sum[r], &ep->socks[k].st);
            nsock[r]++;
        }
    }
    for (int r = 0; r <= TCP_MAX_RAILS; r++) {
        char a[128] = "another address";
        if (r < me->nrails) {
            tcp_rails_t one = {.nrails = 1, .rail = {me->rail[r]}};
            tcp_rails_str(&one, a, sizeof(a));
        } else if (!nsock[r]) {
            continue;
        }
        fprintf(f, "rcoll:     rail %d (%s): %d sockets, sent %llu bytes, "
                "received %llu bytes\n", r < me->nrails ? r : -1,
                a + (r < me->nrails ? 2 : 0), nsock[r],
                (unsigned long long)sum[r].tx_bytes,
                (unsigned long long)sum[r].rx_bytes);
    }
}

/* rcoll-info -t: the rails a rank here would have (rail 0: the address
 * rcoll_sock_pick_addr picks with no root to route to, as for a job
 * whose bootstrap leaves through it). */
static void tcp_describe(FILE *f)
{
    rcoll_sockaddr_t a;
    char ifname[64], s[512];
    tcp_rails_t rs;
    if (rcoll_sock_pick_addr(NULL, &a, ifname, sizeof(ifname)) != RCOLL_OK) {
        fprintf(f, "         rails: none (%s)\n", rcoll_last_error());
        return;
    }
    tcp_rails_find(&a, rcoll_config.tcp_rails, &rs);
    tcp_rails_str(&rs, s, sizeof(s));
    fprintf(f, "         rails here: %s\n", s);
}

/* The fewest rail pairs of any two ranks this transport joins, up to the
 * sockets per peer: every rank has every rank's rails and the same pair
 * answers, so all answer the same. Past 4,096 ranks (n^2 pairings) the
 * fewest rails any rank has stands in for it. */
static int tcp_paths(rcoll_tl_ctx_t *ctx)
{
    int n = ctx->p.nranks, np = RCOLL_MIN(TCP_MAX_RAILS, ctx->nsocks);
    uint8_t pairs[TCP_MAX_RAILS][2];
    for (int a = 0; ctx->rails && a < n && np > 1; a++) {
        if (n > 4096) {
            np = RCOLL_MIN(np, ctx->rails[a].nrails);
            continue;
        }
        for (int b = a + 1; b < n && np > 1; b++)
            if (rcoll_tl_pair(&ctx->p, a, b))
                np = RCOLL_MIN(np, tcp_rails_pair(&ctx->rails[a],
                                                  &ctx->rails[b], pairs));
    }
    /* the last use of the pairs: setup's state ends here */
    ctx->p.pair = NULL;
    ctx->p.pair_arg = NULL;
    return RCOLL_MAX(1, np);
}

static void tcp_stats(rcoll_tl_ctx_t *ctx, FILE *f)
{
    rcoll_lane_stats_t sum[64] = {{0}};
    int n = RCOLL_MIN(ctx->nsocks, 64), peers = 0, socks = 0;
    for (int i = 0; ctx->eps && i < ctx->p.nranks; i++) {
        tcp_ep_t *ep = ctx->eps[i];
        peers += ep != NULL;
        for (int k = 0; ep && k < n; k++) {
            rcoll_lanes_sum(&sum[k], &ep->socks[k].st);
            socks += ep->socks[k].fd >= 0;
        }
    }
    fprintf(f, "rcoll:     %d lanes per peer (sockets), %d peers, %d slots "
            "per socket, %zu bytes received in place; connected %s: %d "
            "sockets\n", ctx->nsocks, peers, ctx->nslots,
            (size_t)__atomic_load_n(&ctx->placed_bytes, __ATOMIC_RELAXED),
            ctx->lazy ? "on first use" : "at init", socks);
    rcoll_lanes_print(f, "socket k of every peer", n, sum);
    tcp_rails_stats(ctx, f);
    fprintf(f, "rcoll:     failover (RCOLL_RAIL_FAILOVER=%d): %llu sockets "
            "lost, %llu connected again, %llu messages sent again, %llu "
            "received out of order and set aside\n",
            rcoll_config.rail_failover,
            (unsigned long long)__atomic_load_n(&ctx->rails_down,
                                                __ATOMIC_RELAXED),
            (unsigned long long)__atomic_load_n(&ctx->rails_up,
                                                __ATOMIC_RELAXED),
            (unsigned long long)__atomic_load_n(&ctx->resent,
                                                __ATOMIC_RELAXED),
            (unsigned long long)__atomic_load_n(&ctx->taken_aside,
                                                __ATOMIC_RELAXED));
}

/* Sends: a socket not connected yet (connections on first use) is
 * connected first, the send waiting as for a credit. */
static rcoll_status_t tcp_send_op(rcoll_tl_ep_t *tep,
                                  const rcoll_msg_hdr_t *hdr,
                                  const void *payload, void *cookie,
                                  int flags, size_t xfer)
{
    tcp_ep_t *ep = (tcp_ep_t *)tep;
    tcp_sock_t *s = tcp_tx_sock(ep);
    if (s->fd < 0 && ep->ctx->lazy && !ep->failed && !s->ended) {
        tcp_lazy_connect(ep);
        if (ep->failed)
            return rcoll__set_error(RCOLL_ERR_REMOTE, "%s", ep->fail_msg);
        rcoll_lane_add(&s->st.tx_waits, 1);
        return RCOLL_INPROGRESS;
    }
    return tcp_fo_send(tep, hdr, payload, cookie, flags, xfer);
}

/* Handshakes on first use time out and their ends are freed on every
 * turn of the engine, busy (progress) or idle. */
static int tcp_progress(rcoll_tl_ctx_t *ctx)
{
    if (ctx->conns || ctx->dead)
        tcp_lazy_tick(ctx);
    tcp_fo_tick(ctx);
    return 0;
}

static int tcp_idle_op(rcoll_tl_ctx_t *ctx)
{
    tcp_progress(ctx);
    return tcp_idle(ctx);
}

const rcoll_tl_ops_t rcoll_tl_tcp_ops = {
    .name = "tcp",
    .doc = "TCP sockets (any network; RCOLL_TCP_NSOCKS per peer)",
    .usable = tcp_usable,
    .local_only = 0,
    .fd_lanes = tcp_fd_lanes,
    .ctx_create = tcp_ctx_create,
    .send = tcp_send_op,
    .recv_peek = tcp_fo_recv_peek,
    .recv_release = tcp_fo_recv_release,
    .recv_full = tcp_recv_full,
    .lanes = tcp_lanes,
    .paths = tcp_paths,
    .describe = tcp_describe,
    .stats = tcp_stats,
    .recv_place = tcp_recv_place,
    .recv_unplace = tcp_recv_unplace,
    .send_revoke = tcp_send_revoke,
    .progress = tcp_progress,
    .idle = tcp_idle_op,
    .ctx_destroy = tcp_ctx_destroy,
    .peer_bytes = tcp_peer_bytes,
};
