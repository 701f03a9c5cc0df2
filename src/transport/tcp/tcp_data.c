/* The TCP transport's send side (tcp.h): sends and their queue, the
 * small-payload ring's placement, a peer's failure and a socket's end.
 * The receive side is tcp_recv.c. */
#include "transport/tcp/tcp.h"

/* Arms or disarms EPOLLOUT. A failed MOD would lose the wake-up a queued
 * send waits for (it would stall until RCOLL_TIMEOUT), so it fails the
 * peer at once, naming the call. 0 on success. */
static int tcp_sock_set_events(tcp_sock_t *s)
{
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP |
                                       (s->want_out ? EPOLLOUT : 0),
                             .data.ptr = &s->h};
    if (epoll_ctl(s->ep->ctx->p.epfd, EPOLL_CTL_MOD, s->fd, &ev) != 0) {
        int err = errno;
        tcp_ep_fail(s->ep, s->want_out ? "epoll_ctl(EPOLL_CTL_MOD) arming "
                    "EPOLLOUT for a queued send failed" :
                    "epoll_ctl(EPOLL_CTL_MOD) failed", err);
        return -1;
    }
    return 0;
}

void tcp_sock_close(tcp_sock_t *s)
{
    if (s->closed)
        return;
    epoll_ctl(s->ep->ctx->p.epfd, EPOLL_CTL_DEL, s->fd, NULL);
    close(s->fd);
    s->closed = 1;
}

/* The link to this peer is gone: tell the communicator (once). */
void tcp_ep_fail(tcp_ep_t *ep, const char *what, int err)
{
    struct rcoll_tl_ctx *ctx = ep->ctx;
    if (ep->failed)
        return;
    ep->failed = 1;
    if (!ep->end_what[0])
        snprintf(ep->end_what, sizeof(ep->end_what), "%s%s%s", what,
                 err ? ": " : "", err ? strerror(err) : "");
    for (int i = 0; i < ctx->nsocks; i++)
        tcp_sock_close(&ep->socks[i]);
    rcoll_tl_peer_failed(&ctx->p, ep->peer, ep->fail_msg,
                         sizeof(ep->fail_msg), ep->aborted, ep->abort_reason,
                         ep->end_what);
}

void tcp_ep_fail_st(tcp_ep_t *ep, rcoll_status_t st, const char *what)
{
    struct rcoll_tl_ctx *ctx = ep->ctx;
    const rcoll_boot_peer_t *pi = &ctx->p.bs->peers[ep->peer];
    if (ep->failed)
        return;
    ep->failed = 1;
    if (!ep->end_what[0])
        snprintf(ep->end_what, sizeof(ep->end_what), "%s", what);
    for (int i = 0; i < ctx->nsocks; i++)
        tcp_sock_close(&ep->socks[i]);
    snprintf(ep->fail_msg, sizeof(ep->fail_msg), "rank %d (%s pid %d): %s",
             ep->peer, pi->hostname, (int)pi->pid, what);
    ctx->p.ev->peer_failed(ctx->p.ev->arg, ep->peer, st, ep->fail_msg);
}

void tcp_ep_activate(tcp_ep_t *ep)
{
    if (!ep->active) {
        ep->active = 1;
        ep->ctx->nactive++;
    }
}

/* One socket of a peer ended (EOF, reset, timeout, abort notice). When
 * the peer is reached over another socket and did not abort or say
 * goodbye, the ep fails over: the socket is marked lost and closed here,
 * and tcp_fo_poll (tcp_failover.c), which every entry point of the
 * transport runs once a socket was lost, warns, tells the peer and sends
 * its messages again. Otherwise what the peer
 * sent before that on its other sockets is still read (a peer that aborts
 * or dies right after its last message must not lose it); the peer counts
 * as failed once all its sockets ended, or as soon as an operation needs
 * an ended socket. */
