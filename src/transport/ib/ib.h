/* The RDMA verbs transport: RC queue pairs, RCOLL_IB_QPS_PER_PEER per peer,
 * messages striped round-robin over them (message i on QP i % nqps, so each
 * peer pair stays a FIFO). The same slot/credit protocol as TCP and shm:
 *
 * - Every QP owns a registered ring of nslots receive slots on the receiver
 *   (plus a small control area for an abort reason). A message is one RDMA
 *   WRITE of its header and payload straight into the next slot, signalled
 *   with a 32-bit word: type, credits handed back, slot. The word travels
 *   as the immediate of RDMA_WRITE_WITH_IMM, or - on iWARP devices without
 *   immediate data, such as siw - as a 4-byte inline SEND right after the
 *   WRITE (RC delivers it after the WRITE is placed). Both ends must agree:
 *   immediates are used only if both devices have them (RCOLL_IB_IMM).
 * - Credits ride on every message; alone (a zero-byte WRITE_WITH_IMM, or a
 *   SEND) only at half the slots or when the engine idles. No atomics, no
 *   SRQ, one receive SGE: the limits of eRDMA.
 * - Connections: librdmacm (RCOLL_IB_CONNECT=cm; the only way on iWARP),
 *   the ring's address and rkey in the connection's private data with a MAC
 *   of the job secret, at init or (lazy: ib_lazy.c) when a peer is first
 *   used; or (oob: InfiniBand and RoCE) QP numbers exchanged through the
 *   authenticated bootstrap and the QPs moved to RTS by hand.
 * - Completions: polled by the engine each turn; before it sleeps the CQ is
 *   armed (ibv_req_notify_cq) and the completion channel's fd is in its
 *   epoll set. A failed completion or a disconnect fails the peer by name.
 *
 * Payloads are copied into a registered staging slot (or go inline when
 * small), except from memory the user registered (rcoll_comm_register):
 * then the WRITE gathers the header from staging and the payload in place,
 * and the send is done when its completion arrives.
 *
 * Receives in place (recv_place, from RCOLL_IB_PLACE_MIN bytes): the
 * receiver registers the destination and tells the sender where it is (a
 * PLACE notice through a slot, which the receiver's engine never sees:
 * the sender takes it when it arrives). The sender then RDMA-writes each
 * matching payload straight into the destination, followed by the header
 * alone into the slot, signalled as IMM_PLACED; RC ordering puts the data
 * there before the signal. Data sent before the notice arrived goes
 * through the slots as ever. Unposting deregisters the destination, so a
 * write that comes later (a failed operation's) fails on the sender's
 * queue pair instead of touching freed memory. Destinations and sources
 * of zero-copy sends are registered through the registration cache
 * (proto/rcache.c), which learns of freed and unmapped memory; with
 * several devices, a destination on each device a queue pair to the
 * sender runs over (the notice has a key per device), a source on its
 * queue pair's device.
 *
 * The transport is ten files, each calling only the ones after it:
 * ib_ctx.c (context create/destroy in steps, counters, the ops table),
 * ib_lazy.c (connections on first use), ib_conn.c (connecting QPs by
 * rdma_cm or out of band), ib_dev.c (devices,
 * addresses, GIDs, opening a context's device, rcoll-info's description),
 * ib_recv.c (receives, receives in place), ib_data.c (completions,
 * polling, sends, failover's notices and resends), ib_post.c (work
 * requests, credits), ib_mem.c (registrations, the cache's hooks, the
 * QPs' rings, the peer's receive-in-place destinations), ib_fail.c (a
 * peer's failure, the devices' events) and ib_fo.c (failover: a lost
 * queue pair's messages over the others). This header holds what they share. */
#ifndef RCOLL_IB_H
#define RCOLL_IB_H

#include "transport/transport.h"
#include "transport/slots.h"
#include "proto/lanes.h"
#include "proto/place.h"
#include "proto/rcache.h"
#include "util/dl.h"
#include "util/params.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <infiniband/verbs.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#define IB_HDR 64       /* slot bytes before the payload */
#define IB_HDR_OFF (IB_HDR - sizeof(rcoll_msg_hdr_t)) /* header ends there */
#define IB_SEQ_OFF (IB_HDR_OFF - 8) /* failover: the message's number */
#define IB_REASON RCOLL_TL_REASON /* after the slots: an abort's reason, */
#define IB_CTRL (IB_REASON + 64) /* then a RAIL notice's `upto` */
#define IB_MAGIC 0x69627631U /* "ibv1" */
#define IB_CM_TRIES 8   /* rdma_connect redone on a local port collision */

