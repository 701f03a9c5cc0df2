/* The verbs transport's data path (ib.h): sends (staged, inline, gathered
 * from registered memory, or written into a receiver's destination),
 * completions and the signal words, credits, receives, revokes. A peer's
 * failure and the devices' events are in ib_fail.c. */
#include "transport/ib/ib.h"

/* ---- posting ---- */

/* Each posted work request holds an entry of the CQ until its
 * completion is polled: room for n more? (The CQ may be smaller than
 * every queue pair's full depth: the device's max_cqe.) */
int ib_cq_room(const ib_dev_t *d, int n)
{
    return d->cq_used + n <= d->cqe;
}

void ib_cq_posted(ib_qp_t *q, int n)
{
    q->cq_out += n;
    q->dev->cq_used += n;
}

/* q's queue pair goes: what it had posted never completes here */
void ib_cq_forget(ib_qp_t *q)
{
    q->dev->cq_used -= q->cq_out;
    q->cq_out = 0;
}

int ib_post_recv(ib_qp_t *q, int i)
{
    struct ibv_sge sge = {(uintptr_t)&q->rbuf[i], sizeof(uint32_t),
                          q->rbuf_mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = WRID(q, WR_RECV, i), .sg_list = &sge,
                             .num_sge = 1}, *bad;
    int rc = ibv_post_recv(q->qp, &wr, &bad);
    if (rc == 0)
        ib_cq_posted(q, 1);
    return rc;
}

/* Posts a signal word alone (credits, goodbye, abort): a zero-byte
 * WRITE_WITH_IMM or a 4-byte inline SEND. */
int ib_post_note(ib_qp_t *q, uint32_t word)
{
    struct ibv_send_wr wr, *bad;
    struct ibv_sge sge = {(uintptr_t)&word, sizeof(word), 0};
    if (q->sq_free < 1 || !ib_cq_room(q->dev, 1))
        return -1;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = WRID(q, WR_NOTE, 0);
    wr.send_flags = IBV_SEND_SIGNALED;
    if (q->imm) {
        wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        wr.imm_data = htonl(word);
        wr.wr.rdma.remote_addr = q->raddr;
        wr.wr.rdma.rkey = q->rkey;
    } else {
        wr.opcode = IBV_WR_SEND;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.send_flags |= IBV_SEND_INLINE;
    }
    int rc = ibv_post_send(q->qp, &wr, &bad);
    if (rc == 0) {
        q->sq_free--;
        ib_cq_posted(q, 1);
    }
    return rc;
}

static void ib_send_credits(ib_qp_t *q)
{
    if (q->sl.owed == 0 || !q->up || q->ended || q->bye || q->sq_free < 1)
        return;
    int c = RCOLL_MIN(q->sl.owed, IB_MAX_CREDITS);
    if (ib_post_note(q, IMM(IMM_CREDIT, c, 0)) == 0)
        rcoll_slots_take_owed(&q->sl, c);
}

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
            if (ep->nrplace == IB_NRPLACE) /* stale ones: the oldest goes */
                memmove(&ep->rplace[0], &ep->rplace[1],
                        (IB_NRPLACE - 1) * sizeof(ep->rplace[0]));
            else
                ep->nrplace++;
            memcpy(&ep->rplace[ep->nrplace - 1], (const char *)h + sizeof(*h),
                   sizeof(ib_place_msg_t));
            q->rx_flag[slot] = SLOT_TL;
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
        } else {
            char *r = q->rx + (size_t)ctx->p.nslots * ctx->stride;
            r[IB_CTRL - 1] = '\0';
            snprintf(ep->abort_reason, sizeof(ep->abort_reason), "%s", r);
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
        ib_qp_ended(q, why);
        return;
    }
    if (kind == WR_RECV) {
        q->heard = 1;
        uint32_t w = wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM
                         ? ntohl(wc->imm_data)
                         : q->rbuf[idx];
        if (!q->ended && ib_post_recv(q, idx) != 0)
            ib_qp_ended(q, "cannot repost a receive");
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
    return total;
}

int ib_progress(rcoll_tl_ctx_t *ctx)
{
    int n = ib_poll(ctx);
    ib_async_take(ctx);
    if (ctx->nfatal)
        n += ib_poll(ctx); /* which ends the QPs the events failed */
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
    return ib_poll(ctx);
}


