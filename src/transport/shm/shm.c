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
 * the aborting rank's segment header, which peers read in progress(). */
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
#define SHM_REASON_MAX 512
#define SHM_NAME_MAX 64
#define SHM_BOUNCE (256u << 10)
#define SHM_MSG_MAX (1u << 30) /* a single-copy message (32-bit lengths) */
#define SHM_BOUNCE_MIN (16u << 10)
#define SHM_ALIGN(x) (((x) + SHM_CL - 1) & ~(size_t)(SHM_CL - 1))

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
    uint64_t area_off;          /* the shared area (RCOLL_SHM_AREA): offset */
    uint64_t area_len;          /* and length; 0: none */
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
    char pad[SHM_CL - sizeof(rcoll_msg_hdr_t) - 12];
} shm_slot_hdr_t;

typedef struct shm_ep {
    struct rcoll_tl_ctx *ctx;
    int peer;
    char *peer_base;            /* the peer's segment, mapped */
    size_t peer_len;
    shm_seg_hdr_t *peer_hdr;
    shm_ring_ctl_t *tx;         /* our ring in the peer's segment */
    char *tx_slots;
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
    rcoll_area_ctl_t *area;     /* the peer's shared area, or NULL */
    size_t area_len;
    uint64_t wake_posted, wake_done;
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
    size_t slot_size;
    size_t cma_min;             /* single copy from this many bytes */
    size_t cma_max;             /* and for transfers up to this many */
    size_t rndv_min;            /* whole transfers from this many bytes */
    char *bounce;               /* SHM_BOUNCE bytes: misaligned reads */
    shm_ep_t **eps;             /* by rank; NULL if not ours */
    int npeers;
    uint8_t *pairs;             /* copy of p.pairs */
    uint64_t sent_single;       /* messages sent for the peer to read from
                                   our memory (single copy) */
    uint64_t read_bytes;        /* bytes read from peers' memory */
};

/* ---- helpers ---- */

static int futex(uint32_t *uaddr, int op, uint32_t val,
                 const struct timespec *ts)
{
    return (int)syscall(SYS_futex, uaddr, op, val, ts, NULL, 0);
}

static void shm_ring_doorbell(shm_seg_hdr_t *h)
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (__atomic_load_n(&h->sleeping, __ATOMIC_SEQ_CST)) {
        __atomic_fetch_add(&h->doorbell, 1, __ATOMIC_SEQ_CST);
        futex(&h->doorbell, FUTEX_WAKE, 1, NULL);
    }
}

static size_t shm_ring_bytes(size_t slot_size, int nslots)
{
    return sizeof(shm_ring_ctl_t) + slot_size * (size_t)nslots;
}

/* Index of sender s's ring in receiver r's segment: the rings are in rank
 * order of the senders that r talks to through shared memory. */
static int shm_ring_index(const rcoll_tl_params_t *p, int r, int s)
{
    int idx = 0;
    for (int i = 0; i < s; i++)
        idx += p->pairs[(size_t)r * (size_t)p->nranks + (size_t)i];
    return idx;
}

