/* The shared-memory transport's context (shm.h): segments created,
 * mapped by the peers, swept when stale, torn down; lanes, counters and
 * the ops table. */
#include "transport/shm/shm.h"

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

/* ---- the segment's layout ---- */

/* Offsets in a segment: the header, the rings, the pool's bitmap and
 * waiter words (each on their own cache lines), its slots, the shared
 * region (params.region). Senders recompute it from the header's counts
 * to check it. */
typedef struct {
    size_t pool_bits, pool_wait, pool, region, len;
} shm_layout_t;

static void shm_layout(size_t ring_slot, int nslots, int peers, int pool,
                       size_t chunk, size_t region, shm_layout_t *l)
{
    size_t off = sizeof(shm_seg_hdr_t) +
                 (size_t)peers * shm_ring_bytes(ring_slot, nslots);
    off = SHM_ALIGN(off);
    l->pool_bits = l->pool_wait = l->pool = 0;
    if (pool) {
        l->pool_bits = off;
        off += SHM_ALIGN(8 * (((size_t)pool + 63) / 64));
        l->pool_wait = off;
        off += SHM_ALIGN(8 * (((size_t)peers + 63) / 64));
        l->pool = off;
        off += (size_t)pool * SHM_ALIGN(chunk);
    }
    region = SHM_ALIGN(region);
    l->region = region ? off : 0;
    l->len = off + region;
}

int rcoll_shm_plan(size_t chunk, int nslots, int peers, int pool_ok,
                   size_t region, rcoll_shm_plan_t *pl)
{
    size_t budget = rcoll_config.shm_budget, fixed = 4096;
    size_t full = SHM_CL + SHM_ALIGN(chunk);
    shm_layout_t l;
    fixed += SHM_ALIGN(region);
    pl->ring_slot = full;
    pl->pool = 0;
    shm_layout(full, nslots, peers, 0, chunk, region, &l);
    pl->bytes = l.len;
    if (!budget || peers < 1)
        return 1;
    if (budget > fixed &&
        shm_ring_bytes(full, nslots) <= (budget - fixed) / (size_t)peers)
        return 1;
    if (!pool_ok || !rcoll_config.shm_pool || chunk <= SHM_POOL_INLINE)
        return 0;
    /* small rings, their control words, then as many chunk-sized slots as
     * the rest holds, up to SHM_POOL_SENDERS full windows: the pipelined
     * schedules that move large messages receive from 1 peer at a time
     * (a ring, a chain, the hierarchical in-host phases) or 2 (channel
     * rings, one each way), so 3 windows leave one to spare */
    size_t small = SHM_CL + SHM_POOL_INLINE;
    size_t most = (size_t)peers * (size_t)nslots;
    size_t rings = (size_t)peers * shm_ring_bytes(small, nslots);
    size_t ctl = SHM_ALIGN(8 * ((most + 63) / 64)) +
                 SHM_ALIGN(8 * (((size_t)peers + 63) / 64));
    if (budget <= fixed + ctl || rings > budget - fixed - ctl)
        return 0;
    size_t n = (budget - fixed - ctl - rings) / SHM_ALIGN(chunk);
    n = RCOLL_MIN(n, most);
    n = RCOLL_MIN(n, (size_t)SHM_POOL_SENDERS * (size_t)nslots);
    n = RCOLL_MIN(n, (size_t)1 << 24);
    if (n < RCOLL_MIN(2 * (size_t)nslots, most))
        return 0;
    pl->ring_slot = small;
    pl->pool = (int)n;
    shm_layout(small, nslots, peers, (int)n, chunk, region, &l);
    pl->bytes = l.len;
    return 1;
}

/* ---- setup and teardown ---- */

typedef struct {
    char name[SHM_NAME_MAX];
} shm_addr_t;

static void shm_ctx_destroy(rcoll_tl_ctx_t *ctx, int abort,
                            const char *reason);

