/* The verbs transport's connections on first use (RCOLL_IB_CONNECT=lazy;
 * ib.h). At init every rank only listens and learns the others' listening
 * addresses; a peer's queue pairs, with their registered rings, are made
 * when a message first goes to it (ib_send marks the peer, ib_lazy_tick
 * starts the attempt) or when the peer's connection request arrives. So a
 * rank holds registered memory and queue pairs only for the peers it talks
 * to: a ring's neighbours, a tree's parent and children, not all n - 1.
 *
 * Two ranks may start the same queue pair at once; the lower rank's
 * attempt is kept (ib_cm_connect_request): the lower rejects the higher's
 * request while its own is under way, the higher drops its own and
 * accepts; the reject says so (IB_REJ_TIE), and the higher rank then
 * waits IB_AWAIT_S for the lower one's to arrive before it tries again.
 * Refused for any other reason (closing, failed, no listener), an
 * unreachable peer, or no connection within RCOLL_TIMEOUT: the peer is
 * failed by name. On iWARP the acceptor waits for
 * the initiator's greeting before it sends (ib_qp_ready).
 *
 * The same events connect a queue pair again after failover lost it
 * (failback, ib_fo.c; with connections at init too): lazy_rejoin drops a
 * lost queue pair's old QP once its side is quiet and, on the lower rank,
 * starts an attempt every RCOLL_RAIL_RETRY seconds; a refused or failed
 * attempt only waits for the next, and one not up within IB_REJOIN_WAIT
 * is dropped. */
#include "transport/ib/ib.h"

/* After a lower-ranked peer refused our attempt (its own is under way),
 * how long its request may take to come before ours tries again. */
#define IB_AWAIT_S 5.0
/* A failback attempt (either side) not up by then is dropped. */
#define IB_REJOIN_WAIT 10.0

/* An attempt of ours, or one we accepted, dropped: its completions polled
 * first (they leave the CQ before it goes) */
static void lazy_drop(struct rcoll_tl_ctx *ctx, ib_qp_t *q)
{
    ib_poll(ctx);
    ib_cm_drop(ctx, q);
}

/* iWARP's rdma_connect blocks in the kernel until the TCP connection
 * under it is up (siw: over a minute for a peer out of reach), so before a
 * failback attempt a plain TCP socket from the device's address connects,
 * without blocking, to the peer's listener (which drops it when it
 * closes): 1 once the peer answered (start now; a refusal, as from a
 * listener the device keeps to itself, proves the path too), 0 while it
 * is under way or after it failed (then the next try is in
 * RCOLL_RAIL_RETRY seconds). */
static int lazy_probe(struct rcoll_tl_ctx *ctx, ib_qp_t *q, double now)
{
    double retry = rcoll_config.rail_retry;
    if (q->dev->verbs->device->transport_type != IBV_TRANSPORT_IWARP)
        return 1;
    if (q->probe && now - q->probe_at > 1.0 + RCOLL_MAX(retry, 0.1))
        ib_probe_close(q); /* a stale one (its attempt went otherwise) */
    if (!q->probe) {
        struct sockaddr_in src = q->dev->addr;
        src.sin_port = 0;
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd >= 0 && bind(fd, (struct sockaddr *)&src, sizeof(src)) == 0 &&
            (connect(fd,
                     (struct sockaddr *)&ctx->raddrs[q->ep->peer].a[q->rdev],
                     sizeof(struct sockaddr_in)) == 0 ||
             errno == EINPROGRESS)) {
            q->probe = fd + 1;
            q->probe_at = now;
            return 0;
        }
        if (fd >= 0)
            close(fd);
        q->retry_at = now + retry;
        return 0;
    }
    struct pollfd pf = {.fd = q->probe - 1, .events = POLLOUT};
    int err = -1;
    socklen_t len = sizeof(err);
    if (poll(&pf, 1, 0) > 0)
        getsockopt(pf.fd, SOL_SOCKET, SO_ERROR, &err, &len);
    else if (now - q->probe_at < 1.0)
        return 0;
    ib_probe_close(q);
    if (err == 0 || err == ECONNREFUSED)
        return 1;
    q->retry_at = now + retry;
    return 0;
}

