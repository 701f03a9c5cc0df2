/* The shared-memory transport's data path (shm.h): rings, sends and
 * receives, single-copy reads, revokes, waiting on the doorbell, a peer's
 * failure. */
#include "transport/shm/shm.h"

/* ---- helpers ---- */

int shm_futex(uint32_t *uaddr, int op, uint32_t val,
              const struct timespec *ts)
{
    return (int)syscall(SYS_futex, uaddr, op, val, ts, NULL, 0);
}

static void shm_ring_doorbell(shm_seg_hdr_t *h)
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (__atomic_load_n(&h->sleeping, __ATOMIC_SEQ_CST)) {
        __atomic_fetch_add(&h->doorbell, 1, __ATOMIC_SEQ_CST);
        shm_futex(&h->doorbell, FUTEX_WAKE, 1, NULL);
    }
}

size_t shm_ring_bytes(size_t slot_size, int nslots)
{
    return sizeof(shm_ring_ctl_t) + slot_size * (size_t)nslots;
}

/* Index of sender s's ring in receiver r's segment: the rings are in rank
 * order of the senders that r talks to through shared memory. */
int shm_ring_index(const rcoll_tl_params_t *p, int r, int s)
{
    int idx = 0;
    for (int i = 0; i < s; i++)
        idx += rcoll_tl_pair(p, r, i);
    return idx;
}

/* ---- failures ---- */

static void shm_ep_fail(shm_ep_t *ep, int aborted, const char *reason,
                        const char *what)
{
    if (ep->failed)
        return;
    ep->failed = 1;
    rcoll_tl_peer_failed(&ep->ctx->p, ep->peer, ep->fail_msg,
                         sizeof(ep->fail_msg), aborted, reason, what);
}

/* Looks at the peer's state; reports an abort or a death once. Returns
 * the state (SHM_LIVE while it runs). */
