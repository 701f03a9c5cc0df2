/* The TCP transport's receive side (tcp.h): reading headers and payloads
 * into slots (the small-payload ring or big buffers), receives in place,
 * handing messages to the engine and credits back to the peer. */
#include "transport/tcp/tcp.h"

/* ---- receive side ---- */

static int tcp_handle_wire(tcp_sock_t *s)
{
    tcp_ep_t *ep = s->ep;
    tcp_wire_t *w = &s->rx_wire;
    /* unsigned on the wire: compared before it is added (a huge value
     * cast to int would go negative and stall the sender for good) */
    if (rcoll_slots_credit(&s->sl, w->credits) != 0) {
        tcp_ep_fail(ep, "protocol error: too many credits", 0);
        return -1;
    }
    /* the slots free in order: the oldest messages' */
    for (uint32_t i = 0; i < w->credits; i++) {
        if (s->tx_keep)
            tcp_keep_credit(s, s->tx_fifo_head);
        s->tx_big_out -= s->tx_isbig[s->tx_fifo_head];
        s->tx_ring_used -= s->tx_ring[s->tx_fifo_head];
        s->tx_fifo_head = (s->tx_fifo_head + 1) % ep->ctx->nslots;
        s->tx_fifo_count--;
    }
    switch (w->type) {
    case TCP_CREDIT:
        return 0;
    case TCP_RAIL: { /* the peer lost socket `flags` & 0xff */
        uint32_t idx = w->flags & 0xffu, gen = w->flags >> 8;
        if (idx >= (uint32_t)ep->ctx->nsocks || idx == (uint32_t)s->idx) {
            tcp_ep_fail(ep, "protocol error: a failover notice names a "
                        "wrong socket", 0);
            return -1;
        }
        if (tcp_ep_fo(ep) != 1) {
            tcp_ep_fail(ep, "it failed over from a lost socket, which this "
                        "rank cannot do (one rail to it, or "
                        "RCOLL_RAIL_FAILOVER=0)", 0);
            return -1;
        }
        if (!ep->have_upto || tcp_lseq_before(ep->rx_upto, w->lseq)) {
            ep->rx_upto = w->lseq;
            ep->have_upto = 1;
        }
        tcp_ep_activate(ep);
        /* (a notice of an earlier connection's loss, read after a new
         * one replaced it, ends nothing: only its number counts) */
        if (gen == ep->socks[idx].gen) {
            char why[64];
            snprintf(why, sizeof(why), "rank %d found it failed", ep->peer);
            tcp_sock_end(&ep->socks[idx], why, 0);
        } else {
            /* (it took a failback's connection and lost it again: our
             * handshake for that one waits for nothing, tcp_lazy.c) */
            ep->socks[idx].peer_lost = gen + 1;
        }
        return s->closed ? -1 : 0;
    }
    case TCP_BYE:
        ep->bye = 1;
        s->bye = 1;
        /* everything sent before it on this socket is in our slots (the
         * other sockets may still hold data: they get their own goodbye).
         * Close our side so the peer's destroy sees EOF at once. */
        tcp_sock_close(s);
        rcoll_debug(RCOLL_SUBSYS_NET, "tcp: rank %d said goodbye on socket "
                    "%d", ep->peer, s->idx);
        return -1;
    case TCP_ABORT:
        ep->aborted = 1;
        if (w->hdr.len > 0 && w->hdr.len < RCOLL_TL_REASON)
            return 2; /* read the reason first */
        tcp_sock_end(s, "aborted", 0);
        return -1;
    case TCP_DATA:
        if (w->hdr.len > ep->ctx->p.chunk_size ||
            rcoll_slots_next(&s->sl) < 0) {
            tcp_ep_fail(ep, "protocol error: oversized message or no free "
                        "slot", 0);
            return -1;
        }
        return 1;
    default:
        tcp_ep_fail(ep, "protocol error: unknown message type", 0);
        return -1;
    }
}

/* A socket that receives and does not answer (a broadcast's leaf, a
 * ring's left neighbour) is taken out of the kernel's "pingpong" (delayed
 * ACK) mode, which an earlier exchange on it (connection set-up, an
 * all-reduce) left it in. In that mode the receiver's reads send no ACK,
 * so the ACK the kernel owes for every two small segments is built when
 * the second arrives: over loopback that is in the sender's system call,
 * on the sender's core. Out of it, the read that empties the socket ACKs,
 * on the receiver's core. That helps a sustained stream, whose sender is
 * the bottleneck, but not a short burst (20 calls after a barrier), whose
 * receiver finishes last and then also sends an ACK per read
 * (docs/performance.md). So it comes after TCP_ONEWAY_READS reads
 * with data and no data message of ours between them, one setsockopt
 * (a failure only leaves the kernel's default); a credit message of ours
 * puts the kernel back in pingpong mode, and the next read takes it out
 * again. Exchanges (an all-reduce's) never count that far. */
