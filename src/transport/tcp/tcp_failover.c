/* The TCP transport surviving the loss of a rail (tcp.h). A peer's
 * sockets go over different pairs of rails (tcp_rails.c); when one of
 * them fails (reset, EOF, or data unacknowledged for RCOLL_RAIL_TIMEOUT)
 * while another still reaches the peer, the ep fails over instead of
 * failing:
 *  - every DATA message carries its number from this rank to the peer
 *    (lseq). An ep that may fail over sends from a copy of each payload,
 *    kept until its credit comes back (the receiver released it);
 *  - the side that finds a socket failed closes it, tells the peer on
 *    every other socket (a RAIL notice with the number of its next new
 *    message, `upto`) and sends the failed socket's uncredited copies
 *    again over the others, marked RESENT, before any new message. The
 *    peer does the same on the notice, so both directions recover;
 *  - from then on the receiver takes messages by number, from whichever
 *    socket (or the failed one's slots) holds the next one. A copy of a
 *    message it took already is dropped; a message numbered below the
 *    peer's `upto` that blocks a slot while an earlier one is missing is
 *    moved aside (at most the messages in flight when the rail failed),
 *    so that its credit lets the resends through.
 * A RESENT message never lands in place: its operation may have taken
 * the first copy and moved on.
 * Failback: the lower rank of the pair connects a socket taken down again
 * every RCOLL_RAIL_RETRY seconds (tcp_lazy_rejoin), once nothing of it is
 * left to send again and its slots hold nothing not yet received, on both
 * sides (tcp_sock_quiet); both then make it new (tcp_sock_renew) and it
 * carries its share again. Each connection of a socket has a number,
 * proposed by the connecting rank above any it proposed or took before
 * and taken by the peer only above its own (so an answer lost on the way
 * cannot leave the two sides on different numbers for good); a loss
 * notice names the number, and one about an older connection, read
 * late, ends nothing.
 * Destroy (tcp_fo_settle): the engine no longer runs, so before its
 * goodbyes the destroy reads and writes these sockets itself until every
 * byte sent is acknowledged by the peer's kernel, so that a rail lost
 * under the last messages is still found and they go again.
 * ib queue pairs fail over in ib_fo.c. */
#include "transport/tcp/tcp.h"
#include <linux/sockios.h>
#include <sys/ioctl.h>

struct tcp_resend {
    uint32_t lseq;
    rcoll_msg_hdr_t hdr;
    const char *pay;          /* the failed socket's copy */
    int from;                 /* that socket */
};

struct tcp_side {
    uint32_t lseq;
    rcoll_msg_hdr_t hdr;
    char data[];
};

/* ---- send side ---- */

static int resend_add(tcp_ep_t *ep, uint32_t lseq, const rcoll_msg_hdr_t *h,
                      const char *pay, int from)
{
    if (ep->nresend == ep->resend_cap) {
        int cap = RCOLL_MAX(16, 2 * ep->resend_cap);
        struct tcp_resend *r = realloc(ep->resend, (size_t)cap * sizeof(*r));
        if (!r)
            return -1;
        ep->resend = r;
        ep->resend_cap = cap;
    }
    ep->resend[ep->nresend].lseq = lseq;
    ep->resend[ep->nresend].hdr = *h;
    ep->resend[ep->nresend].from = from;
    ep->resend[ep->nresend++].pay = pay;
    ep->socks[from].resends++;
    return 0;
}

/* The number above every message sent so far and every one waiting to
 * go again (a send that failed its socket is in the list before the
 * sender counts it). */
static uint32_t next_new(const tcp_ep_t *ep)
{
    uint32_t upto = (uint32_t)ep->tx_seq;
    for (int i = ep->resend_head; i < ep->nresend; i++)
        if (!tcp_lseq_before(ep->resend[i].lseq, upto))
            upto = ep->resend[i].lseq + 1;
    return upto;
}

/* A RAIL notice on socket c: socket `idx` (its connection's number)
 * failed;
 * our messages from next_new on are sent after every resend. 0, or -1
 * when c's queue has no room. */
static int tell(tcp_sock_t *c, int idx)
{
    tcp_txitem_t *it = tcp_txq_push(c, TCP_RAIL, NULL, NULL, NULL);
    if (!it)
        return -1;
    it->wire.lseq = next_new(c->ep);
    it->wire.flags = (uint32_t)idx | c->ep->socks[idx].gen << 8;
    tcp_sock_write(c);
    return 0;
}

