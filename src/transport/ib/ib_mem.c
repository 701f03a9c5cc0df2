/* The verbs transport's memory (ib.h): registrations (the user's, and
 * the registration cache's hooks), each queue pair's rings, and the peer's
 * destinations of receives in place. */
#include "transport/ib/ib.h"

/* ---- registration ---- */

static struct ibv_mr *ib_reg(ib_dev_t *d, void *buf, size_t len, int access,
                             const char *what)
{
    struct ibv_mr *mr = ibv_reg_mr(d->pd, buf, len, access);
    if (mr)
        return mr;
    int err = errno;
    struct rlimit rl;
    char lim[64] = "unknown";
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
        if (rl.rlim_cur == RLIM_INFINITY)
            snprintf(lim, sizeof(lim), "unlimited");
        else
            snprintf(lim, sizeof(lim), "%llu KiB",
                     (unsigned long long)rl.rlim_cur / 1024);
    }
    rcoll__set_error(RCOLL_ERR_NO_MEMORY,
                     "ib: rank %d cannot register %zu bytes of %s with %s "
                     "(ibv_reg_mr: %s). Registered memory is locked memory: "
                     "the locked-memory limit is %s; raise it (ulimit -l "
                     "unlimited; LimitMEMLOCK=infinity for systemd; docker "
                     "--ulimit memlock=-1) or lower RCOLL_CHUNK_SIZE, "
                     "RCOLL_NSLOTS or RCOLL_IB_QPS_PER_PEER",
                     d->ctx->p.rank, len, what, d->devname, strerror(err),
                     lim);
    return NULL;
}

/* the registration cache's (receives in place, zero-copy sends; arg: the
 * device): local and remote write, so that one registration serves both */
void *ib_rc_reg(void *arg, void *addr, size_t len)
{
    return ib_reg(arg, addr, len,
                  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
                  "a buffer (registration cache)");
}

void ib_rc_dereg(void *arg, void *h)
{
    (void)arg;
    ibv_dereg_mr(h);
}

/* ---- user registrations ---- */
/* On the first device only: with several (RCOLL_IB_NIC=all) a send over
 * another device reads user memory through the registration cache's
 * entry on that device (ib_send_key). */

rcoll_status_t ib_mem_reg(rcoll_tl_ctx_t *ctx, void *buf, size_t len,
                          void **h)
{
    ib_ureg_t *u = calloc(1, sizeof(*u));
    if (!u)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "ib: no memory");
    u->buf = buf;
    u->len = len;
    if (!(u->mr = ib_reg(ctx->dev, buf, len, IBV_ACCESS_LOCAL_WRITE,
                         "user memory (rcoll_comm_register)"))) {
        free(u);
        return RCOLL_ERR_NO_MEMORY;
    }
    pthread_mutex_lock(&ctx->reg_lock);
    if (ctx->nregs == ctx->regs_cap) {
        int cap = ctx->regs_cap ? 2 * ctx->regs_cap : 8;
        ib_ureg_t **r = realloc(ctx->regs, (size_t)cap * sizeof(*r));
        if (!r) {
            pthread_mutex_unlock(&ctx->reg_lock);
            ibv_dereg_mr(u->mr);
            free(u);
            return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "ib: no memory");
        }
        ctx->regs = r;
        ctx->regs_cap = cap;
    }
    int i = ctx->nregs;
    __atomic_store_n(&ctx->nregs, i + 1, __ATOMIC_RELAXED);
    while (i > 0 && ctx->regs[i - 1]->buf > u->buf) {
        ctx->regs[i] = ctx->regs[i - 1];
        i--;
    }
    ctx->regs[i] = u;
    pthread_mutex_unlock(&ctx->reg_lock);
    *h = u;
    return RCOLL_OK;
}

void ib_mem_dereg(rcoll_tl_ctx_t *ctx, void *h)
{
    ib_ureg_t *u = h;
    pthread_mutex_lock(&ctx->reg_lock);
    for (int i = 0; i < ctx->nregs; i++)
        if (ctx->regs[i] == u) {
            memmove(&ctx->regs[i], &ctx->regs[i + 1],
                    (size_t)(ctx->nregs - i - 1) * sizeof(*ctx->regs));
            __atomic_store_n(&ctx->nregs, ctx->nregs - 1, __ATOMIC_RELAXED);
            break;
        }
    pthread_mutex_unlock(&ctx->reg_lock);
    ibv_dereg_mr(u->mr);
    free(u);
}

