/* The verbs transport's connections (ib.h): each QP created, its ring
 * exchanged and connected, through rdma_cm (listen, resolve, connect and
 * accept, all at once on the event channel) or out of band (QP numbers,
 * PSNs and GIDs through the bootstrap); the cm events after set-up. */
#include "transport/ib/ib.h"

/* The verbs transport's set-up and teardown (ib.h): which devices and
 * addresses, queue pairs connected through rdma_cm or out of band,
 * creating and destroying a context, rcoll-info's description, and the
 * ops table. */
#include "transport/ib/ib.h"

static void conn_data_seal(struct rcoll_tl_ctx *ctx, ib_conn_data_t *d)
{
    d->mac = rcoll_siphash(ctx->p.secret, d, offsetof(ib_conn_data_t, mac));
}

static int conn_data_check(struct rcoll_tl_ctx *ctx, const void *pd,
                           size_t len, ib_conn_data_t *out)
{
    if (!pd || len < sizeof(*out))
        return -1;
    memcpy(out, pd, sizeof(*out));
    return out->magic == IB_MAGIC &&
                   out->mac == rcoll_siphash(ctx->p.secret, out,
                                             offsetof(ib_conn_data_t, mac))
               ? 0
               : -1;
}


void ib_cm_event(rcoll_ev_handler_t *h, uint32_t events)
{
    struct rcoll_tl_ctx *ctx =
        (struct rcoll_tl_ctx *)((char *)h - offsetof(struct rcoll_tl_ctx, ech_h));
    struct rdma_cm_event *ev;
    (void)events;
    while (rdma_get_cm_event(ctx->ech, &ev) == 0) {
        struct rdma_cm_id *id = ev->id;
        ib_qp_t *q = id ? id->context : NULL;
        enum rdma_cm_event_type t = ev->event;
        if (t == RDMA_CM_EVENT_CONNECT_REQUEST) {
            /* every peer connected at setup: this is not one of ours */
            rcoll_warn("ib: rank %d rejected a connection request after "
                       "setup (not from this job)", ctx->p.rank);
            rdma_reject(id, NULL, 0);
            rdma_ack_cm_event(ev);
            rdma_destroy_id(id);
            continue;
        }
        rdma_ack_cm_event(ev);
        if (!q || ib_is_listener(ctx, id))
            continue;
        if (t == RDMA_CM_EVENT_DISCONNECTED ||
            t == RDMA_CM_EVENT_DEVICE_REMOVAL) {
            ib_poll(ctx); /* what arrived before it counts */
            ib_qp_ended(q, t == RDMA_CM_EVENT_DISCONNECTED
                               ? "disconnected without goodbye (process died "
                                 "or was killed?)"
                               : "the RDMA device was removed");
        }
    }
}



/* Creates the QP (on the cm id: then it is in INIT; or plain for oob). */
static rcoll_status_t ib_qp_create(struct rcoll_tl_ctx *ctx, ib_qp_t *q,
                                   struct rdma_cm_id *id)
{
    struct ibv_qp_init_attr a;
    /* the most inline data the device takes (siw: less than 256) */
    static const uint32_t inl[] = {256, 128, 64, 32, 16, 0};
    for (int attempt = 0; attempt < 6; attempt++) {
        memset(&a, 0, sizeof(a));
        a.send_cq = a.recv_cq = q->dev->cq;
        a.qp_type = IBV_QPT_RC;
        a.cap.max_send_wr = (uint32_t)ctx->sq_depth;
        a.cap.max_recv_wr = (uint32_t)q->nrecv;
        a.cap.max_send_sge = 2;
        a.cap.max_recv_sge = 1;
        a.cap.max_inline_data = inl[attempt];
        int rc;
        if (id) {
            rc = rdma_create_qp(id, q->dev->pd, &a);
            if (rc == 0)
                q->qp = id->qp;
        } else {
            q->qp = ibv_create_qp(q->dev->pd, &a);
            rc = q->qp ? 0 : -1;
        }
        if (rc == 0)
            break;
        if (attempt == 5)
            return rcoll__set_error(RCOLL_ERR_SYSTEM,
                                    "ib: creating a queue "
                                    "pair to rank %d on %s: %s",
                                    q->ep->peer, q->dev->devname,
                                    strerror(errno));
    }
    if (q->dev->max_inline == 0 || a.cap.max_inline_data < q->dev->max_inline)
        q->dev->max_inline = a.cap.max_inline_data;
    if (!q->dev->imm_ok && a.cap.max_inline_data < sizeof(uint32_t))
        return rcoll__set_error(RCOLL_ERR_NO_DEVICE,
                                "ib: %s has neither "
                                "immediate data nor inline sends: not "
                                "supported",
                                q->dev->devname);
    q->sq_free = ctx->sq_depth;
    return RCOLL_OK;
}

/* Posts every receive (the QP must be in INIT or later). */
static rcoll_status_t ib_qp_post_recvs(ib_qp_t *q)
{
    for (int i = 0; i < q->nrecv; i++)
        if (ib_post_recv(q, i) != 0)
            return rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: posting receives "
                                    "for rank %d: %s", q->ep->peer,
                                    strerror(errno));
    return RCOLL_OK;
}

