/* The TCP transport: RCOLL_TCP_NSOCKS non-blocking sockets per peer,
 * messages striped round-robin over them (message i on socket i % nsocks,
 * so each peer pair stays a FIFO), each socket with its own ring of
 * receive slots and credits piggybacked on the reverse direction.
 *
 * Wire format per socket: a tcp_wire_t header, then `hdr.len` payload bytes
 * for DATA. Credits ride in every header. BYE says a rank destroyed the
 * communicator cleanly; ABORT that it aborted. EOF without either means the
 * process died. */
#include "transport/transport.h"
#include "transport/slots.h"
#include "proto/lanes.h"
#include "util/params.h"
#include <errno.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/uio.h>
#include <unistd.h>

enum { TCP_DATA = 1, TCP_CREDIT = 2, TCP_BYE = 3, TCP_ABORT = 4 };
#define TCP_REASON_MAX 512 /* an ABORT's payload: why the peer gave up */
#define TCP_HELLO_MAGIC 0x74637031U /* "tcp1" */
#define TCP_NPLACE 8 /* receives in place per peer at a time */
/* Reads go through a small staging buffer per socket (allocated on first
 * read): one recv brings a header with its payload, often several small
 * messages; a payload part of TCP_RX_DIRECT bytes or more still missing
 * is read straight into its slot or place (no second copy). */
#define TCP_RX_STAGE (16u << 10)
#define TCP_RX_DIRECT (4u << 10)
/* Each socket has TCP_SLOT_MUL x RCOLL_NSLOTS slots (message headers),
 * and two places for payloads:
 * - a message of more than `small` bytes (tcp_ring_sizes: 4-16 KiB)
 *   takes one of RCOLL_NSLOTS chunk buffers (at most RCOLL_NSLOTS such
 *   messages unreleased);
 * - a smaller one takes its size, rounded up to TCP_RING_ALIGN, in a ring
 *   of TCP_RING_MUL x RCOLL_NSLOTS x `small` bytes, filled and freed in
 *   order (a payload that does not fit before the ring's end starts at
 *   its beginning, and the end is skipped).
 * The sender keeps to all three bounds without being told: slots free in
 * order, so each credit says which of its messages were freed, and it
 * lays out the ring exactly as the receiver does. So a stream of small
 * messages one way (a broadcast's) costs a credit message back every
 * half window of slots (tcp_window; 32 messages at 64 slots: broadcast
 * over loopback, 8 B - 8 KiB, 0-1.1 us faster at 2 ranks than a credit
 * per message, 0.8-4.8 us at 4), a stream of 4 KiB ones every 8, for the
 * memory of TCP_RING_MUL x RCOLL_NSLOTS buffers of 4 KiB, as when every
 * slot had one. */
#define TCP_SMALL 4096u
/* A small communicator gets a bigger ring and sends more through it:
 * `small` is TCP_RING_BUDGET / (peers x sockets x TCP_RING_MUL x
 * RCOLL_NSLOTS), between TCP_SMALL and TCP_SMALL_MAX (16 KiB up to 5
 * ranks at the defaults, 4 KiB from 17 ranks on). A big message costs a
 * chunk buffer, and a one-way stream of them a credit message back per
 * two (half of RCOLL_NSLOTS): a system call on each side and a segment
 * for the sender's stack. Through a ring of 256 KiB, 16 KiB messages
 * cost one per eight (broadcast over loopback against 355cec9, 5
 * interleaved rounds of long runs, benchmarks/ab_long.sh: 2 ranks 16 KiB
 * 8.14 -> 7.49 us, 4 KiB 6.73 -> 6.53; 4 ranks 16 KiB 24.8 -> 17.0 us,
 * 4 KiB 17.4 -> 13.4; 64 KiB 1.01-1.18x). The rings take TCP_RING_BUDGET
 * per rank in all at most, unless the 4 KiB minimum needs more. */
#define TCP_SMALL_MAX 16384u
#define TCP_RING_BUDGET (2u << 20)
#define TCP_SLOT_MUL 16
/* A small communicator gets a deeper window of slots: each socket has
 * TCP_SLOT_BUDGET / (peers x sockets) of them, between TCP_SLOT_MUL x
 * RCOLL_NSLOTS and TCP_SLOT_MAX (both ends work it out from the same
 * numbers), so that a rank's slot headers (about 70 bytes each) take
 * at most TCP_SLOT_BUDGET x 70 bytes unless the minimum needs more. A
 * root streaming small broadcasts stalls once it has filled a peer's
 * slots, until that peer runs and hands credits back, and with ranks
 * oversubscribed a peer may not run for a scheduler's time slice: 4-rank
 * broadcast over loopback on 2 cores, 32-512 B, 682 slots per socket
 * instead of 64 (two sockets per peer): 1.05-1.15x (7 interleaved
 * rounds, docs/benchmarks.md); the root then makes no system
 * call but its sends. */