/* the 32-bit word that signals a message */
#define IMM(t, c, a) ((uint32_t)(t) << 30 | (uint32_t)(c) << 16 | (uint32_t)(a))
#define IMM_TYPE(x) ((x) >> 30)
#define IMM_CREDITS(x) (((x) >> 16) & 0x3fffU)
#define IMM_ARG(x) ((x) & 0xffffU)
enum { IMM_PLACED = 0, IMM_DATA = 1, IMM_CREDIT = 2, IMM_CTRL = 3 };
/* a header kind of the transport's own (RCOLL_TL_CLASS): a PLACE notice */
#define IB_KIND_PLACE (RCOLL_TL_CLASS << 24)
#define IB_NRPLACE 16 /* a peer's destinations remembered per peer */
/* slot flags (receive side) */
enum { SLOT_PLAIN = 0, SLOT_PLACED = 1, SLOT_TL = 2 };

/* A PLACE notice's payload: which messages, and where they go: the
 * destination's key on each of the receiver's devices (by its index in
 * the receiver's list: a queue pair's rdev), 0 on one it did not
 * register with (no queue pair to the sender runs over it). */
#define IB_MAX_DEVS 4
typedef struct {
    uint64_t seq, total, chunk, addr, bytes;
    uint32_t kind, step, tag;
    uint32_t rkey[IB_MAX_DEVS];
} ib_place_msg_t;
/* CTRL_SEEN: an abort arrived (the aborting rank may close now) */
/* CTRL_PING/PONG: is this queue pair alive? (ib_fo_stalls) */
enum { CTRL_BYE = 1, CTRL_ABORT = 2, CTRL_SEEN = 3, CTRL_RAIL = 4,
       CTRL_PING = 5, CTRL_PONG = 6 };
/* CTRL_RAIL's argument: the code, the lost queue pair's index, and how
 * many times it was lost (mod 256: a late notice of a loss already
 * mended ends nothing) */
#define CTRL_CODE(a) ((a) & 15U)
#define CTRL_QP(a) ((int)(((a) >> 4) & 15U))
#define CTRL_GEN(a) ((unsigned)((a) >> 8) & 0xffU)
#define IB_MAX_CREDITS 0x3fff

/* what a work request was, in its wr_id: the QP's index above, then the
 * QP's generation (a dropped connection attempt's late completions, such
 * as flushed receives, are told apart from the next QP's even when the
 * device reuses the QP number), the receive's index (< 2^20: at most
 * 2 x 1024 + 8) and the kind */
enum { WR_DATA = 1, WR_NOTE = 2, WR_RECV = 3 };
#define WRID(q, kind, i)                                                      \
    ((uint64_t)(q)->gidx << 32 | (uint64_t)((q)->gen & 0xffu) << 24 |         \
     (uint64_t)(i) << 4 | (kind))
#define WRID_GEN(w) ((unsigned)((w) >> 24) & 0xffu)
#define WRID_IDX(w) ((int)(((w) >> 4) & 0xfffffu))

typedef struct ib_ep ib_ep_t;
typedef struct ib_dev ib_dev_t;
/* a lost queue pair's message to go again: its index and staging slot */
typedef struct {
    int qidx, slot;
} ib_resend_t;
/* a message moved out of its slot (ib_fo_peek): number, header, payload
 * (none when it was written in place), and the slot's SLOT_* */
typedef struct {
    char *m;
    int flag;
} ib_aside_t;

