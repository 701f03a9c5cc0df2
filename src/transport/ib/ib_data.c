/* The verbs transport's data path (ib.h): completions and the signal
 * words, polling, sends (their work requests are built in ib_post.c),
 * failover's notices, resends and stall checks, revokes. Receives are in
 * ib_recv.c; a peer's failure and the devices' events in ib_fail.c. */
#include "transport/ib/ib.h"

static int ib_fo_turn(struct rcoll_tl_ctx *ctx);

/* ---- completions ---- */

/* q's last signal words, oldest first, as "t/c/a ..." */
static void ib_words_str(const ib_qp_t *q, char *buf, size_t len)
{
    size_t o = 0;
    uint64_t k = q->nwords > 8 ? q->nwords - 8 : 0;
    buf[0] = '\0';
    for (; k < q->nwords && o + 20 < len; k++) {
        uint32_t w = q->words[k % 8];
        o += (size_t)snprintf(buf + o, len - o, "%s%u/%u/%u", o ? " " : "",
                              IMM_TYPE(w), IMM_CREDITS(w), IMM_ARG(w));
    }
}

/* A RAIL notice on q: the peer lost its queue pair k; its next new
 * message is numbered `upto` (in our control area) */
static void ib_rail_notice(ib_qp_t *q, int k, unsigned gen)
{
    ib_ep_t *ep = q->ep;
    struct rcoll_tl_ctx *ctx = ep->ctx;
    uint64_t upto;
    memcpy(&upto, q->rx + (size_t)ctx->p.nslots * ctx->stride + IB_REASON,
           sizeof(upto));
    if (!ep->fo || k >= ctx->nqps) {
        ib_ep_fail(ep,
                   "protocol error: a notice that queue pair %d was "
                   "lost",
                   k);
        return;
    }
    if (upto > ep->peer_upto)
        ep->peer_upto = upto;
    /* its loss count: one more than ours is a new loss; ours or less, one
     * we know of (or mended already) */
    if (!ep->qps[k].down &&
        (signed char)(unsigned char)(gen - ep->qps[k].nlost) > 0) {
        char why[96];
        snprintf(why, sizeof(why), "rank %d lost it", ep->peer);
        if (ib_fo_down(&ep->qps[k], why) != 0)
            ib_ep_fail(ep, "queue pair %d: %s, and no other reaches it", k,
                       why);
    }
}