static void ib_conn_data_fill(struct rcoll_tl_ctx *ctx, ib_qp_t *q,
                              ib_conn_data_t *d)
{
    memset(d, 0, sizeof(*d));
    d->magic = IB_MAGIC;
    d->from = ctx->p.rank;
    d->to = q->ep->peer;
    d->idx = (uint16_t)q->idx;
    d->nqps = (uint16_t)ctx->nqps;
    d->nslots = (uint32_t)ctx->p.nslots;
    d->chunk = (uint32_t)ctx->p.chunk_size;
    d->rkey = q->rx_mr->rkey;
    d->imm = (uint32_t)q->dev->imm_ok;
    d->addr = (uint64_t)(uintptr_t)q->rx;
    d->nlost = q->nlost;
    conn_data_seal(ctx, d);
}

static rcoll_status_t ib_conn_data_apply(struct rcoll_tl_ctx *ctx, ib_qp_t *q,
                                         const ib_conn_data_t *d)
{
    if (d->nqps != ctx->nqps || d->nslots != (uint32_t)ctx->p.nslots ||
        d->chunk != (uint32_t)ctx->p.chunk_size)
        return rcoll__set_error(
            RCOLL_ERR_INVALID_ARGUMENT,
            "ib: rank %d and rank %d disagree on RCOLL_IB_QPS_PER_PEER (%d vs "
            "%u), RCOLL_CHUNK_SIZE (%zu vs %u) or RCOLL_NSLOTS (%d vs %u): "
            "set them the same on every rank", ctx->p.rank, q->ep->peer,
            ctx->nqps, d->nqps, ctx->p.chunk_size, d->chunk, ctx->p.nslots,
            d->nslots);
    q->raddr = d->addr;
    q->rkey = d->rkey;
    /* both sides count the same losses from here (a loss one side saw
     * alone, such as an attempt that died after the other's ESTABLISHED,
     * would make every later notice of the other's look old) */
    if (d->nlost > q->nlost)
        q->nlost = d->nlost;
    q->imm = q->dev->imm_ok && d->imm;
    return RCOLL_OK;
}

const char *ib_peer_str(struct rcoll_tl_ctx *ctx, int peer, char *b,
                        size_t l)
{
    const rcoll_boot_peer_t *pi = &ctx->p.bs->peers[peer];
    snprintf(b, l, "rank %d (%s pid %d)", peer, pi->hostname, pi->pid);
    return b;
}

/* An active QP's connection attempt: a new cm_id, then address and route
 * resolution (the events continue it in ib_connect_cm). */
rcoll_status_t ib_cm_start(struct rcoll_tl_ctx *ctx, ib_qp_t *q)
{
    char ps[128];
    const ib_raddr_t *ra = &ctx->raddrs[q->ep->peer];
    if (rdma_create_id(ctx->ech, &q->id, q, RDMA_PS_TCP) != 0 ||
        rdma_resolve_addr(q->id, (struct sockaddr *)&q->dev->addr,
                          (struct sockaddr *)&ra->a[q->rdev], 5000) != 0)
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: resolving the "
                                "address of %s: %s",
                                ib_peer_str(ctx, q->ep->peer, ps, sizeof(ps)),
                                strerror(errno));
    return RCOLL_OK;
}

/* ib_connect_cm's steps: what its events do. */

/* ROUTE_RESOLVED (active side): the QP, its receives, and the connection
 * request with our ring. *redo: a port collision (below); try again. */
rcoll_status_t ib_cm_route_resolved(struct rcoll_tl_ctx *ctx, ib_qp_t *q,
                                    struct rdma_cm_id *id, ib_qp_t **redo)
{
    char ps[128];
    ib_conn_data_t d;
    rcoll_status_t st = ib_qp_create(ctx, q, id);
    if (st == RCOLL_OK)
        st = ib_qp_post_recvs(q);
    if (st != RCOLL_OK)
        return st;
    ib_conn_data_fill(ctx, q, &d);
    struct rdma_conn_param cp = {
        .private_data = &d, .private_data_len = sizeof(d),
        .responder_resources = 1, .initiator_depth = 1,
        .retry_count = 7, .rnr_retry_count = 7};
    if (rdma_connect(id, &cp) == 0)
        return RCOLL_OK;
    /* iWARP devices without a port mapper (siw) bind a kernel TCP socket
     * to the port rdma_cm chose in its own port space, which a TCP socket
     * of this host may hold: nothing reached the peer, so a new cm_id (a
     * new port) may try */
    if ((errno == EADDRINUSE || errno == EADDRNOTAVAIL) &&
        q->cm_tries < IB_CM_TRIES) {
        rcoll_info(RCOLL_SUBSYS_NET, "ib: rank %d: rdma_connect to %s: %s; "
                   "again with another port", ctx->p.rank,
                   ib_peer_str(ctx, q->ep->peer, ps, sizeof(ps)),
                   strerror(errno));
        *redo = q;
        return RCOLL_OK;
    }
    return rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: rdma_connect to %s: %s",
                            ib_peer_str(ctx, q->ep->peer, ps, sizeof(ps)),
                            strerror(errno));
}

/* An attempt of ours dropped: its QP (with the completions it may still
 * raise) and id destroyed, the ring kept for the next. Its events must
 * have been acked. */
