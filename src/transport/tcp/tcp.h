/* The TCP transport: RCOLL_TCP_NSOCKS non-blocking sockets per peer,
 * messages striped round-robin over them (message i on socket i % nsocks,
 * so each peer pair stays a FIFO), each socket with its own ring of
 * receive slots and credits piggybacked on the reverse direction.
 * tcp_data.c is the data path's send side (sends, failures of a peer),
 * tcp_recv.c its receive side (reads, receives in place, credits),
 * tcp_ctx.c the context (sockets set up and torn
 * down, the ops table), tcp_sock.c a socket taken into use (by both
 * set-ups), tcp_lazy.c connections on first use, tcp_rails.c rails,
 * tcp_failover.c a rail's loss survived.
 *
 * Wire format per socket: a tcp_wire_t header, then `hdr.len` payload bytes
 * for DATA. Credits ride in every header. BYE says a rank destroyed the
 * communicator cleanly; ABORT that it aborted. EOF without either means the
 * process died. */
#ifndef RCOLL_TCP_H
#define RCOLL_TCP_H
#include "transport/transport.h"
#include "transport/slots.h"
#include "proto/lanes.h"
#include "proto/place.h"
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

enum { TCP_DATA = 1, TCP_CREDIT = 2, TCP_BYE = 3, TCP_ABORT = 4,
       TCP_RAIL = 5 };
#define TCP_F_RESENT 1u /* DATA: a copy sent again after a rail failed */
#define TCP_HELLO_MAGIC 0x74637031U /* "tcp1" */
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
 * half window of slots (tcp_window; 32 messages at 64 slots), not one per
 * message, and with `small` at its 4 KiB minimum a stream of 4 KiB ones
 * costs one every 8. */
#define TCP_SMALL 4096u
/* A small communicator gets a bigger ring and sends more through it:
 * `small` is TCP_RING_BUDGET / (peers x sockets x TCP_RING_MUL x
 * RCOLL_NSLOTS), between TCP_SMALL and TCP_SMALL_MAX (16 KiB up to 5
 * ranks at the defaults, 4 KiB from 17 ranks on). A big message costs a
 * chunk buffer, and a one-way stream of them a credit message back per
 * two (half of RCOLL_NSLOTS): a system call on each side and a segment
 * for the sender's stack. Through a ring of 256 KiB, 16 KiB messages
 * cost one per eight, about 30% off a 4-rank 16 KiB broadcast over
 * loopback (docs/performance.md). The rings take TCP_RING_BUDGET
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
 * oversubscribed a peer may not run for a scheduler's time slice. With
 * the deeper window (682 slots per socket at 4 ranks, not 64) the root
 * makes no system call but its sends (docs/design.md). */
#define TCP_SLOT_BUDGET 4096
#define TCP_SLOT_MAX 1024
/* Messages queued while the socket takes no more (each ~80 bytes): a
 * send that finds the queue full is retried, as one without a credit.
 * TCP_TXQ_CTL(nsocks) more entries are kept for control messages (a
 * credit, a failover notice per other socket of the peer, one spare). */
#define TCP_TXQ_MAX 64
#define TCP_TXQ_CTL(nsocks) ((nsocks) + 2)
#define TCP_RING_MUL 4
#define TCP_RING_ALIGN 64u

typedef struct {
    uint32_t type;
    uint32_t credits;
    uint32_t lseq;     /* DATA: the message's number from this rank to the
                          peer (mod 2^32); RAIL: the next such number */
    uint32_t flags;    /* DATA: TCP_F_RESENT; RAIL: the failed socket |
                          its generation << 8 (tcp_sock_t.gen) */
    rcoll_msg_hdr_t hdr;
} tcp_wire_t;

/* Rails (tcp_rails.c): the interfaces a rank's sockets leave through, as
 * its peers learn them in the address exchange. Socket k to a peer goes
 * over the k-th pair (mod the pairs) of our rail and its rail in one
 * subnet; pair 0 is the two bootstrap addresses. */
