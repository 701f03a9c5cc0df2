/* The transport interface. A transport moves messages (a fixed header plus
 * up to chunk_size payload bytes) between two ranks over a directed FIFO
 * with a ring of receive slots on the receiver and credits flowing back.
 * Algorithms see only this interface (through the core's engine), so the
 * same protocol serves TCP, shared memory and RDMA WRITE_WITH_IMM. */
#ifndef RCOLL_TRANSPORT_H
#define RCOLL_TRANSPORT_H

#include "bootstrap/bootstrap.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* The message header every chunk carries; checked by the receiver to catch
 * ranks that called different operations. */
typedef struct {
    uint64_t seq;       /* what the message belongs to: the collective's
                           number in the communicator, or the point-to-
                           point message's number from sender to receiver */
    uint32_t kind;      /* coll kind | datatype << 8 | op << 16 |
                           message class << 24 (coll/sched.h) */
    uint32_t step;      /* the transfer's ordinal among those of its
                           operation between the two ranks (in order) */
    uint32_t chunk;     /* the chunk's index within its transfer */
    uint32_t len;       /* payload bytes */
    uint32_t csum;      /* CRC32C of header (csum 0) + payload when kind
                           has RCOLL_HDR_CSUM (RCOLL_CHECKSUM=1) */
    uint32_t tag;       /* a collective's root, a point-to-point tag */
    uint64_t total;     /* the operation's element count (mismatch check) */
} rcoll_msg_hdr_t;
#define RCOLL_HDR_CSUM 0x80000000u /* in kind: csum is valid */
/* The message class (bits 24-30 of kind) the protocol leaves to the
 * transports: no operation sends it, and a transport takes such a
 * message itself, before the engine could see it (ib's PLACE notice). */
#define RCOLL_TL_CLASS 0x7fu

/* Something the engine's epoll loop dispatches to. */
typedef struct rcoll_ev_handler {
    void (*cb)(struct rcoll_ev_handler *h, uint32_t events);
} rcoll_ev_handler_t;

/* Calls from a transport back into the engine. A transport makes them
 * from inside its own ops; the engine never calls an op while it holds the
 * communicator's lock, which peer_failed takes. */
typedef struct {
    void *arg;
    /* the send with this cookie has left the user's buffer */
    void (*send_done)(void *arg, void *cookie);
    /* the link to `peer` broke: the communicator fails with this status */
    void (*peer_failed)(void *arg, int peer, rcoll_status_t st,
                        const char *msg);
} rcoll_tl_events_t;

typedef struct {
    int rank;
    int nranks;
    const uint8_t *secret;
    rcoll_bootstrap_t *bs;   /* for the address exchange */
    int epfd;                /* the engine's epoll set */
    size_t chunk_size;
    int nslots;
    const rcoll_tl_events_t *ev;
    /* which rank pairs this transport serves: pair(pair_arg, a, b) is 1
     * if ranks a and b talk through it (symmetric; every rank gets the
     * same answers; computed on demand, so no rank holds an n x n table).
     * Valid during ctx_create and paths() only (rcoll_tl_pair): a context
     * that copies the params clears its copy's pair after its last use. A
     * transport connects only its own rank's pairs, but ctx_create is
     * still called on every rank, since setup is collective over the
     * bootstrap. */
    int (*pair)(const void *pair_arg, int a, int b);
    const void *pair_arg;
    double timeout;          /* the communicator's RCOLL_TIMEOUT */
    size_t region;           /* bytes of the shared region a transport
                                with a region op gives each rank (the
                                caller's use: coll/area.c); 0: none */
} rcoll_tl_params_t;

#define RCOLL_TL_PEER_COPIES 1
/* send flag: nothing downstream waits on this transfer's chunks one by one
 * (all-to-all, gather, scatter, point to point), so a transport may carry
 * the whole transfer in one message (max_msg) */
#define RCOLL_TL_WHOLE 2

typedef struct rcoll_tl_ctx rcoll_tl_ctx_t;
typedef struct rcoll_tl_ep rcoll_tl_ep_t;

/* A receive posted in place (recv_place): the messages whose header has
 * these seq, kind (without RCOLL_HDR_CSUM), step, tag and total carry the
 * `bytes` of `dst`, chunk i at dst + i * chunk. */
typedef struct {
    uint64_t seq;
    uint32_t kind;
    uint32_t step;
    uint32_t tag;
    uint64_t total;
    size_t chunk;
    char *dst;
    size_t bytes;
} rcoll_tl_place_t;