void ib_cm_drop(struct rcoll_tl_ctx *ctx, ib_qp_t *q)
{
    (void)ctx;
    if (q->qp) {
        ib_cq_forget(q);
        rdma_destroy_qp(q->id);
    }
    if (q->id)
        rdma_destroy_id(q->id);
    q->id = NULL;
    q->qp = NULL;
    q->active = 0;
    q->gen++;
    q->early_err = 0;
    q->fatal[0] = '\0'; /* an asynchronous event of the QP gone */
}

/* The reason travels as 8 bytes of private data: a magic word and the
 * code. rdma_cm delivers a reject's private data on IB (REJ) and on
 * iWARP (the MPA reply's reject flag). */
#define IB_REJ_MAGIC 0x524a4352u /* "RCJR" */

void ib_cm_reject(struct rdma_cm_id *id, int reason)
{
    uint32_t pd[2] = {IB_REJ_MAGIC, (uint32_t)reason};
    rdma_reject(id, reason ? pd : NULL, reason ? sizeof(pd) : 0);
}

int ib_cm_reject_reason(const struct rdma_cm_event *ev)
{
    uint32_t pd[2];
    if (!ev->param.conn.private_data ||
        ev->param.conn.private_data_len < sizeof(pd))
        return IB_REJ_NONE;
    memcpy(pd, ev->param.conn.private_data, sizeof(pd));
    return pd[0] == IB_REJ_MAGIC && pd[1] <= IB_REJ_NOQP ? (int)pd[1]
                                                          : IB_REJ_NONE;
}

const char *ib_rej_str(int reason)
{
    switch (reason) {
    case IB_REJ_LOCAL:    return "this rank's attempt failed";
    case IB_REJ_CUT:      return "it disconnected before the connection "
                                 "was up";
    case IB_REJ_TIE:      return "its own attempt is under way";
    case IB_REJ_CLOSING:  return "it is destroying the communicator";
    case IB_REJ_FAILED:   return "it failed this rank already";
    case IB_REJ_DUP:      return "duplicate";
    case IB_REJ_SETUP:    return "setting up its side failed";
    case IB_REJ_STRANGER: return "not from this job";
    case IB_REJ_NOQP:     return "no such rank or queue pair at the "
                                 "acceptor (do the ranks' settings differ?)";
    }
    return "no reason given (nobody listening, or its backlog full)";
}

/* A failback attempt we accepted (ib_fo.c) that failed fails nothing: its
 * id stays with q until ib_lazy.c drops it (IB_REJOIN_WAIT) */
static rcoll_status_t ib_cm_failback_err(struct rcoll_tl_ctx *ctx, ib_qp_t *q,
                                         rcoll_status_t st)
{
    if (!q->down)
        return st;
    rcoll_debug(RCOLL_SUBSYS_NET,
                "ib: rank %d: accepting lost queue pair %d "
                "of rank %d again: %s",
                ctx->p.rank, q->idx, q->ep->peer, rcoll_last_error());
    return RCOLL_OK;
}

/* CONNECT_REQUEST (passive side): a lower rank's QP (lazy: any rank's),
 * accepted with our ring. One not from this job, or a duplicate, is
 * rejected and its id destroyed: then *gone is set (the event is acked
 * here). *from: the peer it came from, -1 if none of this job's. Lazy,
 * when both ranks started an attempt on the same QP, the
 * lower rank's wins: the lower rejects the higher's, and the higher drops
 * its own and accepts (its refused attempt then never reports). */