#define TCP_SLOT_BUDGET 4096
#define TCP_SLOT_MAX 1024
/* Messages queued while the socket takes no more (each ~80 bytes): a
 * send that finds the queue full is retried, as one without a credit */
#define TCP_TXQ_MAX 64
#define TCP_RING_MUL 4
#define TCP_RING_ALIGN 64u

typedef struct {
    uint32_t type;
    uint32_t credits;
    rcoll_msg_hdr_t hdr;
} tcp_wire_t;

typedef struct {
    tcp_wire_t wire;
    const char *payload;
    char *own;         /* the payload, copied when its operation failed
                          mid-write (tcp_send_revoke); freed once written */
    size_t off;        /* bytes of wire+payload written */
    void *cookie;
    int has_payload;
} tcp_txitem_t;

typedef struct tcp_ep tcp_ep_t;

typedef struct {
    rcoll_ev_handler_t h;
    tcp_ep_t *ep;
    int fd;
    int idx;
    /* receive side */
    char *ring;               /* small payloads (ring_size, lazily) */
    size_t rx_ring_tail;      /* where the next small payload goes */
    size_t rx_ring_held;      /* ring bytes of arrived, unreleased ones */
    size_t rx_ring_owed;      /* released, credit not yet sent */
    uint32_t *slot_off;       /* per slot: its payload's ring offset */
    uint32_t *slot_ring;      /*   and the ring bytes it takes */
    char **slot_pay;          /* where each slot's payload is: the ring,
                                 a big buffer or the receiver's
                                 (tcp_recv_place) */
    char **slot_big;          /* the big buffer a slot holds, or NULL */
    unsigned char *slot_isbig; /* the slot's message is > ctx->small */
    int rx_big_held;          /* big messages arrived, not released */
    int rx_big_owed;          /* big ones released, credit not yet sent */
    char **pool;              /* free big buffers (a stack of npool) */
    char **pool_all;          /* every big buffer allocated (nalloc) */
    int npool, nalloc;
    rcoll_msg_hdr_t *slot_hdr;
    rcoll_slots_t sl;         /* the slot/credit state, both ways */
    tcp_wire_t rx_wire;
    char *rb;                 /* staging: bytes read, not yet taken */
    size_t rb_head, rb_tail;  /* [head, tail) of rb holds them */
    size_t rx_off;            /* bytes of the current wire header read */
    size_t rx_poff;           /* payload bytes read */
    int rx_in_payload;
    /* send side */
    unsigned char *tx_isbig;  /* per message not yet credited back, in
                                 order: was it big (a ring of n slots) */
    uint32_t *tx_ring;        /*   and the peer's ring bytes it takes */
    int tx_fifo_head, tx_fifo_count, tx_big_out;
    size_t tx_ring_tail;      /* the peer's ring as we fill it */
    size_t tx_ring_used;      /* its bytes not credited back */
    tcp_txitem_t *txq;        /* ring */
    int txq_cap, txq_head, txq_count;
    int want_out;
    int rx_run;               /* reads that got data since our last data
                                 message (credits do not count) */
    int oneway;               /* rx_run reached TCP_ONEWAY_READS: kept out
                                 of pingpong mode (tcp_recv) */
    int oneway_again;         /* a credit went out since: out again */
    int bye;                  /* the peer said goodbye on this socket */
    int ended;                /* EOF, reset or abort on this socket */
    int closed;               /* fd closed (bye/abort/error) */
    rcoll_lane_stats_t st;
} tcp_sock_t;

struct tcp_ep {
    struct rcoll_tl_ctx *ctx;
    int peer;
    tcp_sock_t *socks;
    uint64_t tx_seq, rx_seq;
    int bye, aborted;         /* what the peer told us (bye: on any socket) */
    char abort_reason[TCP_REASON_MAX];
    int nended;               /* sockets that ended */
    char end_what[256];       /* why the first one ended */
    char fail_msg[1024];      /* the message given to the communicator */
    int failed;
    /* receives posted in place: payload that matches lands in dst */
    struct {
        rcoll_tl_place_t pl;
        size_t landed;        /* payload bytes read straight into dst */
    } place[TCP_NPLACE];
    int nplace;
};

struct rcoll_tl_ctx {
    rcoll_tl_params_t p;
    int nsocks;
    int nslots;               /* per socket: tcp_window() */
    int nbig;                 /* of which may hold big messages: p.nslots */
    size_t small;             /* payloads up to this go to the ring */
    size_t ring_size;         /* TCP_RING_MUL x p.nslots x small */
    int listen_fd;
    tcp_ep_t **eps;           /* by rank */
    uint64_t placed_bytes;    /* payload read straight into receivers'
                                 buffers (tcp_recv_place) */
};