/* The work requests of one message, built in place (they point into it). */
typedef struct {
    struct ibv_sge sge[3];
    struct ibv_send_wr wr[3];   /* [2]: payload in place, [0]: slot, [1]:
                                   the SEND signal without immediates */
    struct ibv_sge wsge;
    uint32_t word;              /* the signal: kind, credits, slot */
} ib_msg_wrs_t;

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
        *need = (q->imm ? 1 : 2) + (*rp >= 0);
        if (rcoll_slots_can_send(&q->sl) && q->tx_seq - q->tx_done < ns &&
            q->sq_free >= *need && ib_cq_room(q->dev, *need))
            return 1;
    }
    return 0;
}

/* The local key the NIC reads the payload through in place: the user's
 * registration (rcoll_comm_register), else, for a large one, the cache's
 * (*rent; a failure leaves it to the staging copy); 0: copy it. With
 * several devices a message copies (its queue pair's device has no
 * registration of it: not built yet). */
static uint32_t ib_send_key(struct rcoll_tl_ctx *ctx, const void *payload,
                            uint32_t len, rcoll_rcache_entry_t **rent)
{
    uint32_t ukey = 0;
    *rent = NULL;
    if (ctx->ndev > 1)
        return 0;
    if (len && __atomic_load_n(&ctx->nregs, __ATOMIC_RELAXED))
        ukey = ib_reg_lookup(ctx, payload, len);
    if (!ukey && ctx->dev->rcache && rcoll_config.ib_zcopy_min &&
        len >= rcoll_config.ib_zcopy_min) {
        void *h;
        if ((*rent =
                 rcoll_rcache_get(ctx->dev->rcache, (void *)payload, len, &h)))
            ukey = ((struct ibv_mr *)h)->lkey;
    }
    return ukey;
}

/* The payload straight into the peer's destination rp (from the user's
 * registered memory, else from staging s), then the header alone into
 * the slot (wr[0]). */
static void ib_wrs_place(ib_ep_t *ep, ib_qp_t *q, int rp, char *s,
                         const rcoll_msg_hdr_t *hdr, const void *payload,
                         uint32_t ukey, ib_msg_wrs_t *w)
{
    const ib_place_msg_t *p = &ep->rplace[rp];
    uint64_t off = (uint64_t)hdr->chunk * p->chunk;
    memcpy(s + IB_HDR_OFF, hdr, sizeof(*hdr));
    if (!ukey)
        memcpy(s + IB_HDR, payload, hdr->len);
    w->sge[2] = ukey ? (struct ibv_sge){(uintptr_t)payload, hdr->len, ukey}
                     : (struct ibv_sge){(uintptr_t)(s + IB_HDR), hdr->len,
                                        q->tx_mr->lkey};
    w->wr[2].wr_id = WRID(q, WR_NOTE, 0);
    w->wr[2].opcode = IBV_WR_RDMA_WRITE;
    w->wr[2].sg_list = &w->sge[2];
    w->wr[2].num_sge = 1;
    w->wr[2].send_flags = IBV_SEND_SIGNALED;
    w->wr[2].wr.rdma.remote_addr = p->addr + off;
    w->wr[2].wr.rdma.rkey = p->rkey;
    w->wr[2].next = &w->wr[0];
    w->sge[0] = (struct ibv_sge){(uintptr_t)(s + IB_HDR_OFF), sizeof(*hdr),
                                 q->tx_mr->lkey};
    w->wr[0].num_sge = 1;
    if (off + hdr->len >= p->bytes) /* its last: forget it */
        ep->rplace[rp] = ep->rplace[--ep->nrplace];
    rcoll_lane_add(&ep->ctx->n_placed, 1);
}

/* Header and payload into the slot (wr[0]): gathered from registered
 * user memory, inline in the work request, or copied into staging s. */