typedef struct rcoll_tl_ops {
    const char *name;
    const char *doc;
    /* 1 if it can run here (device present...); fills `why` otherwise */
    int (*usable)(char *why, size_t len);
    /* 1 if it reaches only ranks on the same host (shared memory) */
    int local_only;
    /* Optional: the descriptors a peer's connection takes when it is made
     * on first use (sockets); 0 when all are made at init. The tuner then
     * keeps to algorithms whose partners fit RLIMIT_NOFILE. */
    int (*fd_lanes)(int nranks);
    /* Collective over the bootstrap: creates the context and connects an
     * endpoint to every other rank (eps[rank] is NULL). */
    rcoll_status_t (*ctx_create)(const rcoll_tl_params_t *p,
                                 rcoll_tl_ctx_t **ctx_p, rcoll_tl_ep_t **eps);
    /* Posts one message. RCOLL_OK: queued (send_done(cookie) follows, when
     * the payload buffer may be reused); RCOLL_INPROGRESS: no credit now,
     * call again later; error: link down. flags: RCOLL_TL_PEER_COPIES if
     * the receiver will only copy the payload (not reduce it), so a
     * transport may let it read straight from our buffer. xfer: the bytes
     * of the whole transfer the message belongs to (a transport may pick
     * its path by it). */
    rcoll_status_t (*send)(rcoll_tl_ep_t *ep, const rcoll_msg_hdr_t *hdr,
                           const void *payload, void *cookie, int flags,
                           size_t xfer);
    /* The next message from this peer, if arrived: RCOLL_OK and pointers
     * into the slot (valid until recv_release); RCOLL_INPROGRESS if none
     * yet; an error if the peer is gone. *payload is NULL when the data is
     * still in the sender's memory: then recv_copy fetches it. */
    rcoll_status_t (*recv_peek)(rcoll_tl_ep_t *ep, const rcoll_msg_hdr_t **hdr,
                                const void **payload);
    /* Optional (required if recv_peek can give a NULL payload): copies the
     * peeked message's payload to dst. */
    rcoll_status_t (*recv_copy)(rcoll_tl_ep_t *ep, void *dst);
    /* Frees the slot of the message returned by recv_peek (a credit back). */
    void (*recv_release)(rcoll_tl_ep_t *ep);
    /* Optional: 1 if this peer may be out of credits because messages of
     * its are still unreleased in our slots (every slot of a link taken
     * or owed). A stalled engine then sets those messages aside
     * (coll_match_unblock), so that no operation waits on a sender that
     * waits on slots held by messages nobody is asking for yet. */
    int (*recv_full)(rcoll_tl_ep_t *ep);
    /* Polling work for transports without fds; may be NULL. Returns the
     * number of events handled. */
    int (*progress)(rcoll_tl_ctx_t *ctx);
    /* Optional: the engine made no progress and may wait next: flush
     * whatever was held back (credits), arm event notification. Returns
     * the number of events found meanwhile (then the engine does not
     * sleep). */
    int (*idle)(rcoll_tl_ctx_t *ctx);
    /* Optional: blocks up to `ms` until something may have arrived for
     * this context (transports without fds: a futex). */
    void (*wait)(rcoll_tl_ctx_t *ctx, int ms);
    /* Optional: makes a wait() in another thread return now. */
    void (*kick)(rcoll_tl_ctx_t *ctx);
    /* Graceful (goodbye to peers, bounded wait) or abortive close; an
     * abort carries `reason` (may be NULL) to the peers' error messages. */
    void (*ctx_destroy)(rcoll_tl_ctx_t *ctx, int abort, const char *reason);
    /* Optional: the communicator failed; tell every peer still connected
     * why, now (the abort ctx_destroy would send later), so that each
     * fails with `reason`, not with a broken link. Called once, by the
     * engine, before a failed operation's buffers are taken back
     * (recv_unplace, send_revoke): a peer's write into one then fails
     * after the notice, not ahead of it. Bounded in time. */
    void (*fail_notify)(rcoll_tl_ctx_t *ctx, const char *reason);
    /* Optional: the most payload bytes one send with these flags may
     * carry to this peer, given `len` bytes left in the transfer; NULL or
     * an answer below the chunk size means one chunk. A transport answers
     * more only where the payload stays in the sender's memory until the
     * receiver fetches it (single copy), so no slot must hold it; the
     * receiver then gets a message that covers several chunks. */
    size_t (*max_msg)(rcoll_tl_ep_t *ep, size_t len, int flags);
    /* Optional: register user memory for sends without a staging copy
     * (rcoll_comm_register); *h is given back to mem_dereg. A transport
     * that sends from registered memory calls send_done only when the
     * data has left it. */
    rcoll_status_t (*mem_reg)(rcoll_tl_ctx_t *ctx, void *buf, size_t len,
                              void **h);
    void (*mem_dereg)(rcoll_tl_ctx_t *ctx, void *h);
    /* Optional: receive in place. From now until recv_unplace, the
     * transport may land the payload of messages that match `pl` straight
     * in pl->dst (recv_peek then gives a payload pointer into dst, where
     * the receiver would have copied it). 1: taken; 0: not (full), the
     * messages go through the slots as ever. Wire and credits are the
     * same either way: only where the bytes land changes. */
    int (*recv_place)(rcoll_tl_ep_t *ep, const rcoll_tl_place_t *pl);
    /* Ends a recv_place (same seq, step and dst). Whatever the transport
     * holds in dst of messages not yet released (a failed operation's) is
     * moved to its own memory first, so dst may be freed at once. */
    void (*recv_unplace)(rcoll_tl_ep_t *ep, const rcoll_tl_place_t *pl);
    /* Withdraws every send posted with this cookie whose send_done has
     * not come yet (a failed operation's, before its request completes):
     * on return the transport reads none of the memory those sends were
     * given, and it has called send_done for each. It may carry such a
     * message on from a copy of its own, drop it (its receive then never
     * completes at the peer), or revoke it so that a peer reading it at
     * that moment fails the receive; a peer never completes a receive
     * with bytes read from that memory after this call. Bounded in time.
     * why: the operation's error, for a peer that finds the message
     * withdrawn. Required. */
    void (*send_revoke)(rcoll_tl_ctx_t *ctx, void *cookie, const char *why);
    /* Optional: how many independent network paths (rails) the lanes to
     * a peer spread over, the same answer on every rank (the tuner splits
     * a transfer into at least that many chunks so that every path
     * carries one); NULL: 1. */
    int (*paths)(rcoll_tl_ctx_t *ctx);
    /* Optional: the most NICs the ranks of one host use between them
     * (each rank on one of its host's devices), the same answer on every
     * rank; the tuner spreads a ring collective over that many channels
     * (coll/select.c). NULL or 1: every rank uses the same NICs. */
    int (*host_nics)(rcoll_tl_ctx_t *ctx);
    /* Optional, for rcoll-info -t: the devices it would use here. */
    void (*describe)(FILE *f);
    /* The lanes (proto/lanes.h) each peer's messages are striped over
     * with the current settings, and what they are (rcoll-info -t). */
    int (*lanes)(char *what, size_t len);
    /* For rcoll_comm_dump (and rcoll-info -p): this context's lanes with
     * their counters and any cache's, as lines "rcoll:     ...". Called
     * under the communicator's lock, from any thread: reads counters
     * only. */
    void (*stats)(rcoll_tl_ctx_t *ctx, FILE *f);
    /* For rcoll-info -m: the bytes this rank allocates per peer it serves
     * with these settings (the bound of its memory per communicator), and
     * what they are. */
    size_t (*peer_bytes)(size_t chunk, int nslots, char *what, size_t len);
    /* Optional (shared memory): each rank's region of params.region
     * bytes, mapped by every rank the context reaches, zeroed at the
     * start and 64-byte aligned. Returns its address for `rank` (this
     * rank too) and its length, or NULL if that rank has none. Its first
     * RCOLL_TL_WATCH 64-bit words are watch words: the owner alone stores
     * them, and a change to one wakes a rank asleep in wait(). What the
     * rest holds is the caller's (coll/area.c). */
    void *(*region)(rcoll_tl_ctx_t *ctx, int rank, size_t *len);
    /* Wakes every peer asleep in wait() (after the owner stored its watch
     * words; a sequentially consistent fence is inside). */
    void (*region_wake)(rcoll_tl_ctx_t *ctx);
} rcoll_tl_ops_t;
#define RCOLL_TL_WATCH 2