/* Maps a local peer's segment (ep->peer_base, peer_len, peer_hdr). */
static rcoll_status_t shm_peer_mmap(struct rcoll_tl_ctx *ctx, shm_ep_t *ep,
                                    int peer, const char *name)
{
    const rcoll_tl_params_t *p = &ctx->p;
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0)
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "shm: rank %d cannot open "
                                "rank %d's segment %s: %s", p->rank, peer,
                                name, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "shm: rank %d: fstat of "
                                "rank %d's segment %s: %s", p->rank, peer,
                                name, strerror(errno));
    }
    void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ | PROT_WRITE,
                   MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "shm: rank %d cannot map "
                                "rank %d's segment %s: %s", p->rank, peer,
                                name, strerror(errno));
    ep->peer_base = m;
    ep->peer_len = (size_t)sb.st_size;
    ep->peer_hdr = m;
    return RCOLL_OK;
}

/* Checks a mapped peer's header against our settings and the layout its
 * counts give, and points our sending side at our ring (and its pool) in
 * its segment and at its shared region. */
static rcoll_status_t shm_peer_layout(struct rcoll_tl_ctx *ctx, shm_ep_t *ep,
                                      int peer)
{
    const rcoll_tl_params_t *p = &ctx->p;
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
    /* its layout, recomputed from its counts: the offsets it wrote must
     * be those, and everything must lie inside what we mapped (its header
     * read once: the peer could change it meanwhile) */
    shm_seg_hdr_t ph = *ep->peer_hdr;
    size_t full = SHM_CL + SHM_ALIGN(p->chunk_size);
    shm_layout_t pl;
    int ring_ok = ph.pool_n ? ph.ring_slot == SHM_CL + SHM_POOL_INLINE &&
                                  SHM_POOL_INLINE < p->chunk_size
                            : ph.ring_slot == full;
    int pool_n = (int)RCOLL_MIN(ph.pool_n, 1u << 24);
    int nrings = (int)RCOLL_MIN(ph.nrings, (uint32_t)p->nranks);
    size_t ring_slot = ring_ok ? ph.ring_slot : full;
    /* (its region, last, is checked on its own below) */
    shm_layout(ring_slot, p->nslots, nrings, pool_n, p->chunk_size, 0, &pl);
    int tx_idx = shm_ring_index(p, peer, p->rank);
    if (!ring_ok || ph.pool_n != (uint32_t)pool_n ||
        ph.nrings != (uint32_t)nrings || tx_idx >= nrings ||
        pl.len > ep->peer_len || (pool_n && (ph.pool_off != pl.pool ||
        ph.pool_bits_off != pl.pool_bits ||
        ph.pool_wait_off != pl.pool_wait)))
        return rcoll__set_error(RCOLL_ERR_PROTOCOL, "shm: rank %d's segment "
                                "(%zu bytes) does not hold the rings and "
                                "pool it announces (%u rings of %llu-byte "
                                "slots, %u pool slots)", peer, ep->peer_len,
                                ph.nrings, (unsigned long long)ph.ring_slot,
                                ph.pool_n);
    ep->tx_slot = ring_slot;
    ep->tx_inline = ring_slot - SHM_CL;
    ep->tx_ring_idx = tx_idx;
    size_t off = sizeof(shm_seg_hdr_t) +
                 (size_t)tx_idx * shm_ring_bytes(ep->tx_slot, p->nslots);
    ep->tx = (shm_ring_ctl_t *)(ep->peer_base + off);
    ep->tx_slots = (char *)(ep->tx + 1);
    if (pool_n) {
        ep->tx_pool_n = pool_n;
        ep->tx_pool = ep->peer_base + pl.pool;
        ep->tx_pool_bits = (uint64_t *)(ep->peer_base + pl.pool_bits);
        ep->tx_pool_wait = (uint64_t *)(ep->peer_base + pl.pool_wait);
    }
    if (ph.region_len >= RCOLL_TL_WATCH * sizeof(uint64_t) &&
        ph.region_off >= pl.len && ph.region_off <= ep->peer_len &&
        ph.region_len <= ep->peer_len - ph.region_off &&
        ph.region_off % SHM_CL == 0) {
        ep->region = (uint64_t *)(ep->peer_base + ph.region_off);
        ep->region_len = ph.region_len;
    }
    return RCOLL_OK;
}