typedef struct {
    ib_ep_t *ep;
    int idx;                  /* among the peer's QPs */
    int gidx;                 /* in ctx->qps */
    ib_dev_t *dev;            /* the device it runs on (ib_lane_devs) */
    int rdev;                 /* and the peer's, an index of its list */
    struct rdma_cm_id *id;    /* cm mode */
    struct ibv_qp *qp;
    int up;                   /* connected */
    int ended;                /* error, flush or disconnect seen */
    int imm;                  /* signal with immediates (else WRITE+SEND) */
    int active;               /* we connected (cm): the reply has the ring */
    int heard;                /* a message from the peer arrived on it */
    int cm_tries;             /* connection attempts redone (cm, active) */
    unsigned gen;             /* QPs dropped before this one (WRID) */
    int early_err;            /* lazy: the first error completion before
                                 the connection was up (ibv_wc_status) */
    double await;             /* lazy: the lower-ranked peer refused our
                                 attempt (its own is under way): none of
                                 ours before then */
    /* receive side */
    char *rx;                 /* nslots slots + IB_CTRL */
    struct ibv_mr *rx_mr;
    uint32_t *rbuf;           /* a 4-byte SEND target per receive WR */
    struct ibv_mr *rbuf_mr;
    int nrecv;
    rcoll_slots_t sl;         /* the slot/credit state, both ways */
    unsigned char *rx_flag;   /* by slot: SLOT_* */
    int bye, aborted;         /* what the peer said on this QP */
    int told, seen;           /* our abort went on it; the peer has it */
    char fatal[192];          /* an asynchronous event failed it: ended
                                 once what came before is polled */
    uint32_t words[8];        /* the last signal words received, and */
    uint64_t nwords;          /* how many: a protocol error shows them */
    /* send side */
    char *tx;                 /* staging: nslots slots + IB_CTRL */
    struct ibv_mr *tx_mr;
    uint64_t raddr;           /* the peer's ring */
    uint32_t rkey;
    uint64_t tx_seq;          /* data messages posted (remote slot = % n) */
    uint64_t tx_done;         /* data messages completed (staging free) */
    void **tx_cookie;         /* by slot: a zero-copy send's cookie */
    rcoll_rcache_entry_t **tx_rent; /* by slot: the cached registration a
                                 zero-copy send reads through */
    int sq_free;              /* send queue entries */
    int cq_out;               /* its work requests not completed yet (each
                                 takes an entry of the CQ until polled) */
    /* failover (ib_fo.c) */
    int down;                 /* lost: its messages went over the others */
    unsigned nlost;           /* times it was lost */
    int fresh;                /* lost, and its old QP gone: connects again
                                 (the lower rank, from retry_at) */
    double retry_at, conn_at; /* the next attempt; this one's start */
    int probe;                /* iWARP: its reachability probe's fd + 1 */
    double probe_at;
    double t_prog;            /* the peer was last heard on it (or its
                                 first send after none was outstanding) */
    double ping_at;           /* a CTRL_PING went then */
    /* oob mode */
    uint32_t psn;
    rcoll_lane_stats_t st;
} ib_qp_t;

struct ib_ep {
    struct rcoll_tl_ctx *ctx;
    int peer;
    ib_qp_t *qps;
    uint64_t tx_seq, rx_seq;
    int failed;
    int aborted;
    char abort_reason[IB_REASON];
    char fail_msg[1024];
    /* the peeked slot's header, copied out of the ring: the peer can
     * RDMA-write the ring at any time, so the engine checks this copy */
    rcoll_msg_hdr_t rx_hdr;
    /* receives in place we posted: registered destinations, and by the
     * same index, their registrations (the caches'), on each device a
     * queue pair to the peer runs over (by device index), and ep->nlost
     * when each was posted */
    rcoll_places_t places;
    rcoll_rcache_entry_t *place_rent[RCOLL_NPLACE][IB_MAX_DEVS];
    unsigned place_nlost[RCOLL_NPLACE];
    /* the peer's: where its receives want our data, and each notice's
     * number (failover: a copy of one is not taken again) */
    ib_place_msg_t rplace[IB_NRPLACE];
    uint64_t rplace_num[IB_NRPLACE];
    int nrplace;
    /* lazy: a message waits for a queue pair not ready (in ctx->pend);
     * until conn_deadline for all of them to be */
    int pending;
    double conn_deadline;
    double ready_at;          /* lazy, failover: its first queue pair was
                                 ready then (ib_lazy_tick) */
    /* failover (ib_fo.c) */
    int fo;                   /* its queue pairs span several devices */
    int fo_on;                /* one was lost: new messages go round the
                                 live ones, from tx_rr */
    unsigned nlost;           /* its queue pairs' losses */
    int tx_rr;
    uint32_t tell;            /* lost queue pairs the peer is not told of */
    ib_resend_t *rs;          /* uncredited messages of lost queue pairs,
                                 to go again (from rs_head) */
    int nrs, rs_head, rs_cap;
    uint64_t peer_upto;       /* the peer's first new message after its
                                 last loss */
    ib_aside_t *aside;        /* messages moved out of their slots */
    int naside, aside_cap;
    int rx_from;              /* the peeked message's queue pair, or -1 -
                                 its index in aside */
    int rx_flag;              /* and its SLOT_* */
};