static int shm_usable(char *why, size_t len)
{
    struct stat sb;
    if (stat("/dev/shm", &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        snprintf(why, len, "/dev/shm is missing");
        return 0;
    }
    return 1;
}

/* The PID namespace of this process (the inode of /proc/self/ns/pid), or
 * 0 if it cannot be read. Segment names carry it: a PID means something
 * only in its own namespace, and containers that share /dev/shm (hostIPC,
 * one pod) have different ones. */
static unsigned long shm_pidns(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (unsigned long)st.st_ino
                                               : 0;
}

/* Removes segments that a crashed process left behind:
 * /rcoll-n<pidns>-<pid>-* of our own PID namespace whose process is gone.
 * Segments of other namespaces (other containers on this /dev/shm) and
 * names without a namespace are never judged: kill(pid, 0) says nothing
 * about a PID of another namespace, and judging them once unlinked live
 * segments of jobs in other containers during their setup. */
static void shm_sweep_stale(unsigned long ns)
{
    DIR *d = ns ? opendir("/dev/shm") : NULL;
    struct dirent *e;
    if (!d)
        return;
    while ((e = readdir(d))) {
        int pid;
        unsigned long their;
        char name[SHM_NAME_MAX + 2];
        if (sscanf(e->d_name, "rcoll-n%lu-%d-", &their, &pid) != 2 ||
            pid <= 0 || their != ns)
            continue;
        if (kill(pid, 0) == 0 || errno != ESRCH)
            continue;
        snprintf(name, sizeof(name), "/%.*s", SHM_NAME_MAX - 1, e->d_name);
        if (shm_unlink(name) == 0)
            rcoll_info(RCOLL_SUBSYS_INIT, "shm: removed %s, left by a "
                       "process that no longer exists", name);
    }
    closedir(d);
}

/* ---- failures ---- */

static void shm_ep_fail(shm_ep_t *ep, const char *what)
{
    struct rcoll_tl_ctx *ctx = ep->ctx;
    const rcoll_boot_peer_t *pi = &ctx->p.bs->peers[ep->peer];
    if (ep->failed)
        return;
    ep->failed = 1;
    snprintf(ep->fail_msg, sizeof(ep->fail_msg), "rank %d (%s pid %d) %s",
             ep->peer, pi->hostname, pi->pid, what);
    ctx->p.ev->peer_failed(ctx->p.ev->arg, ep->peer, RCOLL_ERR_REMOTE,
                           ep->fail_msg);
}

/* Looks at the peer's state; reports an abort or a death once. Returns
 * the state (SHM_LIVE while it runs). */
static int shm_ep_check(shm_ep_t *ep)
{
    int state = (int)__atomic_load_n(&ep->peer_hdr->state, __ATOMIC_ACQUIRE);
    if (state == SHM_ABORTED && !ep->failed) {
        char what[SHM_REASON_MAX + 64];
        char reason[SHM_REASON_MAX];
        memcpy(reason, ep->peer_hdr->reason, sizeof(reason));
        reason[sizeof(reason) - 1] = '\0';
        snprintf(what, sizeof(what), "aborted the communicator%s%s",
                 reason[0] ? ": " : "", reason);
        shm_ep_fail(ep, what);
    } else if (ep->dead && state == SHM_LIVE && !ep->failed) {
        shm_ep_fail(ep, "died: its process exited without closing the "
                    "communicator");
    }
    if (state == SHM_LIVE && ep->dead)
        return SHM_ABORTED;
    return state;
}

static rcoll_status_t shm_ep_error(shm_ep_t *ep, int state)
{
    if (state == SHM_CLOSED && !ep->failed)
        return rcoll__set_error(RCOLL_ERR_REMOTE, "rank %d already destroyed "
                                "the communicator", ep->peer);
    return rcoll__set_error(RCOLL_ERR_REMOTE, "%s", ep->fail_msg);
}

static void shm_pidfd_event(rcoll_ev_handler_t *h, uint32_t events)
{
    shm_ep_t *ep = (shm_ep_t *)((char *)h - offsetof(shm_ep_t, h));
    (void)events;
    ep->dead = 1;
    epoll_ctl(ep->ctx->p.epfd, EPOLL_CTL_DEL, ep->pidfd, NULL);
    shm_ep_check(ep);
}

/* ---- data path ---- */

/* The counters a peer writes are checked before use: a tail beyond what we
 * published (or going back), or a head more than a ring ahead of what we
 * consumed (or behind it), means its shared memory is corrupt, and fails
 * the peer instead of counting towards it (an impossible tail once made
 * the loop below run ~2^62 times: tests/fuzz/fuzz_shm_ring.c). */
static int shm_index_bad(shm_ep_t *ep, const char *which, uint64_t v,
                         uint64_t lo, uint64_t hi)
{
    char what[160];
    if (v >= lo && v <= hi)
        return 0;
    snprintf(what, sizeof(what), "wrote an impossible ring %s (%llu, "
             "expected %llu to %llu): its shared memory is corrupt", which,
             (unsigned long long)v, (unsigned long long)lo,
             (unsigned long long)hi);
    shm_ep_fail(ep, what);
    return 1;
}

/* Reads the tail of our ring in the peer's segment: -1 if impossible. */
static int shm_tail_load(shm_ep_t *ep)
{
    uint64_t t = __atomic_load_n(&ep->tx->tail, __ATOMIC_ACQUIRE);
    if (shm_index_bad(ep, "tail", t, ep->tx_tail_seen, ep->tx_head))
        return -1;
    ep->tx_tail_seen = t;
    return 0;
}

/* Reads the head of the peer's ring in our segment: -1 if impossible. */
static int shm_head_load(shm_ep_t *ep)
{
    uint64_t h = __atomic_load_n(&ep->rx->head, __ATOMIC_ACQUIRE);
    if (shm_index_bad(ep, "head", h, ep->rx_tail,
                      ep->rx_tail + (uint64_t)ep->ctx->p.nslots))
        return -1;
    ep->rx_head_seen = h;
    return 0;
}

/* Single-copy sends whose slot the receiver has freed are done. */
static void shm_tx_complete(shm_ep_t *ep)
{
    struct rcoll_tl_ctx *ctx = ep->ctx;
    uint64_t ns = (uint64_t)ctx->p.nslots;
    if (ep->tx_done == ep->tx_head)
        return;
    /* (after a peer's abort, what it consumed before still completes) */
    if (shm_tail_load(ep) != 0)
        return;
    while (ep->tx_done < ep->tx_tail_seen) {
        void **c = &ep->tx_cookie[ep->tx_done % ns];
        if (*c) {
            void *cookie = *c;
            *c = NULL;
            ctx->p.ev->send_done(ctx->p.ev->arg, cookie);
        }
        ep->tx_done++;
    }
}

static rcoll_status_t shm_send(rcoll_tl_ep_t *tep, const rcoll_msg_hdr_t *hdr,
                               const void *payload, void *cookie, int flags,
                               size_t xfer)
{
    shm_ep_t *ep = (shm_ep_t *)tep;
    struct rcoll_tl_ctx *ctx = ep->ctx;
    uint64_t ns = (uint64_t)ctx->p.nslots;
    if (ep->failed || ep->dead) {
        int state = shm_ep_check(ep);
        return shm_ep_error(ep, state == SHM_LIVE ? SHM_ABORTED : state);
    }
    if (ep->tx_head - ep->tx_tail_seen >= ns) {
        if (shm_tail_load(ep) != 0)
            return shm_ep_error(ep, SHM_ABORTED);
        shm_tx_complete(ep);
        if (ep->tx_head - ep->tx_tail_seen >= ns) {
            int state = shm_ep_check(ep);
            if (state != SHM_LIVE)
                return shm_ep_error(ep, state);
            rcoll_lane_add(&ep->st.tx_waits, 1);
            return RCOLL_INPROGRESS;
        }
    }
    char *slot = ep->tx_slots + (ep->tx_head % ns) * ctx->slot_size;
    shm_slot_hdr_t *sh = (shm_slot_hdr_t *)slot;
    /* large data the peer only copies, in transfers up to cma_max: let
     * it read our buffer (one copy instead of two; past cma_max the two
     * copies through a ring that stays in cache measured faster); the
     * send is done when it frees the slot */
    int single = ep->cma_tx &&
                 ((ctx->cma_min && hdr->len >= ctx->cma_min &&
                   xfer <= ctx->cma_max &&
                   ((flags & RCOLL_TL_PEER_COPIES) ||
                    rcoll_config.shm_cma_all)) ||
                  hdr->len > ctx->p.chunk_size ||
                  (ctx->rndv_min && hdr->len >= ctx->rndv_min &&
                   (flags & RCOLL_TL_WHOLE) &&
                   (flags & RCOLL_TL_PEER_COPIES)));
    if (!single && hdr->len > ctx->p.chunk_size)
        return rcoll__set_error(RCOLL_ERR_INTERNAL, "shm: a %u-byte message "
                                "to rank %d is larger than a slot (%zu)",
                                hdr->len, ep->peer, ctx->p.chunk_size);
    sh->hdr = *hdr;
    sh->revoked = 0;
    if (single) {
        sh->cma_addr = (uint64_t)(uintptr_t)payload;
        ep->tx_cookie[ep->tx_head % ns] = cookie;
    } else {
        sh->cma_addr = 0;
        if (hdr->len)
            memcpy(slot + SHM_CL, payload, hdr->len);
    }
    ep->tx_head++;
    rcoll_lane_sent(&ep->st, hdr->len);
    if (single)
        rcoll_lane_add(&ctx->sent_single, 1);
    __atomic_store_n(&ep->tx->head, ep->tx_head, __ATOMIC_RELEASE);
    shm_ring_doorbell(ep->peer_hdr);
    if (!single)
        ctx->p.ev->send_done(ctx->p.ev->arg, cookie);
    return RCOLL_OK;
}

static rcoll_status_t shm_recv_peek(rcoll_tl_ep_t *tep,
                                    const rcoll_msg_hdr_t **hdr,
                                    const void **payload)
{
    shm_ep_t *ep = (shm_ep_t *)tep;
    struct rcoll_tl_ctx *ctx = ep->ctx;
    if (ep->rx_tail == ep->rx_head_seen) {
        if (shm_head_load(ep) != 0)
            return shm_ep_error(ep, SHM_ABORTED);
        if (ep->rx_tail == ep->rx_head_seen) {
            int state = shm_ep_check(ep);
            if (state != SHM_LIVE) {
                /* published just before it went away? */
                if (shm_head_load(ep) != 0)
                    return shm_ep_error(ep, SHM_ABORTED);
                if (ep->rx_tail == ep->rx_head_seen)
                    return shm_ep_error(ep, state);
            } else {
                return RCOLL_INPROGRESS;
            }
        }
    }
    char *slot = ep->rx_slots +
                 (ep->rx_tail % (uint64_t)ctx->p.nslots) * ctx->slot_size;
    const shm_slot_hdr_t *sh = (const shm_slot_hdr_t *)slot;
    ep->rx_hdr = sh->hdr;
    ep->rx_cma_addr = sh->cma_addr;
    /* a length no sender of ours writes becomes one that every check
     * refuses (a mismatch): past a slot for data in the slot, past
     * SHM_MSG_MAX for data left in the sender's memory */
    if (!ep->rx_cma_addr && ep->rx_hdr.len > ctx->p.chunk_size)
        ep->rx_hdr.len = (uint32_t)ctx->p.chunk_size + 1;
    else if (ep->rx_cma_addr && ep->rx_hdr.len > SHM_MSG_MAX)
        ep->rx_hdr.len = SHM_MSG_MAX + 1;
    *hdr = &ep->rx_hdr;
    *payload = ep->rx_cma_addr ? NULL : slot + SHM_CL;
    return RCOLL_OK;
}

/* 1 if the sender withdrew the single-copy message in this slot */
static int shm_withdrawn(const char *slot)
{
    const shm_slot_hdr_t *sh = (const shm_slot_hdr_t *)slot;
    return __atomic_load_n(&sh->revoked, __ATOMIC_ACQUIRE) != 0;
}

/* A receive of a withdrawn message (or one from a sender gone) fails with
 * the sender's reason: its operation's error, or its abort's. */
static rcoll_status_t shm_withdrawn_error(shm_ep_t *ep, size_t len)
{
    if (ep->failed)
        return rcoll__set_error(RCOLL_ERR_REMOTE, "%s", ep->fail_msg);
    char reason[SHM_REASON_MAX];
    memcpy(reason, ep->peer_hdr->reason, sizeof(reason));
    reason[sizeof(reason) - 1] = '\0';
    return rcoll__set_error(RCOLL_ERR_REMOTE, "shm: rank %d (pid %d) "
                            "withdrew a %zu-byte message while it was read: "
                            "its operation failed%s%s", ep->peer,
                            (int)ep->pid, len, reason[0] ? ": " : "",
                            reason);
}

/* The peeked message's payload to dst: from the slot, or straight out of
 * the sender's memory (process_vm_readv). */
static rcoll_status_t shm_recv_copy(rcoll_tl_ep_t *tep, void *dst)
{
    shm_ep_t *ep = (shm_ep_t *)tep;
    struct rcoll_tl_ctx *ctx = ep->ctx;
    const char *slot = ep->rx_slots +
        (ep->rx_tail % (uint64_t)ctx->p.nslots) * ctx->slot_size;
    size_t len = ep->rx_hdr.len, got = 0;
    if (!ep->rx_cma_addr) {
        len = RCOLL_MIN(len, ctx->p.chunk_size);
        memcpy(dst, slot + SHM_CL, len);
        return RCOLL_OK;
    }
    /* The kernel copies 5x slower when source and destination differ in
     * their offsets within 32 bytes (measured here: 1.7 against 9 GB/s):
     * then read in pieces into a bounce buffer that shares the source's
     * offset and copy each piece on while it is in cache. */
    size_t mis = (size_t)(ep->rx_cma_addr - (uintptr_t)dst) & 31;
    if (mis && len >= SHM_BOUNCE_MIN && !ctx->bounce &&
        posix_memalign((void **)&ctx->bounce, 4096, SHM_BOUNCE + 64))
        ctx->bounce = NULL;
    while (got < len) {
        size_t want = len - got;
        char *to = (char *)dst + got;
        int bounced = mis && len >= SHM_BOUNCE_MIN && ctx->bounce;
        if (bounced) {
            want = RCOLL_MIN(want, SHM_BOUNCE);
            to = ctx->bounce + ((ep->rx_cma_addr + got) & 63);
        }
        struct iovec l = {to, want};
        struct iovec r = {(void *)(uintptr_t)(ep->rx_cma_addr + got), want};
        ssize_t n = process_vm_readv(ep->pid, &l, 1, &r, 1, 0);
        if (n > 0 && bounced)
            memcpy((char *)dst + got, to, (size_t)n);
        if (n <= 0) {
            int err = n < 0 ? errno : EIO;
            if (err == EINTR)
                continue;
            /* a sender whose operation failed may have withdrawn it and
             * taken its memory back, or died: say that, with its reason */
            shm_ep_check(ep);
            if (shm_withdrawn(slot) || ep->failed)
                return shm_withdrawn_error(ep, len);
            return rcoll__set_error(RCOLL_ERR_REMOTE, "shm: reading %zu "
                                    "bytes from rank %d (pid %d): %s",
                                    len - got, ep->peer, (int)ep->pid,
                                    strerror(err));
        }
        got += (size_t)n;
    }
    rcoll_lane_add(&ctx->read_bytes, len);
    /* Read from memory that was the sender's operation's all along? Its
     * revocation (a seq_cst store, then its caller's writes) comes after
     * our reads if we do not see it here: a seqlock reader's check. */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (shm_withdrawn(slot))
        return shm_withdrawn_error(ep, len);
    return RCOLL_OK;
}

/* Withdraws the single-copy sends of a failed operation (transport op
 * send_revoke): each slot that still points into its memory is marked
 * revoked, so that a receiver reading it now fails the receive instead of
 * taking bytes its caller may rewrite from here on. */
static void shm_send_revoke(rcoll_tl_ctx_t *ctx, void *cookie,
                            const char *why)
{
    uint64_t ns = (uint64_t)ctx->p.nslots;
    int any = 0, told = 0;
    for (int i = 0; i < ctx->p.nranks; i++) {
        shm_ep_t *ep = ctx->eps[i];
        for (uint64_t k = ep ? ep->tx_done : 0; ep && k < ep->tx_head; k++) {
            if (ep->tx_cookie[k % ns] != cookie)
                continue;
            shm_slot_hdr_t *sh =
                (shm_slot_hdr_t *)(ep->tx_slots + (k % ns) * ctx->slot_size);
            if (!told++ && why && !ctx->hdr->reason[0]) {
                /* why, for the peer that finds the mark (before it) */
                snprintf(ctx->hdr->reason, SHM_REASON_MAX, "%s", why);
                __atomic_thread_fence(__ATOMIC_SEQ_CST);
            }
            __atomic_store_n(&sh->revoked, 1, __ATOMIC_SEQ_CST);
            ep->tx_cookie[k % ns] = NULL;
            ctx->p.ev->send_done(ctx->p.ev->arg, cookie);
            any = 1;
        }
    }
    /* the marks before any write of the caller's to its buffers */
    if (any)
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

static void shm_recv_release(rcoll_tl_ep_t *tep)
{
    shm_ep_t *ep = (shm_ep_t *)tep;
    rcoll_lane_received(&ep->st, ep->rx_hdr.len);
    ep->rx_tail++;
    __atomic_store_n(&ep->rx->tail, ep->rx_tail, __ATOMIC_RELEASE);
    shm_ring_doorbell(ep->peer_hdr); /* a credit for a waiting sender */
}

/* The ring is full: its sender can post nothing until we release. */
static int shm_recv_full(rcoll_tl_ep_t *tep)
{
    shm_ep_t *ep = (shm_ep_t *)tep;
    if (ep->rx_head_seen - ep->rx_tail < (uint64_t)ep->ctx->p.nslots &&
        shm_head_load(ep) != 0)
        return 0; /* (an abort: recv_peek reports it) */
    return ep->rx_head_seen - ep->rx_tail >= (uint64_t)ep->ctx->p.nslots;
}

static int shm_progress(rcoll_tl_ctx_t *ctx)
{
    int n = 0;
    for (int i = 0; i < ctx->p.nranks; i++) {
        shm_ep_t *ep = ctx->eps[i];
        if (!ep)
            continue;
        shm_tx_complete(ep);
        if (!ep->failed && shm_ep_check(ep) == SHM_ABORTED)
            n++;
    }
    return n;
}

/* True if something happened since the last wake-up: a message, a freed
 * slot or a peer's state change. Each event wakes us once: a message that
 * the schedule does not want yet (it waits on another peer first) must not
 * keep us from sleeping. */
static int shm_anything(rcoll_tl_ctx_t *ctx)
{
    int any = 0;
    for (int i = 0; i < ctx->p.nranks; i++) {
        shm_ep_t *ep = ctx->eps[i];
        if (!ep)
            continue;
        uint64_t head = __atomic_load_n(&ep->rx->head, __ATOMIC_SEQ_CST);
        if (head != ep->rx_tail && head != ep->wake_head) {
            ep->wake_head = head;
            any = 1;
        }
        uint64_t tail = __atomic_load_n(&ep->tx->tail, __ATOMIC_SEQ_CST);
        if (tail != ep->wake_tail) {
            ep->wake_tail = tail;
            any = 1;
        }
        uint32_t state = __atomic_load_n(&ep->peer_hdr->state,
                                         __ATOMIC_SEQ_CST);
        if (state != ep->wake_state) {
            ep->wake_state = state;
            any = 1;
        }
        if (ep->area) {
            uint64_t v = __atomic_load_n(&ep->area->posted, __ATOMIC_SEQ_CST);
            uint64_t d = __atomic_load_n(&ep->area->done, __ATOMIC_SEQ_CST);
            if (v != ep->wake_posted || d != ep->wake_done) {
                ep->wake_posted = v;
                ep->wake_done = d;
                any = 1;
            }
        }
    }
    return any;
}

static void *shm_area(rcoll_tl_ctx_t *ctx, int rank, size_t *len)
{
    if (rank == ctx->p.rank) {
        if (!ctx->hdr || !ctx->hdr->area_len)
            return NULL;
        *len = ctx->hdr->area_len;
        return ctx->base + ctx->hdr->area_off;
    }
    if (rank < 0 || rank >= ctx->p.nranks || !ctx->eps[rank] ||
        !ctx->eps[rank]->area)
        return NULL;
    *len = ctx->eps[rank]->area_len;
    return ctx->eps[rank]->area;
}

static void shm_area_wake(rcoll_tl_ctx_t *ctx)
{
    /* one fence for all (shm_ring_doorbell has one per peer) */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    for (int i = 0; i < ctx->p.nranks; i++) {
        shm_ep_t *ep = ctx->eps[i];
        if (ep && __atomic_load_n(&ep->peer_hdr->sleeping, __ATOMIC_SEQ_CST)) {
            __atomic_fetch_add(&ep->peer_hdr->doorbell, 1, __ATOMIC_SEQ_CST);
            futex(&ep->peer_hdr->doorbell, FUTEX_WAKE, 1, NULL);
        }
    }
}

static void shm_wait(rcoll_tl_ctx_t *ctx, int ms)
{
    shm_seg_hdr_t *h = ctx->hdr;
    uint32_t v = __atomic_load_n(&h->doorbell, __ATOMIC_SEQ_CST);
    __atomic_store_n(&h->sleeping, 1, __ATOMIC_SEQ_CST);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (!shm_anything(ctx)) {
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
        futex(&h->doorbell, FUTEX_WAIT, v, &ts);
    }
    __atomic_store_n(&h->sleeping, 0, __ATOMIC_RELAXED);
}

static void shm_kick(rcoll_tl_ctx_t *ctx)
{
    __atomic_fetch_add(&ctx->hdr->doorbell, 1, __ATOMIC_SEQ_CST);
    futex(&ctx->hdr->doorbell, FUTEX_WAKE, 1, NULL);
}

/* ---- setup and teardown ---- */

typedef struct {
    char name[SHM_NAME_MAX];
} shm_addr_t;

static void shm_ctx_destroy(rcoll_tl_ctx_t *ctx, int abort,
                            const char *reason);

static rcoll_status_t shm_map_peer(struct rcoll_tl_ctx *ctx, int peer,
                                   const char *name)
{
    const rcoll_tl_params_t *p = &ctx->p;
    shm_ep_t *ep = ctx->eps[peer];
    struct stat sb;
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0)
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "shm: rank %d cannot open "
                                "rank %d's segment %s: %s", p->rank, peer,
                                name, strerror(errno));
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "shm: rank %d: fstat of rank %d's segment %s: %s", p->rank, peer, name,
                                strerror(errno));
    }
    void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ | PROT_WRITE,
                   MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "shm: rank %d cannot map rank %d's segment %s: %s", p->rank, peer, name,
                                strerror(errno));
    ep->peer_base = m;
    ep->peer_len = (size_t)sb.st_size;
    ep->peer_hdr = m;
    if (ep->peer_hdr->magic != SHM_MAGIC ||
        ep->peer_hdr->rank != peer ||
        ep->peer_hdr->chunk_size != p->chunk_size ||
        ep->peer_hdr->nslots != (uint32_t)p->nslots)
        return rcoll__set_error(
            RCOLL_ERR_INVALID_ARGUMENT,
            "shm: rank %d and rank %d disagree on RCOLL_CHUNK_SIZE (%zu vs "
            "%llu) or RCOLL_NSLOTS (%d vs %u): set them the same on every "
            "rank", p->rank, peer, p->chunk_size,
            (unsigned long long)ep->peer_hdr->chunk_size, p->nslots,
            ep->peer_hdr->nslots);
    size_t rb = shm_ring_bytes(ctx->slot_size, p->nslots);
    size_t off = sizeof(shm_seg_hdr_t) +
                 (size_t)shm_ring_index(p, peer, p->rank) * rb;
    if (off + rb > ep->peer_len)
        return rcoll__set_error(RCOLL_ERR_PROTOCOL, "shm: rank %d's segment "
                                "is too small (%zu bytes)", peer,
                                ep->peer_len);
    ep->tx = (shm_ring_ctl_t *)(ep->peer_base + off);
    ep->tx_slots = (char *)(ep->tx + 1);
    if (ep->peer_hdr->area_len &&
        ep->peer_hdr->area_off + ep->peer_hdr->area_len <= ep->peer_len &&
        ep->peer_hdr->area_off % SHM_CL == 0) {
        ep->area = (rcoll_area_ctl_t *)(ep->peer_base +
                                        ep->peer_hdr->area_off);
        ep->area_len = ep->peer_hdr->area_len;
    }
    off = sizeof(shm_seg_hdr_t) + (size_t)shm_ring_index(p, p->rank, peer) * rb;
    ep->rx = (shm_ring_ctl_t *)(ctx->base + off);
    ep->rx_slots = (char *)(ep->rx + 1);
    ep->pid = (pid_t)p->bs->peers[peer].pid;
    ep->tx_cookie = calloc((size_t)p->nslots, sizeof(void *));
    if (!ep->tx_cookie)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "shm: no memory");

    /* Can we read its memory (same pid namespace, ptrace allowed)? Read
     * its segment's magic where it has it mapped; tell it through our
     * ring's cma_ok. */
    if (ctx->cma_min || ctx->rndv_min) {
        uint32_t v = 0;
        struct iovec l = {&v, sizeof(v)};
        struct iovec rm = {(void *)(uintptr_t)ep->peer_hdr->probe_addr,
                           sizeof(v)};
        int ok = process_vm_readv(ep->pid, &l, 1, &rm, 1, 0) ==
                     (ssize_t)sizeof(v) && v == SHM_MAGIC;
        if (!ok)
            rcoll_info(RCOLL_SUBSYS_INIT, "shm: rank %d cannot read rank "
                       "%d's memory (%s): copies through the slots only",
                       p->rank, peer, strerror(errno));
        __atomic_store_n(&ep->rx->cma_ok, (uint32_t)ok, __ATOMIC_RELEASE);
    }

    /* its death becomes an epoll event */
    ep->pidfd = (int)syscall(SYS_pidfd_open, (pid_t)p->bs->peers[peer].pid, 0);
    if (ep->pidfd >= 0) {
        ep->h.cb = shm_pidfd_event;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &ep->h};
        if (epoll_ctl(p->epfd, EPOLL_CTL_ADD, ep->pidfd, &ev) != 0) {
            close(ep->pidfd);
            ep->pidfd = -1;
        }
    }
    if (ep->pidfd < 0)
        rcoll_warn("shm: rank %d cannot watch rank %d (pid %d): %s; its "
                   "death will show only as RCOLL_TIMEOUT", p->rank, peer,
                   p->bs->peers[peer].pid, strerror(errno));
    return RCOLL_OK;
}

