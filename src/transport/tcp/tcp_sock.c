/* The TCP transport's sockets taken into use, by both set-ups (tcp_ctx.c
 * at init, tcp_lazy.c on first use): the window and ring sizes every rank
 * works out alike, a socket's buffers, its options and epoll entry, and
 * the check that a peer's hello has our settings. */
#include "transport/tcp/tcp.h"

/* Slots per socket (TCP_SLOT_BUDGET); every rank computes the same */
int tcp_window(int nslots, int nranks, int nsocks)
{
    long base = (long)TCP_SLOT_MUL * nslots;
    long w = TCP_SLOT_BUDGET / ((long)RCOLL_MAX(nranks - 1, 1) *
                                RCOLL_MAX(nsocks, 1));
    return (int)RCOLL_MAX(base, RCOLL_MIN(w, TCP_SLOT_MAX));
}

/* The ring's threshold and size (TCP_RING_BUDGET); every rank computes
 * the same */
void tcp_ring_sizes(int nslots, int nranks, int nsocks,
                           size_t *small, size_t *ring)
{
    size_t per = (size_t)TCP_RING_MUL * (size_t)RCOLL_MAX(nslots, 1);
    size_t b = TCP_RING_BUDGET / ((size_t)RCOLL_MAX(nranks - 1, 1) *
                                  (size_t)RCOLL_MAX(nsocks, 1) * per);
    b &= ~(size_t)(TCP_RING_ALIGN - 1);
    *small = RCOLL_MAX(TCP_SMALL, RCOLL_MIN(b, TCP_SMALL_MAX));
    *ring = per * *small;
}

int tcp_sock_alloc(struct rcoll_tl_ctx *ctx, tcp_sock_t *s)
{
    size_t ns = (size_t)ctx->nslots, nb = (size_t)ctx->nbig;
    if (s->allocated)
        return 0;
    rcoll_slots_init(&s->sl, ctx->nslots);
    s->txq_cap = RCOLL_MIN(ctx->nslots, TCP_TXQ_MAX) +
                 TCP_TXQ_CTL(ctx->nsocks);
    s->slot_off = calloc(ns, sizeof(uint32_t));
    s->slot_ring = calloc(ns, sizeof(uint32_t));
    s->tx_ring = calloc(ns, sizeof(uint32_t));
    s->slot_hdr = calloc(ns, sizeof(rcoll_msg_hdr_t));
    s->slot_lseq = calloc(ns, sizeof(uint32_t));
    s->slot_pay = calloc(ns, sizeof(char *));
    s->slot_big = calloc(ns, sizeof(char *));
    s->slot_isbig = calloc(ns, 1);
    s->tx_isbig = calloc(ns, 1);
    s->pool = calloc(nb, sizeof(char *));
    s->pool_all = calloc(nb, sizeof(char *));
    s->txq = calloc((size_t)s->txq_cap, sizeof(tcp_txitem_t));
    if (!s->slot_off || !s->slot_ring || !s->tx_ring || !s->slot_hdr ||
        !s->slot_pay || !s->slot_lseq || !s->slot_big || !s->slot_isbig || !s->tx_isbig ||
        !s->pool || !s->pool_all || !s->txq)
        return -1;
    s->allocated = 1;
    return 0;
}

rcoll_status_t tcp_sock_setup(struct rcoll_tl_ctx *ctx, int peer, int idx,
                              int fd)
{
    tcp_ep_t *ep = ctx->eps[peer];
    tcp_sock_t *s = &ep->socks[idx];
    if (s->ended) {
        /* lost (a failover) while its handshake on first use ran: the
         * connection is dropped, the peer sees it end */
        close(fd);
        return RCOLL_OK;
    }
    if (s->fd >= 0) {
        close(fd);
        return rcoll__set_error(RCOLL_ERR_PROTOCOL,
                                "tcp: rank %d connected socket %d twice", peer,
                                idx);
    }
    s->fd = fd;
    s->closed = 0;
    s->rail = ctx->rails ? tcp_rail_of(&ctx->rails[ctx->p.rank], fd) : -1;
    rcoll_sock_set_nonblock(fd, 1);
    /* kernel buffers that hold what the credits let through (the ring,
     * the big buffers, their headers), so that the credits and not TCP's
     * window pace the sender: a buffer below one MSS keeps TCP's window
     * shut until its persist timer fires (100-200 ms per step) */
    size_t want = ctx->ring_size + (size_t)ctx->nbig * ctx->p.chunk_size +
                  (size_t)ctx->nslots * sizeof(tcp_wire_t);
    int sz = (int)RCOLL_MIN(want, 8u << 20);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
    /* where a lost rail's traffic can move to another, data that stays
     * unacknowledged RCOLL_RAIL_TIMEOUT ends the socket (ETIMEDOUT), so
     * that a lost link is found in seconds, not after TCP's minutes of
     * retransmissions. (Linux also ends it when the peer's window stays
     * shut that long: a peer process that does not read at all.) */
    unsigned ms = (unsigned)(rcoll_config.rail_timeout * 1000.0);
    if (tcp_ep_fo(ep) == 1 && ms > 0)
        setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof(ms));
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP,
                             .data.ptr = &s->h};
    if (epoll_ctl(ctx->p.epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "tcp: epoll_ctl: %s",
                                strerror(errno));
    return RCOLL_OK;
}