/* One RDMA device port a context uses: its verbs context, listening
 * address (rdma_cm), protection domain, completion channel and queue,
 * asynchronous events and registration cache (registrations belong to a
 * protection domain). A context uses one (ctx->dev), or with
 * RCOLL_IB_NIC=all every usable one (ctx->devs, ndev). */
struct ib_dev {
    struct rcoll_tl_ctx *ctx;
    int idx;                  /* in ctx->devs */
    uint32_t mask;            /* its address's netmask (network order) */
    int nqp;                  /* queue pairs on it */
    struct ibv_context *verbs;
    uint8_t port;
    char devname[64];
    char addr_str[64];
    struct sockaddr_in addr;
    struct rdma_cm_id *listen_id;
    struct ibv_pd *pd;
    struct ibv_comp_channel *cch;
    rcoll_ev_handler_t cch_h;
    struct ibv_cq *cq;
    int cq_armed;
    int cqe;                  /* the CQ's entries */
    int cq_used;              /* work requests posted, not yet completed:
                                 posting stays within cqe (ib_cq_room) */
    /* completions polled, not yet handled: a batch kept with the device,
     * so that a call back into ib_poll from a handler goes on with the
     * same batch, in order, before it polls more */
    struct ibv_wc wc[32];
    int wc_n, wc_i;
    struct ib_async_dev *adev; /* the device's asynchronous events */
    unsigned async_seen;      /* how many of them this context handled */
    rcoll_ev_handler_t async_h;
    uint32_t max_inline;
    int imm_ok;               /* this device does WRITE_WITH_IMM */
    /* buffers registered on use and kept (proto/rcache.c): receives in
     * place, zero-copy sends */
    rcoll_rcache_t *rcache;
};

/* A rank's listening addresses, one per device, as the set-up exchanges
 * them (port set) */
typedef struct {
    struct sockaddr_in a[IB_MAX_DEVS];
    uint32_t mask[IB_MAX_DEVS];
    int32_t n;
} ib_raddr_t;

struct rcoll_tl_ctx {
    rcoll_tl_params_t p;
    ib_dev_t devs[IB_MAX_DEVS];
    int ndev;
    ib_dev_t *dev;            /* devs[0] */
    int nqps;
    int oob;
    int lazy;                 /* QPs connected on first use (ib_lazy.c) */
    uint8_t secret[16];       /* p.secret points here: the caller's copy
                                 ends with set-up, requests do not */
    ib_raddr_t *raddrs;       /* every rank's listening addresses (set-up;
                                 kept when lazy) */
    int host_nics;            /* the most device addresses the ranks of
                                 one host listen on (ib_host_nics) */
    ib_ep_t **pend;           /* lazy: peers with a message waiting for a
                                 connection (npend of them) */
    int npend;
    size_t stride;            /* slot bytes: IB_HDR + chunk, 64-aligned */
    size_t ring_bytes;
    int sq_depth;
    struct rdma_event_channel *ech;
    rcoll_ev_handler_t ech_h;
    int nfatal;               /* QPs with `fatal` set (ib_progress) */
    int npolled;              /* completions handled since the engine's
                                 last turn (ib_polled) */
    ib_ep_t **eps;            /* by rank */
    ib_qp_t **qps;            /* every QP, by gidx */
    int nq;
    int closing;
    /* rcoll_comm_register: sorted by address; the lock because the user
     * registers while the engine may send */
    pthread_mutex_t reg_lock;
    struct ib_ureg **regs;
    int nregs, regs_cap;
    uint64_t n_sent, n_zcopy, n_placed;
    /* failover: work for the engine's turn (notices, resends); queue
     * pairs lost; copies dropped; the last look for stalls */
    int nfo;                  /* eps that can fail over */
    int fo_work;
    uint64_t n_lost, n_back, n_dups;
    double stall_at, rejoin_at;
};

typedef struct ib_ureg {
    char *buf;
    size_t len;
    struct ibv_mr *mr;
} ib_ureg_t;

/* ---- the connection's private data (cm) ---- */