typedef struct {
    uint32_t magic;
    int32_t rank;
    int32_t idx;
    int32_t nsocks;
    uint64_t chunk_size;      /* must match on both ends, like nslots */
    int32_t nslots;
    int32_t pad;
} tcp_hello_t;

static int tcp_usable(char *why, size_t len)
{
    (void)why; /* TCP works wherever sockets do */
    (void)len;
    return 1;
}

static void tcp_ep_fail(tcp_ep_t *ep, const char *what, int err);

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

static void tcp_sock_close(tcp_sock_t *s)
{
    if (s->closed)
        return;
    epoll_ctl(s->ep->ctx->p.epfd, EPOLL_CTL_DEL, s->fd, NULL);
    close(s->fd);
    s->closed = 1;
}

/* The link to this peer is gone: tell the communicator (once). */
static void tcp_ep_fail(tcp_ep_t *ep, const char *what, int err)
{
    struct rcoll_tl_ctx *ctx = ep->ctx;
    const rcoll_boot_peer_t *pi = &ctx->p.bs->peers[ep->peer];
    if (ep->failed)
        return;
    ep->failed = 1;
    if (!ep->end_what[0])
        snprintf(ep->end_what, sizeof(ep->end_what), "%s%s%s", what,
                 err ? ": " : "", err ? strerror(err) : "");
    if (ep->aborted)
        snprintf(ep->fail_msg, sizeof(ep->fail_msg), "rank %d (%s pid %d) "
                 "aborted the communicator%s%s", ep->peer, pi->hostname,
                 pi->pid, ep->abort_reason[0] ? ": " : "", ep->abort_reason);
    else
        snprintf(ep->fail_msg, sizeof(ep->fail_msg), "rank %d (%s pid %d): "
                 "%s", ep->peer, pi->hostname, pi->pid, ep->end_what);
    for (int i = 0; i < ctx->nsocks; i++)
        tcp_sock_close(&ep->socks[i]);
    ctx->p.ev->peer_failed(ctx->p.ev->arg, ep->peer, RCOLL_ERR_REMOTE,
                           ep->fail_msg);
}

/* One socket of a peer ended (EOF, reset, abort notice). What the peer
 * sent before that on its other sockets is still read (a peer that aborts
 * or dies right after its last message must not lose it); the peer counts
 * as failed once all its sockets ended, or as soon as an operation needs
 * an ended socket. */
static void tcp_sock_end(tcp_sock_t *s, const char *what, int err)
{
    tcp_ep_t *ep = s->ep;
    if (s->ended || ep->failed)
        return;
    if (!ep->end_what[0])
        snprintf(ep->end_what, sizeof(ep->end_what), "%s%s%s", what,
                 err ? ": " : "", err ? strerror(err) : "");
    s->ended = 1;
    tcp_sock_close(s);
    if (++ep->nended == ep->ctx->nsocks)
        tcp_ep_fail(ep, what, err);
}