void tcp_sock_end(tcp_sock_t *s, const char *what, int err)
{
    tcp_ep_t *ep = s->ep;
    int live = 0;
    if (s->ended || ep->failed)
        return;
    for (int k = 0; k < ep->ctx->nsocks; k++)
        live += k != s->idx && !ep->socks[k].ended;
    if (live && tcp_ep_fo(ep) == 1 && !ep->aborted && !ep->bye) {
        snprintf(s->lost_why, sizeof(s->lost_why), "%s%s%s", what,
                 err ? ": " : "", err ? strerror(err) : "");
        s->ended = s->lost = 1;
        ep->nended++;
        ep->lost_pending = 1;
        tcp_ep_activate(ep);
        tcp_sock_close(s);
        return;
    }
    if (!ep->end_what[0])
        snprintf(ep->end_what, sizeof(ep->end_what), "%s%s%s", what,
                 err ? ": " : "", err ? strerror(err) : "");
    s->ended = 1;
    tcp_sock_close(s);
    if (++ep->nended == ep->ctx->nsocks)
        tcp_ep_fail(ep, what, err);
}

/* An operation needs this socket: the peer's failure, as an error. */
rcoll_status_t tcp_ep_error(tcp_ep_t *ep)
{
    tcp_ep_fail(ep, "connection ended", 0);
    return rcoll__set_error(RCOLL_ERR_REMOTE, "%s", ep->fail_msg);
}

/* ---- the small-payload ring ---- */

/* Where the payload of the next message (`len` bytes) goes in a ring of
 * `size` bytes whose next free byte is *tail: its offset (*off); returns
 * the ring bytes it takes (0 for an empty or big one), and moves *tail.
 * The sender and the receiver run this on the same messages in the same
 * order (per socket), so they agree on every offset. */
uint32_t tcp_ring_place(size_t *tail, size_t size, size_t small,
                        uint32_t len, size_t *off)
{
    *off = 0;
    if (len == 0 || len > small)
        return 0;
    size_t sz = ((size_t)len + TCP_RING_ALIGN - 1) &
                ~(size_t)(TCP_RING_ALIGN - 1);
    size_t skip = *tail + sz > size ? size - *tail : 0;
    *off = skip ? 0 : *tail;
    *tail = (*off + sz) % size;
    return (uint32_t)(skip + sz);
}

/* The sender may have no room left in the ring for its next small
 * payload (it takes less than 2 x small with the skipped end): an idle
 * receiver hands back what it owes. */
int tcp_ring_tight(const tcp_sock_t *s)
{
    return s->rx_ring_held + s->rx_ring_owed + 2 * s->ep->ctx->small >
           s->ep->ctx->ring_size;
}

/* ---- send side ---- */

tcp_txitem_t *tcp_txq_push(tcp_sock_t *s, uint32_t type,
                           const rcoll_msg_hdr_t *hdr, const void *payload,
                           void *cookie)
{
    if (s->txq_count == s->txq_cap)
        return NULL;
    tcp_txitem_t *it = &s->txq[(s->txq_head + s->txq_count) % s->txq_cap];
    memset(it, 0, sizeof(*it));
    it->wire.type = type;
    if (hdr)
        it->wire.hdr = *hdr;
    it->payload = payload;
    it->has_payload = type == TCP_DATA && hdr && hdr->len > 0;
    it->cookie = cookie;
    s->txq_count++;
    return it;
}

