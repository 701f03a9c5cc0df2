/* The verbs transport's context (ib.h): created in steps (settings,
 * device, completion queue, endpoints and QPs, connections, the engine's
 * epoll set), destroyed in steps (goodbyes, drain, teardown), its
 * counters for the dump, and the ops table. */
#include "transport/ib/ib.h"

static void ib_ctx_destroy(rcoll_tl_ctx_t *ctx, int abort, const char *reason);

/* ib_ctx_create's steps, in order; each sets the error it returns. */

/* The settings: connection mode, slot stride, ring and send queue sizes. */
static rcoll_status_t ib_ctx_params(struct rcoll_tl_ctx *ctx,
                                    const rcoll_tl_params_t *p)
{
    const char *mode = rcoll_config.ib_connect ? rcoll_config.ib_connect : "cm";
    ctx->p = *p;
    ctx->dev = &ctx->devs[0];
    ctx->dev->ctx = ctx;
    memcpy(ctx->secret, p->secret, sizeof(ctx->secret));
    ctx->p.secret = ctx->secret;
    pthread_mutex_init(&ctx->reg_lock, NULL);
    ctx->nqps = rcoll_config.ib_qps_per_peer;
    if (!strcmp(mode, "oob"))
        ctx->oob = 1;
    else if (!strcmp(mode, "lazy") || (!strcmp(mode, "auto") && p->nranks > 32))
        ctx->lazy = 1;
    else if (strcmp(mode, "cm") != 0 && strcmp(mode, "auto") != 0 && mode[0])
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT, "RCOLL_IB_CONNECT="
                                "%s: expected auto, cm, lazy or oob", mode);
    ctx->stride = (IB_HDR + p->chunk_size + 63) & ~(size_t)63;
    ctx->ring_bytes = (size_t)p->nslots * ctx->stride + IB_CTRL;
    /* data (2 WRs each without immediates) + notes (credits, goodbye) */
    ctx->sq_depth = 3 * p->nslots + 8;
    ctx->eps = calloc((size_t)p->nranks, sizeof(*ctx->eps));
    if (ctx->lazy)
        ctx->pend = calloc((size_t)p->nranks, sizeof(*ctx->pend));
    if (!ctx->eps || (ctx->lazy && !ctx->pend))
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "ib: no memory");
    return RCOLL_OK;
}

/* Device d's completion queue, for its d->nqp queue pairs of nrecv
 * receives each. It holds an entry per work request not yet polled: every
 * receive posted, and up to sq_depth sends per queue pair. A device whose
 * max_cqe is smaller gets its max_cqe, and posting waits for room
 * (ib_cq_room): the receives must fit, and one message. */
static rcoll_status_t ib_cq_setup(struct rcoll_tl_ctx *ctx, ib_dev_t *d,
                                  int nrecv)
{
    int nqp = d->nqp;
    long want = (long)nqp * (ctx->sq_depth + nrecv) + 16;
    long recvs = (long)nqp * nrecv;
    long cqe = want;
    struct ibv_device_attr da;
    if (ibv_query_device(d->verbs, &da) == 0 && cqe > da.max_cqe)
        cqe = da.max_cqe;
    if (rcoll_fault("ib_cq_small")) /* (tests) */
        cqe = RCOLL_MIN(cqe, recvs + 8);
    if (cqe < recvs + 3)
        return rcoll__set_error(RCOLL_ERR_NO_DEVICE,
                                "ib: %s's completion "
                                "queues hold at most %ld entries; %d queue "
                                "pairs with %d receives each need %ld: lower "
                                "RCOLL_NSLOTS or RCOLL_IB_QPS_PER_PEER",
                                d->devname, cqe, nqp, nrecv, recvs + 3);
    if (cqe < want)
        rcoll_info(RCOLL_SUBSYS_NET,
                   "ib: rank %d: %s's completion queue "
                   "holds %ld entries, not the %ld that %d queue pairs could "
                   "post: sends wait for room",
                   ctx->p.rank, d->devname, cqe, want, nqp);
    d->cqe = (int)cqe;
    if (!(d->cq = ibv_create_cq(d->verbs, d->cqe, NULL, d->cch, 0)))
        return rcoll__set_error(RCOLL_ERR_SYSTEM,
                                "ib: completion queue of %d "
                                "entries on %s: %s",
                                d->cqe, d->devname, strerror(errno));
    return RCOLL_OK;
}

