/* The verbs transport's receive side (ib.h): receives in place (the
 * PLACE notice), the next message (in its queue pair's order, or by
 * number where the peer can fail over: ib_fo.c), its release and the
 * credits it frees. */
#include "transport/ib/ib.h"

/* Lets go of a destination's registrations (rent, by device); drop:
 * out of the cache too */
static void place_put(ib_ep_t *ep, rcoll_rcache_entry_t **rent, int drop)
{
    struct rcoll_tl_ctx *ctx = ep->ctx;
    for (int d = 0; d < ctx->ndev; d++) {
        if (!rent[d])
            continue;
        if (drop)
            rcoll_rcache_invalidate(ctx->devs[d].rcache, rent[d]);
        rcoll_rcache_put(ctx->devs[d].rcache, rent[d]);
        rent[d] = NULL;
    }
}

int ib_recv_place(rcoll_tl_ep_t *tep, const rcoll_tl_place_t *pl)
{
    ib_ep_t *ep = (ib_ep_t *)tep;
    struct rcoll_tl_ctx *ctx = ep->ctx;
    if (!rcoll_config.ib_place_min || pl->bytes < rcoll_config.ib_place_min ||
        ep->places.n == RCOLL_NPLACE || ep->failed || !pl->chunk ||
        !pl->bytes)
        return 0;
    ib_qp_t *nq = ep->fo_on ? &ep->qps[ep->tx_rr]
                            : &ep->qps[ep->tx_seq % (uint64_t)ctx->nqps];
    if (!ib_qp_ready(ctx, nq)) {
        ib_lazy_want(ep); /* the notice needs the connection */
        return 0;
    }
    /* registered with each device a queue pair to the peer runs over
     * (queue pairs lost for now too: one back writes with its key) */
    ib_place_msg_t m = {.seq = pl->seq,
                        .total = pl->total,
                        .chunk = pl->chunk,
                        .addr = (uintptr_t)pl->dst,
                        .bytes = pl->bytes,
                        .kind = pl->kind,
                        .step = pl->step,
                        .tag = pl->tag};
    rcoll_rcache_entry_t *rent[IB_MAX_DEVS] = {0};
    for (int k = 0; k < ctx->nqps; k++) {
        ib_dev_t *d = ep->qps[k].dev;
        if (rent[d->idx] || ep->qps[k].down)
            continue; /* (a lost one's device: key 0, the sender's data
                         through its slots) */
        void *mrh;
        if (!(rent[d->idx] =
                  rcoll_rcache_get(d->rcache, pl->dst, pl->bytes, &mrh))) {
            rcoll_debug(RCOLL_SUBSYS_NET,
                        "ib: cannot register %zu bytes with %s for a "
                        "receive in place from rank %d (%s): through the "
                        "slots",
                        pl->bytes, d->devname, ep->peer, rcoll_last_error());
            place_put(ep, rent, 0);
            return 0;
        }
        m.rkey[d->idx] = ((struct ibv_mr *)mrh)->rkey;
    }
    rcoll_msg_hdr_t h = {.kind = IB_KIND_PLACE, .len = sizeof(m)};
    char buf[sizeof(m)];
    memcpy(buf, &m, sizeof(m));
    if (ib_send(tep, &h, buf, NULL, 0, sizeof(m)) != RCOLL_OK) {
        /* no credit now (or the link failed: the next call says so) */
        place_put(ep, rent, 0);
        return 0;
    }
    /* (room, chunk and bytes: checked above, so this takes it) */
    int i = rcoll_places_add(&ep->places, pl);
    memcpy(ep->place_rent[i], rent, sizeof(rent));
    ep->place_nlost[i] = ep->nlost;
    return 1;
}