rcoll_status_t ib_cm_connect_request(struct rcoll_tl_ctx *ctx,
                                     struct rdma_cm_event *ev, int *gone,
                                     int *from)
{
    char ps[128];
    struct rdma_cm_id *id = ev->id;
    int r = ctx->p.rank;
    ib_conn_data_t d;
    ib_qp_t *nq = NULL;
    char why[160] = "private data not sealed with this job's secret";
    int sealed = conn_data_check(ctx, ev->param.conn.private_data,
                                 ev->param.conn.private_data_len, &d) == 0;
    if (sealed) {
        snprintf(why, sizeof(why), "from rank %d to rank %d, queue pair %u",
                 d.from, d.to, d.idx);
        if (d.to == r && d.from >= 0 && d.from < ctx->p.nranks &&
            d.from != r && (d.from < r || ctx->lazy) && ctx->eps[d.from] &&
            d.idx < ctx->nqps)
            nq = &ctx->eps[d.from]->qps[d.idx];
    }
    if (nq && id->verbs != nq->dev->verbs) {
        /* the ranks paired their devices differently (ib_lane_devs) */
        snprintf(why + strlen(why), sizeof(why) - strlen(why),
                 ", arrived on %s, expected on %s",
                 ibv_get_device_name(id->verbs->device), nq->dev->devname);
        nq = NULL;
    }
    *from = nq ? d.from : -1;
    if (nq && nq->id && ctx->lazy && nq->active && !nq->up && d.from < r) {
        rcoll_debug(RCOLL_SUBSYS_NET, "ib: rank %d: %s connects queue pair "
                    "%d as we do: its attempt is kept", r,
                    ib_peer_str(ctx, d.from, ps, sizeof(ps)), d.idx);
        ib_cm_drop(ctx, nq);
    }
    int rej = !nq ? (sealed ? IB_REJ_NOQP : IB_REJ_STRANGER)
              : ctx->closing ? IB_REJ_CLOSING
              : nq->ep->failed ? IB_REJ_FAILED
              : nq->down && !nq->fresh ? IB_REJ_DUP /* (lost, not over) */
              : !nq->id ? IB_REJ_NONE
              : ctx->lazy && nq->active && !nq->up ? IB_REJ_TIE
                                                   : IB_REJ_DUP;
    if (rej) {
        if (!nq || (rej == IB_REJ_DUP && !ctx->lazy && !nq->down))
            rcoll_warn("ib: rank %d rejected a connection request: %s (%s)",
                       r, ib_rej_str(rej), why);
        ib_cm_reject(id, rej);
        rdma_ack_cm_event(ev);
        rdma_destroy_id(id);
        *gone = 1;
        return RCOLL_OK;
    }
    if (!nq->rx) { /* lazy: the ring on first use */
        rcoll_status_t st = ib_qp_alloc(ctx, nq);
        if (st != RCOLL_OK) {
            ib_cm_reject(id, IB_REJ_SETUP);
            rdma_ack_cm_event(ev);
            rdma_destroy_id(id);
            *gone = 1;
            return ib_cm_failback_err(ctx, nq, st);
        }
    }
    ib_probe_close(nq); /* (ours, on iWARP: the peer's attempt came) */
    nq->id = id;
    id->context = nq;
    nq->conn_at = rcoll_time_sec();
    rcoll_status_t st = ib_conn_data_apply(ctx, nq, &d);
    if (st == RCOLL_OK)
        st = ib_qp_create(ctx, nq, id);
    if (st == RCOLL_OK)
        st = ib_qp_post_recvs(nq);
    if (st != RCOLL_OK) {
        ib_cm_reject(id, IB_REJ_SETUP); /* heard now, not at its timeout */
        return ib_cm_failback_err(ctx, nq, st);
    }
    ib_conn_data_fill(ctx, nq, &d);
    d.imm = (uint32_t)nq->imm; /* the decision, for the other end */
    conn_data_seal(ctx, &d);
    struct rdma_conn_param cp = {
        .private_data = &d, .private_data_len = sizeof(d),
        .responder_resources = 1, .initiator_depth = 1,
        .retry_count = 7, .rnr_retry_count = 7};
    if (rdma_accept(id, &cp) != 0)
        return ib_cm_failback_err(
            ctx, nq,
            rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: rdma_accept from %s: %s",
                             ib_peer_str(ctx, d.from, ps, sizeof(ps)),
                             strerror(errno)));
    return RCOLL_OK;
}

/* ESTABLISHED on the active side: the peer's ring from its reply, and our
 * greeting, the first FPDU (see ib_connect_cm). */
rcoll_status_t ib_cm_established(struct rcoll_tl_ctx *ctx, ib_qp_t *q,
                                 struct rdma_cm_event *ev)
{
    char ps[128];
    ib_conn_data_t d;
    if (conn_data_check(ctx, ev->param.conn.private_data,
                        ev->param.conn.private_data_len, &d) != 0 ||
        d.from != q->ep->peer || d.to != ctx->p.rank)
        return rcoll__set_error(RCOLL_ERR_PROTOCOL, "ib: the reply of %s "
                                "carries no valid ring address (%u bytes of "
                                "private data)",
                                ib_peer_str(ctx, q->ep->peer, ps, sizeof(ps)),
                                ev->param.conn.private_data_len);
    rcoll_status_t st = ib_conn_data_apply(ctx, q, &d);
    if (st != RCOLL_OK)
        return st;
    if (ib_post_note(q, IMM(IMM_CREDIT, 0, 0)) != 0)
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: greeting %s on a new "
                                "connection: %s",
                                ib_peer_str(ctx, q->ep->peer, ps, sizeof(ps)),
                                strerror(errno));
    return RCOLL_OK;
}

/* The connections past RCOLL_TIMEOUT: which are missing, and who is
 * silent if every one is up. */
static rcoll_status_t ib_cm_timeout(struct rcoll_tl_ctx *ctx, int up,
                                    int expected)
{
    char ps[128];
    int silent = -1;
    for (int g = 0; g < ctx->nq && silent < 0; g++)
        if (ctx->qps[g]->up && !ctx->qps[g]->heard && !ctx->qps[g]->active)
            silent = ctx->qps[g]->ep->peer;
    if (up == expected && silent >= 0)
        return rcoll__set_error(RCOLL_ERR_TIMEOUT, "ib: rank %d: %d of %d "
                                "connections established, but nothing "
                                "arrived from %s within RCOLL_TIMEOUT",
                                ctx->p.rank, up, expected,
                                ib_peer_str(ctx, silent, ps, sizeof(ps)));
    return rcoll__set_error(RCOLL_ERR_TIMEOUT, "ib: rank %d: only %d of %d "
                            "connections came up within RCOLL_TIMEOUT",
                            ctx->p.rank, up, expected);
}