/* An operation needs this socket: the peer's failure, as an error. */
static rcoll_status_t tcp_ep_error(tcp_ep_t *ep)
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
static uint32_t tcp_ring_place(size_t *tail, size_t size, size_t small,
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

/* Slots per socket (TCP_SLOT_BUDGET); every rank computes the same */
static int tcp_window(int nslots, int nranks, int nsocks)
{
    long base = (long)TCP_SLOT_MUL * nslots;
    long w = TCP_SLOT_BUDGET / ((long)RCOLL_MAX(nranks - 1, 1) *
                                RCOLL_MAX(nsocks, 1));
    return (int)RCOLL_MAX(base, RCOLL_MIN(w, TCP_SLOT_MAX));
}

/* The ring's threshold and size (TCP_RING_BUDGET); every rank computes
 * the same */
static void tcp_ring_sizes(int nslots, int nranks, int nsocks,
                           size_t *small, size_t *ring)
{
    size_t per = (size_t)TCP_RING_MUL * (size_t)RCOLL_MAX(nslots, 1);
    size_t b = TCP_RING_BUDGET / ((size_t)RCOLL_MAX(nranks - 1, 1) *
                                  (size_t)RCOLL_MAX(nsocks, 1) * per);
    b &= ~(size_t)(TCP_RING_ALIGN - 1);
    *small = RCOLL_MAX(TCP_SMALL, RCOLL_MIN(b, TCP_SMALL_MAX));
    *ring = per * *small;
}

/* The sender may have no room left in the ring for its next small
 * payload (it takes less than 2 x small with the skipped end): an idle
 * receiver hands back what it owes. */
static int tcp_ring_tight(const tcp_sock_t *s)
{
    return s->rx_ring_held + s->rx_ring_owed + 2 * s->ep->ctx->small >
           s->ep->ctx->ring_size;
}

/* ---- send side ---- */

static int tcp_txq_push(tcp_sock_t *s, uint32_t type,
                        const rcoll_msg_hdr_t *hdr, const void *payload,
                        void *cookie)
{
    if (s->txq_count == s->txq_cap)
        return -1;
    tcp_txitem_t *it = &s->txq[(s->txq_head + s->txq_count) % s->txq_cap];
    memset(it, 0, sizeof(*it));
    it->wire.type = type;
    if (hdr)
        it->wire.hdr = *hdr;
    it->payload = payload;
    it->has_payload = type == TCP_DATA && hdr && hdr->len > 0;
    it->cookie = cookie;
    s->txq_count++;
    return 0;
}

/* Writes as much of the queue as the socket takes. */
static void tcp_sock_write(tcp_sock_t *s)
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

static rcoll_status_t tcp_send(rcoll_tl_ep_t *tep, const rcoll_msg_hdr_t *hdr,
                               const void *payload, void *cookie, int flags,
                               size_t xfer)
{
    (void)flags; /* the payload is copied onto the wire anyway */
    (void)xfer;
    tcp_ep_t *ep = (tcp_ep_t *)tep;
    tcp_sock_t *s = &ep->socks[ep->tx_seq % (uint64_t)ep->ctx->nsocks];
    if (ep->failed || s->ended)
        return tcp_ep_error(ep);
    if (s->bye || s->closed)
        return rcoll__set_error(RCOLL_ERR_REMOTE,
                                "rank %d already destroyed the communicator",
                                ep->peer);
    int big = hdr->len > ep->ctx->small;
    size_t tail = s->tx_ring_tail, off;
    uint32_t ring = tcp_ring_place(&tail, ep->ctx->ring_size, ep->ctx->small,
                                   hdr->len, &off);
    if (!rcoll_slots_can_send(&s->sl) ||
        (big && s->tx_big_out >= ep->ctx->nbig) ||
        s->tx_ring_used + ring > ep->ctx->ring_size) {
        rcoll_lane_add(&s->st.tx_waits, 1);
        return RCOLL_INPROGRESS;
    }
    if (hdr->len > ep->ctx->p.chunk_size)
        return rcoll__set_error(RCOLL_ERR_INTERNAL, "tcp: a %u-byte message "
                                "to rank %d is larger than a slot (%zu)",
                                hdr->len, ep->peer, ep->ctx->p.chunk_size);
    if (tcp_txq_push(s, TCP_DATA, hdr, payload, cookie) != 0) {
        rcoll_lane_add(&s->st.tx_waits, 1);
        return RCOLL_INPROGRESS;
    }
    rcoll_slots_sent(&s->sl);
    rcoll_lane_sent(&s->st, hdr->len);
    int n = ep->ctx->nslots, i = (s->tx_fifo_head + s->tx_fifo_count++) % n;
    s->tx_isbig[i] = (unsigned char)big;
    s->tx_ring[i] = ring;
    s->tx_big_out += big;
    s->tx_ring_tail = tail;
    s->tx_ring_used += ring;
    ep->tx_seq++;
    tcp_sock_write(s);
    return RCOLL_OK;
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

static void tcp_send_revoke(rcoll_tl_ctx_t *ctx, void *cookie,
                            const char *why)
{
    (void)why; /* what is dropped never arrives: the abort says why */
    for (int i = 0; i < ctx->p.nranks; i++)
        for (int k = 0; ctx->eps[i] && k < ctx->nsocks; k++)
            tcp_sock_revoke(&ctx->eps[i]->socks[k], cookie);
}

/* ---- receive side ---- */

static int tcp_handle_wire(tcp_sock_t *s)
{
    tcp_ep_t *ep = s->ep;
    tcp_wire_t *w = &s->rx_wire;
    /* unsigned on the wire: compared before it is added (a huge value
     * cast to int went negative and stalled the sender for good) */
    if (rcoll_slots_credit(&s->sl, w->credits) != 0) {
        tcp_ep_fail(ep, "protocol error: too many credits", 0);
        return -1;
    }
    /* the slots free in order: the oldest messages' */
    for (uint32_t i = 0; i < w->credits; i++) {
        s->tx_big_out -= s->tx_isbig[s->tx_fifo_head];
        s->tx_ring_used -= s->tx_ring[s->tx_fifo_head];
        s->tx_fifo_head = (s->tx_fifo_head + 1) % ep->ctx->nslots;
        s->tx_fifo_count--;
    }
    switch (w->type) {
    case TCP_CREDIT:
        return 0;
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
        if (w->hdr.len > 0 && w->hdr.len < TCP_REASON_MAX)
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
 * on the sender's core (perf: __sock_wfree, tcp_v4_rcv under the root's
 * sendmsg). Out of it, the read that empties the socket ACKs, on the
 * receiver's core. That helps a sustained stream, whose sender is the
 * bottleneck (long runs against the build before, benchmarks/ab_long.sh,
 * 5 rounds: 2-rank broadcast 256 B - 4 KiB 1.16-1.24x, 4 ranks
 * 1.09-1.14x, all-reduce unchanged; docs/performance-small.md), but not
 * a short burst, whose receiver finishes last and then also sends an
 * ACK per read: 20 broadcasts after a barrier (rcoll-perf -n 20, 2
 * ranks) took 1.27x as long at 8 B and 1.10x at 512 B - 2 KiB when the
 * switch came after 4 reads. So it comes after TCP_ONEWAY_READS reads
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
    for (int i = 0; i < ep->nplace; i++) {
        const rcoll_tl_place_t *pl = &ep->place[i].pl;
        if (pl->seq != h->seq || pl->step != h->step ||
            pl->kind != (h->kind & ~RCOLL_HDR_CSUM) || pl->tag != h->tag ||
            pl->total != h->total)
            continue;
        size_t off = (size_t)h->chunk * pl->chunk;
        if (h->chunk >= (pl->bytes + pl->chunk - 1) / pl->chunk ||
            h->len > pl->bytes - off)
            return NULL; /* not what it should be: the receiver sees */
        ep->place[i].landed += h->len;
        rcoll_lane_add(&ep->ctx->placed_bytes, h->len);
        return pl->dst + off;
    }
    return NULL;
}

static int tcp_recv_place(rcoll_tl_ep_t *tep, const rcoll_tl_place_t *pl)
{
    tcp_ep_t *ep = (tcp_ep_t *)tep;
    if (ep->nplace == TCP_NPLACE || !pl->chunk || !pl->bytes)
        return 0;
    ep->place[ep->nplace].pl = *pl;
    ep->place[ep->nplace++].landed = 0;
    return 1;
}

/* A buffer of the slot's class for its message: its place in the ring,
 * or a big one from the pool (the sender keeps at most nbig big messages
 * unreleased, so one is free). NULL: out of memory, or a sender past its
 * limit (a protocol error). Both are allocated on first use. The ring is
 * also mapped at once (rcoll_prefault): otherwise every message of its
 * first lap takes the faults of the pages it lands on, and the first
 * calls of a size run slow (2-rank 8 KiB all-reduce over loopback: 10-12
 * us per call for the first 64 calls, 2 sockets x a 256 KiB ring, then
 * 7-8 us; with rcoll-perf's default -n 20 -w 5, 11.3-13.8 us against
 * 7.1-7.8 with -n 1000). A big buffer is not: a message of 20 KiB would
 * map all RCOLL_CHUNK_SIZE bytes of it, up to RCOLL_NSLOTS per socket,
 * and it is filled in its first use by a chunk-sized one anyway. */
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

static void tcp_recv_unplace(rcoll_tl_ep_t *tep, const rcoll_tl_place_t *pl)
{
    tcp_ep_t *ep = (tcp_ep_t *)tep;
    int i = 0;
    while (i < ep->nplace && (ep->place[i].pl.seq != pl->seq ||
                              ep->place[i].pl.step != pl->step ||
                              ep->place[i].pl.dst != pl->dst))
        i++;
    if (i == ep->nplace)
        return;
    rcoll_debug(RCOLL_SUBSYS_NET, "tcp: %zu of %zu bytes from rank %d "
                "(message %llu, transfer %u) landed in place",
                ep->place[i].landed, pl->bytes, ep->peer,
                (unsigned long long)pl->seq, pl->step);
    ep->place[i] = ep->place[--ep->nplace];
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

static void tcp_sock_read(tcp_sock_t *s)
{
    tcp_ep_t *ep = s->ep;
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
                /* an abort's reason: short, read it right here */
                size_t len = s->rx_wire.hdr.len;
                size_t got = tcp_take(s, ep->abort_reason, len);
                double dl = rcoll_time_sec() + 1.0;
                if (got == len ||
                    rcoll_sock_recv_all(s->fd, ep->abort_reason + got,
                                        len - got, dl) == RCOLL_OK)
                    ep->abort_reason[len] = '\0';
                else
                    ep->abort_reason[0] = '\0';
                tcp_sock_end(s, "aborted", 0);
                return;
            }
            int slot = rcoll_slots_next(&s->sl); /* free: checked above */
            s->slot_hdr[slot] = s->rx_wire.hdr;
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
                return;
            }
            if (big && ++s->rx_big_held > ep->ctx->nbig) {
                tcp_ep_fail(ep, "protocol error: more large messages than "
                            "large slots", 0);
                return;
            }
            if (s->rx_wire.hdr.len == 0) {
                s->slot_pay[slot] = NULL;
                rcoll_slots_arrived(&s->sl);
                continue;
            }
            s->slot_pay[slot] = tcp_place_find(ep, &s->rx_wire.hdr);
            if (!s->slot_pay[slot] &&
                !(s->slot_pay[slot] = tcp_slot_buf(s, slot))) {
                tcp_ep_fail(ep, "out of memory for a receive slot", ENOMEM);
                return;
            }
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

static void tcp_sock_event(rcoll_ev_handler_t *h, uint32_t events)
{
    tcp_sock_t *s = (tcp_sock_t *)h;
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
        tcp_sock_read(s);
    if ((events & EPOLLOUT) && !s->closed)
        tcp_sock_write(s);
}

static rcoll_status_t tcp_recv_peek(rcoll_tl_ep_t *tep,
                                    const rcoll_msg_hdr_t **hdr,
                                    const void **payload)
{
    tcp_ep_t *ep = (tcp_ep_t *)tep;
    tcp_sock_t *s = &ep->socks[ep->rx_seq % (uint64_t)ep->ctx->nsocks];
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

static void tcp_recv_release(rcoll_tl_ep_t *tep)
{
    tcp_ep_t *ep = (tcp_ep_t *)tep;
    tcp_sock_t *s = &ep->socks[ep->rx_seq % (uint64_t)ep->ctx->nsocks];
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
    ep->rx_seq++;
    /* Credits go back with our next message to that peer, or alone once
     * half the slots are owed, or when the engine runs out of work
     * (tcp_idle): a message alone costs a system call on each side, and
     * in a request-response pattern the next message comes soon. The
     * engine calls tcp_idle before it waits, so a peer never waits for
     * credits that we sit on while it has none. */
    if (half && s->txq_count == 0 && !s->bye && !s->closed)
        tcp_sock_write(s);
}

static int tcp_recv_full(rcoll_tl_ep_t *tep)
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
 * slots (tcp_recv_release): a stream of small messages one way (a
 * broadcast's) no longer costs a credit message back per message, which
 * was a system call on each side and a segment for the root's stack to
 * take (2-rank 32-byte broadcast over loopback: 10 -> 7 us). */
static int tcp_idle(rcoll_tl_ctx_t *ctx)
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
        for (int j = 0; s->txq && j < s->txq_count; j++)
            free(s->txq[(s->txq_head + j) % s->txq_cap].own);
        free(s->txq);
        free(s->rb);
    }
    free(ep->socks);
    free(ep);
}

/* A socket's state before it is connected: its slots, the send queue;
 * -1 out of memory (tcp_ep_free frees what was allocated). */
static int tcp_sock_init(struct rcoll_tl_ctx *ctx, tcp_ep_t *ep,
                         tcp_sock_t *s, int k)
{
    size_t ns = (size_t)ctx->nslots, nb = (size_t)ctx->nbig;
    s->h.cb = tcp_sock_event;
    s->ep = ep;
    s->fd = -1;
    s->closed = 1;
    s->idx = k;
    rcoll_slots_init(&s->sl, ctx->nslots);
    s->txq_cap = RCOLL_MIN(ctx->nslots, TCP_TXQ_MAX) + 4;
    s->slot_off = calloc(ns, sizeof(uint32_t));
    s->slot_ring = calloc(ns, sizeof(uint32_t));
    s->tx_ring = calloc(ns, sizeof(uint32_t));
    s->slot_hdr = calloc(ns, sizeof(rcoll_msg_hdr_t));
    s->slot_pay = calloc(ns, sizeof(char *));
    s->slot_big = calloc(ns, sizeof(char *));
    s->slot_isbig = calloc(ns, 1);
    s->tx_isbig = calloc(ns, 1);
    s->pool = calloc(nb, sizeof(char *));
    s->pool_all = calloc(nb, sizeof(char *));
    s->txq = calloc((size_t)s->txq_cap, sizeof(tcp_txitem_t));
    if (!s->slot_off || !s->slot_ring || !s->tx_ring || !s->slot_hdr ||
        !s->slot_pay || !s->slot_big || !s->slot_isbig || !s->tx_isbig ||
        !s->pool || !s->pool_all || !s->txq)
        return -1;
    return 0;
}

static rcoll_status_t tcp_sock_setup(struct rcoll_tl_ctx *ctx, int peer,
                                     int idx, int fd)
{
    tcp_ep_t *ep = ctx->eps[peer];
    tcp_sock_t *s = &ep->socks[idx];
    if (s->fd >= 0) {
        close(fd);
        return rcoll__set_error(RCOLL_ERR_PROTOCOL,
                                "tcp: rank %d connected socket %d twice", peer,
                                idx);
    }
    s->fd = fd;
    s->closed = 0;
    rcoll_sock_set_nonblock(fd, 1);
    int sz = (int)RCOLL_MIN(ctx->p.chunk_size * 4, 8u << 20);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP,
                             .data.ptr = &s->h};
    if (epoll_ctl(ctx->p.epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "tcp: epoll_ctl: %s",
                                strerror(errno));
    return RCOLL_OK;
}

static void tcp_ctx_destroy(rcoll_tl_ctx_t *ctx, int abort,
                            const char *reason);

/* An endpoint with its sockets for every peer this rank talks to. */
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
        for (int k = 0; k < ctx->nsocks; k++)
            if (tcp_sock_init(ctx, ep, &ep->socks[k], k) != 0)
                return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "tcp: no memory");
    }
    return RCOLL_OK;
}