/* This rank's segment: its header, a ring per local peer and the shared
 * area, reserved in /dev/shm now (a full /dev/shm is an error here, not a
 * SIGBUS in the middle of a collective) and mapped; its name in `name`. */
static rcoll_status_t shm_segment_create(struct rcoll_tl_ctx *ctx, char *name,
                                         size_t name_len)
{
    const rcoll_tl_params_t *p = &ctx->p;
    int r = p->rank;
    uint8_t rnd[8];
    char hex[17];
    unsigned long ns = shm_pidns();
    rcoll_status_t st;
    shm_sweep_stale(ns);
    if ((st = rcoll_random_bytes(rnd, sizeof(rnd))) != RCOLL_OK)
        return st;
    rcoll_hex_encode(rnd, sizeof(rnd), hex, sizeof(hex));
    snprintf(ctx->name, sizeof(ctx->name), "/rcoll-n%lu-%d-%s", ns,
             (int)getpid(), hex);
    ctx->len = sizeof(shm_seg_hdr_t) +
               (size_t)ctx->npeers * shm_ring_bytes(ctx->slot_size, p->nslots);
    /* the shared area, after the rings (coll/area.c) */
    size_t area_off = SHM_ALIGN(ctx->len);
    size_t area_len = rcoll_config.shm_area
                          ? RCOLL_AREA_LEN(rcoll_config.shm_area)
                          : 0;
    if (area_len)
        ctx->len = area_off + area_len;
    int fd = shm_open(ctx->name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "shm: rank %d cannot create "
                                "its segment %s: %s", r, ctx->name,
                                strerror(errno));
    ctx->named = 1;
    int rc = posix_fallocate(fd, 0, (off_t)ctx->len);
    if (rc != 0) {
        close(fd);
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "shm: cannot reserve "
                                "%zu bytes in /dev/shm for %s: %s (lower "
                                "RCOLL_CHUNK_SIZE or RCOLL_NSLOTS, or set "
                                "RCOLL_TRANSPORTS=^shm)", ctx->len,
                                ctx->name, strerror(rc));
    }
    void *m = mmap(NULL, ctx->len, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_POPULATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "shm: rank %d cannot map "
                                "its segment %s: %s", r, ctx->name,
                                strerror(errno));
    ctx->base = m;
    ctx->hdr = m;
    ctx->hdr->rank = r;
    ctx->hdr->pid = (int32_t)getpid();
    ctx->hdr->probe_addr = (uint64_t)(uintptr_t)&ctx->hdr->magic;
    ctx->hdr->chunk_size = p->chunk_size;
    ctx->hdr->nslots = (uint32_t)p->nslots;
    ctx->hdr->nrings = (uint32_t)ctx->npeers;
    ctx->hdr->area_off = area_len ? area_off : 0;
    ctx->hdr->area_len = area_len;
    ctx->hdr->state = SHM_LIVE;
    __atomic_store_n(&ctx->hdr->magic, SHM_MAGIC, __ATOMIC_RELEASE);
    snprintf(name, name_len, "%s", ctx->name);
    return RCOLL_OK;
}