static void ib_handle_word(ib_qp_t *q, uint32_t w)
{
    q->words[q->nwords++ % 8] = w;
    ib_ep_t *ep = q->ep;
    struct rcoll_tl_ctx *ctx = ep->ctx;
    if (rcoll_slots_credit(&q->sl, IMM_CREDITS(w)) != 0) {
        ib_ep_fail(ep, "protocol error: %u credits, %d already held of %d",
                   IMM_CREDITS(w), q->sl.credits, ctx->p.nslots);
        return;
    }
    switch (IMM_TYPE(w)) {
    case IMM_CREDIT:
        return;
    case IMM_PLACED:
    case IMM_DATA: {
        int slot = rcoll_slots_next(&q->sl);
        const rcoll_msg_hdr_t *h = (const rcoll_msg_hdr_t *)(
            q->rx + (size_t)(slot < 0 ? 0 : slot) * ctx->stride + IB_HDR_OFF);
        if (slot < 0 || (int)IMM_ARG(w) != slot ||
            h->len > ctx->p.chunk_size) {
            char last[128];
            ib_words_str(q, last, sizeof(last));
            ib_ep_fail(ep, "protocol error: message in slot %u, expected "
                       "%d (%d full), length %u on queue pair %d (last "
                       "signals, type/credits/argument: %s)", IMM_ARG(w),
                       slot, q->sl.count, h->len, q->idx, last);
            return;
        }
        q->rx_flag[slot] = IMM_TYPE(w) == IMM_PLACED ? SLOT_PLACED
                                                     : SLOT_PLAIN;
        if (IMM_TYPE(w) == IMM_DATA && h->kind == IB_KIND_PLACE) {
            /* where the peer wants a receive's data: taken now, so that
             * what we send from here on goes there (the slot is skipped
             * when the engine reaches it) */
            if (h->len != sizeof(ib_place_msg_t)) {
                ib_ep_fail(ep, "protocol error: a %u-byte PLACE notice",
                           h->len);
                return;
            }
            q->rx_flag[slot] = SLOT_TL;
            uint64_t num = 0;
            if (ep->fo) { /* a copy after a loss: taken at its first */
                memcpy(&num, (const char *)h - 8, sizeof(num));
                int seen = num < ep->rx_seq;
                for (int i = 0; i < ep->nrplace && !seen; i++)
                    seen = ep->rplace_num[i] == num;
                if (seen) {
                    rcoll_slots_arrived(&q->sl);
                    return;
                }
            }
            if (ep->nrplace == IB_NRPLACE) { /* stale ones: the oldest goes */
                memmove(&ep->rplace[0], &ep->rplace[1],
                        (IB_NRPLACE - 1) * sizeof(ep->rplace[0]));
                memmove(&ep->rplace_num[0], &ep->rplace_num[1],
                        (IB_NRPLACE - 1) * sizeof(ep->rplace_num[0]));
            } else {
                ep->nrplace++;
            }
            memcpy(&ep->rplace[ep->nrplace - 1], (const char *)h + sizeof(*h),
                   sizeof(ib_place_msg_t));
            ep->rplace_num[ep->nrplace - 1] = num;
        }
        rcoll_slots_arrived(&q->sl);
        return;
    }
    case IMM_CTRL:
        if (IMM_ARG(w) == CTRL_BYE) {
            q->bye = 1;
            rcoll_debug(RCOLL_SUBSYS_NET, "ib: rank %d said goodbye on qp %d",
                        ep->peer, q->idx);
        } else if (IMM_ARG(w) == CTRL_SEEN) {
            q->seen = 1;
        } else if (CTRL_CODE(IMM_ARG(w)) == CTRL_RAIL) {
            ib_rail_notice(q, CTRL_QP(IMM_ARG(w)), CTRL_GEN(IMM_ARG(w)));
        } else if (IMM_ARG(w) == CTRL_PING) {
            if (!q->ended)
                ib_post_note(q, IMM(IMM_CTRL, 0, CTRL_PONG));
        } else if (IMM_ARG(w) == CTRL_PONG) {
            /* heard: t_prog is set */
        } else {
            char *r = q->rx + (size_t)ctx->p.nslots * ctx->stride;
            rcoll_tl_reason_take(ep->abort_reason, r, IB_REASON);
            ep->aborted = 1;
            q->aborted = 1;
            ib_ep_fail(ep, "aborted");
            /* the aborting rank waits for this before it closes: a close
             * may reset the connection, losing what it had not sent yet */
            if (!q->ended)
                ib_post_note(q, IMM(IMM_CTRL, 0, CTRL_SEEN));
        }
        return;
    default:
        ib_ep_fail(ep, "protocol error: signal word 0x%08x", w);
    }
}

/* A message's last work request completed (or was flushed): its staging
 * slot is free, and a zero-copy send's memory is read no more. */
static void ib_tx_completed(ib_qp_t *q)
{
    struct rcoll_tl_ctx *ctx = q->ep->ctx;
    uint64_t slot = q->tx_done % (uint64_t)ctx->p.nslots;
    void **c = &q->tx_cookie[slot];
    q->tx_done++;
    if (q->tx_rent[slot]) {
        rcoll_rcache_put(q->dev->rcache, q->tx_rent[slot]);
        q->tx_rent[slot] = NULL;
    }
    if (*c) {
        void *cookie = *c;
        *c = NULL;
        ctx->p.ev->send_done(ctx->p.ev->arg, cookie);
    }
}