typedef struct __attribute__((packed)) {
    uint32_t magic;
    int32_t from, to;
    uint16_t idx, nqps;
    uint32_t nslots;
    uint32_t chunk;
    uint32_t rkey;
    uint32_t imm;             /* 1: this end can take immediates */
    uint64_t addr;
    uint32_t nlost;           /* failback: times the queue pair was lost */
    uint64_t mac;             /* siphash(secret, all of the above) */
} ib_conn_data_t;             /* 52 bytes: IB's REQ carries 56 */

/* ---- ib_lazy.c: connections on first use (RCOLL_IB_CONNECT=lazy) ---- */
/* The cm events after set-up (requests, our attempts' steps, disconnects) */
void ib_lazy_event(rcoll_ev_handler_t *h, uint32_t events);
/* Starts the connections that messages wait for, retries those a lower
 * peer refused once its own has had time, fails a peer past its
 * deadline; from the engine's progress and idle turns */
void ib_lazy_tick(struct rcoll_tl_ctx *ctx);

/* 1 if q may carry our messages: connected, and on iWARP the acceptor
 * has heard from the initiator (it may not send first) */
static inline int ib_qp_ready(const struct rcoll_tl_ctx *ctx,
                              const ib_qp_t *q)
{
    return q->up && (ctx->oob || q->active || q->heard);
}

/* q's reachability probe (ib_lazy.c) is over: its socket goes */
static inline void ib_probe_close(ib_qp_t *q)
{
    if (q->probe) {
        close(q->probe - 1);
        q->probe = 0;
    }
}

/* A message to ep waits for a connection: ib_lazy_tick starts it */
static inline void ib_lazy_want(ib_ep_t *ep)
{
    struct rcoll_tl_ctx *ctx = ep->ctx;
    if (ep->pending || !ctx->pend)
        return;
    ep->pending = 1;
    ep->conn_deadline = rcoll_time_sec() + ctx->p.timeout;
    ctx->pend[ctx->npend++] = ep;
}

/* ---- ib_conn.c ---- */
void ib_cm_event(rcoll_ev_handler_t *h, uint32_t events);
/* The devices listen and the ranks' addresses go round (ctx->raddrs;
 * rdma_cm modes), before the endpoints are made: their queue pairs' devices
 * come from them */
rcoll_status_t ib_addrs_exchange(struct rcoll_tl_ctx *ctx, int backlog);
rcoll_status_t ib_connect_all(struct rcoll_tl_ctx *ctx);
int ib_is_listener(const struct rcoll_tl_ctx *ctx,
                   const struct rdma_cm_id *id);
/* The devices queue pair k to peer runs between: ours (*li, an index of
 * ctx->devs) and the peer's (*rj, of its raddrs entry). The pairs (x, y)
 * whose addresses share a subnet, x the lower rank's device and y the
 * other's, ordered by (y - x) mod max(counts) then x (so the first queue
 * pairs use distinct devices at both ends), k mod their number; with
 * none, device x with the other's x mod n. Both ranks compute the same
 * pair. */
void ib_lane_devs(const struct rcoll_tl_ctx *ctx, int peer, int k, int *li,
                  int *rj);
/* For ib_lazy.c: an active QP's attempt started (address resolution);
 * its steps on ROUTE_RESOLVED (*redo: a local port collision, start it
 * again), CONNECT_REQUEST (accepted or rejected: *gone when the event
 * was acked and the id destroyed there; *from: the requesting rank, -1
 * if none of this job's) and ESTABLISHED (active side);
 * an attempt dropped (its QP and id destroyed, the ring kept); "rank P
 * (HOST pid N)" */
rcoll_status_t ib_cm_start(struct rcoll_tl_ctx *ctx, ib_qp_t *q);
rcoll_status_t ib_cm_route_resolved(struct rcoll_tl_ctx *ctx, ib_qp_t *q,
                                    struct rdma_cm_id *id, ib_qp_t **redo);
rcoll_status_t ib_cm_connect_request(struct rcoll_tl_ctx *ctx,
                                     struct rdma_cm_event *ev, int *gone,
                                     int *from);
rcoll_status_t ib_cm_established(struct rcoll_tl_ctx *ctx, ib_qp_t *q,
                                 struct rdma_cm_event *ev);