static rcoll_status_t shm_ctx_create(const rcoll_tl_params_t *p,
                                     rcoll_tl_ctx_t **ctx_p,
                                     rcoll_tl_ep_t **eps)
{
    struct rcoll_tl_ctx *ctx = calloc(1, sizeof(*ctx));
    shm_addr_t *addrs = NULL;
    rcoll_status_t st;
    int n = p->nranks, r = p->rank;
    const uint8_t *use = p->pairs + (size_t)r * (size_t)n;

    if (!ctx)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "shm: no memory");
    ctx->p = *p;
    ctx->pairs = malloc((size_t)n * (size_t)n);
    if (ctx->pairs) {
        memcpy(ctx->pairs, p->pairs, (size_t)n * (size_t)n);
        ctx->p.pairs = ctx->pairs; /* the caller's copy goes away */
    }
    ctx->slot_size = SHM_CL + SHM_ALIGN(p->chunk_size);
    ctx->cma_min = rcoll_config.shm_cma_min;
    ctx->cma_max = rcoll_config.shm_cma_max;
    ctx->rndv_min = rcoll_config.shm_rndv_min;
    ctx->eps = calloc((size_t)n, sizeof(*ctx->eps));
    addrs = calloc((size_t)n, sizeof(*addrs));
    if (!ctx->eps || !addrs || !ctx->pairs) {
        st = rcoll__set_error(RCOLL_ERR_NO_MEMORY, "shm: no memory");
        goto err;
    }
    for (int i = 0; i < n; i++) {
        if (i == r || !use[i])
            continue;
        shm_ep_t *ep = calloc(1, sizeof(*ep));
        if (!ep) {
            st = rcoll__set_error(RCOLL_ERR_NO_MEMORY, "shm: no memory");
            goto err;
        }
        ep->ctx = ctx;
        ep->peer = i;
        ep->pidfd = -1;
        ctx->eps[i] = ep;
        ctx->npeers++;
    }
    if (ctx->npeers &&
        (st = shm_segment_create(ctx, addrs[r].name, sizeof(addrs[r].name))) !=
            RCOLL_OK)
        goto err;
    /* every rank takes part: setup is collective */
    st = rcoll_bootstrap_allgather(p->bs, addrs, sizeof(*addrs));
    if (st != RCOLL_OK)
        goto err;
    for (int i = 0; i < n; i++) {
        if (!ctx->eps[i])
            continue;
        addrs[i].name[SHM_NAME_MAX - 1] = '\0';
        if ((st = shm_map_peer(ctx, i, addrs[i].name)) != RCOLL_OK)
            goto err;
    }
    /* everyone has mapped everything (and probed single copy): the names
     * can go */
    st = rcoll_bootstrap_barrier(p->bs);
    if (st != RCOLL_OK)
        goto err;
    for (int i = 0; i < n; i++)
        if (ctx->eps[i])
            ctx->eps[i]->cma_tx = (int)__atomic_load_n(
                &ctx->eps[i]->tx->cma_ok, __ATOMIC_ACQUIRE);
    if (ctx->named) {
        shm_unlink(ctx->name);
        ctx->named = 0;
    }
    rcoll_debug(RCOLL_SUBSYS_NET, "shm: rank %d: %d local peers, segment "
                "%zu bytes", r, ctx->npeers, ctx->len);
    free(addrs);
    for (int i = 0; i < n; i++)
        eps[i] = (rcoll_tl_ep_t *)ctx->eps[i];
    *ctx_p = ctx;
    return RCOLL_OK;
