/* The verbs transport surviving the loss of a device (ib.h). With
 * RCOLL_IB_NIC=all a peer's queue pairs may run over different device
 * pairs; when one of them fails (an error completion, its port's or
 * device's event, or no progress for RCOLL_RAIL_TIMEOUT while another
 * queue pair to the peer progressed) and another still reaches the peer,
 * the ep fails over instead of failing:
 *  - every message carries its number from this rank to the peer in the
 *    8 bytes before its header (IB_SEQ_OFF), and is built in staging even
 *    when it goes inline: a staging slot is reused only once its remote
 *    slot is credited back, so staging holds every message the peer may
 *    not have taken;
 *  - the side that finds a queue pair lost moves it to the error state
 *    (the NIC stops using its rings), queues its uncredited messages to
 *    go again over the others before any new message, and tells the peer
 *    on every other queue pair (a CTRL_RAIL word naming it, after a WRITE
 *    of `upto`, the number of its next new message, into the peer's
 *    control area). The peer does the same on the notice, so both
 *    directions recover. New messages then go round the live queue pairs;
 *  - the receiver always takes messages by number, from whichever queue
 *    pair's oldest slot holds the next one. A copy of one it took already
 *    is dropped; one numbered below the peer's `upto` that heads a queue
 *    pair while the next is missing is moved aside (at most the messages
 *    in flight at the loss), so that the resends behind it get through.
 * Failback: a lost queue pair whose side is quiet (ib_fo_quiet) drops its
 * old QP and starts its state afresh (ib_fo_renew); the lower rank of the
 * pair connects it again every RCOLL_RAIL_RETRY seconds, the higher
 * accepts once its own side is fresh too (else it refuses as a duplicate
 * and the lower tries later: ib_lazy.c), and once up it carries its share
 * again (ib_fo_back). Each loss is counted on both sides, and a notice
 * names the count, so a late notice of a loss already mended ends
 * nothing. Receives in place work as ever (a key per device in the
 * notice); a lost one goes again whole through a slot, and the receiver's
 * engine copies it. With connections on first use (lazy), a queue pair
 * that does not connect while another to the peer did is lost too
 * (ib_lazy.c), and connects again as above. */
#include "transport/ib/ib.h"

int ib_fo_able(const struct rcoll_tl_ctx *ctx, const ib_ep_t *ep)
{
    /* (from the pairs both ranks compute alike: never from one side's
     * device count alone) */
    if (!rcoll_config.rail_failover || ctx->nqps < 2)
        return 0;
    for (int k = 1; k < ctx->nqps; k++)
        if (ep->qps[k].dev != ep->qps[0].dev ||
            ep->qps[k].rdev != ep->qps[0].rdev)
            return 1;
    return 0;
}

int ib_fo_live(const ib_ep_t *ep)
{
    int n = 0;
    for (int k = 0; k < ep->ctx->nqps; k++)
        n += !ep->qps[k].ended && (ep->qps[k].up || ep->ctx->lazy);
    return n;
}

void ib_fo_advance(ib_ep_t *ep)
{
    int n = ep->ctx->nqps;
    for (int i = 1; i <= n; i++) {
        int k = (ep->tx_rr + i) % n;
        if (!ep->qps[k].ended) {
            ep->tx_rr = k;
            return;
        }
    }
}

static int resend_add(ib_ep_t *ep, int qidx, int slot)
{
    if (ep->nrs == ep->rs_cap) {
        int cap = RCOLL_MAX(16, 2 * ep->rs_cap);
        ib_resend_t *r = realloc(ep->rs, (size_t)cap * sizeof(*r));
        if (!r)
            return -1;
        ep->rs = r;
        ep->rs_cap = cap;
    }
    ep->rs[ep->nrs].qidx = qidx;
    ep->rs[ep->nrs++].slot = slot;
    return 0;
}