/* An endpoint with its queue pairs for every peer in `use`. */
static rcoll_status_t ib_eps_create(struct rcoll_tl_ctx *ctx,
                                    const uint8_t *use, int nrecv)
{
    for (int i = 0; i < ctx->p.nranks; i++) {
        if (i == ctx->p.rank || !use[i])
            continue;
        ib_ep_t *ep = calloc(1, sizeof(*ep));
        if (!ep || !(ep->qps = calloc((size_t)ctx->nqps, sizeof(ib_qp_t)))) {
            free(ep);
            return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "ib: no memory");
        }
        ctx->eps[i] = ep;
        ep->ctx = ctx;
        ep->peer = i;
        for (int k = 0; k < ctx->nqps; k++) {
            ib_qp_t *q = &ep->qps[k];
            q->ep = ep;
            q->idx = k;
            q->gidx = ctx->nq;
            q->nrecv = nrecv;
            int li, rj;
            ib_lane_devs(ctx, i, k, &li, &rj);
            q->dev = &ctx->devs[li];
            q->rdev = rj;
            q->dev->nqp++;
            rcoll_slots_init(&q->sl, ctx->p.nslots);
            ctx->qps[ctx->nq++] = q;
            if (ctx->lazy) /* its ring when it connects (ib_lazy.c) */
                continue;
            rcoll_status_t st = ib_qp_alloc(ctx, q);
            if (st != RCOLL_OK)
                return st;
        }
        ep->fo = ib_fo_able(ctx, ep);
        ctx->nfo += ep->fo;
    }
    return RCOLL_OK;
}

/* Into the engine's epoll set (completions, connection events), the
 * device's asynchronous events, and the completion queue armed. */
static rcoll_status_t ib_ctx_arm(struct rcoll_tl_ctx *ctx)
{
    int fl = fcntl(ctx->ech->fd, F_GETFL);
    fcntl(ctx->ech->fd, F_SETFL, fl | O_NONBLOCK);
    /* (failover's failback connects after set-up, as lazy does) */
    ctx->ech_h.cb = ctx->lazy || ctx->nfo ? ib_lazy_event : ib_cm_event;
    struct epoll_event e2 = {.events = EPOLLIN, .data.ptr = &ctx->ech_h};
    if (epoll_ctl(ctx->p.epfd, EPOLL_CTL_ADD, ctx->ech->fd, &e2) != 0)
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: epoll_ctl: %s",
                                strerror(errno));
    for (int i = 0; i < ctx->ndev; i++) {
        ib_dev_t *d = &ctx->devs[i];
        fl = fcntl(d->cch->fd, F_GETFL);
        fcntl(d->cch->fd, F_SETFL, fl | O_NONBLOCK);
        d->cch_h.cb = ib_cq_event;
        struct epoll_event e1 = {.events = EPOLLIN, .data.ptr = &d->cch_h};
        if (epoll_ctl(ctx->p.epfd, EPOLL_CTL_ADD, d->cch->fd, &e1) != 0)
            return rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: epoll_ctl: %s",
                                    strerror(errno));
    }
    rcoll_status_t st = ib_async_attach(ctx);
    if (st != RCOLL_OK)
        return st;
    for (int i = 0; i < ctx->ndev; i++) {
        ibv_req_notify_cq(ctx->devs[i].cq, 0);
        ctx->devs[i].cq_armed = 1;
    }
    return RCOLL_OK;
}