static const char *rail_name(const tcp_sock_t *s, char *buf, size_t len)
{
    const struct rcoll_tl_ctx *ctx = s->ep->ctx;
    const tcp_rails_t *me = ctx->rails ? &ctx->rails[ctx->p.rank] : NULL;
    if (me && s->rail >= 0 && s->rail < me->nrails)
        snprintf(buf, len, "%s", me->rail[s->rail].ifname);
    else
        snprintf(buf, len, "of socket %d", s->idx);
    return buf;
}

/* Socket s was lost (tcp_sock_end marked it): warns, and queues its
 * messages not credited back, oldest first, to go again (its send queue
 * holds only some of them, from copies). */
static void take_down(tcp_sock_t *s)
{
    tcp_ep_t *ep = s->ep;
    struct rcoll_tl_ctx *ctx = ep->ctx;
    const rcoll_boot_peer_t *pi = &ctx->p.bs->peers[ep->peer];
    int live = ctx->nsocks - ep->nended, lost = s->tx_fifo_count;
    char rn[32];
    s->down = 1;
    s->retry_at = rcoll_time_sec() + rcoll_config.rail_retry;
    ep->down_mask |= 1u << s->idx;
    rcoll_lane_add(&ctx->rails_down, 1);
    rcoll_warn("tcp: rank %d: rail %s to rank %d (%s pid %d) failed (%s): "
               "%d unacknowledged messages go again and the traffic moves "
               "to the other %d socket(s); RCOLL_RAIL_FAILOVER=0 makes this "
               "an error", ctx->p.rank, rail_name(s, rn, sizeof(rn)),
               ep->peer, pi->hostname, (int)pi->pid, s->lost_why, lost,
               live);
    for (int i = 0; i < lost; i++) {
        int j = (s->tx_fifo_head + i) % ctx->nslots;
        if (resend_add(ep, s->tx_lseq[j], &s->tx_hdr[j], s->tx_keep[j],
                       s->idx)) {
            tcp_ep_fail(ep, "out of memory for a failed socket's messages",
                        ENOMEM);
            return;
        }
    }
    s->tx_fifo_count = 0;
    for (int j = 0; j < s->txq_count; j++)
        free(s->txq[(s->txq_head + j) % s->txq_cap].own);
    s->txq_count = 0;
}

/* Failback: the lower rank of the pair connects each socket taken down
 * again, every RCOLL_RAIL_RETRY seconds, once it is quiet on this side
 * (the peer checks its own side when the hello comes). */
static void failback(tcp_ep_t *ep)
{
    struct rcoll_tl_ctx *ctx = ep->ctx;
    if (!ep->down_mask || ctx->p.rank > ep->peer || ep->failed ||
        ep->bye || rcoll_config.rail_retry <= 0)
        return;
    double now = rcoll_time_sec();
    for (int k = 0; k < ctx->nsocks && !ep->failed; k++) {
        tcp_sock_t *s = &ep->socks[k];
        if (!s->down || s->conn || now < s->retry_at || now < s->await ||
            !tcp_sock_quiet(s))
            continue;
        s->retry_at = now + rcoll_config.rail_retry;
        tcp_lazy_rejoin(ep, k);
    }
}

void tcp_fo_poll(tcp_ep_t *ep)
{
    int n = ep->ctx->nsocks;
    if (ep->lost_pending) {
        ep->lost_pending = 0;
        for (int k = 0; k < n && !ep->failed; k++)
            if (ep->socks[k].lost && !ep->socks[k].down)
                take_down(&ep->socks[k]);
    }
    /* every socket that carries messages tells the peer of each lost one
     * before anything goes again or anew on it (also one connected on
     * first use after the loss) */
    for (int k = 0; k < n && !ep->failed; k++) {
        tcp_sock_t *c = &ep->socks[k];
        uint32_t news = ep->down_mask & ~c->told;
        if (c->ended || c->closed || !news)
            continue;
        for (int d = 0; d < n; d++)
            if (news >> d & 1 && tell(c, d) != 0) {
                tcp_ep_fail(ep, "no room to tell of a failed socket", 0);
                return;
            }
        c->told |= news;
    }
    tcp_resend_drain(ep);
    failback(ep);
}