/* Can we read the peer's memory (same pid namespace, ptrace allowed)?
 * Read its segment's magic where it has it mapped; tell it through our
 * ring's cma_ok. */
static void shm_peer_cma_probe(struct rcoll_tl_ctx *ctx, shm_ep_t *ep,
                               int peer)
{
    const rcoll_tl_params_t *p = &ctx->p;
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
}

/* The peer's death becomes an epoll event (a pidfd), or a warning. */
static void shm_peer_watch(struct rcoll_tl_ctx *ctx, shm_ep_t *ep, int peer)
{
    const rcoll_tl_params_t *p = &ctx->p;
    ep->pidfd = (int)syscall(SYS_pidfd_open, (pid_t)p->bs->peers[peer].pid, 0);
    if (ep->pidfd >= 0) {
        ep->h.cb = shm_pidfd_event;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &ep->h};
        if (epoll_ctl(p->epfd, EPOLL_CTL_ADD, ep->pidfd, &ev) != 0) {
            close(ep->pidfd);
            ep->pidfd = -1;
        }
    }
    if (ep->pidfd < 0) {
        int e = errno;
        char hint[320];
        rcoll_warn("shm: rank %d cannot watch rank %d (pid %d): %s%s; its "
                   "death will show only as RCOLL_TIMEOUT", p->rank, peer,
                   p->bs->peers[peer].pid, strerror(e),
                   rcoll_fd_limit_hint(e, hint, sizeof(hint)));
    }
}

static rcoll_status_t shm_map_peer(struct rcoll_tl_ctx *ctx, int peer,
                                   const char *name)
{
    const rcoll_tl_params_t *p = &ctx->p;
    shm_ep_t *ep = ctx->eps[peer];
    rcoll_status_t st;
    if ((st = shm_peer_mmap(ctx, ep, peer, name)) != RCOLL_OK ||
        (st = shm_peer_layout(ctx, ep, peer)) != RCOLL_OK)
        return st;
    size_t rb = shm_ring_bytes(ctx->slot_size, p->nslots);
    ep->rx_ring_idx = shm_ring_index(p, p->rank, peer);
    ctx->ring_ep[ep->rx_ring_idx] = ep;
    size_t off = sizeof(shm_seg_hdr_t) + (size_t)ep->rx_ring_idx * rb;
    ep->rx = (shm_ring_ctl_t *)(ctx->base + off);
    ep->rx_slots = (char *)(ep->rx + 1);
    ep->pid = (pid_t)p->bs->peers[peer].pid;
    ep->tx_cookie = calloc((size_t)p->nslots, sizeof(void *));
    if (!ep->tx_cookie)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "shm: no memory");
    shm_peer_cma_probe(ctx, ep, peer);
    shm_peer_watch(ctx, ep, peer);
    return RCOLL_OK;
}

