/* The verbs transport's posting (ib.h): the completion queue's room,
 * receives, signal words alone (credits, goodbye, abort), and a message's
 * work requests, built from staging, inline, registered user memory or
 * into a receiver's destination, then posted and counted. */
#include "transport/ib/ib.h"

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
    struct ibv_recv_wr wr = {.wr_id = WRID(q, WR_RECV, i),
                             .sg_list = &sge,
                             .num_sge = 1},
                       *bad;
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

void ib_send_credits(ib_qp_t *q)
{
    if (q->sl.owed == 0 || !q->up || q->ended || q->bye || q->sq_free < 1)
        return;
    int c = RCOLL_MIN(q->sl.owed, IB_MAX_CREDITS);
    if (ib_post_note(q, IMM(IMM_CREDIT, c, 0)) == 0)
        rcoll_slots_take_owed(&q->sl, c);
}

/* The local key q's NIC reads the payload through in place: the user's
 * registration (rcoll_comm_register, on the first device only), else,
 * for a large one, the cache's on q's device (*rent; a failure leaves it
 * to the staging copy); 0: copy it. */
uint32_t ib_send_key(ib_qp_t *q, const void *payload, uint32_t len,
                     rcoll_rcache_entry_t **rent)
{
    struct rcoll_tl_ctx *ctx = q->ep->ctx;
    uint32_t ukey = 0;
    *rent = NULL;
    if (len && q->dev == ctx->dev &&
        __atomic_load_n(&ctx->nregs, __ATOMIC_RELAXED))
        ukey = ib_reg_lookup(ctx, payload, len);
    if (!ukey && q->dev->rcache && rcoll_config.ib_zcopy_min &&
        len >= rcoll_config.ib_zcopy_min) {
        void *h;
        if ((*rent =
                 rcoll_rcache_get(q->dev->rcache, (void *)payload, len, &h)))
            ukey = ((struct ibv_mr *)h)->lkey;
    }
    return ukey;
}

/* The payload straight into the peer's destination rp (from the user's
 * registered memory, else from staging s, through the key the
 * destination has on the peer's end of q), then the header alone into
 * the slot (wr[0]; where ep can fail over, after the message's number,
 * and the payload stays in staging: a resend goes through a slot). */
void ib_wrs_place(ib_ep_t *ep, ib_qp_t *q, int rp, char *s,
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
    w->wr[2].wr.rdma.rkey = p->rkey[q->rdev];
    w->wr[2].next = &w->wr[0];
    size_t at = ep->fo ? IB_SEQ_OFF : IB_HDR_OFF;
    w->sge[0] = (struct ibv_sge){(uintptr_t)(s + at), (uint32_t)(IB_HDR - at),
                                 q->tx_mr->lkey};
    w->wr[0].num_sge = 1;
    if (off + hdr->len >= p->bytes) { /* its last: forget it */
        ep->nrplace--;
        ep->rplace[rp] = ep->rplace[ep->nrplace];
        ep->rplace_num[rp] = ep->rplace_num[ep->nrplace];
    }
    rcoll_lane_add(&ep->ctx->n_placed, 1);
}

/* Header and payload into the slot (wr[0]): gathered from registered
 * user memory, inline in the work request, or copied into staging s. */
void ib_wrs_slot(ib_qp_t *q, char *s, const rcoll_msg_hdr_t *hdr,
                 const void *payload, uint32_t ukey, int inl, ib_msg_wrs_t *w)
{
    if (ukey) {
        memcpy(s + IB_HDR_OFF, hdr, sizeof(*hdr));
        w->sge[0] = (struct ibv_sge){(uintptr_t)(s + IB_HDR_OFF), sizeof(*hdr),
                                     q->tx_mr->lkey};
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

/* Failover: the message as staging slot s holds it (number, header,
 * payload: so it can go again), sent from there, inline when small. */
void ib_wrs_kept(ib_qp_t *q, const char *s, ib_msg_wrs_t *w)
{
    rcoll_msg_hdr_t h;
    memcpy(&h, s + IB_HDR_OFF, sizeof(h));
    uint32_t bytes = (uint32_t)(IB_HDR - IB_SEQ_OFF) + h.len;
    w->sge[0] =
        (struct ibv_sge){(uintptr_t)(s + IB_SEQ_OFF), bytes, q->tx_mr->lkey};
    w->wr[0].num_sge = 1;
    if (bytes <= q->dev->max_inline && h.len <= rcoll_config.ib_inline)
        w->wr[0].send_flags = IBV_SEND_INLINE;
}

/* wr[0] targets the peer's slot and carries the signal: its immediate, or
 * (without immediates) the SEND of the signal word after it. */
void ib_wrs_signal(struct rcoll_tl_ctx *ctx, ib_qp_t *q, uint32_t slot,
                   ib_msg_wrs_t *w)
{
    w->wr[0].sg_list = w->sge;
    w->wr[0].wr.rdma.remote_addr = q->raddr + (uint64_t)slot * ctx->stride +
                                   (q->ep->fo ? IB_SEQ_OFF : IB_HDR_OFF);
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
rcoll_status_t ib_send_refused(ib_ep_t *ep, ib_qp_t *q, int rc,
                               rcoll_rcache_entry_t *rent)
{
    char why[128];
    snprintf(why, sizeof(why), "ibv_post_send on queue pair %d: %s", q->idx,
             strerror(rc > 0    ? rc
                      : rc < -1 ? -rc
                                : errno));
    rcoll_rcache_put(q->dev->rcache, rent);
    ib_qp_ended(q, why);
    if (!ep->failed && q->down)
        return RCOLL_INPROGRESS; /* failed over: it goes on another */
    if (!ep->failed)
        ib_ep_fail(ep, "%s", why);
    return rcoll__set_error(RCOLL_ERR_REMOTE, "%s", ep->fail_msg);
}

/* Posts q's next message (its work requests w, `need` of them; c owed
 * credits ride on it) and counts it: 0, or the post's error. */
int ib_post_msg(ib_qp_t *q, ib_msg_wrs_t *w, int rp, int need, int c,
                uint32_t len)
{
    struct ibv_send_wr *bad;
    int idle = q->sl.credits == q->sl.n && q->tx_seq == q->tx_done;
    int rc = ibv_post_send(q->qp, rp >= 0 ? &w->wr[2] : &w->wr[0], &bad);
    if (rc != 0)
        return rc;
    if (q->ep->fo && idle) /* the stall clock starts (ib_fo_stalls) */
        q->t_prog = rcoll_time_sec();
    q->sq_free -= need;
    ib_cq_posted(q, need);
    rcoll_slots_take_owed(&q->sl, c);
    rcoll_slots_sent(&q->sl);
    q->tx_seq++;
    rcoll_lane_sent(&q->st, len);
    return 0;
}