int ib_fo_down(ib_qp_t *q, const char *why)
{
    ib_ep_t *ep = q->ep;
    struct rcoll_tl_ctx *ctx = ep->ctx;
    if (q->down)
        return 0;
    q->down = 1;
    q->ended = 1;
    q->nlost++;
    ep->nlost++;
    ib_probe_close(q);
    int live = ib_fo_live(ep);
    if (!ep->fo || live == 0)
        return -1;
    if (q->qp) { /* the NIC lets go of its rings; posted requests flush */
        struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
        ibv_modify_qp(q->qp, &a, IBV_QP_STATE);
    }
    int n = ctx->p.nslots, lost = n - q->sl.credits;
    for (int i = 0; i < lost; i++)
        if (resend_add(
                ep, q->idx,
                (int)((q->tx_seq - (uint64_t)(lost - i)) % (uint64_t)n)) != 0)
            return -1;
    if (!ep->fo_on) { /* from the stripe's place, round the live ones */
        ep->fo_on = 1;
        ep->tx_rr = (int)(ep->tx_seq % (uint64_t)ctx->nqps);
    }
    if (ep->qps[ep->tx_rr].ended)
        ib_fo_advance(ep);
    ep->tell |= 1u << q->idx;
    ctx->fo_work = 1;
    rcoll_lane_add(&ctx->n_lost, 1);
    const rcoll_boot_peer_t *pi = &ctx->p.bs->peers[ep->peer];
    char ra[INET_ADDRSTRLEN] = "?";
    if (ctx->raddrs && q->rdev < ctx->raddrs[ep->peer].n)
        inet_ntop(AF_INET, &ctx->raddrs[ep->peer].a[q->rdev].sin_addr, ra,
                  sizeof(ra));
    rcoll_warn("ib: rank %d: link %s port %d (%s) to rank %d (%s pid %d) at "
               "%s, queue pair %d, failed (%s): %d unacknowledged messages go "
               "again and the traffic moves to the other %d queue pair(s); "
               "RCOLL_RAIL_FAILOVER=0 makes this an error",
               ctx->p.rank, q->dev->devname, q->dev->port, q->dev->addr_str,
               ep->peer, pi->hostname, (int)pi->pid, ra, q->idx, why, lost,
               live);
    return 0;
}

/* ---- receive side ---- */

static const char *slot_at(const struct rcoll_tl_ctx *ctx, const ib_qp_t *q,
                           int slot)
{
    return q->rx + (size_t)slot * ctx->stride + IB_SEQ_OFF;
}

static uint64_t msg_seq(const char *m)
{
    uint64_t s;
    memcpy(&s, m, sizeof(s));
    return s;
}

static uint32_t msg_len(const struct rcoll_tl_ctx *ctx, const char *m)
{
    rcoll_msg_hdr_t h;
    memcpy(&h, m + 8, sizeof(h));
    return RCOLL_MIN(h.len, (uint32_t)ctx->p.chunk_size);
}

/* Copies q's oldest message aside and frees its slot: -1 without memory */
static int aside_add(ib_ep_t *ep, ib_qp_t *q)
{
    struct rcoll_tl_ctx *ctx = ep->ctx;
    const char *m = slot_at(ctx, q, q->sl.head);
    if (ep->naside == ep->aside_cap) {
        int cap = RCOLL_MAX(8, 2 * ep->aside_cap);
        ib_aside_t *a = realloc(ep->aside, (size_t)cap * sizeof(*a));
        if (!a)
            return -1;
        ep->aside = a;
        ep->aside_cap = cap;
    }
    int flag = q->rx_flag[q->sl.head];
    /* (one written in place: its payload is in place already) */
    size_t bytes = 8 + sizeof(rcoll_msg_hdr_t) +
                   (flag == SLOT_PLACED ? 0 : msg_len(ctx, m));
    char *c = malloc(bytes);
    if (!c)
        return -1;
    memcpy(c, m, bytes);
    ep->aside[ep->naside].m = c;
    ep->aside[ep->naside++].flag = flag;
    rcoll_slots_release(&q->sl);
    return 0;
}

int ib_fo_peek(ib_ep_t *ep, const char **msg)
{
    struct rcoll_tl_ctx *ctx = ep->ctx;
    int n = ctx->nqps;
    for (;;) {
        for (int i = 0; i < ep->naside; i++) {
            uint64_t s = msg_seq(ep->aside[i].m);
            if (s == ep->rx_seq) {
                ep->rx_from = -1 - i;
                ep->rx_flag = ep->aside[i].flag;
                *msg = ep->aside[i].m;
                return 1;
            }
            if (s < ep->rx_seq) { /* its other copy was taken */
                free(ep->aside[i].m);
                ep->aside[i--] = ep->aside[--ep->naside];
                rcoll_lane_add(&ctx->n_dups, 1);
            }
        }
        int start = (int)(ep->rx_seq % (uint64_t)n);
        for (int j = 0; j < n; j++) {
            ib_qp_t *q = &ep->qps[(start + j) % n];
            while (q->sl.count > 0) {
                const char *m = slot_at(ctx, q, q->sl.head);
                uint64_t s = msg_seq(m);
                if (s == ep->rx_seq) {
                    ep->rx_from = q->idx;
                    ep->rx_flag = q->rx_flag[q->sl.head];
                    *msg = m;
                    return 1;
                }
                if (s > ep->rx_seq)
                    break;
                rcoll_slots_release(&q->sl); /* taken already: a copy */
                rcoll_lane_add(&ctx->n_dups, 1);
            }
        }
        int moved = 0;
        for (int k = 0; k < n; k++) {
            ib_qp_t *q = &ep->qps[k];
            if (q->sl.count > 0 &&
                msg_seq(slot_at(ctx, q, q->sl.head)) < ep->peer_upto) {
                if (aside_add(ep, q) != 0)
                    return -1;
                moved = 1;
            }
        }
        if (!moved)
            return 0;
    }
}