/* The QPs ready to carry data (*ready); an error if one failed. */
static rcoll_status_t ib_cm_ready(struct rcoll_tl_ctx *ctx, int *ready)
{
    char ps[128];
    *ready = 0;
    for (int g = 0; g < ctx->nq; g++) {
        ib_qp_t *q = ctx->qps[g];
        if (q->ended && q->up)
            return rcoll__set_error(RCOLL_ERR_REMOTE, "ib: connecting rank "
                                    "%d and %s: %s", ctx->p.rank,
                                    ib_peer_str(ctx, q->ep->peer, ps, sizeof(ps)),
                                    q->ep->fail_msg[0] ? q->ep->fail_msg
                                                       : "queue pair failed");
        *ready += q->up && (q->active || q->heard);
    }
    return RCOLL_OK;
}

/* One connection event. *up counts established QPs; *redo: an active QP
 * to start again (after the event is acked). */
static rcoll_status_t ib_cm_step(struct rcoll_tl_ctx *ctx,
                                 struct rdma_cm_event *ev, int *up,
                                 ib_qp_t **redo, int *gone)
{
    char ps[128];
    struct rdma_cm_id *id = ev->id;
    ib_qp_t *q = id->context;
    rcoll_status_t st = RCOLL_OK;
    switch (ev->event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
        if (rdma_resolve_route(id, 5000) != 0)
            st = rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: resolving the route "
                                  "to %s: %s",
                                  ib_peer_str(ctx, q->ep->peer, ps, sizeof(ps)),
                                  strerror(errno));
        return st;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
        return ib_cm_route_resolved(ctx, q, id, redo);
    case RDMA_CM_EVENT_CONNECT_REQUEST: {
        int from;
        return ib_cm_connect_request(ctx, ev, gone, &from);
    }
    case RDMA_CM_EVENT_ESTABLISHED:
        if (q->active && (st = ib_cm_established(ctx, q, ev)) != RCOLL_OK)
            return st;
        q->up = 1;
        (*up)++;
        return RCOLL_OK;
    default:
        return rcoll__set_error(RCOLL_ERR_REMOTE, "ib: connecting rank %d and "
                                "%s: %s (status %d)", ctx->p.rank,
                                q ? ib_peer_str(ctx, q->ep->peer, ps, sizeof(ps))
                                  : "a peer",
                                rdma_event_str(ev->event), ev->status);
    }
}

/* cm mode: connect to every higher peer, accept every lower one, all at
 * once through the event channel.
 *
 * iWARP (MPA, RFC 5044) lets the initiator send first: the responder sees
 * ESTABLISHED as soon as its MPA reply is on the wire, and an FPDU it sends
 * then can reach the initiator before the initiator's kernel has read that
 * reply; siw then fails the connection (CONNECT_ERROR, -EINVAL) and the
 * responder's write fails. So the initiator greets each accepted QP with a
 * zero-credit note right after ESTABLISHED, and a QP we accepted counts as
 * ready only once something from the peer arrived on it: nothing of ours
 * goes out on it before that. */
static rcoll_status_t ib_connect_cm(struct rcoll_tl_ctx *ctx)
{
    int expected = ctx->nq, up = 0, ready = 0;
    double deadline = rcoll_time_sec() + ctx->p.timeout;
    rcoll_status_t st;
    for (int g = 0; g < ctx->nq; g++) {
        ib_qp_t *q = ctx->qps[g];
        if (q->ep->peer < ctx->p.rank)
            continue;
        q->active = 1;
        if ((st = ib_cm_start(ctx, q)) != RCOLL_OK)
            return st;
    }
    while (ready < expected) {
        double left = deadline - rcoll_time_sec();
        if (left <= 0)
            return ib_cm_timeout(ctx, up, expected);
        /* greetings arrive on the CQ, not the event channel: look often
         * while only they are missing */
        int wait_ms = up == expected ? 2 : 1000;
        struct pollfd pf = {.fd = ctx->ech->fd, .events = POLLIN};
        int pr = poll(&pf, 1, (int)RCOLL_MIN(left * 1000 + 1, wait_ms));
        ib_poll(ctx);
        if ((st = ib_cm_ready(ctx, &ready)) != RCOLL_OK)
            return st;
        struct rdma_cm_event *ev;
        if (pr <= 0 || rdma_get_cm_event(ctx->ech, &ev) != 0)
            continue;
        ib_qp_t *redo = NULL;
        int gone = 0;
        st = ib_cm_step(ctx, ev, &up, &redo, &gone);
        if (!gone)
            rdma_ack_cm_event(ev);
        if (st != RCOLL_OK)
            return st;
        if (redo) { /* its events are acked: the id may go */
            ib_cm_drop(ctx, redo);
            redo->active = 1;
            redo->cm_tries++;
            if ((st = ib_cm_start(ctx, redo)) != RCOLL_OK)
                return st;
        }
        if ((st = ib_cm_ready(ctx, &ready)) != RCOLL_OK)
            return st;
    }
    return RCOLL_OK;
}

/* oob mode: QP numbers, PSNs, rings and GIDs through the bootstrap. */
typedef struct {
    uint32_t qpn, psn, rkey, imm;
    uint64_t addr;
} ib_oob_qp_t;

typedef struct {
    uint8_t gid[16];
    uint16_t lid;
    uint8_t link_layer;
    uint8_t pad;
    uint32_t mtu;
    int32_t gid_index;
    uint32_t pad2;
} ib_oob_hdr_t;