err:
    free(addrs);
    return rcoll_tl_create_failed(ctx, shm_ctx_destroy, st);
}

static void shm_ctx_destroy(rcoll_tl_ctx_t *ctx, int abort,
                            const char *reason)
{
    int n = ctx->p.nranks;
    if (ctx->hdr) {
        if (abort && reason)
            snprintf(ctx->hdr->reason, sizeof(ctx->hdr->reason), "%s",
                     reason);
        __atomic_store_n(&ctx->hdr->state, abort ? SHM_ABORTED : SHM_CLOSED,
                         __ATOMIC_RELEASE);
    }
    for (int i = 0; ctx->eps && i < n; i++) {
        shm_ep_t *ep = ctx->eps[i];
        if (!ep)
            continue;
        if (ep->peer_hdr) {
            /* wake it so it sees our state now */
            __atomic_fetch_add(&ep->peer_hdr->doorbell, 1, __ATOMIC_SEQ_CST);
            futex(&ep->peer_hdr->doorbell, FUTEX_WAKE, 1, NULL);
            munmap(ep->peer_base, ep->peer_len);
        }
        if (ep->pidfd >= 0) {
            if (!ep->dead)
                epoll_ctl(ctx->p.epfd, EPOLL_CTL_DEL, ep->pidfd, NULL);
            close(ep->pidfd);
        }
        free(ep->tx_cookie);
        free(ep);
    }
    if (ctx->named)
        shm_unlink(ctx->name);
    if (ctx->base)
        munmap(ctx->base, ctx->len);
    free(ctx->eps);
    free(ctx->pairs);
    free(ctx->bounce);
    free(ctx);
}