/* One completion. */
static void ib_wc_handle(struct rcoll_tl_ctx *ctx, const struct ibv_wc *wc)
{
    uint32_t gidx = (uint32_t)(wc->wr_id >> 32);
    int kind = (int)(wc->wr_id & 15);
    int idx = WRID_IDX(wc->wr_id);
    if (gidx >= (uint32_t)ctx->nq)
        return;
    ib_qp_t *q = ctx->qps[gidx];
    if (!q->qp || wc->qp_num != q->qp->qp_num ||
        WRID_GEN(wc->wr_id) != (q->gen & 0xffu))
        return; /* a QP of a connection attempt dropped (ib_cm_drop) */
    q->cq_out--;
    q->dev->cq_used--;
    if (kind != WR_RECV)
        q->sq_free++;
    if (kind == WR_DATA) /* done, or flushed: the NIC let go */
        ib_tx_completed(q);
    if (wc->status != IBV_WC_SUCCESS) {
        char why[256];
        if (ctx->lazy && !q->up) {
            /* an attempt that failed (flushed when refused): its cm event
             * says what happens next; one that gets up after all ends
             * with this (ib_lazy.c) */
            if (!q->early_err)
                q->early_err = (int)wc->status;
            return;
        }
        if (wc->status == IBV_WC_WR_FLUSH_ERR)
            snprintf(why, sizeof(why), "the connection closed without "
                     "goodbye (process died or was killed?)");
        else
            snprintf(why, sizeof(why), "%s on queue pair %d: %s (vendor "
                     "error 0x%x)", kind == WR_RECV ? "receive" : "RDMA write",
                     q->idx, ibv_wc_status_str(wc->status), wc->vendor_err);
        if (wc->status == IBV_WC_REM_ACCESS_ERR ||
            wc->status == IBV_WC_REM_INV_REQ_ERR ||
            wc->status == IBV_WC_LOC_PROT_ERR) {
            /* a key or address refused: no link's fault, so no failover
             * (the next write in place would fail on another queue pair) */
            q->ended = 1;
            if (!q->down && !q->bye && !ctx->closing)
                ib_ep_fail(q->ep, "%s", why);
            return;
        }
        ib_qp_ended(q, why);
        return;
    }
    if (kind == WR_RECV) {
        if (q->ep->fo) /* (a send's completion says nothing of the peer:
                          siw completes it in the kernel's socket) */
            q->t_prog = rcoll_time_sec();
        q->heard = 1;
        uint32_t w = wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM
                         ? ntohl(wc->imm_data)
                         : q->rbuf[idx];
        /* (a failback's new QP: ended until it is back) */
        if ((!q->ended || q->fresh) && ib_post_recv(q, idx) != 0)
            ib_qp_ended(q, "cannot repost a receive");
        if (q->fresh && q->up && !q->active)
            ib_fo_back(q); /* failback, passive side: the greeting came */
        ib_handle_word(q, w);
    }
}

/* QPs an asynchronous event failed (ib_fail.c marks them): ended now that
 * what arrived before the event is polled (a peer that aborts, its reason
 * a message, and closes may raise the event first). */
static void ib_fatal_apply(struct rcoll_tl_ctx *ctx)
{
    for (int i = 0; i < ctx->nq; i++) {
        ib_qp_t *q = ctx->qps[i];
        if (!q->fatal[0])
            continue;
        char why[sizeof(q->fatal)];
        memcpy(why, q->fatal, sizeof(why));
        q->fatal[0] = '\0';
        if (!q->ended)
            ib_qp_ended(q, why);
    }
}

/* Handles every completion device d's CQ has, in its order. The batch is
 * the device's, so a handler that polls again continues it instead of
 * handling newer completions first (a peer's signal for slot k+1 before
 * its slot k). */