/* ib_connect_oob's steps. */

/* This rank's block header: the port's GID (its index in *gidx), LID,
 * link layer and MTU. */
static rcoll_status_t ib_oob_local(struct rcoll_tl_ctx *ctx,
                                   struct ibv_port_attr *pa, int *gidx,
                                   ib_oob_hdr_t *me)
{
    union ibv_gid gid;
    if (ibv_query_port(ctx->dev->verbs, ctx->dev->port, pa) != 0)
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: ibv_query_port: %s",
                                strerror(errno));
    memset(&gid, 0, sizeof(gid));
    *gidx = ib_pick_gid(ctx->dev, pa, &gid);
    if (*gidx < 0)
        return rcoll__set_error(RCOLL_ERR_NO_DEVICE,
                                "ib: no usable GID on %s "
                                "port %d (set RCOLL_IB_GID_INDEX)",
                                ctx->dev->devname, ctx->dev->port);
    char gs[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, gid.raw, gs, sizeof(gs));
    rcoll_info(RCOLL_SUBSYS_NET,
               "ib: oob connect on %s port %d, GID index "
               "%d (%s), LID %u",
               ctx->dev->devname, ctx->dev->port, *gidx, gs, pa->lid);
    memcpy(me->gid, gid.raw, 16);
    me->lid = pa->lid;
    me->link_layer = pa->link_layer;
    me->mtu = pa->active_mtu;
    me->gid_index = *gidx;
    return RCOLL_OK;
}

/* A QP created, in INIT with its receives posted; *e tells the peer its
 * number, PSN and ring. */
static rcoll_status_t ib_oob_qp_init(struct rcoll_tl_ctx *ctx, ib_qp_t *q,
                                     unsigned *seed, ib_oob_qp_t *e)
{
    rcoll_status_t st = ib_qp_create(ctx, q, NULL);
    if (st != RCOLL_OK)
        return st;
    struct ibv_qp_attr at = {.qp_state = IBV_QPS_INIT,
                             .pkey_index = 0,
                             .port_num = ctx->dev->port,
                             .qp_access_flags = IBV_ACCESS_LOCAL_WRITE |
                                                IBV_ACCESS_REMOTE_WRITE};
    if (ibv_modify_qp(q->qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                                      IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: queue pair to INIT: %s",
                                strerror(errno));
    if ((st = ib_qp_post_recvs(q)) != RCOLL_OK)
        return st;
    q->psn = (uint32_t)rand_r(seed) & 0xffffff;
    e->qpn = q->qp->qp_num;
    e->psn = q->psn;
    e->rkey = q->rx_mr->rkey;
    e->imm = (uint32_t)ctx->dev->imm_ok;
    e->addr = (uint64_t)(uintptr_t)q->rx;
    return RCOLL_OK;
}

/* A QP to RTR then RTS with the peer's header th and entry te. */
static rcoll_status_t ib_oob_qp_connect(struct rcoll_tl_ctx *ctx, ib_qp_t *q,
                                        const struct ibv_port_attr *pa,
                                        int gidx, const ib_oob_hdr_t *th,
                                        const ib_oob_qp_t *te)
{
    char ps[128];
    int peer = q->ep->peer;
    ib_conn_data_t d = {.nqps = (uint16_t)ctx->nqps,
                        .nslots = (uint32_t)ctx->p.nslots,
                        .chunk = (uint32_t)ctx->p.chunk_size,
                        .rkey = te->rkey, .imm = te->imm, .addr = te->addr};
    rcoll_status_t st = ib_conn_data_apply(ctx, q, &d);
    if (st != RCOLL_OK)
        return st;
    struct ibv_qp_attr at;
    memset(&at, 0, sizeof(at));
    at.qp_state = IBV_QPS_RTR;
    at.path_mtu = RCOLL_MIN(pa->active_mtu, (enum ibv_mtu)th->mtu);
    at.dest_qp_num = te->qpn;
    at.rq_psn = te->psn;
    at.max_dest_rd_atomic = 1;
    at.min_rnr_timer = 12;
    at.ah_attr.port_num = ctx->dev->port;
    at.ah_attr.dlid = th->lid;
    if (pa->link_layer == IBV_LINK_LAYER_ETHERNET || th->lid == 0) {
        at.ah_attr.is_global = 1;
        memcpy(at.ah_attr.grh.dgid.raw, th->gid, 16);
        at.ah_attr.grh.sgid_index = (uint8_t)gidx;
        at.ah_attr.grh.hop_limit = 64;
    }
    if (ibv_modify_qp(q->qp, &at, IBV_QP_STATE | IBV_QP_AV |
                                      IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                      IBV_QP_RQ_PSN |
                                      IBV_QP_MAX_DEST_RD_ATOMIC |
                                      IBV_QP_MIN_RNR_TIMER))
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: queue pair to %s: RTR "
                                "failed: %s",
                                ib_peer_str(ctx, peer, ps, sizeof(ps)),
                                strerror(errno));
    memset(&at, 0, sizeof(at));
    at.qp_state = IBV_QPS_RTS;
    at.timeout = 14;
    at.retry_cnt = 7;
    at.rnr_retry = 7;
    at.sq_psn = q->psn;
    at.max_rd_atomic = 1;
    if (ibv_modify_qp(q->qp, &at, IBV_QP_STATE | IBV_QP_TIMEOUT |
                                      IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                      IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: queue pair to %s: RTS "
                                "failed: %s",
                                ib_peer_str(ctx, peer, ps, sizeof(ps)),
                                strerror(errno));
    q->up = 1;
    return RCOLL_OK;
}

/* oob mode: every rank's block (header, then an entry per rank and QP
 * index) through the bootstrap's all-gather, each QP connected from the
 * peer's entry for us, then a barrier: every rank's QPs are ready to
 * receive before anyone sends. */
static rcoll_status_t ib_connect_oob(struct rcoll_tl_ctx *ctx)
{
    int n = ctx->p.nranks, r = ctx->p.rank, gidx = -1;
    size_t per = sizeof(ib_oob_hdr_t) +
                 (size_t)n * (size_t)ctx->nqps * sizeof(ib_oob_qp_t);
    char *all = calloc((size_t)n, per);
    struct ibv_port_attr pa;
    unsigned seed = (unsigned)(rcoll_time_sec() * 1e6) ^ (unsigned)getpid();
    if (!all)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "ib: no memory");
    ib_oob_hdr_t *me = (ib_oob_hdr_t *)(all + (size_t)r * per);
    ib_oob_qp_t *mine = (ib_oob_qp_t *)(me + 1);
    rcoll_status_t st = ib_oob_local(ctx, &pa, &gidx, me);
    for (int g = 0; st == RCOLL_OK && g < ctx->nq; g++) {
        ib_qp_t *q = ctx->qps[g];
        st = ib_oob_qp_init(ctx, q, &seed,
                            &mine[q->ep->peer * ctx->nqps + q->idx]);
    }
    if (st == RCOLL_OK)
        st = rcoll_bootstrap_allgather(ctx->p.bs, all, per);
    for (int g = 0; st == RCOLL_OK && g < ctx->nq; g++) {
        ib_qp_t *q = ctx->qps[g];
        ib_oob_hdr_t *th = (ib_oob_hdr_t *)(all + (size_t)q->ep->peer * per);
        ib_oob_qp_t *te = (ib_oob_qp_t *)(th + 1) + r * ctx->nqps + q->idx;
        st = ib_oob_qp_connect(ctx, q, &pa, gidx, th, te);
    }
    if (st == RCOLL_OK)
        st = rcoll_bootstrap_barrier(ctx->p.bs);
    free(all);
    return st;
}