void tcp_sock_renew(tcp_sock_t *s, uint32_t gen)
{
    tcp_ep_t *ep = s->ep;
    struct rcoll_tl_ctx *ctx = ep->ctx;
    size_t ns = (size_t)ctx->nslots;
    rcoll_slots_init(&s->sl, ctx->nslots);
    s->rx_ring_tail = s->rx_ring_held = s->rx_ring_owed = 0;
    memset(s->slot_big, 0, ns * sizeof(char *));
    memset(s->slot_isbig, 0, ns);
    memset(s->slot_ring, 0, ns * sizeof(uint32_t));
    s->rx_big_held = s->rx_big_owed = 0;
    memcpy(s->pool, s->pool_all, (size_t)s->nalloc * sizeof(char *));
    s->npool = s->nalloc;
    s->rb_head = s->rb_tail = 0;
    s->rx_off = s->rx_poff = 0;
    s->rx_in_payload = 0;
    s->tx_fifo_head = s->tx_fifo_count = s->tx_big_out = 0;
    s->tx_ring_tail = s->tx_ring_used = 0;
    s->txq_head = s->txq_count = 0;
    if (s->tx_keep) {
        memset(s->tx_keep, 0, ns * sizeof(char *));
        memcpy(s->keep_pool, s->keep_all, (size_t)s->nkeep * sizeof(char *));
        s->nkeep_free = s->nkeep;
    }
    s->want_out = s->rx_run = s->oneway = s->oneway_again = 0;
    s->await = 0;
    s->fd = -1;
    s->bye = s->ended = s->lost = s->down = 0;
    s->lost_why[0] = 0;
    s->resends = 0;
    s->told = 0; /* it tells of every socket down now before it carries */
    s->gen = gen & 0xffffffu;
    ep->nended--;
    ep->down_mask &= ~(1u << s->idx);
    for (int k = 0; k < ctx->nsocks; k++)
        ep->socks[k].told &= ~(1u << s->idx);
    rcoll_lane_add(&ctx->rails_up, 1);
}

/* An authenticated hello with other settings than ours: both sides would
 * fail later in confusing ways, so stop here and say why. */
rcoll_status_t tcp_hello_agree(const struct rcoll_tl_ctx *ctx,
                               const tcp_hello_t *h)
{
    const rcoll_tl_params_t *p = &ctx->p;
    if (h->nsocks == ctx->nsocks && h->chunk_size == p->chunk_size &&
        h->nslots == p->nslots)
        return RCOLL_OK;
    return rcoll__set_error(
        RCOLL_ERR_INVALID_ARGUMENT,
        "tcp: rank %d and rank %d disagree on RCOLL_TCP_NSOCKS (%d vs "
        "%d), RCOLL_CHUNK_SIZE (%zu vs %llu) or RCOLL_NSLOTS (%d vs "
        "%d): set them the same on every rank", p->rank, h->rank,
        ctx->nsocks, h->nsocks, p->chunk_size,
        (unsigned long long)h->chunk_size, p->nslots, h->nslots);
}

/* ---- copies of what a peer that may fail over has in flight ---- */

static int keep_alloc(tcp_sock_t *s)
{
    struct rcoll_tl_ctx *ctx = s->ep->ctx;
    size_t n = (size_t)ctx->nslots, nb = (size_t)ctx->nbig;
    char **keep = calloc(n, sizeof(char *));
    rcoll_msg_hdr_t *hdr = calloc(n, sizeof(rcoll_msg_hdr_t));
    uint32_t *lseq = calloc(n, sizeof(uint32_t));
    char **pool = calloc(nb, sizeof(char *)), **all = calloc(nb, sizeof(char *));
    if (!keep || !hdr || !lseq || !pool || !all) {
        free(keep);
        free(hdr);
        free(lseq);
        free(pool);
        free(all);
        return -1;
    }
    s->tx_keep = keep;
    s->tx_hdr = hdr;
    s->tx_lseq = lseq;
    s->keep_pool = pool;
    s->keep_all = all;
    return 0;
}

char *tcp_keep(tcp_sock_t *s, int i, const rcoll_msg_hdr_t *hdr,
               uint32_t lseq, size_t ring_off, int big, const void *payload)
{
    struct rcoll_tl_ctx *ctx = s->ep->ctx;
    char *b = NULL;
    if (!s->tx_keep && keep_alloc(s) != 0)
        return NULL;
    s->tx_hdr[i] = *hdr;
    s->tx_lseq[i] = lseq;
    s->tx_keep[i] = NULL;
    if (!hdr->len)
        return NULL;
    if (!big) {
        /* the same offset as in the peer's ring: the credits that keep
         * its ring from overflowing keep these copies apart */
        if (!s->keep_ring) {
            if (!(s->keep_ring = malloc(ctx->ring_size)))
                return NULL;
            rcoll_prefault(s->keep_ring, ctx->ring_size, 1);
        }
        b = s->keep_ring + ring_off;
    } else if (s->nkeep_free > 0) {
        b = s->keep_pool[--s->nkeep_free];
    } else if (s->nkeep < ctx->nbig && (b = malloc(ctx->p.chunk_size))) {
        s->keep_all[s->nkeep++] = b;
    }
    if (b) {
        memcpy(b, payload, hdr->len);
        s->tx_keep[i] = b;
    }
    return b;
}

void tcp_keep_credit(tcp_sock_t *s, int i)
{
    if (s->tx_isbig[i] && s->tx_keep[i])
        s->keep_pool[s->nkeep_free++] = s->tx_keep[i];
    s->tx_keep[i] = NULL;
}

void tcp_keep_free(tcp_sock_t *s)
{
    for (int j = 0; j < s->nkeep; j++)
        free(s->keep_all[j]);
    free(s->keep_all);
    free(s->keep_pool);
    free(s->keep_ring);
    free(s->tx_keep);
    free(s->tx_hdr);
    free(s->tx_lseq);
}