/* The peeked message was taken: its slot freed (ib_data.c hands the
 * credit back), or its copy aside dropped. */
ib_qp_t *ib_fo_taken(ib_ep_t *ep)
{
    ep->rx_seq++;
    if (ep->rx_from >= 0)
        return &ep->qps[ep->rx_from];
    int i = -1 - ep->rx_from;
    free(ep->aside[i].m);
    ep->aside[i] = ep->aside[--ep->naside];
    return NULL;
}

int ib_fo_busy(const struct rcoll_tl_ctx *ctx)
{
    for (int i = 0; i < ctx->p.nranks; i++) {
        const ib_ep_t *ep = ctx->eps[i];
        if (!ep || !ep->fo_on || ep->failed ||
            !(ep->tell || ep->rs_head < ep->nrs))
            continue;
        /* (with none connected or connecting, nothing can go) */
        for (int k = 0; k < ctx->nqps; k++) {
            const ib_qp_t *q = &ep->qps[k];
            if (!q->ended && !q->bye &&
                (ib_qp_ready(ctx, q) || (ctx->lazy && ep->pending)))
                return 1;
        }
    }
    return 0;
}

int ib_fo_unacked(const struct rcoll_tl_ctx *ctx)
{
    for (int i = 0; i < ctx->p.nranks; i++) {
        const ib_ep_t *ep = ctx->eps[i];
        for (int k = 0; ep && ep->fo && !ep->failed && k < ctx->nqps; k++) {
            const ib_qp_t *q = &ep->qps[k];
            if (q->up && !q->ended && !q->bye && q->sl.credits < q->sl.n)
                return 1;
        }
    }
    return 0;
}

int ib_fo_quiet(const ib_qp_t *q)
{
    const ib_ep_t *ep = q->ep;
    if ((ep->tell & (1u << q->idx)) || q->sl.count)
        return 0;
    for (int i = ep->rs_head; i < ep->nrs; i++)
        if (ep->rs[i].qidx == q->idx)
            return 0;
    return 1;
}

void ib_fo_renew(ib_qp_t *q)
{
    struct rcoll_tl_ctx *ctx = q->ep->ctx;
    int n = ctx->p.nslots;
    rcoll_slots_init(&q->sl, n);
    q->tx_seq = q->tx_done = 0;
    if (q->rx_flag) /* (lazy: lost before its first connection, no ring) */
        memset(q->rx_flag, 0, (size_t)n);
    q->up = q->bye = q->aborted = q->told = q->seen = q->heard = 0;
    q->active = q->early_err = 0; /* (lazy: it may be the passive end now) */
    q->await = 0;
    q->nwords = 0;
    q->t_prog = q->ping_at = 0;
    q->fresh = 1;
    ib_probe_close(q);
    q->retry_at = rcoll_time_sec() + rcoll_config.rail_retry;
}

void ib_fo_back(ib_qp_t *q)
{
    ib_ep_t *ep = q->ep;
    struct rcoll_tl_ctx *ctx = ep->ctx;
    q->down = q->ended = q->fresh = 0;
    q->t_prog = rcoll_time_sec();
    rcoll_lane_add(&ctx->n_back, 1);
    char ra[INET_ADDRSTRLEN] = "?";
    if (ctx->raddrs && q->rdev < ctx->raddrs[ep->peer].n)
        inet_ntop(AF_INET, &ctx->raddrs[ep->peer].a[q->rdev].sin_addr, ra,
                  sizeof(ra));
    rcoll_warn("ib: rank %d: link %s port %d (%s) to rank %d at %s, queue "
               "pair %d, is back: it carries its share again",
               ctx->p.rank, q->dev->devname, q->dev->port, q->dev->addr_str,
               ep->peer, ra, q->idx);
}

void ib_fo_free(ib_ep_t *ep)
{
    for (int i = 0; i < ep->naside; i++)
        free(ep->aside[i].m);
    free(ep->aside);
    free(ep->rs);
}