static rcoll_status_t ib_ctx_create(const rcoll_tl_params_t *p,
                                    rcoll_tl_ctx_t **ctx_p,
                                    rcoll_tl_ep_t **eps)
{
    char why[320];
    if (!ib_libs_loaded(why, sizeof(why)))
        return rcoll__set_error(RCOLL_ERR_NO_DEVICE, "ib: %s", why);
    struct rcoll_tl_ctx *ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "ib: no memory");
    rcoll_status_t st = ib_ctx_params(ctx, p);
    if (st != RCOLL_OK) {
        free(ctx->eps);
        free(ctx->pend);
        free(ctx);
        return st;
    }
    uint8_t *use = rcoll_tl_row(p);
    int npeers = 0, nrecv = 2 * p->nslots + 8;
    if (!use) {
        st = rcoll__set_error(RCOLL_ERR_NO_MEMORY, "ib: no memory");
        goto err;
    }
    for (int i = 0; i < p->nranks; i++)
        npeers += i != p->rank && use[i];
    if ((st = ib_dev_open(ctx)) != RCOLL_OK ||
        (st = ib_addrs_exchange(ctx, npeers * ctx->nqps)) != RCOLL_OK)
        goto err;
    ctx->qps = calloc((size_t)(npeers * ctx->nqps) + 1, sizeof(*ctx->qps));
    if (!ctx->qps) {
        st = rcoll__set_error(RCOLL_ERR_NO_MEMORY, "ib: no memory");
        goto err;
    }
    if ((st = ib_eps_create(ctx, use, nrecv)) != RCOLL_OK)
        goto err;
    for (int i = 0; i < ctx->ndev; i++)
        if ((st = ib_cq_setup(ctx, &ctx->devs[i], nrecv)) != RCOLL_OK)
            goto err;
    if ((st = ib_connect_all(ctx)) != RCOLL_OK)
        goto err;
    struct ibv_port_attr pa;
    ibv_query_port(ctx->dev->verbs, ctx->dev->port, &pa);
    rcoll_info(RCOLL_SUBSYS_NET,
               "ib: rank %d on %s port %d (%s, %s), %d "
               "queue pairs per peer, %s, inline up to %u bytes, %s connect",
               p->rank, ctx->dev->devname, ctx->dev->port,
               ib_link_layer_str(pa.link_layer, ctx->dev->verbs),
               ctx->dev->addr_str, ctx->nqps,
               ctx->nq && ctx->qps[0]->imm ? "WRITE_WITH_IMM"
                                           : "WRITE + SEND signals",
               ctx->dev->max_inline,
               ctx->oob    ? "oob"
               : ctx->lazy ? "rdma_cm on first use"
                           : "rdma_cm");
    for (int i = 1; i < ctx->ndev; i++)
        rcoll_info(RCOLL_SUBSYS_NET, "ib: rank %d also on %s port %d (%s), "
                   "%d of its queue pairs", p->rank, ctx->devs[i].devname,
                   ctx->devs[i].port, ctx->devs[i].addr_str, ctx->devs[i].nqp);
    if ((st = ib_ctx_arm(ctx)) != RCOLL_OK)
        goto err;
    for (int i = 0; i < p->nranks; i++)
        eps[i] = (rcoll_tl_ep_t *)ctx->eps[i];
    free(use);
    ctx->p.pair = NULL; /* its caller's state ends with set-up */
    ctx->p.pair_arg = NULL;
    *ctx_p = ctx;
    return RCOLL_OK;
err:
    free(use);
    return rcoll_tl_create_failed(ctx, ib_ctx_destroy, st);
}

/* ib_ctx_destroy's steps, in order. */

/* Goodbye (or the abort and its reason) on one live QP. */
static void ib_qp_goodbye(ib_qp_t *q, int abort, const char *reason,
                          double deadline)
{
    struct rcoll_tl_ctx *ctx = q->ep->ctx;
    if (abort && reason) {
        char *s = q->tx + (size_t)ctx->p.nslots * ctx->stride;
        snprintf(s, IB_REASON, "%s", reason);
        struct ibv_sge sge = {(uintptr_t)s, (uint32_t)strlen(s) + 1,
                              q->tx_mr->lkey};
        struct ibv_send_wr wr = {
            .wr_id = WRID(q, WR_NOTE, 0), .sg_list = &sge, .num_sge = 1,
            .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED},
            *bad;
        wr.wr.rdma.remote_addr = q->raddr + (uint64_t)ctx->p.nslots *
                                                ctx->stride;
        wr.wr.rdma.rkey = q->rkey;
        while (q->sq_free < 2 && rcoll_time_sec() < deadline && !q->ended)
            ib_poll(ctx);
        if (q->sq_free >= 2 && ib_cq_room(q->dev, 2) &&
            ibv_post_send(q->qp, &wr, &bad) == 0) {
            q->sq_free--;
            ib_cq_posted(q, 1);
        }
    }
    while ((q->sq_free < 1 || !ib_cq_room(q->dev, 1)) &&
           rcoll_time_sec() < deadline && !q->ended)
        ib_poll(ctx);
    if (ib_post_note(q, IMM(IMM_CTRL, 0, abort ? CTRL_ABORT : CTRL_BYE)) ==
        0 && abort)
        q->told = 1;
}