/* This rank's segment: its header, a ring per local peer and the shared
 * region, reserved in /dev/shm now (a full /dev/shm is an error here, not a
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
    /* the rings, the pool if any, the shared region */
    shm_layout_t lay;
    shm_layout(ctx->slot_size, p->nslots, ctx->npeers, ctx->pool_n,
               p->chunk_size, p->region, &lay);
    ctx->len = lay.len;
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
    ctx->hdr->region_off = lay.region;
    ctx->hdr->region_len = lay.region ? p->region : 0;
    ctx->hdr->ring_slot = ctx->slot_size;
    if (ctx->pool_n) {
        ctx->hdr->pool_off = lay.pool;
        ctx->hdr->pool_bits_off = lay.pool_bits;
        ctx->hdr->pool_wait_off = lay.pool_wait;
        ctx->hdr->pool_n = (uint32_t)ctx->pool_n;
        ctx->pool = ctx->base + lay.pool;
        ctx->pool_bits = (uint64_t *)(ctx->base + lay.pool_bits);
        ctx->pool_wait = (uint64_t *)(ctx->base + lay.pool_wait);
        ctx->pool_nw = (ctx->pool_n + 63) / 64;
        ctx->wait_nw = (ctx->npeers + 63) / 64;
        ctx->pool_stride = SHM_ALIGN(p->chunk_size);
    }
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

    if (!ctx)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "shm: no memory");
    ctx->p = *p;
    ctx->cma_min = rcoll_config.shm_cma_min;
    ctx->cma_max = rcoll_config.shm_cma_max;
    ctx->rndv_min = rcoll_config.shm_rndv_min;
    ctx->eps = calloc((size_t)n, sizeof(*ctx->eps));
    addrs = calloc((size_t)n, sizeof(*addrs));
    if (!ctx->eps || !addrs) {
        st = rcoll__set_error(RCOLL_ERR_NO_MEMORY, "shm: no memory");
        goto err;
    }
    for (int i = 0; i < n; i++) {
        if (i == r || !rcoll_tl_pair(p, r, i))
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
    /* full rings while they fit RCOLL_SHM_BUDGET, else small rings and a
     * pool; past the budget even so (warned at set-up), full rings */
    rcoll_shm_plan_t plan;
    rcoll_shm_plan(p->chunk_size, p->nslots, ctx->npeers, 1, p->region,
                   &plan);
    ctx->slot_size = plan.ring_slot;
    ctx->pool_n = plan.pool;
    ctx->ring_ep = calloc((size_t)ctx->npeers + 1, sizeof(*ctx->ring_ep));
    if (!ctx->ring_ep) {
        st = rcoll__set_error(RCOLL_ERR_NO_MEMORY, "shm: no memory");
        goto err;
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
    ctx->p.pair = NULL; /* its caller's state ends with set-up */
    ctx->p.pair_arg = NULL;
    rcoll_debug(RCOLL_SUBSYS_NET, "shm: rank %d: %d local peers, segment "
                "%zu bytes", r, ctx->npeers, ctx->len);
    int first = 1; /* (the lowest rank of the host says it) */
    for (int i = 0; i < r; i++)
        first &= !ctx->eps[i];
    if (ctx->pool_n && first)
        rcoll_info(RCOLL_SUBSYS_INIT, "shm: rank %d: %d local peers: rings "
                   "of %d %zu-byte slots and a pool of %d %zu-byte slots "
                   "(RCOLL_SHM_POOL) keep the %zu-byte chunk within "
                   "RCOLL_SHM_BUDGET=%zu (segment %zu bytes)", r,
                   ctx->npeers, p->nslots, ctx->slot_size, ctx->pool_n,
                   ctx->pool_stride, p->chunk_size, rcoll_config.shm_budget,
                   ctx->len);
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
            shm_futex(&ep->peer_hdr->doorbell, FUTEX_WAKE, 1, NULL);
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
    free(ctx->ring_ep);
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
    fprintf(f, "rcoll:     pool (RCOLL_SHM_POOL): %d slots of %zu bytes "
            "here (0: full rings); %llu messages sent through peers' "
            "pools, %llu sends found one full\n", ctx->pool_n,
            ctx->pool_stride,
            (unsigned long long)__atomic_load_n(&ctx->pool_msgs,
                                                __ATOMIC_RELAXED),
            (unsigned long long)__atomic_load_n(&ctx->pool_waits,
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
    .region = shm_region,
    .region_wake = shm_region_wake,
};