/* The lkey of a registration that holds [p, p + len), or 0 (none). */
uint32_t ib_reg_lookup(struct rcoll_tl_ctx *ctx, const void *p,
                       size_t len)
{
    const char *a = p;
    uint32_t key = 0;
    pthread_mutex_lock(&ctx->reg_lock);
    int lo = 0, hi = ctx->nregs - 1;
    while (lo <= hi) { /* the last registration starting at or below p */
        int mid = (lo + hi) / 2;
        if (ctx->regs[mid]->buf <= a)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    /* overlapping registrations: look back a few for one that covers it */
    for (int i = hi; i >= 0 && i > hi - 8; i--) {
        ib_ureg_t *u = ctx->regs[i];
        if (a >= u->buf && (size_t)(a - u->buf) + len <= u->len) {
            key = u->mr->lkey;
            break;
        }
    }
    pthread_mutex_unlock(&ctx->reg_lock);
    return key;
}

/* ---- data path ---- */

/* The peer's receive in place that message h belongs to, or -1. */
int ib_rplace_find(const ib_ep_t *ep, const rcoll_msg_hdr_t *h)
{
    for (int i = ep->nrplace - 1; i >= 0; i--) {
        const ib_place_msg_t *rp = &ep->rplace[i];
        uint64_t off;
        if (rp->seq != h->seq || rp->step != h->step ||
            rp->kind != (h->kind & ~RCOLL_HDR_CSUM) || rp->tag != h->tag ||
            rp->total != h->total)
            continue;
        if (!rcoll_place_fits(rp->chunk, rp->bytes, h->chunk, h->len, &off))
            return -1; /* not its data: through the slot, the peer sees */
        return i;
    }
    return -1;
}

/* ---- setup ---- */

static rcoll_status_t ib_qp_alloc_all(struct rcoll_tl_ctx *ctx, ib_qp_t *q)
{
    if (posix_memalign((void **)&q->rx, 4096, ctx->ring_bytes) ||
        posix_memalign((void **)&q->tx, 4096, ctx->ring_bytes) ||
        !(q->rbuf = calloc((size_t)q->nrecv, sizeof(uint32_t))) ||
        !(q->tx_cookie = calloc((size_t)ctx->p.nslots, sizeof(void *))) ||
        !(q->tx_rent = calloc((size_t)ctx->p.nslots, sizeof(*q->tx_rent))) ||
        !(q->rx_flag = calloc((size_t)ctx->p.nslots, 1)))
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "ib: no memory for "
                                "%zu-byte rings", ctx->ring_bytes);
    memset(q->rx, 0, ctx->ring_bytes);
    memset(q->tx, 0, ctx->ring_bytes);
    if (!(q->rx_mr = ib_reg(q->dev, q->rx, ctx->ring_bytes,
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
                            "receive slots")) ||
        !(q->tx_mr = ib_reg(q->dev, q->tx, ctx->ring_bytes,
                            IBV_ACCESS_LOCAL_WRITE, "send staging")) ||
        !(q->rbuf_mr = ib_reg(q->dev, q->rbuf,
                              (size_t)q->nrecv * sizeof(uint32_t),
                              IBV_ACCESS_LOCAL_WRITE, "receive words")))
        return RCOLL_ERR_NO_MEMORY;
    return RCOLL_OK;
}

void ib_qp_unalloc(struct rcoll_tl_ctx *ctx, ib_qp_t *q)
{
    if (q->rx_mr)
        ibv_dereg_mr(q->rx_mr);
    if (q->tx_mr)
        ibv_dereg_mr(q->tx_mr);
    if (q->rbuf_mr)
        ibv_dereg_mr(q->rbuf_mr);
    free(q->rx);
    free(q->tx);
    free(q->rbuf);
    free(q->tx_cookie);
    for (int k = 0; q->tx_rent && k < ctx->p.nslots; k++)
        rcoll_rcache_put(q->dev->rcache, q->tx_rent[k]);
    free(q->tx_rent);
    free(q->rx_flag);
    q->rx_mr = q->tx_mr = q->rbuf_mr = NULL;
    q->rx = q->tx = NULL;
    q->rbuf = NULL;
    q->tx_cookie = NULL;
    q->tx_rent = NULL;
    q->rx_flag = NULL;
}

rcoll_status_t ib_qp_alloc(struct rcoll_tl_ctx *ctx, ib_qp_t *q)
{
    rcoll_status_t st = ib_qp_alloc_all(ctx, q);
    if (st != RCOLL_OK) /* all or nothing: a later attempt starts afresh */
        ib_qp_unalloc(ctx, q);
    return st;
}