/* A whole transfer the receiver only copies goes as one message when the
 * receiver can read our memory: it fetches the payload straight into its
 * destination (process_vm_readv), so no slot holds it and a message may be
 * larger than a slot. */
static size_t shm_max_msg(rcoll_tl_ep_t *tep, size_t len, int flags)
{
    shm_ep_t *ep = (shm_ep_t *)tep;
    struct rcoll_tl_ctx *ctx = ep->ctx;
    if (!ep->cma_tx || !ctx->rndv_min || len < ctx->rndv_min ||
        (flags & (RCOLL_TL_WHOLE | RCOLL_TL_PEER_COPIES)) !=
            (RCOLL_TL_WHOLE | RCOLL_TL_PEER_COPIES))
        return ctx->p.chunk_size;
    return SHM_MSG_MAX;
}

static size_t shm_peer_bytes(size_t chunk, int nslots, char *what,
                             size_t len)
{
    snprintf(what, len, "a receive ring of %d slots in this rank's "
             "/dev/shm segment (the peer maps it too: shared, not copied)",
             nslots);
    return shm_ring_bytes(SHM_CL + SHM_ALIGN(chunk), nslots);
}

static int shm_lanes(char *what, size_t len)
{
    snprintf(what, len, "ring of slots per peer and direction in shared "
             "memory; whole transfers the receiver only copies are read "
             "from the sender's memory (process_vm_readv)");
    return 1;
}