/* Until every live QP's sends completed (told: only those fail_notify
 * wrote on), or the deadline. */
static void ib_sq_drain(struct rcoll_tl_ctx *ctx, int told, double deadline)
{
    for (int g = 0; g < ctx->nq; g++) {
        ib_qp_t *q = ctx->qps[g];
        while ((q->told || !told) && q->up && !q->ended &&
               q->sq_free < ctx->sq_depth &&
               rcoll_time_sec() < deadline)
            if (ib_poll(ctx) == 0)
                usleep(100);
    }
}

/* Waits (until deadline) for every QP's sends to complete: then they are
 * in the peer's memory. A clean close also waits until the peers have
 * taken every message we sent them: every slot credited back (or its
 * goodbye, or the connection gone). A send completion only says that the
 * data left this process (siw: into its kernel TCP socket). Tearing the
 * connection down before the peer has it can lose our last messages
 * while they are still being retransmitted (a TCP connection closed with
 * unread data is reset), and the peer, still waiting for our last chunk,
 * fails with "closed without goodbye" (check-rdma's lossy-connection test
 * exercises this). A peer hands credits back once its engine
 * idles, within a second of taking the data; the wait ends at `drain`,
 * min(RCOLL_TIMEOUT, 30 s) after the destroy began (failover's wait
 * before the goodbyes counts in it). */
static void ib_drain(struct rcoll_tl_ctx *ctx, int abort, double deadline,
                     double drain)
{
    ib_sq_drain(ctx, 0, deadline);
    /* an abort: until each peer it went to says it has it (CTRL_SEEN) */
    for (int g = 0; abort && g < ctx->nq; g++) {
        ib_qp_t *q = ctx->qps[g];
        while (q->told && !q->seen && q->up && !q->ended &&
               rcoll_time_sec() < deadline)
            if (ib_poll(ctx) == 0)
                usleep(100);
    }
    while (!abort && rcoll_time_sec() < drain) {
        int waiting = 0;
        for (int g = 0; g < ctx->nq && !waiting; g++) {
            ib_qp_t *q = ctx->qps[g];
            waiting = q->up && !q->ended && !q->bye && !q->ep->failed &&
                      q->sl.credits < q->sl.n;
        }
        if (!waiting)
            break;
        if (ib_poll(ctx) == 0)
            usleep(100);
    }
}

/* Out of the engine's epoll set and the device's asynchronous events; the
 * cm channel non-blocking, so that queued events drain without waiting. */
static void ib_ctx_unhook(struct rcoll_tl_ctx *ctx)
{
    ib_async_detach(ctx);
    for (int i = 0; i < ctx->ndev; i++)
        if (ctx->devs[i].cch && ctx->p.epfd >= 0)
            epoll_ctl(ctx->p.epfd, EPOLL_CTL_DEL, ctx->devs[i].cch->fd, NULL);
    if (ctx->ech && ctx->p.epfd >= 0)
        epoll_ctl(ctx->p.epfd, EPOLL_CTL_DEL, ctx->ech->fd, NULL);
    if (ctx->ech) {
        int fl = fcntl(ctx->ech->fd, F_GETFL);
        fcntl(ctx->ech->fd, F_SETFL, fl | O_NONBLOCK);
    }
}

/* One QP disconnected and destroyed, its memory deregistered and freed. */
static void ib_qp_free(struct rcoll_tl_ctx *ctx, ib_qp_t *q)
{
    ib_probe_close(q); /* (failback, lazy failover: ib_lazy.c) */
    if (q->id) {
        if (q->up)
            rdma_disconnect(q->id);
        if (q->qp)
            rdma_destroy_qp(q->id);
        /* events still queued for the id must be acked first; a peer's
         * request (lazy) is refused, so that it does not wait for it */
        struct rdma_cm_event *ev;
        while (rdma_get_cm_event(ctx->ech, &ev) == 0) {
            struct rdma_cm_id *rid = ev->event == RDMA_CM_EVENT_CONNECT_REQUEST
                                         ? ev->id : NULL;
            if (rid)
                ib_cm_reject(rid, IB_REJ_CLOSING);
            rdma_ack_cm_event(ev);
            if (rid)
                rdma_destroy_id(rid);
        }
        rdma_destroy_id(q->id);
    } else if (q->qp) {
        ibv_destroy_qp(q->qp);
    }
    ib_qp_unalloc(ctx, q);
}