static void ib_wrs_slot(ib_qp_t *q, char *s, const rcoll_msg_hdr_t *hdr,
                        const void *payload, uint32_t ukey, int inl,
                        ib_msg_wrs_t *w)
{
    if (ukey) {
        memcpy(s + IB_HDR_OFF, hdr, sizeof(*hdr));
        w->sge[0] = (struct ibv_sge){(uintptr_t)(s + IB_HDR_OFF),
                                     sizeof(*hdr), q->tx_mr->lkey};
        w->sge[1] = (struct ibv_sge){(uintptr_t)payload, hdr->len, ukey};
        w->wr[0].num_sge = 2;
    } else if (inl) {
        /* the data is copied into the work request when it is posted */
        w->sge[0] = (struct ibv_sge){(uintptr_t)hdr, sizeof(*hdr), 0};
        w->sge[1] = (struct ibv_sge){(uintptr_t)payload, hdr->len, 0};
        w->wr[0].num_sge = hdr->len ? 2 : 1;
        w->wr[0].send_flags = IBV_SEND_INLINE;
    } else {
        memcpy(s + IB_HDR_OFF, hdr, sizeof(*hdr));
        if (hdr->len)
            memcpy(s + IB_HDR, payload, hdr->len);
        w->sge[0] = (struct ibv_sge){(uintptr_t)(s + IB_HDR_OFF),
                                     (uint32_t)(sizeof(*hdr) + hdr->len),
                                     q->tx_mr->lkey};
        w->wr[0].num_sge = 1;
    }
}

/* wr[0] targets the peer's slot and carries the signal: its immediate, or
 * (without immediates) the SEND of the signal word after it. */
static void ib_wrs_signal(struct rcoll_tl_ctx *ctx, ib_qp_t *q, uint32_t slot,
                          ib_msg_wrs_t *w)
{
    w->wr[0].sg_list = w->sge;
    w->wr[0].wr.rdma.remote_addr = q->raddr + (uint64_t)slot * ctx->stride +
                                   IB_HDR_OFF;
    w->wr[0].wr.rdma.rkey = q->rkey;
    w->wr[0].send_flags |= IBV_SEND_SIGNALED;
    w->wsge = (struct ibv_sge){(uintptr_t)&w->word, sizeof(w->word), 0};
    if (q->imm) {
        w->wr[0].wr_id = WRID(q, WR_DATA, 0);
        w->wr[0].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        w->wr[0].imm_data = htonl(w->word);
    } else {
        w->wr[0].wr_id = WRID(q, WR_NOTE, 0);
        w->wr[0].opcode = IBV_WR_RDMA_WRITE;
        w->wr[0].next = &w->wr[1];
        w->wr[1].wr_id = WRID(q, WR_DATA, 0);
        w->wr[1].opcode = IBV_WR_SEND;
        w->wr[1].sg_list = &w->wsge;
        w->wr[1].num_sge = 1;
        w->wr[1].send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
    }
}

/* A refused post: a queue pair in error refuses posts before its error
 * completions or the device's event arrive, so the cause is named as
 * they would (a port down), else the refusal (siw returns -1 and sets
 * errno; others return an errno, some negated). */
static rcoll_status_t ib_send_refused(ib_ep_t *ep, ib_qp_t *q, int rc,
                                      rcoll_rcache_entry_t *rent)
{
    char why[128];
    snprintf(why, sizeof(why), "ibv_post_send on queue pair %d: %s", q->idx,
             strerror(rc > 0 ? rc : rc < -1 ? -rc : errno));
    rcoll_rcache_put(q->dev->rcache, rent);
    ib_qp_ended(q, why);
    if (!ep->failed)
        ib_ep_fail(ep, "%s", why);
    return rcoll__set_error(RCOLL_ERR_REMOTE, "%s", ep->fail_msg);
}

