/* The verbs transport's receive side (ib.h): receives in place (the
 * PLACE notice), the next message (in its queue pair's order, or by
 * number where the peer can fail over: ib_fo.c), its release and the
 * credits it frees. */
#include "transport/ib/ib.h"

int ib_recv_place(rcoll_tl_ep_t *tep, const rcoll_tl_place_t *pl)
{
    ib_ep_t *ep = (ib_ep_t *)tep;
    struct rcoll_tl_ctx *ctx = ep->ctx;
    /* (several devices: a notice would need a key per device; not yet) */
    if (!rcoll_config.ib_place_min || pl->bytes < rcoll_config.ib_place_min ||
        ep->nplace == IB_NPLACE || ep->failed || !pl->chunk || ctx->ndev > 1 ||
        ep->fo)
        return 0;
    if (!ib_qp_ready(ctx, &ep->qps[ep->tx_seq % (uint64_t)ctx->nqps])) {
        ib_lazy_want(ep); /* the notice needs the connection */
        return 0;
    }
    void *mrh;
    rcoll_rcache_entry_t *rent =
        rcoll_rcache_get(ctx->dev->rcache, pl->dst, pl->bytes, &mrh);
    if (!rent) {
        rcoll_debug(RCOLL_SUBSYS_NET,
                    "ib: cannot register %zu bytes for a "
                    "receive in place from rank %d (%s): through the slots",
                    pl->bytes, ep->peer, rcoll_last_error());
        return 0;
    }
    struct ibv_mr *mr = mrh;
    ib_place_msg_t m = {.seq = pl->seq,
                        .total = pl->total,
                        .chunk = pl->chunk,
                        .addr = (uintptr_t)pl->dst,
                        .bytes = pl->bytes,
                        .kind = pl->kind,
                        .step = pl->step,
                        .tag = pl->tag,
                        .rkey = mr->rkey};
    rcoll_msg_hdr_t h = {.kind = IB_KIND_PLACE, .len = sizeof(m)};
    char buf[sizeof(m)];
    memcpy(buf, &m, sizeof(m));
    if (ib_send(tep, &h, buf, NULL, 0, sizeof(m)) != RCOLL_OK) {
        /* no credit now (or the link failed: the next call says so) */
        rcoll_rcache_put(ctx->dev->rcache, rent);
        return 0;
    }
    ep->place[ep->nplace].pl = *pl;
    ep->place[ep->nplace].mr = mr;
    ep->place[ep->nplace].rent = rent;
    ep->place[ep->nplace++].landed = 0;
    return 1;
}

/* Hands back the credits that copies dropped by number freed, at half */
static void ib_fo_credits(ib_ep_t *ep)
{
    for (int k = 0; k < ep->ctx->nqps; k++)
        if (rcoll_slots_half(ep->qps[k].sl.owed, ep->qps[k].sl.n))
            ib_send_credits(&ep->qps[k]);
}

/* recv_peek where ep can fail over: the next message by number (ib_fo.c) */
static rcoll_status_t ib_fo_recv_peek(ib_ep_t *ep, const rcoll_msg_hdr_t **hdr,
                                      const void **payload)
{
    const char *m;
    int r = ib_fo_peek(ep, &m);
    ib_fo_credits(ep);
    if (r < 0) {
        ib_ep_fail(ep, "out of memory for messages moved aside");
        return ib_ep_error(ep);
    }
    if (r == 0) {
        int live = 0, bye = 0;
        for (int k = 0; k < ep->ctx->nqps; k++)
            if (!ep->qps[k].ended) {
                live++;
                bye += ep->qps[k].bye;
            }
        if (ep->failed || live == 0)
            return ib_ep_error(ep);
        if (bye == live)
            return rcoll__set_error(RCOLL_ERR_REMOTE,
                                    "rank %d already "
                                    "destroyed the communicator",
                                    ep->peer);
        return RCOLL_INPROGRESS;
    }
    memcpy(&ep->rx_hdr, m + (IB_HDR_OFF - IB_SEQ_OFF), sizeof(ep->rx_hdr));
    if (ep->rx_hdr.len > ep->ctx->p.chunk_size)
        ep->rx_hdr.len = (uint32_t)ep->ctx->p.chunk_size + 1;
    *hdr = &ep->rx_hdr;
    *payload = m + (IB_HDR - IB_SEQ_OFF);
    return RCOLL_OK;
}