/* The registrations (the user's, then the cache's), the completion queue,
 * protection domain and channels, and the context's memory. */
static void ib_ctx_free(struct rcoll_tl_ctx *ctx)
{
    for (int i = 0; ctx->eps && i < ctx->p.nranks; i++)
        if (ctx->eps[i]) {
            ib_place_free(ctx->eps[i]);
            ib_fo_free(ctx->eps[i]);
            free(ctx->eps[i]->qps);
            free(ctx->eps[i]);
        }
    /* the core deregisters first; any left would keep the PD busy */
    while (ctx->nregs > 0)
        ib_mem_dereg(ctx, ctx->regs[ctx->nregs - 1]);
    for (int i = 0; i < ctx->ndev; i++) {
        ib_dev_t *d = &ctx->devs[i];
        if (d->rcache) {
            rcoll_rcache_stats_t rs;
            rcoll_rcache_stats(d->rcache, &rs);
            if (rs.hits + rs.misses)
                rcoll_info(RCOLL_SUBSYS_NET,
                           "ib: rank %d: registration cache "
                           "(%s): %lu hits, %lu misses, %lu invalidated by the "
                           "memory monitor, %lu evicted, %zu bytes pinned at "
                           "most%s",
                           ctx->p.rank, d->devname, rs.hits, rs.misses,
                           rs.invalidations, rs.evictions, rs.pinned_peak,
                           rs.monitored ? "" : " (no monitor: nothing kept)");
            rcoll_rcache_destroy(d->rcache);
        }
        if (d->cq) /* its events were acked as they came */
            ibv_destroy_cq(d->cq);
        if (d->cch)
            ibv_destroy_comp_channel(d->cch);
        if (d->pd)
            ibv_dealloc_pd(d->pd);
        if (d->listen_id)
            rdma_destroy_id(d->listen_id);
    }
    if (ctx->ech)
        rdma_destroy_event_channel(ctx->ech);
    free(ctx->regs);
    free(ctx->raddrs);
    free(ctx->pend);
    pthread_mutex_destroy(&ctx->reg_lock);
    free(ctx->qps);
    free(ctx->eps);
    free(ctx);
}

/* The QPs a goodbye or an abort can go on now. */
static int ib_qp_sayable(const struct rcoll_tl_ctx *ctx, const ib_qp_t *q)
{
    if (!q->up || q->ended || !q->qp || q->told)
        return 0;
    /* iWARP: the acceptor may not send before the initiator has spoken */
    return ctx->oob || q->active || q->heard;
}

/* The communicator failed (transport op fail_notify): our abort and its
 * reason go on every live QP now, and their sends complete (for siw: are
 * in the kernel's socket) before the engine deregisters a failed receive
 * in place. A peer's write into it then fails behind the notice, so the
 * peer learns the cause instead of a terminated connection. */
static void ib_fail_notify(rcoll_tl_ctx_t *ctx, const char *reason)
{
    double deadline = rcoll_time_sec() + RCOLL_MIN(1.0, ctx->p.timeout);
    for (int g = 0; g < ctx->nq; g++) {
        ib_qp_t *q = ctx->qps[g];
        if (!ib_qp_sayable(ctx, q))
            continue;
        ib_qp_goodbye(q, 1, reason, deadline);
    }
    ib_sq_drain(ctx, 1, deadline);
}