void ib_cm_drop(struct rcoll_tl_ctx *ctx, ib_qp_t *q);
/* Why a connection request was refused, in the reject's private data
 * (lazy: a tie, or no reason at all - no listener, or the kernel's when
 * the listener's backlog is full - makes the requester wait and try
 * again until RCOLL_TIMEOUT; any other reason fails the peer at once,
 * naming it) */
enum {
    IB_REJ_LOCAL = -2,  /* (local) our attempt failed (the last error) */
    IB_REJ_CUT = -1,    /* (local) disconnected before it was up */
    IB_REJ_NONE = 0,    /* no reason given (no listener, not rcoll) */
    IB_REJ_TIE,         /* our own attempt on that QP is under way */
    IB_REJ_CLOSING,     /* the communicator is being destroyed */
    IB_REJ_FAILED,      /* we failed the requester already */
    IB_REJ_DUP,         /* that QP is connected already */
    IB_REJ_SETUP,       /* setting up our side failed (memory, QP) */
    IB_REJ_STRANGER,    /* not sealed with the job's secret */
    IB_REJ_NOQP         /* sealed, but no such rank or queue pair here
                           (the ranks' settings differ?) */
};
void ib_cm_reject(struct rdma_cm_id *id, int reason);
int ib_cm_reject_reason(const struct rdma_cm_event *ev);
const char *ib_rej_str(int reason);
const char *ib_peer_str(struct rcoll_tl_ctx *ctx, int peer, char *b,
                        size_t l);

/* ---- ib_dev.c ---- */
int ib_libs_loaded(char *why, size_t len);
int ib_usable(char *why, size_t len);
const char *ib_link_layer_str(uint8_t ll, struct ibv_context *v);
int ib_pick_gid(const ib_dev_t *d, struct ibv_port_attr *pa,
                union ibv_gid *gid);
rcoll_status_t ib_dev_open(struct rcoll_tl_ctx *ctx);
void ib_describe(FILE *f);

/* ---- ib_post.c ---- */
int ib_cq_room(const ib_dev_t *d, int n);
void ib_cq_posted(ib_qp_t *q, int n);
void ib_cq_forget(ib_qp_t *q);
int ib_post_recv(ib_qp_t *q, int i);
int ib_post_note(ib_qp_t *q, uint32_t word);
/* q's owed credits alone, if it may send */
void ib_send_credits(ib_qp_t *q);
/* The work requests of one message, built in place (they point into it). */
typedef struct {
    struct ibv_sge sge[3];
    struct ibv_send_wr wr[3];   /* [2]: payload in place, [0]: slot, [1]:
                                   the SEND signal without immediates */
    struct ibv_sge wsge;
    uint32_t word;              /* the signal: kind, credits, slot */
} ib_msg_wrs_t;
uint32_t ib_send_key(ib_qp_t *q, const void *payload, uint32_t len,
                     rcoll_rcache_entry_t **rent);
void ib_wrs_place(ib_ep_t *ep, ib_qp_t *q, int rp, char *s,
                  const rcoll_msg_hdr_t *hdr, const void *payload,
                  uint32_t ukey, ib_msg_wrs_t *w);
void ib_wrs_slot(ib_qp_t *q, char *s, const rcoll_msg_hdr_t *hdr,
                 const void *payload, uint32_t ukey, int inl,
                 ib_msg_wrs_t *w);
void ib_wrs_kept(ib_qp_t *q, const char *s, ib_msg_wrs_t *w);
void ib_wrs_signal(struct rcoll_tl_ctx *ctx, ib_qp_t *q, uint32_t slot,
                   ib_msg_wrs_t *w);
rcoll_status_t ib_send_refused(ib_ep_t *ep, ib_qp_t *q, int rc,
                               rcoll_rcache_entry_t *rent);
int ib_post_msg(ib_qp_t *q, ib_msg_wrs_t *w, int rp, int need, int c,
                uint32_t len);

/* ---- ib_data.c ---- */
int ib_poll(struct rcoll_tl_ctx *ctx);
int ib_progress(rcoll_tl_ctx_t *ctx);
void ib_cq_event(rcoll_ev_handler_t *h, uint32_t events);
int ib_idle(rcoll_tl_ctx_t *ctx);
rcoll_status_t ib_send(rcoll_tl_ep_t *tep, const rcoll_msg_hdr_t *hdr,
                       const void *payload, void *cookie, int flags,
                       size_t xfer);
void ib_send_revoke(rcoll_tl_ctx_t *ctx, void *cookie,
                    const char *why);