/* rdma_cm mode: listens for the higher ranks' connections. siw listens on
 * a kernel TCP socket at the port rdma_cm chose in its own port space: on
 * a collision, another id, another port. */
static rcoll_status_t ib_cm_listen(struct rcoll_tl_ctx *ctx, ib_dev_t *d,
                                   int backlog)
{
    int lrc;
    for (int t = 0; (lrc = rdma_listen(d->listen_id, backlog)) != 0 &&
                    errno == EADDRINUSE && t < IB_CM_TRIES;
         t++) {
        struct rdma_cm_id *id;
        rcoll_info(RCOLL_SUBSYS_NET,
                   "ib: rank %d: rdma_listen on %s: %s; "
                   "again with another port",
                   ctx->p.rank, d->addr_str, strerror(errno));
        if (rdma_create_id(ctx->ech, &id, NULL, RDMA_PS_TCP) != 0)
            break;
        if (rdma_bind_addr(id, (struct sockaddr *)&d->addr) != 0) {
            rdma_destroy_id(id);
            break;
        }
        rdma_destroy_id(d->listen_id);
        d->listen_id = id;
    }
    if (lrc != 0)
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: rdma_listen on %s: %s",
                                d->addr_str, strerror(errno));
    return RCOLL_OK;
}

int ib_is_listener(const struct rcoll_tl_ctx *ctx, const struct rdma_cm_id *id)
{
    for (int i = 0; i < ctx->ndev; i++)
        if (id == ctx->devs[i].listen_id)
            return 1;
    return 0;
}

/* 1 if addresses a (mask ma) and b are in one subnet */
static int ib_same_subnet(const struct sockaddr_in *a, uint32_t ma,
                          const struct sockaddr_in *b, uint32_t mb)
{
    return ma == mb && !((a->sin_addr.s_addr ^ b->sin_addr.s_addr) & ma);
}