#define TCP_MAX_RAILS 4
typedef struct {
    uint8_t family;           /* 4 or 6 */
    uint8_t prefix;           /* the subnet's prefix length */
    uint8_t addr[16];         /* 4 bytes for IPv4 */
    char ifname[16];
} tcp_rail_t;
typedef struct {
    int32_t nrails;
    uint16_t port;            /* where the rank listens, on every rail */
    uint16_t pad;
    tcp_rail_t rail[TCP_MAX_RAILS];
} tcp_rails_t;

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
    int rail;                 /* our rail it leaves through; -1 unknown */
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
    /* failover (tcp_failover.c): per message not yet credited back, in
     * the same order, a copy of it (an ep that may fail over sends from
     * copies, so that the messages a failed rail lost can go again) */
    char **tx_keep;           /*   its payload's copy (NULL: none) */
    rcoll_msg_hdr_t *tx_hdr;  /*   its header */
    uint32_t *tx_lseq;        /*   its number */
    char *keep_ring;          /* copies of small payloads, laid out as the
                                 peer's ring (ring_size, lazily) */
    char **keep_pool;         /* free copy buffers of big ones */
    char **keep_all;          /* every one allocated (nkeep) */
    int nkeep_free, nkeep;
    uint32_t *slot_lseq;      /* receive side: each slot's message number */
    int want_out;
    int rx_run;               /* reads that got data since our last data
                                 message (credits do not count) */
    int oneway;               /* rx_run reached TCP_ONEWAY_READS: kept out
                                 of pingpong mode (tcp_recv) */
    int oneway_again;         /* a credit went out since: out again */
    struct tcp_conn *conn;    /* our connection under way (lazy) */
    double await;             /* until then the peer connects it (it
                                 answered our hello "no"; tcp_lazy.c) */
    int allocated;            /* tcp_sock_alloc succeeded */
    int bye;                  /* the peer said goodbye on this socket */
    int ended;                /* EOF, reset or abort on this socket */
    int lost;                 /* it ended and the peer is reached over
                                 the other sockets: failing over */
    int down;                 /*   and tcp_fo_poll has taken it down */
    uint32_t told;            /* the lost sockets (bits) whose loss this
                                 one has told the peer of */
    char lost_why[160];
    int resends;              /* its messages waiting to go again over the
                                 others (their copies are its buffers) */
    uint32_t gen;             /* its connection's number (failback), below
                                 2^24: a loss notice of another is old */
    uint32_t gen_tried;       /* the highest number we proposed for it */
    uint32_t peer_lost;       /* 1 + a number not ours the peer said it
                                 lost (0: none): an answer for it is old */
    double retry_at;          /* taken down: when to connect it again */
    int closed;               /* fd closed (bye/abort/error) */
    rcoll_lane_stats_t st;
} tcp_sock_t;

struct tcp_ep {
    struct rcoll_tl_ctx *ctx;
    int peer;
    tcp_sock_t *socks;
    uint64_t tx_seq, rx_seq;
    int bye, aborted;         /* what the peer told us (bye: on any socket) */
    char abort_reason[RCOLL_TL_REASON];
    int nended;               /* sockets that ended */
    char end_what[256];       /* why the first one ended */
    char fail_msg[1024];      /* the message given to the communicator */
    int failed;
    /* receives posted in place: payload that matches lands in dst */
    rcoll_places_t places;
    /* failover (tcp_failover.c) */
    int fo;                   /* may fail over: -1 not known yet */
    int active;               /* a socket failed: messages are found by
                                 number, not by socket i mod n */
    int lost_pending;         /* a socket lost, not yet taken down */
    uint32_t down_mask;       /* the sockets taken down (bits) */
    int cur;                  /* where the message peeked last is: a
                                 socket, or -1 - i for side[i] */
    int tx_rr;                /* the socket resends start at */
    uint32_t rx_upto;         /* the peer's notice: its messages below this
                                 number may come out of order */
    int have_upto;
    struct tcp_resend *resend; /* copies to send again, oldest first */
    int nresend, resend_head, resend_cap, draining;
    struct tcp_side **side;   /* messages taken out of order from slots */
    int nside, side_cap;
};

struct rcoll_tl_ctx {
    rcoll_tl_params_t p;
    int nsocks;
    int nslots;               /* per socket: tcp_window() */
    int nbig;                 /* of which may hold big messages: p.nslots */
    size_t small;             /* payloads up to this go to the ring */
    size_t ring_size;         /* TCP_RING_MUL x p.nslots x small */
    int listen_fd;
    int lazy;                 /* sockets connect on first use */
    uint8_t secret[16];       /* the job's (p.secret is set-up's only) */
    rcoll_ev_handler_t lh;    /* the listener, lazy */
    struct tcp_conn *conns;   /* connections in their handshake, lazy */
    struct tcp_conn *dead;    /*   and those ended, freed when idle */
    int nconns;
    tcp_rails_t *rails;       /* every rank's rails, by rank */
    unsigned rails_bad;       /* our rails that failed to connect */
    tcp_ep_t **eps;           /* by rank */
    uint64_t placed_bytes;    /* payload read straight into receivers'
                                 buffers (tcp_recv_place) */
    int nactive;              /* eps with a lost socket */
    uint64_t rails_down;      /* sockets lost and failed over */
    uint64_t resent;          /* messages sent again over another socket */
    uint64_t taken_aside;     /* messages moved out of their slots */
    uint64_t rails_up;        /* lost sockets connected again (failback) */
};