static void shm_stats(rcoll_tl_ctx_t *ctx, FILE *f)
{
    rcoll_lane_stats_t sum = {0};
    int single = 0;
    for (int i = 0; ctx->eps && i < ctx->p.nranks; i++)
        if (ctx->eps[i]) {
            rcoll_lanes_sum(&sum, &ctx->eps[i]->st);
            single += ctx->eps[i]->cma_tx;
        }
    fprintf(f, "rcoll:     1 lane per peer (a ring of %d slots), %d peers, "
            "%d of them read our memory (single copy); %llu messages sent "
            "for single copy, %llu bytes read from peers' memory\n",
            ctx->p.nslots, ctx->npeers, single,
            (unsigned long long)__atomic_load_n(&ctx->sent_single,
                                                __ATOMIC_RELAXED),
            (unsigned long long)__atomic_load_n(&ctx->read_bytes,
                                                __ATOMIC_RELAXED));
    rcoll_lanes_print(f, "every peer's ring", 1, &sum);
}

const rcoll_tl_ops_t rcoll_tl_shm_ops = {
    .name = "shm",
    .doc = "shared memory between ranks of one host (POSIX segments, "
           "lock-free rings, futex wake-ups)",
    .usable = shm_usable,
    .local_only = 1,
    .ctx_create = shm_ctx_create,
    .send = shm_send,
    .recv_peek = shm_recv_peek,
    .recv_copy = shm_recv_copy,
    .recv_release = shm_recv_release,
    .send_revoke = shm_send_revoke,
    .recv_full = shm_recv_full,
    .lanes = shm_lanes,
    .stats = shm_stats,
    .progress = shm_progress,
    .wait = shm_wait,
    .kick = shm_kick,
    .ctx_destroy = shm_ctx_destroy,
    .peer_bytes = shm_peer_bytes,
    .max_msg = shm_max_msg,
    .area = shm_area,
    .area_wake = shm_area_wake,
};
