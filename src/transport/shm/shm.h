/* The shared-memory transport, for ranks on the same host.
 *
 * Every rank creates one POSIX shared-memory segment that holds its receive
 * rings: one ring per local peer that sends to it. A ring is nslots slots
 * (message header + chunk_size payload, cache-line aligned) and two
 * counters on their own cache lines: `head`, written only by the sender
 * (messages published), and `tail`, written only by the receiver (slots
 * freed; the credits). Single producer, single consumer: the sender fills
 * slot head % nslots, then publishes with a release store of head; the
 * receiver reads head with acquire, uses the slot in place (reductions read
 * straight out of it) and frees it with a release store of tail.
 *
 * The pool (RCOLL_SHM_POOL): where rings of chunk-sized slots for every
 * local peer would pass RCOLL_SHM_BUDGET, a rank's rings get small slots
 * (SHM_POOL_INLINE bytes of payload) and its segment a pool of
 * chunk-sized slots that every sender draws from: a larger message takes
 * a pool slot (a bit set with compare-and-swap in the pool's bitmap), and
 * its ring slot names it; the receiver frees both together. A sender
 * holds at most nslots pool slots of a receiver (its ring's), so the pool
 * is sized for the few peers a schedule receives from at once, not for
 * all of them, and the chunk stays RCOLL_CHUNK_SIZE at any rank count. A
 * sender that finds the pool full sets its bit in the pool's waiter words
 * and tries once more; the receiver, freeing a pool slot, rings the
 * doorbell of every waiter. A receiver stalled behind a full pool sets
 * aside what holds it (recv_full, coll_match_unblock), as for full rings.
 *
 * Segments are named /rcoll-<pid>-<random>, mapped by every peer, and
 * unlinked by their creator once a barrier says every peer has mapped them,
 * so a crash after setup leaves nothing in /dev/shm. A crash during setup
 * can leave a segment behind; setup removes segments whose creating
 * process no longer exists.
 *
 * Waiting: the engine polls (yielding the CPU) for RCOLL_SPIN_US, then
 * sleeps in wait() on a futex word in its own segment (the doorbell) after
 * announcing it (`sleeping`). A sender that publishes, or a receiver that
 * frees a slot, rings the peer's doorbell only when the peer announced
 * sleep; seq_cst fences on both sides make the announcement and the ring
 * counters a Dekker pair, so no wake-up is lost.
 *
 * Failures: a peer's death is seen through a pidfd in the engine's epoll
 * set (readable when the process exits); an abort writes its reason into
 * the aborting rank's segment header, which peers read in progress().
 *
 * shm_data.c holds the data path (sends, receives, single-copy reads,
 * revokes, waiting and waking, failures of a peer), shm_ctx.c the context
 * (segments created, mapped, swept and torn down; the ops table). */
#ifndef RCOLL_SHM_H
#define RCOLL_SHM_H
#define _GNU_SOURCE
#include "transport/transport.h"
#include "proto/lanes.h"
#include "util/params.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define SHM_CL 64
#define SHM_MAGIC 0x73686d31U /* "shm1" */
#define SHM_REASON_MAX RCOLL_TL_REASON
#define SHM_NAME_MAX 64
#define SHM_BOUNCE (256u << 10)
#define SHM_MSG_MAX (1u << 30) /* a single-copy message (32-bit lengths) */
#define SHM_BOUNCE_MIN (16u << 10)
#define SHM_ALIGN(x) (((x) + SHM_CL - 1) & ~(size_t)(SHM_CL - 1))
#define SHM_POOL_INLINE 4096u /* ring slots' payload when there is a pool */
#define SHM_POOL_SENDERS 3    /* a pool holds at most this many windows */

enum { SHM_LIVE = 0, SHM_CLOSED = 1, SHM_ABORTED = 2 };

/* The head of a segment. The doorbell line is written by everyone who
 * wakes the owner; the rest is written by the owner only. */
typedef struct {
    uint32_t doorbell;          /* futex word */
    uint32_t sleeping;          /* the owner may be in futex_wait */
    char pad0[SHM_CL - 8];
    uint32_t magic;
    uint32_t state;             /* SHM_LIVE / CLOSED / ABORTED */
    int32_t rank;
    int32_t pid;
    uint64_t probe_addr;        /* &magic in the owner's address space, for
                                   the single-copy probe */
    uint64_t chunk_size;
    uint32_t nslots;
    uint32_t nrings;
    uint64_t region_off;        /* the shared region (params.region): */
    uint64_t region_len;        /* offset and length; 0: none */
    uint64_t ring_slot;         /* bytes of a slot of its rings */
    uint64_t pool_off;          /* the pool's slots: offset, */
    uint64_t pool_bits_off;     /* its bitmap (a bit per slot, 1: taken), */
    uint64_t pool_wait_off;     /* its waiters (a bit per ring), */
    uint32_t pool_n;            /* how many slots; 0: no pool */
    uint32_t pool_pad;
    char reason[SHM_REASON_MAX];
} __attribute__((aligned(SHM_CL))) shm_seg_hdr_t;

typedef struct {
    uint64_t head;              /* sender: messages published */
    char pad0[SHM_CL - 8];
    uint64_t tail;              /* receiver: messages consumed */
    uint32_t cma_ok;            /* receiver: it can read the sender's memory
                                   (process_vm_readv worked at setup) */
    char pad1[SHM_CL - 12];
} shm_ring_ctl_t;

/* A slot's first cache line: the message header, and where the payload is
 * when it stayed in the sender's memory (single copy). */