static int ib_poll_dev(struct rcoll_tl_ctx *ctx, ib_dev_t *d)
{
    int total = 0;
    for (;;) {
        if (d->wc_i == d->wc_n) {
            int n = d->cq ? ibv_poll_cq(d->cq, 32, d->wc) : 0;
            d->wc_i = d->wc_n = 0;
            if (n <= 0)
                return total;
            d->wc_n = n;
        }
        struct ibv_wc wc = d->wc[d->wc_i++];
        total++;
        ib_wc_handle(ctx, &wc);
    }
}

/* Every device's completions (a queue pair completes in its device's CQ,
 * so its order is that CQ's); then a QP an asynchronous event failed is
 * ended, once the CQs are empty. */
int ib_poll(struct rcoll_tl_ctx *ctx)
{
    int total = 0;
    for (int i = 0; i < ctx->ndev; i++)
        total += ib_poll_dev(ctx, &ctx->devs[i]);
    if (ctx->nfatal) {
        ctx->nfatal = 0;
        ib_fatal_apply(ctx);
    }
    ctx->npolled += total;
    return total;
}

/* The completions handled since the engine last asked, wherever they were
 * polled (also in a connection's steps or a send waiting for room): what
 * they brought must be looked at before the engine sleeps. */
static int ib_polled(struct rcoll_tl_ctx *ctx)
{
    int n = ctx->npolled;
    ctx->npolled = 0;
    return n;
}

int ib_progress(rcoll_tl_ctx_t *ctx)
{
    ib_poll(ctx);
    ib_async_take(ctx);
    if (ctx->nfatal)
        ib_poll(ctx); /* which ends the QPs the events failed */
    int n = ib_polled(ctx);
    if (ctx->nfo)
        n += ib_fo_turn(ctx);
    return n;
}

void ib_cq_event(rcoll_ev_handler_t *h, uint32_t events)
{
    ib_dev_t *dev = (ib_dev_t *)((char *)h - offsetof(ib_dev_t, cch_h));
    struct rcoll_tl_ctx *ctx = dev->ctx;
    struct ibv_cq *cq;
    void *cq_ctx;
    (void)events;
    while (ibv_get_cq_event(dev->cch, &cq, &cq_ctx) == 0) {
        ibv_ack_cq_events(cq, 1);
        dev->cq_armed = 0;
    }
    ib_poll(ctx);
}

/* The engine has nothing to do and may sleep: hand back owed credits, arm
 * the CQ, and look once more (a completion between the last poll and the
 * arming raises no event). */
int ib_idle(rcoll_tl_ctx_t *ctx)
{
    for (int i = 0; i < ctx->nq; i++)
        ib_send_credits(ctx->qps[i]);
    for (int i = 0; i < ctx->ndev; i++) {
        ib_dev_t *d = &ctx->devs[i];
        if (!d->cq_armed && d->cq) {
            ibv_req_notify_cq(d->cq, 0);
            d->cq_armed = 1;
        }
    }
    ib_poll(ctx);
    return ib_polled(ctx) + (ctx->nfo ? ib_fo_turn(ctx) : 0);
}

/* 1 if q has room for the message now (credit, staging slot, send queue,
 * completion queue), polling once if not; *rp: the peer's receive in
 * place it goes to (-1: none), *need: its work requests. */
static int ib_send_room(struct rcoll_tl_ctx *ctx, ib_ep_t *ep, ib_qp_t *q,
                        const rcoll_msg_hdr_t *hdr, int *rp, int *need)
{
    uint64_t ns = (uint64_t)ctx->p.nslots;
    for (int tries = 0; tries < 2; tries++) {
        if (tries)
            ib_poll(ctx);
        *rp = ep->nrplace && hdr->len ? ib_rplace_find(ep, hdr) : -1;
        if (*rp >= 0 && !ep->rplace[*rp].rkey[q->rdev])
            *rp = -1; /* (not registered with that device: the slot) */
        *need = (q->imm ? 1 : 2) + (*rp >= 0);
        if (rcoll_slots_can_send(&q->sl) && q->tx_seq - q->tx_done < ns &&
            q->sq_free >= *need && ib_cq_room(q->dev, *need))
            return 1;
    }
    return 0;
}