void ib_recv_unplace(rcoll_tl_ep_t *tep, const rcoll_tl_place_t *pl)
{
    ib_ep_t *ep = (ib_ep_t *)tep;
    int i = rcoll_places_posted(&ep->places, pl);
    if (i < 0)
        return;
    /* All of it landed: the registrations stay cached for the buffer's
     * next use. Else (a failed operation's), or if a queue pair to the
     * peer was lost meanwhile (a write of it may still be on its way),
     * they go: a write still to come then fails on the peer's queue
     * pair, not in memory that is the caller's again. */
    place_put(ep, ep->place_rent[i],
              ep->places.e[i].landed < pl->bytes ||
                  ep->place_nlost[i] != ep->nlost);
    int last = rcoll_places_remove(&ep->places, i, "ib", ep->peer);
    if (last != i) {
        memcpy(ep->place_rent[i], ep->place_rent[last],
               sizeof(ep->place_rent[i]));
        ep->place_nlost[i] = ep->place_nlost[last];
    }
}

void ib_place_free(ib_ep_t *ep)
{
    for (int k = 0; k < ep->places.n; k++) /* not unposted */
        place_put(ep, ep->place_rent[k], 0);
    ep->places.n = 0;
}

/* The payload of a message the peer wrote in place (its header in *h):
 * where our receive in place wanted it (*payload); -1 if no receive
 * posted here wants it (the ep failed). */
static int ib_placed(ib_ep_t *ep, const rcoll_msg_hdr_t *h,
                     const void **payload)
{
    size_t off;
    int i = rcoll_places_find(&ep->places, h, &off);
    if (i >= 0) {
        *payload = ep->places.e[i].pl.dst + off;
        return 0;
    }
    ib_ep_fail(ep,
               "protocol error: data written in place for a "
               "receive not posted (transfer %u chunk %u of message "
               "%llu)",
               h->step, h->chunk, (unsigned long long)h->seq);
    return -1;
}

/* A message written in place is taken (released, not merely peeked: the
 * engine may peek one again): its bytes landed */
static void ib_placed_taken(ib_ep_t *ep)
{
    size_t off;
    int i = rcoll_places_find(&ep->places, &ep->rx_hdr, &off);
    if (i >= 0)
        ep->places.e[i].landed += ep->rx_hdr.len;
}

/* Hands back the credits that copies dropped by number freed, at half */
static void ib_fo_credits(ib_ep_t *ep)
{
    for (int k = 0; k < ep->ctx->nqps; k++)
        if (rcoll_slots_half(ep->qps[k].sl.owed, ep->qps[k].sl.n))
            ib_send_credits(&ep->qps[k]);
}

/* The peeked message (len bytes) is taken, where ep can fail over */
static void ib_fo_release(ib_ep_t *ep, uint32_t len)
{
    ib_qp_t *fq = ib_fo_taken(ep);
    if (fq) {
        rcoll_lane_received(&fq->st, len);
        if (rcoll_slots_release(&fq->sl))
            ib_send_credits(fq);
    }
}

/* recv_peek where ep can fail over: the next message by number (ib_fo.c) */
static rcoll_status_t ib_fo_recv_peek(ib_ep_t *ep, const rcoll_msg_hdr_t **hdr,
                                      const void **payload)
{
    const char *m;
    int r;
    while ((r = ib_fo_peek(ep, &m)) == 1 && ep->rx_flag == SLOT_TL)
        ib_fo_release(ep, sizeof(ib_place_msg_t)); /* a PLACE notice, taken
                                                      when it came */
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
    if (ep->rx_flag == SLOT_PLACED && ib_placed(ep, &ep->rx_hdr, payload) != 0)
        return ib_ep_error(ep);
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
    if (q->rx_flag[q->sl.head] == SLOT_PLACED &&
        ib_placed(ep, &ep->rx_hdr, payload) != 0)
        return ib_ep_error(ep);
    return RCOLL_OK;
}

void ib_recv_release(rcoll_tl_ep_t *tep)
{
    ib_ep_t *ep = (ib_ep_t *)tep;
    struct rcoll_tl_ctx *ctx = ep->ctx;
    if (ep->fo) {
        if (ep->rx_flag == SLOT_PLACED)
            ib_placed_taken(ep);
        ib_fo_release(ep, ep->rx_hdr.len);
        return;
    }
    ib_qp_t *q = &ep->qps[ep->rx_seq % (uint64_t)ctx->nqps];
    if (q->rx_flag[q->sl.head] == SLOT_PLACED)
        ib_placed_taken(ep);
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