typedef struct {
    rcoll_msg_hdr_t hdr;
    uint64_t cma_addr;          /* sender's address; 0: payload in the slot */
    uint32_t revoked;           /* sender: the single-copy message's
                                   operation failed and its memory is the
                                   caller's again (shm_send_revoke); the
                                   receiver checks after reading */
    uint32_t pool;              /* payload in pool slot pool - 1; 0: not */
    char pad[SHM_CL - sizeof(rcoll_msg_hdr_t) - 16];
} shm_slot_hdr_t;

typedef struct shm_ep {
    struct rcoll_tl_ctx *ctx;
    int peer;
    char *peer_base;            /* the peer's segment, mapped */
    size_t peer_len;
    shm_seg_hdr_t *peer_hdr;
    shm_ring_ctl_t *tx;         /* our ring in the peer's segment */
    char *tx_slots;
    size_t tx_slot;             /* bytes of its slots (the peer's choice) */
    size_t tx_inline;           /* the most payload bytes one holds */
    /* the peer's pool (tx_pool_n 0: none), mapped */
    char *tx_pool;
    uint64_t *tx_pool_bits, *tx_pool_wait;
    int tx_pool_n;
    int tx_ring_idx;            /* our ring's index there (waiter bit) */
    int pool_wait;              /* a send found its pool full */
    int rx_ring_idx;            /* its ring's index in our segment */
    uint32_t rx_pool;           /* the peeked message's pool slot + 1 */
    shm_ring_ctl_t *rx;         /* the peer's ring in our segment */
    char *rx_slots;
    uint64_t tx_head, tx_tail_seen;
    void **tx_cookie;           /* by slot: a single-copy send's cookie,
                                   done when the receiver frees the slot */
    uint64_t tx_done;           /* slots whose completion was handled */
    int cma_tx;                 /* the peer can read our memory */
    pid_t pid;
    uint64_t rx_tail, rx_head_seen;
    /* the peeked slot's header and single-copy address, copied out of the
     * shared segment: the engine checks and uses this copy, so a peer that
     * rewrote the slot meanwhile cannot make recv_copy overrun */
    rcoll_msg_hdr_t rx_hdr;
    uint64_t rx_cma_addr;
    uint64_t wake_head, wake_tail;  /* last seen by shm_anything */
    uint32_t wake_state;
    uint64_t *region;           /* the peer's shared region, or NULL */
    size_t region_len;
    uint64_t wake_watch[RCOLL_TL_WATCH]; /* its watch words, last seen */
    int pidfd;
    rcoll_ev_handler_t h;
    int dead;                   /* its process exited */
    int failed;                 /* reported to the engine */
    char fail_msg[1024];
    rcoll_lane_stats_t st;      /* the one lane: this ring pair */
} shm_ep_t;

struct rcoll_tl_ctx {
    rcoll_tl_params_t p;
    char name[SHM_NAME_MAX];
    int named;                  /* our segment still has its name */
    char *base;                 /* our segment */
    size_t len;
    shm_seg_hdr_t *hdr;
    size_t slot_size;           /* bytes of a slot of our rings */
    /* our pool (pool_n 0: none): slots of pool_stride bytes */
    char *pool;
    uint64_t *pool_bits, *pool_wait;
    int pool_n, pool_nw, wait_nw;
    size_t pool_stride;
    shm_ep_t **ring_ep;         /* by ring index: whom a waiter bit names */
    uint64_t pool_waits;        /* sends that found a peer's pool full */
    uint64_t pool_msgs;         /* messages sent through peers' pools */
    size_t cma_min;             /* single copy from this many bytes */
    size_t cma_max;             /* and for transfers up to this many */
    size_t rndv_min;            /* whole transfers from this many bytes */
    char *bounce;               /* SHM_BOUNCE bytes: misaligned reads */
    shm_ep_t **eps;             /* by rank; NULL if not ours */
    int npeers;
    uint64_t sent_single;       /* messages sent for the peer to read from
                                   our memory (single copy) */
    uint64_t read_bytes;        /* bytes read from peers' memory */
};


/* shm_data.c, for shm_ctx.c */
int shm_futex(uint32_t *uaddr, int op, uint32_t val,
              const struct timespec *ts);
size_t shm_ring_bytes(size_t slot_size, int nslots);
int shm_ring_index(const rcoll_tl_params_t *p, int r, int s);
void shm_pidfd_event(rcoll_ev_handler_t *h, uint32_t events);
rcoll_status_t shm_send(rcoll_tl_ep_t *tep, const rcoll_msg_hdr_t *hdr,
                        const void *payload, void *cookie, int flags,
                        size_t xfer);
rcoll_status_t shm_recv_peek(rcoll_tl_ep_t *tep,
                             const rcoll_msg_hdr_t **hdr,
                             const void **payload);
rcoll_status_t shm_recv_copy(rcoll_tl_ep_t *tep, void *dst);
void shm_send_revoke(rcoll_tl_ctx_t *ctx, void *cookie,
                     const char *why);
void shm_recv_release(rcoll_tl_ep_t *tep);
int shm_recv_full(rcoll_tl_ep_t *tep);
int shm_progress(rcoll_tl_ctx_t *ctx);
void *shm_region(rcoll_tl_ctx_t *ctx, int rank, size_t *len);
void shm_region_wake(rcoll_tl_ctx_t *ctx);
void shm_wait(rcoll_tl_ctx_t *ctx, int ms);
void shm_kick(rcoll_tl_ctx_t *ctx);

#endif