/* Writes as much of the queue as the socket takes. */
void tcp_sock_write(tcp_sock_t *s)
{
    tcp_ep_t *ep = s->ep;
    while (!s->closed) {
        if (s->txq_count == 0) {
            if (s->sl.owed > 0 && !s->bye)
                tcp_txq_push(s, TCP_CREDIT, NULL, NULL, NULL);
            else
                break;
        }
        tcp_txitem_t *it = &s->txq[s->txq_head];
        if (it->off == 0) {
            /* the header is built when its first byte goes out; a try
             * that wrote nothing (EAGAIN) took credits already: add */
            it->wire.credits += (uint32_t)rcoll_slots_take_owed(&s->sl,
                                                                INT32_MAX);
            s->rx_big_owed = 0; /* all of them go */
            s->rx_ring_owed = 0;
        }
        struct iovec iov[2];
        int n = 0;
        size_t wlen = sizeof(tcp_wire_t);
        size_t plen = it->has_payload ? it->wire.hdr.len : 0;
        if (it->off < wlen) {
            iov[n].iov_base = (char *)&it->wire + it->off;
            iov[n++].iov_len = wlen - it->off;
            if (plen) {
                iov[n].iov_base = (void *)it->payload;
                iov[n++].iov_len = plen;
            }
        } else {
            iov[n].iov_base = (void *)(it->payload + (it->off - wlen));
            iov[n++].iov_len = plen - (it->off - wlen);
        }
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(s->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                if (!s->want_out) {
                    s->want_out = 1;
                    (void)tcp_sock_set_events(s); /* fails the peer */
                }
                return;
            }
            if (errno == EINTR)
                continue;
            tcp_sock_end(s, "send failed", errno);
            return;
        }
        it->off += (size_t)w;
        if (it->wire.type == TCP_DATA) {
            s->rx_run = 0; /* an answer: not one way (any more) */
            s->oneway = 0;
        } else if (s->oneway) {
            s->oneway_again = 1; /* the kernel went back to pingpong */
        }
        if (it->off == wlen + plen) {
            void *cookie = it->cookie;
            uint32_t type = it->wire.type;
            free(it->own);
            it->own = NULL;
            s->txq_head = (s->txq_head + 1) % s->txq_cap;
            s->txq_count--;
            if (type == TCP_DATA && cookie)
                ep->ctx->p.ev->send_done(ep->ctx->p.ev->arg, cookie);
        }
    }
    if (s->want_out && s->txq_count == 0 && !s->closed) {
        s->want_out = 0;
        (void)tcp_sock_set_events(s); /* fails the peer */
    }
}

rcoll_status_t tcp_push(tcp_sock_t *s, const rcoll_msg_hdr_t *hdr,
                        const void *payload, void *cookie, uint32_t lseq,
                        uint32_t flags)
{
    tcp_ep_t *ep = s->ep;
    int big = hdr->len > ep->ctx->small;
    size_t tail = s->tx_ring_tail, off;
    uint32_t ring = tcp_ring_place(&tail, ep->ctx->ring_size, ep->ctx->small,
                                   hdr->len, &off);
    if (!rcoll_slots_can_send(&s->sl) ||
        (big && s->tx_big_out >= ep->ctx->nbig) ||
        s->tx_ring_used + ring > ep->ctx->ring_size ||
        s->txq_count >= s->txq_cap - TCP_TXQ_CTL(ep->ctx->nsocks)) {
        rcoll_lane_add(&s->st.tx_waits, 1);
        return RCOLL_INPROGRESS;
    }
    if (hdr->len > ep->ctx->p.chunk_size)
        return rcoll__set_error(RCOLL_ERR_INTERNAL, "tcp: a %u-byte message "
                                "to rank %d is larger than a slot (%zu)",
                                hdr->len, ep->peer, ep->ctx->p.chunk_size);
    int n = ep->ctx->nslots, i = (s->tx_fifo_head + s->tx_fifo_count) % n;
    if (ep->fo == 1) {
        /* from a copy, so that a failed socket's messages can go again;
         * the caller's buffer is free at once */
        const char *keep = tcp_keep(s, i, hdr, lseq, off, big, payload);
        if ((!keep && hdr->len) || !s->tx_keep)
            return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "tcp: no memory "
                                    "for a copy of a %u-byte message to "
                                    "rank %d", hdr->len, ep->peer);
        payload = keep;
    }
    tcp_txitem_t *it = tcp_txq_push(s, TCP_DATA, hdr, payload,
                                    ep->fo == 1 ? NULL : cookie);
    it->wire.lseq = lseq;
    it->wire.flags = flags;
    rcoll_slots_sent(&s->sl);
    rcoll_lane_sent(&s->st, hdr->len);
    s->tx_fifo_count++;
    s->tx_isbig[i] = (unsigned char)big;
    s->tx_ring[i] = ring;
    s->tx_big_out += big;
    s->tx_ring_tail = tail;
    s->tx_ring_used += ring;
    if (ep->fo == 1 && cookie)
        ep->ctx->p.ev->send_done(ep->ctx->p.ev->arg, cookie);
    tcp_sock_write(s);
    return RCOLL_OK;
}