/* 1 if ranks a and b talk through the transport of p (rcoll_tl_params_t
 * pair; during ctx_create and paths() only). */
static inline int rcoll_tl_pair(const rcoll_tl_params_t *p, int a, int b)
{
    return p->pair ? p->pair(p->pair_arg, a, b) : 0;
}

/* This rank's row of the pairs: row[i] = rcoll_tl_pair(p, rank, i), n
 * bytes from malloc (NULL: no memory). */
static inline uint8_t *rcoll_tl_row(const rcoll_tl_params_t *p)
{
    uint8_t *row = (uint8_t *)malloc((size_t)p->nranks);
    for (int i = 0; row && i < p->nranks; i++)
        row[i] = (uint8_t)(i != p->rank && rcoll_tl_pair(p, p->rank, i));
    return row;
}

/* The end of a ctx_create that failed part-way, for every transport: the
 * context is destroyed as an abort whose reason is the error being
 * reported (so the peers connected so far learn why), and that error is
 * kept for the caller. Returns st. (Inline: transport.c names every
 * transport, so a call into it from one would be a cycle.) */
static inline rcoll_status_t
rcoll_tl_create_failed(rcoll_tl_ctx_t *ctx,
                       void (*destroy)(rcoll_tl_ctx_t *, int, const char *),
                       rcoll_status_t st)
{
    /* the abort's own sends must not overwrite the error being reported */
    char why[512];
    snprintf(why, sizeof(why), "%s", rcoll_last_error());
    destroy(ctx, 1, why);
    return rcoll__set_error(st, "%s", why);
}