/* ---- failover (ib_fo.c): notices, resends, stalls ---- */

/* Tells the peer of the queue pairs ep lost, on every live one with room:
 * `upto` into its control area, then the CTRL_RAIL word. */
static void ib_fo_tell(ib_ep_t *ep)
{
    struct rcoll_tl_ctx *ctx = ep->ctx;
    size_t ctrl = (size_t)ctx->p.nslots * ctx->stride + IB_REASON;
    while (ep->tell) {
        int k = __builtin_ctz(ep->tell), told = 0;
        uint64_t upto = ep->tx_seq;
        for (int j = 0; j < ctx->nqps; j++) {
            ib_qp_t *q = &ep->qps[j];
            if (q->ended || !ib_qp_ready(ctx, q) || q->sq_free < 2 ||
                !ib_cq_room(q->dev, 2))
                continue;
            memcpy(q->tx + ctrl, &upto, sizeof(upto));
            struct ibv_sge sge = {(uintptr_t)(q->tx + ctrl), sizeof(upto),
                                  q->tx_mr->lkey};
            struct ibv_send_wr wr = {.wr_id = WRID(q, WR_NOTE, 0),
                                     .sg_list = &sge,
                                     .num_sge = 1,
                                     .opcode = IBV_WR_RDMA_WRITE,
                                     .send_flags = IBV_SEND_SIGNALED},
                               *bad;
            wr.wr.rdma.remote_addr = q->raddr + ctrl;
            wr.wr.rdma.rkey = q->rkey;
            if (ibv_post_send(q->qp, &wr, &bad) != 0)
                continue;
            q->sq_free--;
            ib_cq_posted(q, 1);
            unsigned a =
                CTRL_RAIL | (unsigned)k << 4 | (ep->qps[k].nlost & 0xffU) << 8;
            if (ib_post_note(q, IMM(IMM_CTRL, 0, a)) == 0)
                told = 1;
        }
        if (!told)
            return; /* no room now: the next turn */
        ep->tell &= ~(1u << k);
    }
}

/* The lost queue pairs' uncredited messages go again, before any new
 * one, round the live queue pairs: RCOLL_OK once none is left. */
static rcoll_status_t ib_fo_resend(ib_ep_t *ep)
{
    struct rcoll_tl_ctx *ctx = ep->ctx;
    uint64_t ns = (uint64_t)ctx->p.nslots;
    while (ep->rs_head < ep->nrs) {
        ib_qp_t *q = &ep->qps[ep->tx_rr];
        int need = q->imm ? 1 : 2;
        if (q->ended) { /* (after a goodbye: not lost, but not usable) */
            if (!ib_fo_live(ep))
                return ib_ep_error(ep);
            ib_fo_advance(ep);
            continue;
        }
        if (!ib_qp_ready(ctx, q)) { /* lazy: not connected yet */
            for (int k = 0; k < ctx->nqps; k++)
                if (!ep->qps[k].ended && ib_qp_ready(ctx, &ep->qps[k])) {
                    ep->tx_rr = k; /* one that is */
                    break;
                }
            if (ep->tx_rr != q->idx)
                continue;
            ib_lazy_want(ep);
            return RCOLL_INPROGRESS;
        }
        if (!rcoll_slots_can_send(&q->sl) || q->tx_seq - q->tx_done >= ns ||
            q->sq_free < need || !ib_cq_room(q->dev, need))
            return RCOLL_INPROGRESS;
        const ib_resend_t *r = &ep->rs[ep->rs_head];
        const char *src = ep->qps[r->qidx].tx + (size_t)r->slot * ctx->stride;
        uint32_t slot = (uint32_t)(q->tx_seq % ns);
        char *s = q->tx + (size_t)slot * ctx->stride;
        rcoll_msg_hdr_t h;
        memcpy(&h, src + IB_HDR_OFF, sizeof(h));
        memcpy(s + IB_SEQ_OFF, src + IB_SEQ_OFF, IB_HDR - IB_SEQ_OFF + h.len);
        int c = RCOLL_MIN(q->sl.owed, IB_MAX_CREDITS);
        ib_msg_wrs_t w;
        memset(&w, 0, sizeof(w));
        /* (one written in place goes again whole, into the slot: its
         * receiver's engine copies it where the first may have landed) */
        w.word = IMM(IMM_DATA, c, slot);
        ib_wrs_kept(q, s, &w);
        ib_wrs_signal(ctx, q, slot, &w);
        int rc = ib_post_msg(q, &w, -1, need, c, h.len);
        if (rc != 0)
            return ib_send_refused(ep, q, rc, NULL);
        ep->rs_head++;
        ib_fo_advance(ep);
    }
    ep->nrs = ep->rs_head = 0;
    return RCOLL_OK;
}