static void ib_ctx_destroy(rcoll_tl_ctx_t *ctx, int abort, const char *reason)
{
    /* Where a peer can fail over, a queue pair lost now may hold messages
     * it has not taken: until they are credited back (or the peer says
     * goodbye), failover goes on as in the engine's turns (losses found,
     * notices, resends; connections on first use and failback's, whose
     * cm events are read here), and every slot of ours is released and
     * credited back: nothing here takes a message any more (copies after
     * a loss, notices), and a peer in its own destroy waits for them. A
     * peer that has a goodbye on every live queue pair expects nothing
     * more, so the goodbyes wait for this. */
    double fo_end = rcoll_time_sec() + RCOLL_MIN(30.0, ctx->p.timeout);
    while (!abort && ctx->nfo && (ib_fo_busy(ctx) || ib_fo_unacked(ctx)) &&
           rcoll_time_sec() < fo_end) {
        for (int g = 0; g < ctx->nq; g++) {
            ib_qp_t *q = ctx->qps[g];
            while (q->sl.count > 0)
                rcoll_slots_release(&q->sl);
            ib_send_credits(q);
        }
        ib_lazy_tick(ctx);
        if (ctx->ech_h.cb == ib_lazy_event)
            ib_lazy_event(&ctx->ech_h, 0);
        if (ib_progress(ctx) == 0)
            usleep(100);
    }
    double deadline = rcoll_time_sec() + RCOLL_MIN(2.0, ctx->p.timeout);
    for (int g = 0; g < ctx->nq; g++)
        if (ib_qp_sayable(ctx, ctx->qps[g]))
            ib_qp_goodbye(ctx->qps[g], abort, reason, deadline);
    ctx->closing = 1;
    if (ctx->lazy) {
        int peers = 0, conn = 0;
        for (int i = 0; i < ctx->p.nranks; i++)
            if (ctx->eps[i]) {
                peers++;
                conn += ctx->eps[i]->qps[0].up;
            }
        rcoll_info(RCOLL_SUBSYS_NET, "ib: rank %d connected to %d of its %d "
                   "ib peers (on first use)", ctx->p.rank, conn, peers);
    }
    if (ctx->n_sent)
        rcoll_info(RCOLL_SUBSYS_NET, "ib: rank %d sent %llu messages, %llu "
                   "zero-copy from registered memory, %llu written in place "
                   "into the receiver's memory", ctx->p.rank,
                   (unsigned long long)ctx->n_sent,
                   (unsigned long long)ctx->n_zcopy,
                   (unsigned long long)ctx->n_placed);
    /* (a second at least: the goodbyes' sends may have just left) */
    ib_drain(ctx, abort, deadline, RCOLL_MAX(fo_end, rcoll_time_sec() + 1.0));
    ib_ctx_unhook(ctx);
    for (int g = 0; g < ctx->nq; g++)
        ib_qp_free(ctx, ctx->qps[g]);
    ib_ctx_free(ctx);
}

static size_t ib_peer_bytes(size_t chunk, int nslots, char *what, size_t len)
{
    size_t stride = (IB_HDR + chunk + 63) & ~(size_t)63;
    size_t ring = (size_t)nslots * stride + IB_CTRL;
    int q = rcoll_config.ib_qps_per_peer;
    snprintf(what, len, "%d QP(s) x (receive ring + send staging) of %zu "
             "bytes, registered (locked) memory", q, ring);
    return (size_t)q * 2 * ring;
}

static int ib_lanes(char *what, size_t len)
{
    snprintf(what, len, "RC queue pairs per peer (RCOLL_IB_QPS_PER_PEER), "
             "message i on QP i mod %d", rcoll_config.ib_qps_per_peer);
    return rcoll_config.ib_qps_per_peer;
}