void tcp_resend_drain(tcp_ep_t *ep)
{
    int n = ep->ctx->nsocks;
    if (ep->draining) /* a push that failed a socket came back here */
        return;
    ep->draining = 1;
    while (ep->resend_head < ep->nresend && !ep->failed) {
        struct tcp_resend r = ep->resend[ep->resend_head];
        rcoll_status_t st = RCOLL_INPROGRESS;
        int any = 0;
        for (int i = 0; i < n && st == RCOLL_INPROGRESS; i++) {
            tcp_sock_t *c = &ep->socks[(ep->tx_rr + i) % n];
            if (c->ended || c->closed || c->bye ||
                (ep->down_mask & ~c->told))
                continue;
            any = 1;
            st = tcp_push(c, &r.hdr, r.pay, NULL, r.lseq, TCP_F_RESENT);
            if (st == RCOLL_OK)
                ep->tx_rr = (c->idx + 1) % n;
        }
        if (st == RCOLL_INPROGRESS) {
            if (!any && ep->ctx->lazy)
                tcp_lazy_connect(ep); /* a socket not connected yet */
            break;
        }
        if (st != RCOLL_OK) {
            tcp_ep_fail(ep, rcoll_last_error(), 0);
            break;
        }
        rcoll_lane_add(&ep->ctx->resent, 1);
        ep->socks[r.from].resends--; /* (the push copied it) */
        ep->resend_head++;
    }
    if (ep->resend_head == ep->nresend)
        ep->resend_head = ep->nresend = 0;
    ep->draining = 0;
}

/* ---- receive side ---- */

static int side_add(tcp_ep_t *ep, uint32_t lseq, const rcoll_msg_hdr_t *h,
                    const void *pay)
{
    if (ep->nside == ep->side_cap) {
        int cap = RCOLL_MAX(8, 2 * ep->side_cap);
        struct tcp_side **a = realloc(ep->side, (size_t)cap * sizeof(*a));
        if (!a)
            return -1;
        ep->side = a;
        ep->side_cap = cap;
    }
    struct tcp_side *x = malloc(sizeof(*x) + h->len);
    if (!x)
        return -1;
    x->lseq = lseq;
    x->hdr = *h;
    if (h->len)
        memcpy(x->data, pay, h->len);
    ep->side[ep->nside++] = x;
    rcoll_lane_add(&ep->ctx->taken_aside, 1);
    return 0;
}

static rcoll_status_t tcp_fo_peek(tcp_ep_t *ep, const rcoll_msg_hdr_t **hdr,
                           const void **payload)
{
    uint32_t want = (uint32_t)ep->rx_seq;
    if (ep->have_upto && !tcp_lseq_before(want, ep->rx_upto))
        ep->have_upto = 0; /* past the resends: every socket in order */
    for (int k = 0; k < ep->ctx->nsocks; k++) {
        tcp_sock_t *s = &ep->socks[k];
        while (s->allocated && s->sl.count > 0) {
            int slot = s->sl.head;
            uint32_t l = s->slot_lseq[slot];
            if (l == want) {
                ep->cur = k;
                *hdr = &s->slot_hdr[slot];
                *payload = s->slot_pay[slot];
                return RCOLL_OK;
            }
            if (tcp_lseq_before(l, want)) { /* a copy of one taken already */
                tcp_sock_release(s);
                continue;
            }
            if (!ep->have_upto || !tcp_lseq_before(l, ep->rx_upto))
                break;
            /* sent before the peer's resends while one of ours is
             * missing: aside, so that its credit lets the resends in */
            if (side_add(ep, l, &s->slot_hdr[slot], s->slot_pay[slot])) {
                tcp_ep_fail(ep, "out of memory for a message out of order",
                            ENOMEM);
                return tcp_ep_error(ep);
            }
            tcp_sock_release(s);
        }
    }
    for (int i = 0; i < ep->nside; i++) {
        struct tcp_side *x = ep->side[i];
        if (x->lseq == want) {
            ep->cur = -1 - i;
            *hdr = &x->hdr;
            *payload = x->data;
            return RCOLL_OK;
        }
        if (tcp_lseq_before(x->lseq, want)) {
            free(x);
            ep->side[i--] = ep->side[--ep->nside];
        }
    }
    if (ep->failed)
        return tcp_ep_error(ep);
    int open = 0;
    for (int k = 0; k < ep->ctx->nsocks; k++)
        open |= !ep->socks[k].closed;
    if (ep->bye && !open) /* every socket said goodbye or was lost */
        return rcoll__set_error(RCOLL_ERR_REMOTE, "rank %d already destroyed "
                                "the communicator", ep->peer);
    return RCOLL_INPROGRESS;
}

static void tcp_fo_release(tcp_ep_t *ep)
{
    if (ep->cur >= 0) {
        tcp_sock_release(&ep->socks[ep->cur]);
    } else if (-1 - ep->cur < ep->nside) {
        int i = -1 - ep->cur;
        free(ep->side[i]);
        ep->side[i] = ep->side[--ep->nside];
    }
    ep->rx_seq++;
}

void tcp_fo_free(tcp_ep_t *ep)
{
    for (int i = 0; i < ep->nside; i++)
        free(ep->side[i]);
    free(ep->side);
    free(ep->resend);
}