/* Failback's turn, ten times a second (see the top). */
static void lazy_rejoin(struct rcoll_tl_ctx *ctx)
{
    double now = rcoll_time_sec(), retry = rcoll_config.rail_retry;
    if (retry <= 0 || ctx->closing || now < ctx->rejoin_at ||
        ctx->n_lost == ctx->n_back)
        return;
    ctx->rejoin_at = now + 0.1;
    for (int g = 0; g < ctx->nq; g++) {
        ib_qp_t *q = ctx->qps[g];
        if (!q->down || q->ep->failed)
            continue;
        if (!q->fresh) {
            if (ib_fo_quiet(q)) {
                lazy_drop(ctx, q);
                ib_fo_renew(q);
            }
        } else if (q->id) { /* (back clears fresh: not back in time) */
            if (now - q->conn_at > IB_REJOIN_WAIT) {
                lazy_drop(ctx, q);
                q->retry_at = now + retry;
            }
        } else if (q->ep->peer > ctx->p.rank && now >= q->retry_at &&
                   lazy_probe(ctx, q, now)) {
            q->active = 1;
            q->cm_tries = 0;
            q->conn_at = now;
            /* (lazy: one lost before its first connection has no ring) */
            if ((q->rx ? RCOLL_OK : ib_qp_alloc(ctx, q)) != RCOLL_OK ||
                ib_cm_start(ctx, q) != RCOLL_OK) {
                rcoll_debug(RCOLL_SUBSYS_NET,
                            "ib: rank %d: connecting lost "
                            "queue pair %d to rank %d again: %s",
                            ctx->p.rank, q->idx, q->ep->peer,
                            rcoll_last_error());
                if (q->id)
                    rdma_destroy_id(q->id);
                q->id = NULL;
                q->active = 0;
                q->retry_at = now + retry;
            }
        }
    }
}

/* q's first connection failed (why). Where the peer can fail over: if
 * another queue pair to it is connected, q is lost (failback connects it
 * later, ib_fo.c); if none is yet, q tries again in RCOLL_RAIL_RETRY
 * (ib_lazy_tick fails the peer at RCOLL_TIMEOUT): lost with nothing
 * connected, the loss could never be told, nor q renewed. Else the peer
 * fails. */
static void lazy_lost(struct rcoll_tl_ctx *ctx, ib_qp_t *q, const char *why)
{
    ib_ep_t *ep = q->ep;
    if (q->id)
        lazy_drop(ctx, q);
    ib_probe_close(q);
    if (ep->failed || q->down)
        return;
    if (ep->fo) {
        int other = 0;
        for (int k = 0; k < ctx->nqps && !other; k++)
            other = k != q->idx && !ep->qps[k].ended &&
                    ib_qp_ready(ctx, &ep->qps[k]);
        if (!other && !q->up) {
            rcoll_debug(RCOLL_SUBSYS_NET,
                        "ib: rank %d: queue pair %d to rank %d: %s; none "
                        "connected yet: again later",
                        ctx->p.rank, q->idx, ep->peer, why);
            q->await = rcoll_time_sec() + RCOLL_MAX(rcoll_config.rail_retry,
                                                    0.1);
            return;
        }
        if (ib_fo_down(q, why) == 0)
            return;
    }
    ib_ep_fail(ep, "%s", why);
}

/* Starts q's attempt: its ring (on first use), then rdma_cm's address
 * resolution; the events do the rest. An error loses q (lazy_lost). */
static void lazy_start(struct rcoll_tl_ctx *ctx, ib_qp_t *q)
{
    rcoll_status_t st = RCOLL_OK;
    if (!q->rx)
        st = ib_qp_alloc(ctx, q);
    if (st == RCOLL_OK) {
        q->active = 1;
        q->cm_tries = 0;
        st = ib_cm_start(ctx, q);
    }
    if (st != RCOLL_OK) {
        char why[320];
        snprintf(why, sizeof(why), "connecting on first use: %s",
                 rcoll_last_error());
        lazy_lost(ctx, q, why);
    }
}

/* Where ep can fail over: its queue pairs not connected RCOLL_RAIL_TIMEOUT
 * after their first attempt and after another connected (ep->ready_at),
 * or at RCOLL_TIMEOUT (by then one was: else the peer fails), are lost.
 * Returns how many. */
static int lazy_fo_late(struct rcoll_tl_ctx *ctx, ib_ep_t *ep, double now,
                        int ready)
{
    double t = rcoll_config.rail_timeout;
    char why[192];
    int n = 0;
    if (ready > 0 && !ep->ready_at)
        ep->ready_at = now;
    for (int k = 0; k < ctx->nqps && !ep->failed && ready > 0; k++) {
        ib_qp_t *q = &ep->qps[k];
        double since = RCOLL_MAX(q->conn_at, ep->ready_at);
        if (ib_qp_ready(ctx, q) || q->down || !q->conn_at ||
            !((t > 0 && now - since > t) || now > ep->conn_deadline))
            continue;
        snprintf(why, sizeof(why),
                 "no connection within %.1f s of its first attempt, while %d "
                 "other queue pair(s) to the same rank connected",
                 now - q->conn_at, ready);
        lazy_lost(ctx, q, why);
        n += q->down;
    }
    return n;
}