typedef struct {
    uint32_t magic;
    int32_t rank;
    int32_t idx;
    int32_t nsocks;
    uint64_t chunk_size;      /* must match on both ends, like nslots */
    int32_t nslots;
    int32_t to;               /* the rank it is for (a connection that
                                 reached another process is dropped) */
    uint32_t gen;             /* failback: the number proposed for the new
                                 connection of a socket taken down */
    uint32_t pad;             /* 0: every byte sent is a member's */
} tcp_hello_t;
/* (no padding: the bytes sent and MAC'd are all initialized) */
_Static_assert(sizeof(tcp_hello_t) == 40, "tcp_hello_t has padding");


/* tcp_rails.c: this rank's rails, rail 0 the bootstrap's address `boot`
 * (at most `max`); the pairs of our rails and a peer's (pairs[i] = {ours,
 * its}, pair 0 first; returns how many); a rail's address with a port;
 * the rail of ours a connected socket is bound to (-1: none); the rails
 * as "0 eth0 10.0.0.1/24, 1 ...". */
void tcp_rails_find(const rcoll_sockaddr_t *boot, int max, tcp_rails_t *rs);
int tcp_rails_pair(const tcp_rails_t *me, const tcp_rails_t *peer,
                   uint8_t pairs[][2]);
void tcp_rail_addr(const tcp_rail_t *r, uint16_t port, rcoll_sockaddr_t *sa);
int tcp_rail_of(const tcp_rails_t *rs, int fd);
void tcp_rails_str(const tcp_rails_t *rs, char *buf, size_t len);

/* tcp_sock.c, for both set-ups: a socket's slots and queue (0, or -1 out
 * of memory; once per socket); a connected socket taken into use; whether
 * a peer's hello agrees with our settings; the slots per socket and the
 * small-payload ring's threshold and size (every rank works out the
 * same). */
int tcp_sock_alloc(struct rcoll_tl_ctx *ctx, tcp_sock_t *s);
rcoll_status_t tcp_sock_setup(struct rcoll_tl_ctx *ctx, int peer, int idx,
                              int fd);
rcoll_status_t tcp_hello_agree(const struct rcoll_tl_ctx *ctx,
                               const tcp_hello_t *h);
int tcp_window(int nslots, int nranks, int nsocks);
/* A socket taken down after a failover made new, as at the start, for the
 * connection numbered gen that replaces it (failback; both sides,
 * tcp_sock_quiet held on each): its buffers kept, the notices of its loss
 * cleared. tcp_sock_setup then takes the descriptor. */
void tcp_sock_renew(tcp_sock_t *s, uint32_t gen);
void tcp_ring_sizes(int nslots, int nranks, int nsocks,
                    size_t *small, size_t *ring);

/* tcp_lazy.c: connections on first use (RCOLL_TCP_CONNECT). The listener
 * joins the engine's epoll set; a send to a socket not connected starts
 * every missing socket of its peer; the engine's idle turns time out the
 * handshakes; destroy closes those still running. */
rcoll_status_t tcp_lazy_listen(struct rcoll_tl_ctx *ctx);
void tcp_lazy_connect(tcp_ep_t *ep);
/* failback: a new connection for socket k, taken down after a failover
 * (the lower rank's; tcp_failover.c). A peer not ready answers "no", a
 * rail still down fails to connect: either way it is tried again later,
 * and the peer is not failed. */
void tcp_lazy_rejoin(tcp_ep_t *ep, int k);
void tcp_lazy_tick(struct rcoll_tl_ctx *ctx);
void tcp_lazy_fini(struct rcoll_tl_ctx *ctx);

/* tcp_rails.c: whether an ep may fail over (RCOLL_RAIL_FAILOVER, two
 * sockets over two pairs of rails; known once the rails are). */
int tcp_ep_fo(tcp_ep_t *ep);
/* tcp_sock.c: a copy of a payload for the message at the send FIFO's
 * slot i (NULL: out of memory or none needed, len 0); its credit came
 * back; the copies freed. */
char *tcp_keep(tcp_sock_t *s, int i, const rcoll_msg_hdr_t *hdr,
               uint32_t lseq, size_t ring_off, int big, const void *payload);
void tcp_keep_credit(tcp_sock_t *s, int i);
void tcp_keep_free(tcp_sock_t *s);

/* tcp_failover.c: surviving the loss of a socket (a rail) while another
 * reaches the peer, above the data path. tcp_sock_end (tcp_data.c) marks
 * a lost socket; tcp_fo_poll takes it down (warning, copies queued to go
 * again), tells the peer on every other socket and sends the copies as
 * credits allow. The ops that the context installs run it first: sends,
 * receives, socket events and the engine's turns (tcp_fo_tick). */
void tcp_fo_poll(tcp_ep_t *ep);
void tcp_resend_drain(tcp_ep_t *ep);
rcoll_status_t tcp_fo_send(rcoll_tl_ep_t *tep, const rcoll_msg_hdr_t *hdr,
                           const void *payload, void *cookie, int flags,
                           size_t xfer);