void ib_lane_devs(const struct rcoll_tl_ctx *ctx, int peer, int k, int *li,
                  int *rj)
{
    *li = *rj = 0;
    if (!ctx->raddrs)
        return;
    /* the pairs as the lower rank lists them: (its device, the other's) */
    int low = RCOLL_MIN(ctx->p.rank, peer), high = RCOLL_MAX(ctx->p.rank, peer);
    const ib_raddr_t *L = &ctx->raddrs[low], *H = &ctx->raddrs[high];
    int px[IB_MAX_DEVS * IB_MAX_DEVS], py[IB_MAX_DEVS * IB_MAX_DEVS], np = 0;
    for (int x = 0; x < L->n; x++)
        for (int y = 0; y < H->n; y++)
            if (ib_same_subnet(&L->a[x], L->mask[x], &H->a[y], H->mask[y])) {
                px[np] = x;
                py[np++] = y;
            }
    if (np == 0) /* no common subnet: device x with the other's x mod n */
        for (int x = 0; x < RCOLL_MAX(L->n, H->n); x++) {
            px[np] = x % RCOLL_MAX(L->n, 1);
            py[np++] = x % RCOLL_MAX(H->n, 1);
        }
    /* diagonals first ((y - x) mod m, then x): on one subnet the first
     * min(nL, nH) queue pairs then use distinct devices at both ends */
    int m = RCOLL_MAX(L->n, H->n);
    for (int a = 1; a < np; a++) /* insertion sort, stable */
        for (int b = a; b > 0; b--) {
            int kb = ((py[b] - px[b]) % m + m) % m;
            int ka = ((py[b - 1] - px[b - 1]) % m + m) % m;
            if (ka < kb || (ka == kb && px[b - 1] <= px[b]))
                break;
            int t = px[b]; px[b] = px[b - 1]; px[b - 1] = t;
            t = py[b]; py[b] = py[b - 1]; py[b - 1] = t;
        }
    int i = k % np;
    *li = ctx->p.rank == low ? px[i] : py[i];
    *rj = ctx->p.rank == low ? py[i] : px[i];
}

/* (host, address) pairs in order */
typedef struct {
    uint64_t host;
    uint32_t ip;
} ib_hostip_t;
static int hostip_cmp(const void *a, const void *b)
{
    const ib_hostip_t *x = a, *y = b;
    if (x->host != y->host)
        return x->host < y->host ? -1 : 1;
    return x->ip < y->ip ? -1 : x->ip > y->ip;
}

/* The most distinct listening addresses (a device port each) among the
 * ranks of one host: the same on every rank, from the same table (it
 * decides channel counts, which must agree); -1 out of memory. */
static int ib_count_host_nics(const struct rcoll_tl_ctx *ctx)
{
    int n = 0, best = 1, cur = 0;
    ib_hostip_t *v = malloc((size_t)ctx->p.nranks * IB_MAX_DEVS * sizeof(*v));
    if (!v)
        return -1;
    for (int r = 0; r < ctx->p.nranks; r++)
        for (int i = 0; i < ctx->raddrs[r].n; i++) {
            v[n].host = ctx->p.bs->peers[r].host_hash;
            v[n++].ip = ctx->raddrs[r].a[i].sin_addr.s_addr;
        }
    qsort(v, (size_t)n, sizeof(*v), hostip_cmp);
    for (int i = 0; i < n; i++) {
        if (i == 0 || v[i].host != v[i - 1].host)
            cur = 1;
        else if (v[i].ip != v[i - 1].ip)
            cur++;
        best = RCOLL_MAX(best, cur);
    }
    free(v);
    return best;
}

/* rdma_cm: every device listens (for the higher ranks' connections, or
 * anyone's when lazy), and the ranks' addresses go round the bootstrap
 * (ctx->raddrs). Out of band: nothing (one device, its GID exchanged
 * with the queue pairs). */
rcoll_status_t ib_addrs_exchange(struct rcoll_tl_ctx *ctx, int backlog)
{
    if (ctx->oob)
        return RCOLL_OK;
    ctx->raddrs = calloc((size_t)ctx->p.nranks, sizeof(*ctx->raddrs));
    if (!ctx->raddrs)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "ib: no memory");
    ib_raddr_t *me = &ctx->raddrs[ctx->p.rank];
    rcoll_status_t st = RCOLL_OK;
    for (int i = 0; i < ctx->ndev && st == RCOLL_OK; i++) {
        ib_dev_t *d = &ctx->devs[i];
        if ((st = ib_cm_listen(ctx, d, RCOLL_MAX(16, backlog))) != RCOLL_OK)
            break;
        me->a[i] = d->addr;
        me->a[i].sin_port = rdma_get_src_port(d->listen_id);
        me->mask[i] = d->mask;
    }
    me->n = ctx->ndev;
    if (st == RCOLL_OK)
        st = rcoll_bootstrap_allgather(ctx->p.bs, ctx->raddrs,
                                       sizeof(*ctx->raddrs));
    for (int r = 0; st == RCOLL_OK && r < ctx->p.nranks; r++)
        if (ctx->raddrs[r].n < 1 || ctx->raddrs[r].n > IB_MAX_DEVS)
            st = rcoll__set_error(RCOLL_ERR_PROTOCOL, "ib: rank %d "
                                  "announced %d devices", r,
                                  (int)ctx->raddrs[r].n);
    if (st == RCOLL_OK && (ctx->host_nics = ib_count_host_nics(ctx)) < 0)
        st = rcoll__set_error(RCOLL_ERR_NO_MEMORY,
                              "ib: rank %d: no memory "
                              "to count the devices of %d ranks' hosts",
                              ctx->p.rank, ctx->p.nranks);
    return st;
}

/* Every queue pair connected: through rdma_cm (lazy: none now, each on
 * its first use) or out of band. */
rcoll_status_t ib_connect_all(struct rcoll_tl_ctx *ctx)
{
    if (ctx->oob)
        return ib_connect_oob(ctx);
    if (ctx->lazy)
        return RCOLL_OK;
    return ib_connect_cm(ctx);
}