rcoll_status_t tcp_send(rcoll_tl_ep_t *tep, const rcoll_msg_hdr_t *hdr,
                        const void *payload, void *cookie, int flags,
                        size_t xfer)
{
    (void)flags; /* the payload is copied onto the wire anyway */
    (void)xfer;
    tcp_ep_t *ep = (tcp_ep_t *)tep;
    if (ep->fo < 0)
        tcp_ep_fo(ep);
    if (ep->nresend > ep->resend_head && !ep->failed)
        return RCOLL_INPROGRESS; /* a lost socket's messages go first */
    tcp_sock_t *s = tcp_tx_sock(ep);
    if (ep->failed || s->ended)
        return tcp_ep_error(ep);
    if (s->bye || s->closed)
        return rcoll__set_error(RCOLL_ERR_REMOTE,
                                "rank %d already destroyed the communicator",
                                ep->peer);
    rcoll_status_t st = tcp_push(s, hdr, payload, cookie,
                                 (uint32_t)ep->tx_seq, 0);
    if (st == RCOLL_OK)
        ep->tx_seq++;
    if (st == RCOLL_OK && ep->fo == 1 && !ep->nended && !s->closed &&
        rcoll_fault("tcp_sock_drop")) { /* (tests: one socket lost) */
        shutdown(s->fd, SHUT_RDWR);
        tcp_sock_end(s, "dropped for RCOLL_FAULT=tcp_sock_drop", 0);
    }
    return st;
}

/* Withdraws the queued sends of an operation that failed (transport op
 * send_revoke), so that nothing reads its buffers once its request
 * completes. A message not started is dropped: the peer never completes
 * its receive (the communicator has failed; the peer learns it from our
 * abort or its own deadline). The one being written, at the queue's head,
 * goes on from a copy of its payload, so that the socket's stream stays
 * whole; with no memory for the copy the socket ends instead. */
static void tcp_sock_revoke(tcp_sock_t *s, void *cookie)
{
    const rcoll_tl_events_t *ev = s->ep->ctx->p.ev;
    int n = s->txq_count, kept = 0;
    for (int i = 0; i < n; i++) {
        tcp_txitem_t it = s->txq[(s->txq_head + i) % s->txq_cap];
        if (it.cookie == cookie && it.wire.type == TCP_DATA) {
            if (i > 0 || s->closed)
                goto drop; /* not started (only the head may be) */
            size_t len = it.has_payload ? it.wire.hdr.len : 0;
            char *copy = len ? malloc(len) : NULL;
            if (len && !copy) {
                tcp_sock_end(s, "out of memory for the rest of a failed "
                             "operation's message", ENOMEM);
                goto drop;
            }
            if (len)
                memcpy(copy, it.payload, len);
            it.payload = it.own = copy;
            it.cookie = NULL;
            ev->send_done(ev->arg, cookie);
        }
        s->txq[(s->txq_head + kept++) % s->txq_cap] = it;
        continue;
    drop:
        free(it.own);
        ev->send_done(ev->arg, cookie);
    }
    s->txq_count = kept;
}

void tcp_send_revoke(rcoll_tl_ctx_t *ctx, void *cookie,
                            const char *why)
{
    (void)why; /* what is dropped never arrives: the abort says why */
    for (int i = 0; i < ctx->p.nranks; i++)
        for (int k = 0; ctx->eps[i] && k < ctx->nsocks; k++)
            tcp_sock_revoke(&ctx->eps[i]->socks[k], cookie);
}

tcp_sock_t *tcp_tx_sock(tcp_ep_t *ep)
{
    int n = ep->ctx->nsocks, k = (int)(ep->tx_seq % (uint64_t)n);
    for (int i = 0; ep->active && i < n; i++)
        if (!ep->socks[(k + i) % n].ended)
            return &ep->socks[(k + i) % n];
    return &ep->socks[k];
}