rcoll_status_t ib_send(rcoll_tl_ep_t *tep, const rcoll_msg_hdr_t *hdr,
                       const void *payload, void *cookie, int flags,
                       size_t xfer)
{
    (void)xfer;
    (void)flags;
    ib_ep_t *ep = (ib_ep_t *)tep;
    struct rcoll_tl_ctx *ctx = ep->ctx;
    ib_qp_t *q = &ep->qps[ep->tx_seq % (uint64_t)ctx->nqps];
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
    int rp, need;
    if (!ib_send_room(ctx, ep, q, hdr, &rp, &need)) {
        rcoll_lane_add(&q->st.tx_waits, 1);
        return RCOLL_INPROGRESS;
    }
    uint32_t slot = (uint32_t)(q->tx_seq % (uint64_t)ctx->p.nslots);
    char *s = q->tx + (size_t)slot * ctx->stride;
    int c = RCOLL_MIN(q->sl.owed, IB_MAX_CREDITS);
    int inl = rp < 0 && sizeof(*hdr) + hdr->len <= q->dev->max_inline &&
              hdr->len <= rcoll_config.ib_inline;
    rcoll_rcache_entry_t *rent = NULL;
    uint32_t ukey = inl ? 0 : ib_send_key(ctx, payload, hdr->len, &rent);
    ib_msg_wrs_t w;
    memset(&w, 0, sizeof(w));
    w.word = IMM(rp >= 0 ? IMM_PLACED : IMM_DATA, c, slot);
    if (rp >= 0)
        ib_wrs_place(ep, q, rp, s, hdr, payload, ukey, &w);
    else
        ib_wrs_slot(q, s, hdr, payload, ukey, inl, &w);
    ib_wrs_signal(ctx, q, slot, &w);
    struct ibv_send_wr *bad;
    int rc = ibv_post_send(q->qp, rp >= 0 ? &w.wr[2] : &w.wr[0], &bad);
    if (rc != 0)
        return ib_send_refused(ep, q, rc, rent);
    q->sq_free -= need;
    ib_cq_posted(q, need);
    rcoll_slots_take_owed(&q->sl, c);
    rcoll_slots_sent(&q->sl);
    q->tx_seq++;
    ep->tx_seq++;
    rcoll_lane_sent(&q->st, hdr->len);
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

/* ---- receives in place ---- */

int ib_recv_place(rcoll_tl_ep_t *tep, const rcoll_tl_place_t *pl)
{
    ib_ep_t *ep = (ib_ep_t *)tep;
    struct rcoll_tl_ctx *ctx = ep->ctx;
    /* (several devices: a notice would need a key per device; not yet) */
    if (!rcoll_config.ib_place_min || pl->bytes < rcoll_config.ib_place_min ||
        ep->nplace == IB_NPLACE || ep->failed || !pl->chunk || ctx->ndev > 1)
        return 0;
    if (!ib_qp_ready(ctx, &ep->qps[ep->tx_seq % (uint64_t)ctx->nqps])) {
        ib_lazy_want(ep); /* the notice needs the connection */
        return 0;
    }
    void *mrh;
    rcoll_rcache_entry_t *rent =
        rcoll_rcache_get(ctx->dev->rcache, pl->dst, pl->bytes, &mrh);
    if (!rent) {
        rcoll_debug(RCOLL_SUBSYS_NET, "ib: cannot register %zu bytes for a "
                    "receive in place from rank %d (%s): through the slots",
                    pl->bytes, ep->peer, rcoll_last_error());
        return 0;
    }
    struct ibv_mr *mr = mrh;
    ib_place_msg_t m = {.seq = pl->seq, .total = pl->total,
                        .chunk = pl->chunk, .addr = (uintptr_t)pl->dst,
                        .bytes = pl->bytes, .kind = pl->kind,
                        .step = pl->step, .tag = pl->tag, .rkey = mr->rkey};
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


rcoll_status_t ib_recv_peek(rcoll_tl_ep_t *tep,
                            const rcoll_msg_hdr_t **hdr,
                            const void **payload)
{
    ib_ep_t *ep = (ib_ep_t *)tep;
    struct rcoll_tl_ctx *ctx = ep->ctx;
    ib_qp_t *q;
    for (;;) {
        q = &ep->qps[ep->rx_seq % (uint64_t)ctx->nqps];
        if (q->sl.count == 0) {
            if (ep->failed || q->ended)
                return ib_ep_error(ep);
            if (q->bye)
                return rcoll__set_error(RCOLL_ERR_REMOTE,
                                        "rank %d already destroyed the "
                                        "communicator", ep->peer);
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
                pl->kind != (h->kind & ~RCOLL_HDR_CSUM) ||
                pl->tag != h->tag || pl->total != h->total ||
                h->chunk >= (pl->bytes + pl->chunk - 1) / pl->chunk ||
                h->len > pl->bytes - off)
                continue;
            *payload = pl->dst + off;
            ep->place[i].landed += h->len;
            return RCOLL_OK;
        }
        ib_ep_fail(ep, "protocol error: data written in place for a "
                   "receive not posted (transfer %u chunk %u of message "
                   "%llu)", h->step, h->chunk, (unsigned long long)h->seq);
        return ib_ep_error(ep);
    }
    return RCOLL_OK;
}

void ib_recv_release(rcoll_tl_ep_t *tep)
{
    ib_ep_t *ep = (ib_ep_t *)tep;
    struct rcoll_tl_ctx *ctx = ep->ctx;
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
        if (rcoll_slots_held(&ep->qps[k].sl))
            return 1;
    return 0;
}