rcoll_status_t tcp_fo_recv_peek(rcoll_tl_ep_t *tep,
                                const rcoll_msg_hdr_t **hdr,
                                const void **payload);
void tcp_fo_recv_release(rcoll_tl_ep_t *tep);
void tcp_fo_event(rcoll_ev_handler_t *h, uint32_t events);
void tcp_fo_tick(struct rcoll_tl_ctx *ctx);
void tcp_fo_free(tcp_ep_t *ep);
/* rcoll_comm_destroy, before the goodbyes: until `deadline`, reads and
 * writes the sockets of the peers that may fail over (the engine no
 * longer runs), so that a rail lost under messages not yet acknowledged
 * is found (RCOLL_RAIL_TIMEOUT) and they go again over the others. */
void tcp_fo_settle(struct rcoll_tl_ctx *ctx, double deadline);

/* a before b, in message numbers mod 2^32 */
static inline int tcp_lseq_before(uint32_t a, uint32_t b)
{
    return (int32_t)(a - b) < 0;
}

/* tcp_data.c (the send side), for tcp_recv.c, tcp_ctx.c and
 * tcp_failover.c */
/* Where the payload of the next message (`len` bytes) goes in a ring of
 * `size` bytes whose next free byte is *tail: its offset (*off); returns
 * the ring bytes it takes (0 for an empty or big one), and moves *tail.
 * The sender and the receiver run this on the same messages in the same
 * order (per socket), so they agree on every offset. */
uint32_t tcp_ring_place(size_t *tail, size_t size, size_t small,
                        uint32_t len, size_t *off);
/* The sender may have no room left in the ring for its next small
 * payload: an idle receiver hands back what it owes. */
int tcp_ring_tight(const tcp_sock_t *s);
/* the peer counts among those the idle engine hands credits back to */
void tcp_ep_activate(tcp_ep_t *ep);
/* Queues one DATA message on s (copying it when the ep may fail over):
 * RCOLL_INPROGRESS when s has no credit or room for it now. */
rcoll_status_t tcp_push(tcp_sock_t *s, const rcoll_msg_hdr_t *hdr,
                        const void *payload, void *cookie, uint32_t lseq,
                        uint32_t flags);
tcp_txitem_t *tcp_txq_push(tcp_sock_t *s, uint32_t type,
                           const rcoll_msg_hdr_t *hdr, const void *payload,
                           void *cookie);
/* the socket a new message goes to: i mod n, or once a socket was lost
 * the next one not lost */
tcp_sock_t *tcp_tx_sock(tcp_ep_t *ep);
/* The link to the peer is gone or cannot be made: its sockets close and
 * the communicator fails with st and "rank P (HOST pid N): what" (once). */
void tcp_ep_fail_st(tcp_ep_t *ep, rcoll_status_t st, const char *what);
/* the same with RCOLL_ERR_REMOTE, `what` and strerror(err) when err */
void tcp_ep_fail(tcp_ep_t *ep, const char *what, int err);
/* an operation needs the peer: its failure, as an error */
rcoll_status_t tcp_ep_error(tcp_ep_t *ep);
/* one socket ended: failed over, or the peer failed (tcp_data.c) */
void tcp_sock_end(tcp_sock_t *s, const char *what, int err);
void tcp_sock_close(tcp_sock_t *s);
void tcp_sock_write(tcp_sock_t *s);
rcoll_status_t tcp_send(rcoll_tl_ep_t *tep, const rcoll_msg_hdr_t *hdr,
                        const void *payload, void *cookie, int flags,
                        size_t xfer);
void tcp_send_revoke(rcoll_tl_ctx_t *ctx, void *cookie,
                     const char *why);
/* tcp_recv.c (the receive side) */
void tcp_sock_release(tcp_sock_t *s);
/* Whether socket s, taken down after a failover, may be replaced by a new
 * connection now: none of its messages waits to go again and its slots
 * hold nothing not yet received (copies of messages taken already are
 * dropped here). */
int tcp_sock_quiet(tcp_sock_t *s);
int tcp_recv_place(rcoll_tl_ep_t *tep, const rcoll_tl_place_t *pl);
void tcp_recv_unplace(rcoll_tl_ep_t *tep, const rcoll_tl_place_t *pl);
void tcp_sock_event(rcoll_ev_handler_t *h, uint32_t events);
rcoll_status_t tcp_recv_peek(rcoll_tl_ep_t *tep,
                             const rcoll_msg_hdr_t **hdr,
                             const void **payload);
void tcp_recv_release(rcoll_tl_ep_t *tep);
int tcp_recv_full(rcoll_tl_ep_t *tep);
int tcp_idle(rcoll_tl_ctx_t *ctx);

#endif