/* ---- the transport's entry points once a socket may fail over ---- */

rcoll_status_t tcp_fo_send(rcoll_tl_ep_t *tep, const rcoll_msg_hdr_t *hdr,
                           const void *payload, void *cookie, int flags,
                           size_t xfer)
{
    tcp_ep_t *ep = (tcp_ep_t *)tep;
    if (ep->active)
        tcp_fo_poll(ep);
    rcoll_status_t st = tcp_send(tep, hdr, payload, cookie, flags, xfer);
    if (ep->lost_pending) /* the send lost a socket */
        tcp_fo_poll(ep);
    return st;
}

rcoll_status_t tcp_fo_recv_peek(rcoll_tl_ep_t *tep,
                                const rcoll_msg_hdr_t **hdr,
                                const void **payload)
{
    tcp_ep_t *ep = (tcp_ep_t *)tep;
    if (!ep->active)
        return tcp_recv_peek(tep, hdr, payload);
    tcp_fo_poll(ep);
    return tcp_fo_peek(ep, hdr, payload);
}

void tcp_fo_recv_release(rcoll_tl_ep_t *tep)
{
    tcp_ep_t *ep = (tcp_ep_t *)tep;
    if (!ep->active) {
        tcp_recv_release(tep);
        return;
    }
    tcp_fo_release(ep);
    if (ep->lost_pending)
        tcp_fo_poll(ep);
}

void tcp_fo_event(rcoll_ev_handler_t *h, uint32_t events)
{
    tcp_ep_t *ep = ((tcp_sock_t *)h)->ep;
    tcp_sock_event(h, events);
    /* a loss seen, or credits that may let resends go (here, once the
     * read is over: a resend may fail a socket and close its descriptor,
     * whose number a new connection may then take) */
    if (ep->active)
        tcp_fo_poll(ep);
}

void tcp_fo_tick(struct rcoll_tl_ctx *ctx)
{
    if (!ctx->nactive)
        return;
    for (int i = 0; i < ctx->p.nranks; i++)
        if (ctx->eps[i] && ctx->eps[i]->active)
            tcp_fo_poll(ctx->eps[i]);
}

/* ---- destroy ---- */

/* 1 while ep may still need its rails to deliver what it sent: a loss
 * not handled yet, messages waiting to go again, or a live socket whose
 * queue or kernel send buffer holds bytes the peer's kernel has not
 * acknowledged (a rail that fails now would lose them). */
static int fo_unsettled(tcp_ep_t *ep)
{
    int live = 0, busy = ep->lost_pending || ep->resend_head < ep->nresend;
    for (int k = 0; k < ep->ctx->nsocks; k++) {
        tcp_sock_t *s = &ep->socks[k];
        int q = 0;
        if (s->closed || s->ended)
            continue;
        live = 1;
        if (s->txq_count || (ioctl(s->fd, SIOCOUTQ, &q) == 0 && q > 0))
            busy = 1;
    }
    return live && busy;
}

void tcp_fo_settle(struct rcoll_tl_ctx *ctx, double deadline)
{
    int n = ctx->p.nranks, cap = n * ctx->nsocks;
    struct pollfd *pf = calloc((size_t)cap, sizeof(*pf));
    tcp_sock_t **ps = calloc((size_t)cap, sizeof(*ps));
    while (pf && ps && rcoll_time_sec() < deadline) {
        int np = 0;
        for (int i = 0; ctx->eps && i < n; i++) {
            tcp_ep_t *ep = ctx->eps[i];
            if (!ep || ep->fo != 1 || ep->failed || ep->aborted || ep->bye)
                continue;
            if (ep->active)
                tcp_fo_poll(ep);
            if (ep->failed || !fo_unsettled(ep))
                continue;
            for (int k = 0; k < ctx->nsocks; k++) {
                tcp_sock_t *s = &ep->socks[k];
                if (s->closed || s->ended)
                    continue;
                if (s->txq_count)
                    tcp_sock_write(s);
                pf[np].fd = s->fd;
                pf[np].events =
                    POLLIN | POLLRDHUP | (s->txq_count ? POLLOUT : 0);
                ps[np++] = s;
            }
        }
        if (!np)
            break;
        if (poll(pf, (nfds_t)np, 10) <= 0)
            continue;
        /* (poll's bits are epoll's on Linux) */
        for (int j = 0; j < np; j++)
            if (pf[j].revents && !ps[j]->closed && ps[j]->fd == pf[j].fd)
                ps[j]->h.cb(&ps[j]->h, (uint32_t)pf[j].revents);
    }
    free(pf);
    free(ps);
}