static int shm_ep_check(shm_ep_t *ep)
{
    int state = (int)__atomic_load_n(&ep->peer_hdr->state, __ATOMIC_ACQUIRE);
    if (state == SHM_ABORTED && !ep->failed) {
        char reason[SHM_REASON_MAX];
        rcoll_tl_reason_take(reason, ep->peer_hdr->reason, sizeof(reason));
        shm_ep_fail(ep, 1, reason, NULL);
    } else if (ep->dead && state == SHM_LIVE && !ep->failed) {
        shm_ep_fail(ep, 0, "", "shm: its process died (exited without "
                    "closing the communicator)");
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

void shm_pidfd_event(rcoll_ev_handler_t *h, uint32_t events)
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
 * the peer instead of counting towards it (an impossible tail would make
 * the loop below run ~2^62 times; tests/fuzz/fuzz_shm_ring.c feeds such
 * counters). */
static int shm_index_bad(shm_ep_t *ep, const char *which, uint64_t v,
                         uint64_t lo, uint64_t hi)
{
    char what[192];
    if (v >= lo && v <= hi)
        return 0;
    snprintf(what, sizeof(what), "shm: it wrote an impossible ring %s (%llu, "
             "expected %llu to %llu): its shared memory is corrupt", which,
             (unsigned long long)v, (unsigned long long)lo,
             (unsigned long long)hi);
    shm_ep_fail(ep, 0, "", what);
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

/* ---- the pool (shm.h) ---- */

/* The bits of word w of an n-slot pool's bitmap that stand for slots */
static inline uint64_t pool_word_mask(int n, int w)
{
    return (w == (n - 1) / 64 && n % 64) ? (1ull << (n % 64)) - 1 : ~0ull;
}

/* Takes a free slot of the peer's pool: its index, or -1 if none is free.
 * The search starts at a word of our own, so that senders spread. */
static int shm_pool_take(shm_ep_t *ep)
{
    int n = ep->tx_pool_n, nw = (n + 63) / 64;
    for (int k = 0; k < nw; k++) {
        int w = (ep->tx_ring_idx + k) % nw;
        uint64_t valid = pool_word_mask(n, w);
        /* seq_cst: the look after our waiter bit is set must not be
         * ordered before it (shm_pool_claim) */
        uint64_t v = __atomic_load_n(&ep->tx_pool_bits[w], __ATOMIC_SEQ_CST);
        while (~v & valid) {
            int b = __builtin_ctzll(~v & valid);
            /* acquire: the receiver's reads of the slot (before its
             * release) come before our writes */
            if (__atomic_compare_exchange_n(&ep->tx_pool_bits[w], &v,
                                            v | 1ull << b, 0,
                                            __ATOMIC_ACQUIRE,
                                            __ATOMIC_RELAXED))
                return w * 64 + b;
        }
    }
    return -1;
}

/* Sets our bit in the peer's pool waiter words: its next free wakes us. */
static void shm_pool_want(shm_ep_t *ep)
{
    __atomic_fetch_or(&ep->tx_pool_wait[ep->tx_ring_idx / 64],
                      1ull << (ep->tx_ring_idx % 64), __ATOMIC_SEQ_CST);
}

/* A free slot of the peer's pool, or -1 after we asked to be woken when
 * one is freed: our waiter bit is set before the second look, and the
 * receiver frees before it reads the bits, so one of us sees the other. */
static int shm_pool_claim(shm_ep_t *ep)
{
    int k = shm_pool_take(ep);
    if (k >= 0)
        return k;
    shm_pool_want(ep);
    k = shm_pool_take(ep);
    ep->pool_wait = k < 0;
    return k;
}

/* 1 if the peer's pool has a free slot (a waiting sender may go on) */
static int shm_pool_any_free(const shm_ep_t *ep)
{
    int n = ep->tx_pool_n, nw = (n + 63) / 64;
    for (int w = 0; w < nw; w++) {
        if (~__atomic_load_n(&ep->tx_pool_bits[w], __ATOMIC_SEQ_CST) &
            pool_word_mask(n, w))
            return 1;
    }
    return 0;
}

/* Frees slot k of our pool and wakes the senders that found it full. */
static void shm_pool_free(struct rcoll_tl_ctx *ctx, int k)
{
    __atomic_fetch_and(&ctx->pool_bits[k / 64], ~(1ull << (k % 64)),
                       __ATOMIC_SEQ_CST);
    for (int w = 0; w < ctx->wait_nw; w++) {
        if (!__atomic_load_n(&ctx->pool_wait[w], __ATOMIC_SEQ_CST))
            continue;
        uint64_t bits = __atomic_exchange_n(&ctx->pool_wait[w], 0,
                                            __ATOMIC_SEQ_CST);
        while (bits) {
            int b = __builtin_ctzll(bits);
            bits &= bits - 1;
            shm_ep_t *ep = w * 64 + b < ctx->npeers ? ctx->ring_ep[w * 64 + b]
                                                    : NULL;
            if (!ep)
                continue;
            /* unconditional: it may be on its way to sleep, past the
             * `sleeping` flag's check (shm_wait looks at the pool) */
            __atomic_fetch_add(&ep->peer_hdr->doorbell, 1, __ATOMIC_SEQ_CST);
            shm_futex(&ep->peer_hdr->doorbell, FUTEX_WAKE, 1, NULL);
        }
    }
}

/* 1 if no slot of our pool is free */
static int shm_pool_full(const struct rcoll_tl_ctx *ctx)
{
    for (int w = 0; w < ctx->pool_nw; w++)
        if (~__atomic_load_n(&ctx->pool_bits[w], __ATOMIC_RELAXED) &
            pool_word_mask(ctx->pool_n, w))
            return 0;
    return 1;
}

rcoll_status_t shm_send(rcoll_tl_ep_t *tep, const rcoll_msg_hdr_t *hdr,
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
    char *slot = ep->tx_slots + (ep->tx_head % ns) * ep->tx_slot;
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
    /* past the ring slot's room: through a slot of the peer's pool */
    int pk = -1;
    if (!single && hdr->len > ep->tx_inline) {
        if (!ep->tx_pool_n)
            return rcoll__set_error(RCOLL_ERR_INTERNAL, "shm: a %u-byte "
                                    "message to rank %d is larger than a "
                                    "slot (%zu)", hdr->len, ep->peer,
                                    ep->tx_inline);
        if ((pk = shm_pool_claim(ep)) < 0) {
            int state = shm_ep_check(ep);
            if (state != SHM_LIVE)
                return shm_ep_error(ep, state);
            rcoll_lane_add(&ep->st.tx_waits, 1);
            rcoll_lane_add(&ctx->pool_waits, 1);
            return RCOLL_INPROGRESS;
        }
        if (ep->pool_wait) /* (it found one on its own) */
            ep->pool_wait = 0;
    }
    sh->hdr = *hdr;
    sh->revoked = 0;
    sh->pool = pk >= 0 ? (uint32_t)pk + 1 : 0;
    if (single) {
        sh->cma_addr = (uint64_t)(uintptr_t)payload;
        ep->tx_cookie[ep->tx_head % ns] = cookie;
    } else {
        sh->cma_addr = 0;
        if (pk >= 0) {
            memcpy(ep->tx_pool + (size_t)pk * SHM_ALIGN(ctx->p.chunk_size),
                   payload, hdr->len);
            rcoll_lane_add(&ctx->pool_msgs, 1);
        } else if (hdr->len) {
            memcpy(slot + SHM_CL, payload, hdr->len);
        }
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

rcoll_status_t shm_recv_peek(rcoll_tl_ep_t *tep,
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
    ep->rx_pool = ep->rx_cma_addr ? 0 : sh->pool;
    /* with a pool, a message names a slot it took (its bit set) and fits
     * where it lies; anything else no sender of ours writes */
    size_t room = ep->rx_pool ? ctx->p.chunk_size
                              : RCOLL_MIN(ctx->p.chunk_size,
                                          ctx->slot_size - SHM_CL);
    uint32_t k = ep->rx_pool - 1;
    if (ep->rx_pool > (uint32_t)ctx->pool_n ||
        (ep->rx_pool && !(__atomic_load_n(&ctx->pool_bits[k / 64],
                                          __ATOMIC_RELAXED) >> (k % 64) & 1)) ||
        (ctx->pool_n && !ep->rx_cma_addr && ep->rx_hdr.len > room)) {
        char what[192];
        snprintf(what, sizeof(what), "shm: it wrote a message of %u bytes "
                 "in pool slot %lld of %d (-1: none, %zu bytes in the ring "
                 "slot): its shared memory is corrupt", ep->rx_hdr.len,
                 (long long)ep->rx_pool - 1, ctx->pool_n, room);
        shm_ep_fail(ep, 0, "", what);
        ep->rx_pool = 0;
        return shm_ep_error(ep, SHM_ABORTED);
    }
    /* a length no sender of ours writes becomes one that every check
     * refuses (a mismatch): past a slot for data here, past SHM_MSG_MAX
     * for data left in the sender's memory */
    if (!ep->rx_cma_addr && ep->rx_hdr.len > ctx->p.chunk_size)
        ep->rx_hdr.len = (uint32_t)ctx->p.chunk_size + 1;
    else if (ep->rx_cma_addr && ep->rx_hdr.len > SHM_MSG_MAX)
        ep->rx_hdr.len = SHM_MSG_MAX + 1;
    *hdr = &ep->rx_hdr;
    *payload = ep->rx_cma_addr ? NULL
               : ep->rx_pool   ? ctx->pool + (size_t)(ep->rx_pool - 1) *
                                                 ctx->pool_stride
                               : slot + SHM_CL;
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
    rcoll_tl_reason_take(reason, ep->peer_hdr->reason, sizeof(reason));
    return rcoll__set_error(RCOLL_ERR_REMOTE, "shm: rank %d (pid %d) "
                            "withdrew a %zu-byte message while it was read: "
                            "its operation failed%s%s", ep->peer,
                            (int)ep->pid, len, reason[0] ? ": " : "",
                            reason);
}

/* The peeked message's payload to dst: from the slot, or straight out of
 * the sender's memory (process_vm_readv). */
rcoll_status_t shm_recv_copy(rcoll_tl_ep_t *tep, void *dst)
{
    shm_ep_t *ep = (shm_ep_t *)tep;
    struct rcoll_tl_ctx *ctx = ep->ctx;
    const char *slot = ep->rx_slots +
        (ep->rx_tail % (uint64_t)ctx->p.nslots) * ctx->slot_size;
    size_t len = ep->rx_hdr.len, got = 0;
    if (!ep->rx_cma_addr) {
        len = RCOLL_MIN(len, ctx->p.chunk_size);
        memcpy(dst, ep->rx_pool ? ctx->pool + (size_t)(ep->rx_pool - 1) *
                                                  ctx->pool_stride
                                : slot + SHM_CL, len);
        return RCOLL_OK;
    }
    /* The kernel copies about 5x slower when source and destination
     * differ in their offsets within 32 bytes: then read in pieces into a
     * bounce buffer that shares the source's offset and copy each piece on
     * while it is in cache. */
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
void shm_send_revoke(rcoll_tl_ctx_t *ctx, void *cookie,
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
                (shm_slot_hdr_t *)(ep->tx_slots + (k % ns) * ep->tx_slot);
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

void shm_recv_release(rcoll_tl_ep_t *tep)
{
    shm_ep_t *ep = (shm_ep_t *)tep;
    rcoll_lane_received(&ep->st, ep->rx_hdr.len);
    if (ep->rx_pool) {
        shm_pool_free(ep->ctx, (int)ep->rx_pool - 1);
        ep->rx_pool = 0;
    }
    ep->rx_tail++;
    __atomic_store_n(&ep->rx->tail, ep->rx_tail, __ATOMIC_RELEASE);
    shm_ring_doorbell(ep->peer_hdr); /* a credit for a waiting sender */
}

/* The ring is full, or it holds messages while our pool is: its sender,
 * or another, can post nothing until we release. */
int shm_recv_full(rcoll_tl_ep_t *tep)
{
    shm_ep_t *ep = (shm_ep_t *)tep;
    if (ep->rx_head_seen - ep->rx_tail < (uint64_t)ep->ctx->p.nslots &&
        shm_head_load(ep) != 0)
        return 0; /* (an abort: recv_peek reports it) */
    if (ep->rx_head_seen - ep->rx_tail >= (uint64_t)ep->ctx->p.nslots)
        return 1;
    return ep->ctx->pool_n && ep->rx_head_seen != ep->rx_tail &&
           shm_pool_full(ep->ctx);
}

int shm_progress(rcoll_tl_ctx_t *ctx)
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
        if (ep->pool_wait) {
            /* our bit again (a free may have cleared it and another
             * sender taken the slot), then the look: one of the two
             * sides sees the other */
            shm_pool_want(ep);
            if (shm_pool_any_free(ep)) {
                ep->pool_wait = 0; /* (once: the send tries again) */
                any = 1;
            }
        }
        uint32_t state = __atomic_load_n(&ep->peer_hdr->state,
                                         __ATOMIC_SEQ_CST);
        if (state != ep->wake_state) {
            ep->wake_state = state;
            any = 1;
        }
        for (int w = 0; ep->region && w < RCOLL_TL_WATCH; w++) {
            uint64_t v = __atomic_load_n(&ep->region[w], __ATOMIC_SEQ_CST);
            if (v != ep->wake_watch[w]) {
                ep->wake_watch[w] = v;
                any = 1;
            }
        }
    }
    return any;
}

void *shm_region(rcoll_tl_ctx_t *ctx, int rank, size_t *len)
{
    if (rank == ctx->p.rank) {
        if (!ctx->hdr || !ctx->hdr->region_len)
            return NULL;
        *len = ctx->hdr->region_len;
        return ctx->base + ctx->hdr->region_off;
    }
    if (rank < 0 || rank >= ctx->p.nranks || !ctx->eps[rank] ||
        !ctx->eps[rank]->region)
        return NULL;
    *len = ctx->eps[rank]->region_len;
    return ctx->eps[rank]->region;
}

void shm_region_wake(rcoll_tl_ctx_t *ctx)
{
    /* one fence for all (shm_ring_doorbell has one per peer) */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    for (int i = 0; i < ctx->p.nranks; i++) {
        shm_ep_t *ep = ctx->eps[i];
        if (ep && __atomic_load_n(&ep->peer_hdr->sleeping, __ATOMIC_SEQ_CST)) {
            __atomic_fetch_add(&ep->peer_hdr->doorbell, 1, __ATOMIC_SEQ_CST);
            shm_futex(&ep->peer_hdr->doorbell, FUTEX_WAKE, 1, NULL);
        }
    }
}

void shm_wait(rcoll_tl_ctx_t *ctx, int ms)
{
    shm_seg_hdr_t *h = ctx->hdr;
    uint32_t v = __atomic_load_n(&h->doorbell, __ATOMIC_SEQ_CST);
    __atomic_store_n(&h->sleeping, 1, __ATOMIC_SEQ_CST);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (!shm_anything(ctx)) {
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
        shm_futex(&h->doorbell, FUTEX_WAIT, v, &ts);
    }
    __atomic_store_n(&h->sleeping, 0, __ATOMIC_RELAXED);
}

void shm_kick(rcoll_tl_ctx_t *ctx)
{
    __atomic_fetch_add(&ctx->hdr->doorbell, 1, __ATOMIC_SEQ_CST);
    shm_futex(&ctx->hdr->doorbell, FUTEX_WAKE, 1, NULL);
}