void ib_lazy_tick(struct rcoll_tl_ctx *ctx)
{
    if (ctx->nfo)
        lazy_rejoin(ctx);
    if (ctx->npend == 0 || ctx->closing)
        return;
    double now = rcoll_time_sec();
    char ps[128];
    for (int i = 0; i < ctx->npend;) {
        ib_ep_t *ep = ctx->pend[i];
        int ready = 0, lost = 0;
        for (int k = 0; k < ctx->nqps && !ep->failed; k++) {
            ib_qp_t *q = &ep->qps[k];
            if (ib_qp_ready(ctx, q)) {
                ready++;
                continue;
            }
            if (q->down) {
                lost++;
                continue;
            }
            if (q->id || q->up || q->ended) {
                ib_probe_close(q); /* (an attempt of the peer's came) */
                continue;
            }
            if (now < q->await)
                continue;
            /* (not probed first, as failback is: with every rank
             * connecting at once, siw has refused real attempts that
             * followed probes of its listeners. A link down from the
             * start fails the address resolution instead.) */
            if (ep->fo && !q->conn_at)
                q->conn_at = now;
            lazy_start(ctx, q);
        }
        if (ep->fo && !ep->failed && ready + lost < ctx->nqps)
            lost += lazy_fo_late(ctx, ep, now, ready);
        if (!ep->failed && ready + lost < ctx->nqps && now > ep->conn_deadline)
            ib_ep_fail(ep, "no connection to %s within RCOLL_TIMEOUT (%g s): "
                       "%d of %d queue pairs ready", ib_peer_str(ctx,
                       ep->peer, ps, sizeof(ps)), ctx->p.timeout, ready,
                       ctx->nqps);
        if (ep->failed || ready + lost == ctx->nqps) {
            ep->pending = 0;
            ctx->pend[i] = ctx->pend[--ctx->npend];
        } else {
            i++;
        }
    }
}

/* Our attempt on q was refused for reason (IB_REJ_*). By a lower rank
 * whose own attempt is under way (ib_cm_connect_request), or cut off
 * before it was up: wait for the lower rank's. With no reason (nobody
 * listening yet, or the kernel's reject when the listener's backlog is
 * full): wait and try again. Either way ib_lazy_tick fails the peer at
 * RCOLL_TIMEOUT. For any other reason the peer is failed now, named with
 * the reason. */
static void lazy_refused(struct rcoll_tl_ctx *ctx, ib_qp_t *q, int reason)
{
    char ps[128];
    ib_ep_t *ep = q->ep;
    lazy_drop(ctx, q);
    if (q->down) { /* failback: the next attempt, in its time */
        rcoll_debug(RCOLL_SUBSYS_NET,
                    "ib: rank %d: %s refused lost queue "
                    "pair %d: %s",
                    ctx->p.rank, ib_peer_str(ctx, ep->peer, ps, sizeof(ps)),
                    q->idx, ib_rej_str(reason));
        q->retry_at = rcoll_time_sec() + rcoll_config.rail_retry;
        return;
    }
    if (reason == IB_REJ_NONE ||
        (ep->peer < ctx->p.rank &&
         (reason == IB_REJ_TIE || reason == IB_REJ_CUT)) ||
        (ep->fo && reason == IB_REJ_CUT)) {
        rcoll_debug(RCOLL_SUBSYS_NET, "ib: rank %d: %s refused our attempt "
                    "on queue pair %d: %s; trying again in %g s",
                    ctx->p.rank, ib_peer_str(ctx, ep->peer, ps, sizeof(ps)),
                    q->idx, ib_rej_str(reason), IB_AWAIT_S);
        q->await = rcoll_time_sec() + IB_AWAIT_S;
        return;
    }
    char why[384];
    if (reason == IB_REJ_LOCAL)
        snprintf(why, sizeof(why), "connecting to %s: %s",
                 ib_peer_str(ctx, ep->peer, ps, sizeof(ps)),
                 rcoll_last_error());
    else
        snprintf(why, sizeof(why), "%s refused the connection: %s",
                 ib_peer_str(ctx, ep->peer, ps, sizeof(ps)),
                 ib_rej_str(reason));
    lazy_lost(ctx, q, why);
}

/* One cm event of an attempt (ours or the peer's) on q; *redo: the local
 * port collided, start again; *refused: the peer refused it (both once
 * the event is acked: an id is destroyed only when its events are). */