static void ib_stats(rcoll_tl_ctx_t *ctx, FILE *f)
{
    rcoll_lane_stats_t sum[64] = {{0}};
    int n = RCOLL_MIN(ctx->nqps, 64), peers = 0, conn = 0;
    for (int i = 0; ctx->eps && i < ctx->p.nranks; i++) {
        ib_ep_t *ep = ctx->eps[i];
        peers += ep != NULL;
        conn += ep && ep->qps[0].up;
        for (int k = 0; ep && k < n; k++)
            rcoll_lanes_sum(&sum[k], &ep->qps[k].st);
    }
    fprintf(
        f,
        "rcoll:     %d lanes per peer (QPs on %s port %u), %d peers "
        "(%d connected%s); %llu sends, %llu zero-copy, %llu written in "
        "place\n",
        ctx->nqps, ctx->dev->devname, ctx->dev->port, peers, conn,
        ctx->lazy ? ", on first use" : "",
        (unsigned long long)__atomic_load_n(&ctx->n_sent, __ATOMIC_RELAXED),
        (unsigned long long)__atomic_load_n(&ctx->n_zcopy, __ATOMIC_RELAXED),
        (unsigned long long)__atomic_load_n(&ctx->n_placed, __ATOMIC_RELAXED));
    if (ctx->nfo)
        fprintf(
            f,
            "rcoll:     %d peers can fail over; %llu queue pairs lost, "
            "%llu back, %llu copies dropped\n",
            ctx->nfo,
            (unsigned long long)__atomic_load_n(&ctx->n_lost, __ATOMIC_RELAXED),
            (unsigned long long)__atomic_load_n(&ctx->n_back, __ATOMIC_RELAXED),
            (unsigned long long)__atomic_load_n(&ctx->n_dups,
                                                __ATOMIC_RELAXED));
    rcoll_lanes_print(f, "QP k of every peer", n, sum);
    /* with several devices: what each carried */
    for (int d = 0; ctx->ndev > 1 && d < ctx->ndev; d++) {
        rcoll_lane_stats_t ds = {0};
        for (int g = 0; g < ctx->nq; g++)
            if (ctx->qps[g]->dev == &ctx->devs[d])
                rcoll_lanes_sum(&ds, &ctx->qps[g]->st);
        char what[96];
        snprintf(what, sizeof(what), "device %s port %u (%s)",
                 ctx->devs[d].devname, ctx->devs[d].port,
                 ctx->devs[d].addr_str);
        rcoll_lanes_print(f, what, 1, &ds);
    }
    for (int d = 0; d < ctx->ndev; d++) {
        if (!ctx->devs[d].rcache)
            continue;
        rcoll_rcache_stats_t rs;
        rcoll_rcache_stats(ctx->devs[d].rcache, &rs);
        fprintf(f,
                "rcoll:     registration cache%s%s%s: %lu hits, %lu "
                "misses, %lu invalidated (memory freed or unmapped), %lu "
                "evicted, %lu not kept; %d entries, %zu bytes pinned now, "
                "%zu at most, bound %zu%s\n",
                ctx->ndev > 1 ? " (" : "",
                ctx->ndev > 1 ? ctx->devs[d].devname : "",
                ctx->ndev > 1 ? ")" : "", rs.hits, rs.misses, rs.invalidations,
                rs.evictions, rs.uncached, rs.entries, rs.pinned,
                rs.pinned_peak, rs.max_pinned,
                rs.monitored ? "" : " (no memory monitor: nothing kept)");
    }
}

/* The engine's turns: connections on first use start and time out here
 * (ib_lazy.c), then the data path's own. */
static int ib_ctx_progress(rcoll_tl_ctx_t *ctx)
{
    ib_lazy_tick(ctx);
    return ib_progress(ctx);
}

static int ib_ctx_idle(rcoll_tl_ctx_t *ctx)
{
    ib_lazy_tick(ctx);
    return ib_idle(ctx);
}

/* Counted from the listening addresses the rdma_cm set-up exchanges
 * (ib_connect_all); out of band (RCOLL_IB_CONNECT=oob) no addresses are
 * exchanged and the answer is 1. */
static int ib_host_nics(rcoll_tl_ctx_t *ctx)
{
    return RCOLL_MAX(1, ctx->host_nics);
}

const rcoll_tl_ops_t rcoll_tl_ib_ops = {
    .name = "ib",
    .doc = "RDMA verbs RC queue pairs (iWARP/eRDMA, RoCE, InfiniBand; "
           "RCOLL_IB_*)",
    .usable = ib_usable,
    .local_only = 0,
    .ctx_create = ib_ctx_create,
    .send = ib_send,
    .recv_peek = ib_recv_peek,
    .recv_release = ib_recv_release,
    .recv_full = ib_recv_full,
    .lanes = ib_lanes,
    .stats = ib_stats,
    .recv_place = ib_recv_place,
    .recv_unplace = ib_recv_unplace,
    .send_revoke = ib_send_revoke,
    .progress = ib_ctx_progress,
    .idle = ib_ctx_idle,
    .ctx_destroy = ib_ctx_destroy,
    .fail_notify = ib_fail_notify,
    .mem_reg = ib_mem_reg,
    .mem_dereg = ib_mem_dereg,
    .describe = ib_describe,
    .peer_bytes = ib_peer_bytes,
    .host_nics = ib_host_nics,
};