#define TCP_ONEWAY_READS 32

static void tcp_sock_oneway(tcp_sock_t *s)
{
    int one = 1;
    (void)setsockopt(s->fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof(one));
}

/* recv() that reports failures: > 0 bytes read, 0 nothing there now,
 * -1 the link failed (the communicator has been told; `eof` says why when
 * the peer closed). */
static ssize_t tcp_recv(tcp_sock_t *s, void *buf, size_t len, const char *eof)
{
    for (;;) {
        ssize_t r = recv(s->fd, buf, len, MSG_DONTWAIT);
        if (r > 0) {
            if (s->oneway) {
                if (s->oneway_again) {
                    s->oneway_again = 0;
                    tcp_sock_oneway(s);
                }
            } else if (++s->rx_run == TCP_ONEWAY_READS) {
                s->oneway = 1;
                tcp_sock_oneway(s);
            }
            return r;
        }
        if (r == 0) {
            tcp_sock_end(s, eof, 0);
            return -1;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 0;
        tcp_sock_end(s, "connection lost", errno);
        return -1;
    }
}

/* ---- receive in place ---- */

/* Where the payload of the message `h` goes if a receive was posted in
 * place for it; NULL: into a slot. */
static char *tcp_place_find(tcp_ep_t *ep, const rcoll_msg_hdr_t *h)
{
    size_t off;
    int i = rcoll_places_find(&ep->places, h, &off);
    if (i < 0)
        return NULL;
    ep->places.e[i].landed += h->len;
    rcoll_lane_add(&ep->ctx->placed_bytes, h->len);
    return ep->places.e[i].pl.dst + off;
}

int tcp_recv_place(rcoll_tl_ep_t *tep, const rcoll_tl_place_t *pl)
{
    tcp_ep_t *ep = (tcp_ep_t *)tep;
    return rcoll_places_add(&ep->places, pl) >= 0;
}

/* A buffer of the slot's class for its message: its place in the ring,
 * or a big one from the pool (the sender keeps at most nbig big messages
 * unreleased, so one is free). NULL: out of memory, or a sender past its
 * limit (a protocol error). Both are allocated on first use. The ring is
 * also mapped at once (rcoll_prefault): otherwise every message of its
 * first lap takes the faults of the pages it lands on, and the first
 * calls of a size run slow (a 2-rank 8 KiB all-reduce over loopback:
 * about 1.5x its steady time for the first lap). A big buffer is not: a
 * message of 20 KiB would map all RCOLL_CHUNK_SIZE bytes of it, up to
 * RCOLL_NSLOTS per socket, and it is filled in its first use by a
 * chunk-sized one anyway. */
static char *tcp_slot_buf(tcp_sock_t *s, int slot)
{
    struct rcoll_tl_ctx *ctx = s->ep->ctx;
    if (!s->slot_isbig[slot]) {
        if (!s->ring) {
            if (!(s->ring = malloc(ctx->ring_size)))
                return NULL;
            rcoll_prefault(s->ring, ctx->ring_size, 1);
        }
        return s->ring + s->slot_off[slot];
    }
    if (!s->slot_big[slot]) {
        if (s->npool > 0) {
            s->slot_big[slot] = s->pool[--s->npool];
        } else if (s->nalloc < ctx->nbig) {
            char *b = malloc(ctx->p.chunk_size);
            if (!b)
                return NULL;
            s->pool_all[s->nalloc++] = b;
            s->slot_big[slot] = b;
        }
    }
    return s->slot_big[slot];
}

/* Moves a payload that lies in [lo, hi) into a buffer of the slot's. */
static int tcp_slot_unplace(tcp_sock_t *s, int slot, size_t len,
                            const char *lo, const char *hi)
{
    char *p = s->slot_pay[slot];
    if (!p || p < lo || p >= hi)
        return 0;
    char *b = tcp_slot_buf(s, slot);
    if (!b)
        return -1;
    memcpy(b, p, len);
    s->slot_pay[slot] = b;
    return 0;
}

void tcp_recv_unplace(rcoll_tl_ep_t *tep, const rcoll_tl_place_t *pl)
{
    tcp_ep_t *ep = (tcp_ep_t *)tep;
    int i = rcoll_places_posted(&ep->places, pl);
    if (i < 0)
        return;
    rcoll_places_remove(&ep->places, i, "tcp", ep->peer);
    /* a failed operation's messages that already landed, or are landing,
     * in dst: into the slots, before dst can be freed */
    const char *lo = pl->dst, *hi = pl->dst + pl->bytes;
    for (int k = 0; k < ep->ctx->nsocks; k++) {
        tcp_sock_t *s = &ep->socks[k];
        int err = rcoll_fault("tcp_unplace_nomem"); /* (tests) */
        if (!s->slot_pay)
            continue;
        for (int j = 0; j < s->sl.count; j++) {
            int slot = rcoll_slots_at(&s->sl, j);
            err |= tcp_slot_unplace(s, slot, s->slot_hdr[slot].len, lo, hi);
        }
        if (s->rx_in_payload)
            err |= tcp_slot_unplace(s, rcoll_slots_next(&s->sl), s->rx_poff,
                                    lo, hi);
        if (err) {
            /* nothing of this socket may point into dst any more */
            tcp_ep_fail(ep, "out of memory for a receive slot", ENOMEM);
            s->sl.count = 0;
            s->rx_in_payload = 0;
        }
    }
}

/* Takes up to `len` staged bytes into `dst`; returns how many. */
static size_t tcp_take(tcp_sock_t *s, void *dst, size_t len)
{
    size_t n = RCOLL_MIN(len, s->rb_tail - s->rb_head);
    if (n == 0) /* (rb may be NULL before the first read: no memcpy) */
        return 0;
    memcpy(dst, s->rb + s->rb_head, n);
    s->rb_head += n;
    if (s->rb_head == s->rb_tail)
        s->rb_head = s->rb_tail = 0;
    return n;
}

/* One recv into the staging buffer: > 0 bytes read, 0 nothing there, -1
 * the link failed. *drained is set when the socket gave less than asked
 * (it is empty now: the next bytes raise an epoll event). */
static ssize_t tcp_fill(tcp_sock_t *s, const char *eof, int *drained)
{
    if (!s->rb && !(s->rb = malloc(TCP_RX_STAGE))) {
        tcp_ep_fail(s->ep, "out of memory for a receive buffer", ENOMEM);
        return -1;
    }
    if (s->rb_head > 0) { /* a partial header or payload: to the front */
        memmove(s->rb, s->rb + s->rb_head, s->rb_tail - s->rb_head);
        s->rb_tail -= s->rb_head;
        s->rb_head = 0;
    }
    size_t want = TCP_RX_STAGE - s->rb_tail;
    ssize_t r = tcp_recv(s, s->rb + s->rb_tail, want, eof);
    if (r > 0) {
        s->rb_tail += (size_t)r;
        *drained = (size_t)r < want;
    }
    return r;
}

/* An abort's reason (short) after its header: read right here, then the
 * socket ends. */
static void tcp_read_abort(tcp_sock_t *s)
{
    tcp_ep_t *ep = s->ep;
    size_t len = s->rx_wire.hdr.len;
    size_t got = tcp_take(s, ep->abort_reason, len);
    double dl = rcoll_time_sec() + 1.0;
    if (got == len || rcoll_sock_recv_all(s->fd, ep->abort_reason + got,
                                          len - got, dl) == RCOLL_OK)
        rcoll_tl_reason_take(ep->abort_reason, ep->abort_reason, len);
    else
        ep->abort_reason[0] = '\0';
    tcp_sock_end(s, "aborted", 0);
}

/* The message whose header was just read takes the next slot: its place
 * in the small-message ring or a large slot, and where its payload goes
 * (in place, or the slot's buffer). Returns 1 when a payload follows, 0
 * for an empty message (arrived already), -1 when the peer failed. */
static int tcp_slot_open(tcp_sock_t *s)
{
    tcp_ep_t *ep = s->ep;
    int slot = rcoll_slots_next(&s->sl); /* free: tcp_handle_wire checked */
    s->slot_hdr[slot] = s->rx_wire.hdr;
    s->slot_lseq[slot] = s->rx_wire.lseq;
    int big = s->rx_wire.hdr.len > ep->ctx->small;
    s->slot_isbig[slot] = (unsigned char)big;
    size_t off;
    uint32_t ring = tcp_ring_place(&s->rx_ring_tail,
                                   ep->ctx->ring_size, ep->ctx->small,
                                   s->rx_wire.hdr.len, &off);
    s->slot_off[slot] = (uint32_t)off;
    s->slot_ring[slot] = ring;
    s->rx_ring_held += ring;
    if (s->rx_ring_held + s->rx_ring_owed > ep->ctx->ring_size) {
        tcp_ep_fail(ep, "protocol error: small messages overflow "
                    "the ring", 0);
        return -1;
    }
    if (big && ++s->rx_big_held > ep->ctx->nbig) {
        tcp_ep_fail(ep, "protocol error: more large messages than "
                    "large slots", 0);
        return -1;
    }
    if (s->rx_wire.hdr.len == 0) {
        s->slot_pay[slot] = NULL;
        rcoll_slots_arrived(&s->sl);
        return 0;
    }
    /* (a copy sent again may be one that arrived already, and
     * its operation may have moved on: never into place) */
    s->slot_pay[slot] = s->rx_wire.flags & TCP_F_RESENT
                            ? NULL
                            : tcp_place_find(ep, &s->rx_wire.hdr);
    if (!s->slot_pay[slot] &&
        !(s->slot_pay[slot] = tcp_slot_buf(s, slot))) {
        tcp_ep_fail(ep, "out of memory for a receive slot", ENOMEM);
        return -1;
    }
    return 1;
}

static void tcp_sock_read(tcp_sock_t *s)
{
    int drained = 0;
    static const char *eof_hdr = "the connection closed without goodbye "
                                 "(process died or was killed?)";
    static const char *eof_pay = "the connection closed in the middle of a "
                                 "message (process died or was killed?)";
    for (;;) {
        if (s->closed)
            return;
        if (!s->rx_in_payload) {
            s->rx_off += tcp_take(s, (char *)&s->rx_wire + s->rx_off,
                                  sizeof(tcp_wire_t) - s->rx_off);
            if (s->rx_off < sizeof(tcp_wire_t)) {
                if (drained || tcp_fill(s, eof_hdr, &drained) <= 0)
                    return;
                continue;
            }
            s->rx_off = 0;
            int k = tcp_handle_wire(s);
            if (k < 0)
                return;
            if (k == 0)
                continue;
            if (k == 2) {
                tcp_read_abort(s);
                return;
            }
            if ((k = tcp_slot_open(s)) < 0)
                return;
            if (k == 0)
                continue;
            s->rx_in_payload = 1;
            s->rx_poff = 0;
        }
        int slot = rcoll_slots_next(&s->sl);
        size_t len = s->rx_wire.hdr.len;
        char *dst = s->slot_pay[slot];
        s->rx_poff += tcp_take(s, dst + s->rx_poff, len - s->rx_poff);
        if (s->rx_poff < len) {
            if (drained)
                return;
            size_t need = len - s->rx_poff;
            if (need >= TCP_RX_DIRECT) { /* the rest straight into place */
                ssize_t r = tcp_recv(s, dst + s->rx_poff, need, eof_pay);
                if (r <= 0)
                    return;
                /* (no drained hint here: a large transfer keeps
                 * arriving while we read, and the next recv is cheaper
                 * than a trip through epoll) */
                s->rx_poff += (size_t)r;
            } else if (tcp_fill(s, eof_pay, &drained) <= 0) {
                return;
            }
            if (s->rx_poff < len)
                continue;
        }
        s->rx_in_payload = 0;
        rcoll_slots_arrived(&s->sl);
    }
}

void tcp_sock_event(rcoll_ev_handler_t *h, uint32_t events)
{
    tcp_sock_t *s = (tcp_sock_t *)h;
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
        tcp_sock_read(s);
    if ((events & EPOLLOUT) && !s->closed)
        tcp_sock_write(s);
}

rcoll_status_t tcp_recv_peek(rcoll_tl_ep_t *tep,
                                    const rcoll_msg_hdr_t **hdr,
                                    const void **payload)
{
    tcp_ep_t *ep = (tcp_ep_t *)tep;
    ep->cur = (int)(ep->rx_seq % (uint64_t)ep->ctx->nsocks);
    tcp_sock_t *s = &ep->socks[ep->cur];
    if (s->sl.count == 0) {
        if (ep->failed || s->ended)
            return tcp_ep_error(ep);
        if (s->bye)
            return rcoll__set_error(RCOLL_ERR_REMOTE,
                                    "rank %d already destroyed the "
                                    "communicator", ep->peer);
        return RCOLL_INPROGRESS;
    }
    *hdr = &s->slot_hdr[s->sl.head];
    *payload = s->slot_pay[s->sl.head];
    return RCOLL_OK;
}

int tcp_sock_quiet(tcp_sock_t *s)
{
    tcp_ep_t *ep = s->ep;
    if (!s->down || s->resends > 0 || ep->failed)
        return 0;
    /* what its slots still hold came again over the other sockets (the
     * peer took the socket down too and sent everything we had not
     * released); a copy taken already is dropped, one not yet taken
     * waits to be (it may be the one the engine holds now) */
    while (s->sl.count > 0 &&
           tcp_lseq_before(s->slot_lseq[s->sl.head], (uint32_t)ep->rx_seq))
        tcp_sock_release(s);
    return s->sl.count == 0;
}

void tcp_sock_release(tcp_sock_t *s)
{
    tcp_ep_t *ep = s->ep;
    int slot = s->sl.head;
    rcoll_lane_received(&s->st, s->slot_hdr[slot].len);
    if (s->slot_isbig[slot]) {
        s->rx_big_held--;
        s->rx_big_owed++;
        if (s->slot_big[slot]) { /* back to the pool */
            s->pool[s->npool++] = s->slot_big[slot];
            s->slot_big[slot] = NULL;
        }
    }
    s->rx_ring_held -= s->slot_ring[slot];
    s->rx_ring_owed += s->slot_ring[slot];
    int half = rcoll_slots_release(&s->sl) ||
               rcoll_slots_half(s->rx_big_owed, ep->ctx->nbig) ||
               2 * s->rx_ring_owed >= ep->ctx->ring_size;
    /* Credits go back with our next message to that peer, or alone once
     * half the slots are owed, or when the engine runs out of work
     * (tcp_idle): a message alone costs a system call on each side, and
     * in a request-response pattern the next message comes soon. The
     * engine calls tcp_idle before it waits, so a peer never waits for
     * credits that we sit on while it has none. */
    if (half && s->txq_count == 0 && !s->bye && !s->closed)
        tcp_sock_write(s);
}

void tcp_recv_release(rcoll_tl_ep_t *tep)
{
    tcp_ep_t *ep = (tcp_ep_t *)tep;
    tcp_sock_release(&ep->socks[ep->rx_seq % (uint64_t)ep->ctx->nsocks]);
    ep->rx_seq++;
}

int tcp_recv_full(rcoll_tl_ep_t *tep)
{
    tcp_ep_t *ep = (tcp_ep_t *)tep;
    for (int k = 0; k < ep->ctx->nsocks; k++) {
        const tcp_sock_t *s = &ep->socks[k];
        if (rcoll_slots_held(&s->sl) ||
            (s->rx_big_held > 0 &&
             s->rx_big_held + s->rx_big_owed >= ep->ctx->nbig) ||
            (s->rx_ring_held > 0 && tcp_ring_tight(s)))
            return 1; /* every slot, every big one or the ring taken or
                         owed */
    }
    return 0;
}

/* The engine has nothing to do: hand back the credits we owe to a sender
 * that may have none left (every slot arrived or owed). A sender with a
 * credit left is not stuck on us: when it spends its last one, that
 * message wakes us, and our next idle turn finds every slot taken. Until
 * then the credits wait for a message of ours to ride on, or for half the
 * slots (tcp_recv_release), so that a stream of small messages one way (a
 * broadcast's) does not cost a credit message back per message: a system
 * call on each side and a segment for the sender's stack to take. */
int tcp_idle(rcoll_tl_ctx_t *ctx)
{
    for (int i = 0; i < ctx->p.nranks; i++) {
        tcp_ep_t *ep = ctx->eps[i];
        for (int k = 0; ep && k < ctx->nsocks; k++) {
            tcp_sock_t *s = &ep->socks[k];
            int full = rcoll_slots_full(&s->sl) ||
                       (s->sl.owed > 0 &&
                        (s->rx_big_owed + s->rx_big_held >= ctx->nbig ||
                         tcp_ring_tight(s)));
            if (full && s->txq_count == 0 && !s->closed && !s->bye)
                tcp_sock_write(s);
        }
    }
    return 0; /* what arrives meanwhile raises an epoll event */
}