static void lazy_step(struct rcoll_tl_ctx *ctx, struct rdma_cm_event *ev,
                      ib_qp_t *q, ib_qp_t **redo, ib_qp_t **refused,
                      int *reason)
{
    char ps[128];
    rcoll_status_t st = RCOLL_OK;
    switch (ev->event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
        if (rdma_resolve_route(ev->id, 5000) != 0)
            st = rcoll__set_error(RCOLL_ERR_SYSTEM, "resolving the route to "
                                  "%s: %s", ib_peer_str(ctx, q->ep->peer, ps,
                                  sizeof(ps)), strerror(errno));
        break;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
        st = ib_cm_route_resolved(ctx, q, ev->id, redo);
        break;
    case RDMA_CM_EVENT_ESTABLISHED:
        if (q->active)
            st = ib_cm_established(ctx, q, ev);
        if (st == RCOLL_OK)
            q->up = 1;
        if (st == RCOLL_OK && q->fresh && ib_qp_ready(ctx, q))
            ib_fo_back(q); /* failback (passive: at the greeting) */
        if (st == RCOLL_OK && q->early_err) { /* failed before it was up */
            char why[128];
            snprintf(why, sizeof(why), "a work request failed while "
                     "connecting: %s",
                     ibv_wc_status_str((enum ibv_wc_status)q->early_err));
            ib_qp_ended(q, why);
        }
        break;
    case RDMA_CM_EVENT_REJECTED:
        *refused = q;
        *reason = ib_cm_reject_reason(ev);
        return;
    case RDMA_CM_EVENT_DISCONNECTED:
        if (!q->up) { /* an attempt cut off before it was up: refused */
            *refused = q;
            *reason = IB_REJ_CUT;
            return;
        }
        /* fall through */
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
        ib_poll(ctx); /* what arrived before it counts */
        ib_qp_ended(q, ev->event == RDMA_CM_EVENT_DISCONNECTED
                           ? "disconnected without goodbye (process died "
                             "or was killed?)"
                           : "the RDMA device was removed");
        return;
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
        return;
    default:
        if (q->up) /* (ADDR_CHANGE and the like: as at init, ignored) */
            return;
        if (q->down) { /* failback: unreachable still */
            *refused = q;
            *reason = IB_REJ_NONE;
            return;
        }
        st = rcoll__set_error(RCOLL_ERR_REMOTE, "connecting to %s: %s "
                              "(status %d)", ib_peer_str(ctx, q->ep->peer, ps,
                              sizeof(ps)), rdma_event_str(ev->event),
                              ev->status);
    }
    if (st != RCOLL_OK && !q->up && (q->down || q->ep->fo)) {
        *refused = q; /* failback: the next attempt, in its time; else
                         lost (lazy_lost), once the event is acked */
        *reason = IB_REJ_LOCAL;
        return;
    }
    if (st != RCOLL_OK && !q->ep->failed)
        ib_ep_fail(q->ep, "%s", rcoll_last_error());
}

void ib_lazy_event(rcoll_ev_handler_t *h, uint32_t events)
{
    struct rcoll_tl_ctx *ctx =
        (struct rcoll_tl_ctx *)((char *)h - offsetof(struct rcoll_tl_ctx, ech_h));
    struct rdma_cm_event *ev;
    (void)events;
    while (rdma_get_cm_event(ctx->ech, &ev) == 0) {
        struct rdma_cm_id *id = ev->id;
        if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
            int gone = 0, from = -1;
            rcoll_status_t st = ib_cm_connect_request(ctx, ev, &gone, &from);
            if (!gone)
                rdma_ack_cm_event(ev);
            if (st != RCOLL_OK && from >= 0 && !ctx->eps[from]->failed)
                ib_ep_fail(ctx->eps[from], "accepting its connection: %s",
                           rcoll_last_error());
            continue;
        }
        ib_qp_t *q = id ? id->context : NULL;
        if (!q || ib_is_listener(ctx, id) || q->id != id || ctx->closing) {
            rdma_ack_cm_event(ev); /* an attempt dropped meanwhile */
            continue;
        }
        ib_qp_t *redo = NULL, *refused = NULL;
        int reason = IB_REJ_NONE;
        lazy_step(ctx, ev, q, &redo, &refused, &reason);
        rdma_ack_cm_event(ev);
        if (refused)
            lazy_refused(ctx, refused, reason);
        if (redo && !redo->ep->failed) { /* its events are acked */
            ib_cm_drop(ctx, redo);
            redo->active = 1;
            redo->cm_tries++;
            if (ib_cm_start(ctx, redo) != RCOLL_OK) {
                if (!redo->down && !redo->ep->fo)
                    ib_ep_fail(redo->ep, "connecting on first use: %s",
                               rcoll_last_error());
                else /* failback: the next attempt, in its time; else
                        lost */
                    lazy_refused(ctx, redo, IB_REJ_LOCAL);
            }
        }
    }
}