/* An abort's reason, the same on every transport's wire: at most
 * RCOLL_TL_REASON - 1 bytes of text and a NUL. */
#define RCOLL_TL_REASON 512

/* Takes a reason a peer wrote (len bytes at most, perhaps without its NUL,
 * perhaps not text) into dst (RCOLL_TL_REASON bytes; dst may be src): cut
 * at the first NUL, and every byte that is not printable ASCII becomes
 * '?', so that a peer's bytes reach an error message or a log as text,
 * never as control characters. */
static inline void rcoll_tl_reason_take(char *dst, const char *src,
                                        size_t len)
{
    size_t i = 0;
    for (; i < len && i < RCOLL_TL_REASON - 1; i++) {
        /* each byte read once: the peer may be writing it meanwhile */
        char c = ((const volatile char *)src)[i];
        if (!c)
            break;
        dst[i] = c >= 0x20 && c < 0x7f ? c : '?';
    }
    dst[i] = '\0';
}

/* Reports once that the link to `peer` ended, in one format for every
 * transport: "rank P (HOST pid N) aborted the communicator: REASON" when
 * the peer said it aborted (reason may be empty), else "rank P (HOST pid
 * N): WHAT". msg (the endpoint's, len bytes) keeps the text for the
 * errors of later calls. */
static inline void rcoll_tl_peer_failed(const rcoll_tl_params_t *p, int peer,
                                        char *msg, size_t len, int aborted,
                                        const char *reason, const char *what)
{
    const rcoll_boot_peer_t *pi = &p->bs->peers[peer];
    if (aborted)
        snprintf(msg, len, "rank %d (%s pid %d) aborted the communicator%s%s",
                 peer, pi->hostname, pi->pid, reason[0] ? ": " : "", reason);
    else
        snprintf(msg, len, "rank %d (%s pid %d): %s", peer, pi->hostname,
                 pi->pid, what);
    p->ev->peer_failed(p->ev->arg, peer, RCOLL_ERR_REMOTE, msg);
}

/* The pipeline chunk for RCOLL_CHUNK_SIZE = chunk when a rank has `peers`
 * shared-memory peers, within RCOLL_SHM_BUDGET (transport.c): chunk while
 * rcoll_shm_plan fits it, else the largest multiple of 4 KiB that fits
 * with full rings; *over is set when even the smallest chunk misses it.
 * region: params.region of the shared-memory transport. */
size_t rcoll_tl_chunk_fit(size_t chunk, int nslots, int peers, size_t region,
                          int *over);

/* How a rank with `peers` shared-memory peers lays out its receive memory
 * for a chunk and a shared region of `region` bytes (params.region)
 * (shm_ctx.c): rings of nslots chunk-sized slots per peer
 * while they fit RCOLL_SHM_BUDGET (pool 0), else, if pool_ok and
 * RCOLL_SHM_POOL, rings of small slots and a pool of chunk-sized slots
 * all peers share, when at least 2 x nslots of them fit. `bytes`: the
 * segment's size. Returns 1 if the plan keeps within the budget (or there
 * is none). */
typedef struct {
    size_t ring_slot;   /* bytes of a ring slot (header + payload) */
    int pool;           /* pool slots; 0: none */
    size_t bytes;       /* header, rings, pool and region */
} rcoll_shm_plan_t;
int rcoll_shm_plan(size_t chunk, int nslots, int peers, int pool_ok,
                   size_t region, rcoll_shm_plan_t *pl);

/* All transports compiled in, NULL-terminated. */
extern const rcoll_tl_ops_t *const rcoll_transports[];

extern const rcoll_tl_ops_t rcoll_tl_tcp_ops;
extern const rcoll_tl_ops_t rcoll_tl_shm_ops;
#if HAVE_VERBS && HAVE_RDMACM
extern const rcoll_tl_ops_t rcoll_tl_ib_ops;
#endif

#endif