rcoll_status_t ib_recv_peek(rcoll_tl_ep_t *tep, const rcoll_msg_hdr_t **hdr,
                            const void **payload)
{
    ib_ep_t *ep = (ib_ep_t *)tep;
    struct rcoll_tl_ctx *ctx = ep->ctx;
    ib_qp_t *q;
    if (ep->fo)
        return ib_fo_recv_peek(ep, hdr, payload);
    for (;;) {
        q = &ep->qps[ep->rx_seq % (uint64_t)ctx->nqps];
        if (q->sl.count == 0) {
            if (ep->failed || q->ended)
                return ib_ep_error(ep);
            if (q->bye)
                return rcoll__set_error(RCOLL_ERR_REMOTE,
                                        "rank %d already destroyed the "
                                        "communicator",
                                        ep->peer);
            return RCOLL_INPROGRESS;
        }
        if (q->rx_flag[q->sl.head] != SLOT_TL)
            break;
        ib_recv_release(tep); /* a PLACE notice, taken when it came */
    }
    char *s = q->rx + (size_t)q->sl.head * ctx->stride;
    memcpy(&ep->rx_hdr, s + IB_HDR_OFF, sizeof(ep->rx_hdr));
    if (ep->rx_hdr.len > ctx->p.chunk_size) /* rewritten since: a mismatch */
        ep->rx_hdr.len = (uint32_t)ctx->p.chunk_size + 1;
    *hdr = &ep->rx_hdr;
    *payload = s + IB_HDR;
    if (q->rx_flag[q->sl.head] == SLOT_PLACED) {
        /* the payload is where our receive in place wanted it */
        const rcoll_msg_hdr_t *h = &ep->rx_hdr;
        for (int i = 0; i < ep->nplace; i++) {
            const rcoll_tl_place_t *pl = &ep->place[i].pl;
            size_t off = (size_t)h->chunk * pl->chunk;
            if (pl->seq != h->seq || pl->step != h->step ||
                pl->kind != (h->kind & ~RCOLL_HDR_CSUM) || pl->tag != h->tag ||
                pl->total != h->total ||
                h->chunk >= (pl->bytes + pl->chunk - 1) / pl->chunk ||
                h->len > pl->bytes - off)
                continue;
            *payload = pl->dst + off;
            ep->place[i].landed += h->len;
            return RCOLL_OK;
        }
        ib_ep_fail(ep,
                   "protocol error: data written in place for a "
                   "receive not posted (transfer %u chunk %u of message "
                   "%llu)",
                   h->step, h->chunk, (unsigned long long)h->seq);
        return ib_ep_error(ep);
    }
    return RCOLL_OK;
}

void ib_recv_release(rcoll_tl_ep_t *tep)
{
    ib_ep_t *ep = (ib_ep_t *)tep;
    struct rcoll_tl_ctx *ctx = ep->ctx;
    if (ep->fo) {
        ib_qp_t *fq = ib_fo_taken(ep);
        if (fq) {
            rcoll_lane_received(&fq->st, ep->rx_hdr.len);
            if (rcoll_slots_release(&fq->sl))
                ib_send_credits(fq);
        }
        return;
    }
    ib_qp_t *q = &ep->qps[ep->rx_seq % (uint64_t)ctx->nqps];
    rcoll_lane_received(&q->st, q->rx_flag[q->sl.head] == SLOT_TL
                                    ? sizeof(ib_place_msg_t)
                                    : ep->rx_hdr.len);
    q->rx_flag[q->sl.head] = SLOT_PLAIN;
    ep->rx_seq++;
    /* like TCP: credits go back with our next message, alone at half the
     * slots, or when the engine idles */
    if (rcoll_slots_release(&q->sl))
        ib_send_credits(q);
}

int ib_recv_full(rcoll_tl_ep_t *tep)
{
    ib_ep_t *ep = (ib_ep_t *)tep;
    for (int k = 0; k < ep->ctx->nqps; k++)
        if (!ep->qps[k].down && rcoll_slots_held(&ep->qps[k].sl))
            return 1;
    return 0;
}