/* What a lost queue pair left: the notices, then the resends (new
 * messages wait for both). */
static rcoll_status_t ib_fo_flush(ib_ep_t *ep)
{
    ib_fo_tell(ep);
    if (ep->tell) {
        ep->ctx->fo_work = 1;
        ib_lazy_want(ep); /* (lazy: none may be connected yet) */
        return RCOLL_INPROGRESS;
    }
    rcoll_status_t st = ib_fo_resend(ep);
    if (st == RCOLL_INPROGRESS)
        ep->ctx->fo_work = 1;
    return st;
}

/* A live queue pair with messages outstanding that has heard nothing
 * from the peer for RCOLL_RAIL_TIMEOUT is lost (a link that fails with no
 * event at this end) if it was pinged and did not answer while another
 * queue pair to the peer answered since. A receiver that waits for a
 * message on the lost one takes nothing from the others either, so their
 * credits stop too: hence the pings (CTRL_PING, answered by CTRL_PONG),
 * sent to every live queue pair of the peer once one has been silent a
 * third of the time, then at that pace to those that answered (one
 * unanswered at most: each takes one of the peer's spare receives). A
 * peer that stops polling answers on none, and loses none. */
static void ib_fo_stalls(struct rcoll_tl_ctx *ctx, double now)
{
    double t = rcoll_config.rail_timeout;
    for (int g = 0; t > 0 && g < ctx->nq; g++) {
        ib_qp_t *q = ctx->qps[g];
        ib_ep_t *ep = q->ep;
        if (!ep->fo || q->ended || !q->up || q->bye || ep->failed ||
            (q->sl.credits == q->sl.n && q->tx_seq == q->tx_done) ||
            now - q->t_prog < t / 3)
            continue;
        for (int k = 0; k < ctx->nqps; k++) {
            ib_qp_t *r = &ep->qps[k];
            if (!r->ended && !r->bye && ib_qp_ready(ctx, r) &&
                r->t_prog >= r->ping_at && now - r->ping_at >= t / 3 &&
                ib_post_note(r, IMM(IMM_CTRL, 0, CTRL_PING)) == 0)
                r->ping_at = now;
        }
        if (now - q->t_prog < t || q->ping_at <= q->t_prog)
            continue;
        int other = -1;
        for (int k = 0; k < ctx->nqps && other < 0; k++)
            if (k != q->idx && !ep->qps[k].ended &&
                ep->qps[k].t_prog > q->ping_at)
                other = k;
        if (other < 0)
            continue;
        char why[160];
        snprintf(why, sizeof(why),
                 "nothing heard for %.1f s with messages outstanding, no "
                 "answer to a ping that queue pair %d to the same rank "
                 "answered",
                 now - q->t_prog, other);
        if (ib_fo_down(q, why) != 0)
            ib_ep_fail(ep, "queue pair %d: %s, and no other reaches it", q->idx,
                       why);
    }
}

/* The engine's turn for failover: stalls looked for ten times a second,
 * then the eps with notices or resends left. */