/* Listens on the bootstrap's interface; every rank's address in addrs. */
static rcoll_status_t tcp_listen_exchange(struct rcoll_tl_ctx *ctx,
                                          rcoll_sockaddr_t *addrs)
{
    const rcoll_tl_params_t *p = &ctx->p;
    rcoll_sockaddr_t me = p->bs->peers[p->rank].boot_addr;
    char a[128];
    rcoll_status_t st;
    if (me.sa.sa_family == AF_INET)
        me.sin.sin_port = 0;
    else
        me.sin6.sin6_port = 0;
    if ((st = rcoll_sock_listen(&me, 0, &ctx->listen_fd)) != RCOLL_OK)
        return st;
    addrs[p->rank] = me;
    if ((st = rcoll_bootstrap_allgather(p->bs, addrs, sizeof(*addrs))) !=
        RCOLL_OK)
        return st;
    rcoll_debug(RCOLL_SUBSYS_NET, "tcp: rank %d listens on %s, %d sockets "
                "per peer", p->rank, rcoll_sock_addr_str(&me, a, sizeof(a)),
                ctx->nsocks);
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

/* An authenticated hello with other settings than ours: both sides would
 * fail later in confusing ways, so stop here and say why. */
static rcoll_status_t tcp_hello_agree(const struct rcoll_tl_ctx *ctx,
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
    for (int got = 0; got < lower * ctx->nsocks;) {
        int fd, ready;
        tcp_hello_t h;
        st = rcoll_acceptor_next(acc, deadline, &h, &fd, NULL, 0, &ready);
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
            !use[h.rank] || h.idx < 0 || h.idx >= ctx->nsocks) {
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

/* Connects every socket to every higher peer. */
static rcoll_status_t tcp_connect_higher(struct rcoll_tl_ctx *ctx,
                                         const uint8_t *use,
                                         const rcoll_sockaddr_t *addrs,
                                         double deadline)
{
    const rcoll_tl_params_t *p = &ctx->p;
    int r = p->rank;
    char a[128];
    rcoll_status_t st;
    for (int peer = r + 1; peer < p->nranks; peer++) {
        for (int k = 0; use[peer] && k < ctx->nsocks; k++) {
            int fd;
            tcp_hello_t h = {TCP_HELLO_MAGIC, r, k, ctx->nsocks,
                             p->chunk_size, p->nslots, 0};
            /* its listener was up before the address exchange: refused
             * means it died (1 s covers a full accept queue) */
            st = rcoll_sock_connect_peer(
                &addrs[peer], deadline,
                RCOLL_MIN(deadline, rcoll_time_sec() + 1.0), &fd);
            if (st == RCOLL_OK) {
                st = rcoll_sock_auth_connect(fd, p->secret, &h, sizeof(h),
                                             deadline);
                if (st != RCOLL_OK)
                    close(fd);
            }
            if (st != RCOLL_OK)
                return rcoll__set_error(st, "tcp: rank %d cannot connect to "
                                        "rank %d at %s: %s", r, peer,
                                        rcoll_sock_addr_str(&addrs[peer], a,
                                                            sizeof(a)),
                                        rcoll_last_error());
            if ((st = tcp_sock_setup(ctx, peer, k, fd)) != RCOLL_OK)
                return st;
        }
    }
    return RCOLL_OK;
}

/* Sockets to every peer of this rank: listen and exchange addresses, then
 * a full mesh among the peers, accepting everything from lower ranks
 * before connecting to higher ones (no cycle, so no deadlock). */
static rcoll_status_t tcp_ctx_create(const rcoll_tl_params_t *p,
                                     rcoll_tl_ctx_t **ctx_p,
                                     rcoll_tl_ep_t **eps)
{
    struct rcoll_tl_ctx *ctx = calloc(1, sizeof(*ctx));
    rcoll_sockaddr_t *addrs = NULL;
    rcoll_status_t st;
    int n = p->nranks, r = p->rank;
    double deadline = rcoll_time_sec() + p->timeout;

    if (!ctx)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "tcp: no memory");
    ctx->p = *p;
    ctx->nsocks = rcoll_config.tcp_nsocks;
    ctx->nbig = p->nslots;
    ctx->nslots = tcp_window(p->nslots, n, ctx->nsocks);
    tcp_ring_sizes(p->nslots, n, ctx->nsocks, &ctx->small, &ctx->ring_size);
    ctx->listen_fd = -1;
    ctx->eps = calloc((size_t)n, sizeof(*ctx->eps));
    addrs = calloc((size_t)n, sizeof(*addrs));
    if (!ctx->eps || !addrs) {
        st = rcoll__set_error(RCOLL_ERR_NO_MEMORY, "tcp: no memory");
        goto err;
    }
    const uint8_t *use = p->pairs + (size_t)r * (size_t)n; /* our peers */
    int lower = 0;
    for (int i = 0; i < r; i++)
        lower += use[i];
    if ((st = tcp_alloc_eps(ctx, use)) != RCOLL_OK ||
        (st = tcp_listen_exchange(ctx, addrs)) != RCOLL_OK ||
        (st = tcp_accept_lower(ctx, use, lower, deadline)) != RCOLL_OK)
        goto err;
    /* every lower rank is connected and higher ones are ours to call: the
     * listener has done its work (left open, a stranger could still
     * connect to it for the communicator's life) */
    close(ctx->listen_fd);
    ctx->listen_fd = -1;
    if ((st = tcp_connect_higher(ctx, use, addrs, deadline)) != RCOLL_OK)
        goto err;
    free(addrs);
    for (int i = 0; i < n; i++)
        eps[i] = (rcoll_tl_ep_t *)ctx->eps[i];
    *ctx_p = ctx;
    return RCOLL_OK;
err:
    free(addrs);
    return rcoll_tl_create_failed(ctx, tcp_ctx_destroy, st);
}

static void tcp_ctx_destroy(rcoll_tl_ctx_t *ctx, int abort,
                            const char *reason)
{
    size_t rlen = reason ? RCOLL_MIN(strlen(reason), TCP_REASON_MAX - 1) : 0;
    int n = ctx->p.nranks;
    double deadline = rcoll_time_sec() + RCOLL_MIN(2.0, ctx->p.timeout);

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
             "buffer", k, nslots,
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
             "socket i mod %d", rcoll_config.tcp_nsocks);
    return rcoll_config.tcp_nsocks;
}

static void tcp_stats(rcoll_tl_ctx_t *ctx, FILE *f)
{
    rcoll_lane_stats_t sum[64] = {{0}};
    int n = RCOLL_MIN(ctx->nsocks, 64), peers = 0;
    for (int i = 0; ctx->eps && i < ctx->p.nranks; i++) {
        tcp_ep_t *ep = ctx->eps[i];
        peers += ep != NULL;
        for (int k = 0; ep && k < n; k++)
            rcoll_lanes_sum(&sum[k], &ep->socks[k].st);
    }
    fprintf(f, "rcoll:     %d lanes per peer (sockets), %d peers, %d slots "
            "per socket, %zu bytes received in place\n", ctx->nsocks, peers,
            ctx->nslots, (size_t)__atomic_load_n(&ctx->placed_bytes,
                                                 __ATOMIC_RELAXED));
    rcoll_lanes_print(f, "socket k of every peer", n, sum);
}

const rcoll_tl_ops_t rcoll_tl_tcp_ops = {
    .name = "tcp",
    .doc = "TCP sockets (any network; RCOLL_TCP_NSOCKS per peer)",
    .usable = tcp_usable,
    .local_only = 0,
    .ctx_create = tcp_ctx_create,
    .send = tcp_send,
    .recv_peek = tcp_recv_peek,
    .recv_release = tcp_recv_release,
    .recv_full = tcp_recv_full,
    .lanes = tcp_lanes,
    .stats = tcp_stats,
    .recv_place = tcp_recv_place,
    .recv_unplace = tcp_recv_unplace,
    .send_revoke = tcp_send_revoke,
    .progress = NULL,
    .idle = tcp_idle,
    .ctx_destroy = tcp_ctx_destroy,
    .peer_bytes = tcp_peer_bytes,
};