/* ---- ib_recv.c ---- */
int ib_recv_place(rcoll_tl_ep_t *tep, const rcoll_tl_place_t *pl);
rcoll_status_t ib_recv_peek(rcoll_tl_ep_t *tep,
                            const rcoll_msg_hdr_t **hdr,
                            const void **payload);
void ib_recv_release(rcoll_tl_ep_t *tep);
int ib_recv_full(rcoll_tl_ep_t *tep);
void ib_recv_unplace(rcoll_tl_ep_t *tep, const rcoll_tl_place_t *pl);
/* the registrations of receives in place not unposted (at destroy) */
void ib_place_free(ib_ep_t *ep);

/* ---- ib_mem.c ---- */

void *ib_rc_reg(void *arg, void *addr, size_t len);
void ib_rc_dereg(void *arg, void *h);
rcoll_status_t ib_mem_reg(rcoll_tl_ctx_t *ctx, void *buf, size_t len,
                          void **h);
void ib_mem_dereg(rcoll_tl_ctx_t *ctx, void *h);
uint32_t ib_reg_lookup(struct rcoll_tl_ctx *ctx, const void *p,
                       size_t len);
int ib_rplace_find(const ib_ep_t *ep, const rcoll_msg_hdr_t *h);
/* A QP's rings and their registrations, all or none (the error set);
 * and their release (q's pointers NULL after) */
rcoll_status_t ib_qp_alloc(struct rcoll_tl_ctx *ctx, ib_qp_t *q);
void ib_qp_unalloc(struct rcoll_tl_ctx *ctx, ib_qp_t *q);

/* ---- ib_fo.c ---- */
/* 1 if ep's queue pairs span more than one device pair (and
 * RCOLL_RAIL_FAILOVER allows it): then it can survive one's loss */
int ib_fo_able(const struct rcoll_tl_ctx *ctx, const ib_ep_t *ep);
/* ep's queue pairs not ended and up (lazy: or not connected yet) */
int ib_fo_live(const ib_ep_t *ep);
/* q is lost: if ep can fail over, it does (warns, queues q's uncredited
 * messages to go again, the peer to be told): 0; -1 if not (the caller
 * fails the peer) */
int ib_fo_down(ib_qp_t *q, const char *why);
/* tx_rr to the next live queue pair */
void ib_fo_advance(ib_ep_t *ep);
/* The next message by number (*msg: its number, header, payload; its
 * SLOT_* in ep->rx_flag), from a queue pair's oldest slot or aside: 1; 0
 * if it is not here yet; -1 out of memory. Copies it finds are dropped
 * (their credits owed). */
int ib_fo_peek(ib_ep_t *ep, const char **msg);
/* The peeked message is taken: its queue pair (its slot to release), or
 * NULL (it was aside) */
ib_qp_t *ib_fo_taken(ib_ep_t *ep);
/* 1 while some ep has notices or resends left to post */
int ib_fo_busy(const struct rcoll_tl_ctx *ctx);
/* 1 while a live queue pair of an ep that can fail over has messages the
 * peer has not credited back (nor said goodbye) */
int ib_fo_unacked(const struct rcoll_tl_ctx *ctx);
/* Failback: 1 if lost q holds nothing this side still needs (no resend
 * from its staging left, the peer told, no message in its slots); its
 * state made new once its old QP is gone (ib_lazy.c); it is up again */
int ib_fo_quiet(const ib_qp_t *q);
void ib_fo_renew(ib_qp_t *q);
void ib_fo_back(ib_qp_t *q);
void ib_fo_free(ib_ep_t *ep);

/* ---- ib_fail.c ---- */
/* Fails a peer once (the first cause is kept) and tells the engine. */
void ib_ep_fail(ib_ep_t *ep, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The error for a call on a failed peer. */
rcoll_status_t ib_ep_error(ib_ep_t *ep);
/* A QP ended (error, flush or disconnect): its peer fails, with the port's
 * state or the device's event as the cause where there is one. */
void ib_qp_ended(ib_qp_t *q, const char *why);
/* The device's asynchronous events that concern this context (the
 * engine's turn), and its membership of the device's shared log. */
void ib_async_take(struct rcoll_tl_ctx *ctx);
rcoll_status_t ib_async_attach(struct rcoll_tl_ctx *ctx);
void ib_async_detach(struct rcoll_tl_ctx *ctx);

#endif