static int ib_fo_turn(struct rcoll_tl_ctx *ctx)
{
    int n = 0;
    if (ctx->nfo) {
        double now = rcoll_time_sec();
        if (now >= ctx->stall_at) {
            ctx->stall_at = now + 0.1;
            ib_fo_stalls(ctx, now);
        }
    }
    if (!ctx->fo_work)
        return 0;
    ctx->fo_work = 0;
    for (int i = 0; i < ctx->p.nranks; i++) {
        ib_ep_t *ep = ctx->eps[i];
        if (ep && ep->fo_on && !ep->failed &&
            (ep->tell || ep->rs_head < ep->nrs) && ib_fo_flush(ep) == RCOLL_OK)
            n++; /* (one still waiting for room leaves fo_work set) */
    }
    return n;
}

rcoll_status_t ib_send(rcoll_tl_ep_t *tep, const rcoll_msg_hdr_t *hdr,
                       const void *payload, void *cookie, int flags,
                       size_t xfer)
{
    (void)xfer;
    (void)flags;
    ib_ep_t *ep = (ib_ep_t *)tep;
    struct rcoll_tl_ctx *ctx = ep->ctx;
    if (ep->fo_on && !ep->failed) {
        rcoll_status_t st = ib_fo_flush(ep);
        if (st != RCOLL_OK)
            return st;
    }
    ib_qp_t *q = ep->fo_on ? &ep->qps[ep->tx_rr]
                           : &ep->qps[ep->tx_seq % (uint64_t)ctx->nqps];
    if (ep->failed || q->ended)
        return ib_ep_error(ep);
    if (q->bye)
        return rcoll__set_error(RCOLL_ERR_REMOTE,
                                "rank %d already destroyed the communicator",
                                ep->peer);
    if (!ib_qp_ready(ctx, q)) { /* lazy: not connected yet */
        ib_lazy_want(ep);
        return RCOLL_INPROGRESS;
    }
    if (hdr->len > ctx->p.chunk_size)
        return rcoll__set_error(RCOLL_ERR_INTERNAL, "ib: a %u-byte message "
                                "to rank %d is larger than a slot (%zu)",
                                hdr->len, ep->peer, ctx->p.chunk_size);
    int rp, need, fo_was = ep->fo_on;
    if (!ib_send_room(ctx, ep, q, hdr, &rp, &need)) {
        rcoll_lane_add(&q->st.tx_waits, 1);
        return RCOLL_INPROGRESS;
    }
    /* its poll may have lost q (failover: its window is counted, and the
     * lost queue pairs' messages go first) */
    if (ep->failed)
        return ib_ep_error(ep);
    if (q->ended || ep->fo_on != fo_was)
        return RCOLL_INPROGRESS;
    uint32_t slot = (uint32_t)(q->tx_seq % (uint64_t)ctx->p.nslots);
    char *s = q->tx + (size_t)slot * ctx->stride;
    int c = RCOLL_MIN(q->sl.owed, IB_MAX_CREDITS);
    int inl = rp < 0 && sizeof(*hdr) + hdr->len <= q->dev->max_inline &&
              hdr->len <= rcoll_config.ib_inline;
    rcoll_rcache_entry_t *rent = NULL;
    /* (where ep can fail over, staging keeps every message whole) */
    uint32_t ukey =
        inl || ep->fo ? 0 : ib_send_key(q, payload, hdr->len, &rent);
    ib_msg_wrs_t w;
    memset(&w, 0, sizeof(w));
    w.word = IMM(rp >= 0 ? IMM_PLACED : IMM_DATA, c, slot);
    if (ep->fo)
        memcpy(s + IB_SEQ_OFF, &ep->tx_seq, sizeof(ep->tx_seq));
    if (ep->fo && rp < 0) {
        memcpy(s + IB_HDR_OFF, hdr, sizeof(*hdr));
        if (hdr->len)
            memcpy(s + IB_HDR, payload, hdr->len);
        ib_wrs_kept(q, s, &w);
    } else if (rp >= 0) {
        ib_wrs_place(ep, q, rp, s, hdr, payload, ukey, &w);
    } else {
        ib_wrs_slot(q, s, hdr, payload, ukey, inl, &w);
    }
    ib_wrs_signal(ctx, q, slot, &w);
    int rc = ib_post_msg(q, &w, rp, need, c, hdr->len);
    if (rc != 0)
        return ib_send_refused(ep, q, rc, rent);
    ep->tx_seq++;
    if (ep->fo_on)
        ib_fo_advance(ep);
    rcoll_lane_add(&ctx->n_sent, 1);
    if (ukey) {
        /* done when the NIC has read it: at the completion */
        q->tx_cookie[slot] = cookie;
        q->tx_rent[slot] = rent;
        rcoll_lane_add(&ctx->n_zcopy, 1);
    } else if (cookie) {
        /* the payload was copied (staging or inline): the buffer is free */
        ctx->p.ev->send_done(ctx->p.ev->arg, cookie);
    }
    return RCOLL_OK;
}

/* 1 if a zero-copy send with this cookie is still posted on q */
static int ib_qp_holds(const ib_qp_t *q, const void *cookie)
{
    uint64_t ns = (uint64_t)q->ep->ctx->p.nslots;
    for (uint64_t k = q->tx_done; k < q->tx_seq; k++)
        if (q->tx_cookie[k % ns] == cookie)
            return 1;
    return 0;
}

/* Withdraws the zero-copy sends of a failed operation (transport op
 * send_revoke): the NIC may read registered user memory until their
 * completions. They get IB_REVOKE_WAIT seconds to complete; a queue pair
 * that still holds one then goes to the error state, which flushes its
 * work requests (the NIC reads nothing more of them), and fails its
 * peer. Sends from staging hold nothing of the caller's. */
#define IB_REVOKE_WAIT 1.0
void ib_send_revoke(rcoll_tl_ctx_t *ctx, void *cookie,
                    const char *why)
{
    (void)why; /* a stopped queue pair fails its peer; the abort says why */
    double wait = RCOLL_MIN(IB_REVOKE_WAIT, ctx->p.timeout);
    double stop_at = rcoll_time_sec() + wait, give_up = stop_at + wait;
    for (;;) {
        int held = 0;
        double now = rcoll_time_sec();
        for (int i = 0; i < ctx->nq; i++) {
            ib_qp_t *q = ctx->qps[i];
            if (!q->qp || !ib_qp_holds(q, cookie))
                continue;
            held = 1;
            if (now >= stop_at && !q->ended) {
                struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
                int rc = ibv_modify_qp(q->qp, &a, IBV_QP_STATE);
                ib_qp_ended(q, rc ? "a failed operation's zero-copy send "
                            "did not complete, and its queue pair could not "
                            "be stopped" : "a failed operation's zero-copy "
                            "send did not complete in time: its queue pair "
                            "was stopped");
            }
        }
        if (!held)
            return;
        if (now >= give_up)
            break;
        if (ib_poll(ctx) == 0)
            usleep(100);
    }
    /* a device that flushes nothing: nothing more can be done here */
    uint64_t ns = (uint64_t)ctx->p.nslots;
    for (int i = 0; i < ctx->nq; i++) {
        ib_qp_t *q = ctx->qps[i];
        for (uint64_t k = q->tx_done; q->qp && k < q->tx_seq; k++)
            if (q->tx_cookie[k % ns] == cookie) {
                rcoll_warn("ib: rank %d: %s did not flush a zero-copy send "
                           "to rank %d within %g s of stopping its queue "
                           "pair",
                           ctx->p.rank, q->dev->devname, q->ep->peer, wait);
                q->tx_cookie[k % ns] = NULL;
                if (q->tx_rent[k % ns])
                    rcoll_rcache_invalidate(q->dev->rcache,
                                            q->tx_rent[k % ns]);
                ctx->p.ev->send_done(ctx->p.ev->arg, cookie);
            }
    }
}
