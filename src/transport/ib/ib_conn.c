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

/* ---- devices ---- */

/* RCOLL_IB_HCA: "mlx5,erdma" (prefixes), "=mlx5_0" (exact names), "^siw"
 * (excluded prefixes); empty allows every device. */
static int ib_device_allowed(const char *name)
{
    const char *spec = rcoll_config.ib_hca;
    char buf[256];
    if (!spec || !spec[0])
        return 1;
    int neg = spec[0] == '^', exact = 0, hit = 0;
    spec += neg;
    if (spec[0] == '=') {
        exact = 1;
        spec++;
    }
    snprintf(buf, sizeof(buf), "%s", spec);
    for (char *save, *t = strtok_r(buf, ",", &save); t;
         t = strtok_r(NULL, ",", &save))
        if (exact ? !strcmp(name, t) : !strncmp(name, t, strlen(t)))
            hit = 1;
    return neg ? !hit : hit;
}

/* libibverbs and librdmacm are loaded at run time (util/dl.h): a host
 * without them has no ib transport, and `why` says which file is missing */
static int ib_libs_loaded(char *why, size_t len)
{
    return rcoll_dl_open(RCOLL_DL_VERBS, why, len) == 0 &&
           rcoll_dl_open(RCOLL_DL_RDMACM, why, len) == 0;
}

static int ib_usable(char *why, size_t len)
{
    int n = 0, ok = 0;
    if (!ib_libs_loaded(why, len))
        return 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list) {
        snprintf(why, len, "no RDMA devices (ibv_get_device_list: %s)",
                 strerror(errno));
        return 0;
    }
    for (int i = 0; i < n && !ok; i++)
        ok = ib_device_allowed(ibv_get_device_name(list[i]));
    ibv_free_device_list(list);
    if (!ok)
        snprintf(why, len, n ? "no RDMA device allowed by RCOLL_IB_HCA"
                             : "no RDMA devices");
    return ok;
}

static int ib_dev_imm(struct ibv_context *verbs)
{
    const char *m = rcoll_config.ib_imm;
    if (m && (!strcmp(m, "1") || !strcmp(m, "yes")))
        return 1;
    if (m && (!strcmp(m, "0") || !strcmp(m, "no")))
        return 0;
    /* iWARP has no immediate data; erdma adds it */
    if (verbs->device->transport_type == IBV_TRANSPORT_IWARP)
        return !strncmp(ibv_get_device_name(verbs->device), "erdma", 5);
    return 1;
}

/* siw (soft-iWARP) sends on a kernel TCP socket from the context of the
 * process that posts, without MSG_NOSIGNAL: a send to a peer whose
 * connection was reset raises SIGPIPE in this process, which by default
 * kills it (seen in CI: a survivor of a killed peer died with status 141).
 * So on iWARP devices SIGPIPE is ignored when it is at its default; a
 * handler the program installed is left alone. Writes to a closed pipe or
 * socket then fail with EPIPE instead, as they do under Python. */
static void ib_sigpipe_guard(struct rcoll_tl_ctx *ctx)
{
    struct sigaction old, ign;
    if (ctx->verbs->device->transport_type != IBV_TRANSPORT_IWARP)
        return;
    memset(&ign, 0, sizeof(ign));
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    if (sigaction(SIGPIPE, NULL, &old) != 0 || (old.sa_flags & SA_SIGINFO) ||
        old.sa_handler != SIG_DFL)
        return;
    if (sigaction(SIGPIPE, &ign, NULL) == 0)
        rcoll_info(RCOLL_SUBSYS_NET, "ib: rank %d: SIGPIPE ignored (it was "
                   "at its default; %s sends from this process on kernel "
                   "TCP sockets)", ctx->p.rank, ctx->devname);
}

static const char *link_layer_str(uint8_t ll, struct ibv_context *v)
{
    if (v->device->transport_type == IBV_TRANSPORT_IWARP)
        return "iWARP";
    return ll == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand";
}

/* Binds the listening id to an IPv4 address of an allowed device with an
 * active port: the bootstrap's address first, then every other one. */
static rcoll_status_t ib_pick_address(struct rcoll_tl_ctx *ctx)
{
    struct sockaddr_in cand[64];
    int nc = 0;
    const rcoll_sockaddr_t *boot = &ctx->p.bs->peers[ctx->p.rank].boot_addr;
    char tried[512] = "";
    size_t toff = 0;
    if (boot->sa.sa_family == AF_INET)
        cand[nc++] = boot->sin;
    struct ifaddrs *ifa = NULL;
    if (getifaddrs(&ifa) == 0) {
        for (struct ifaddrs *i = ifa; i && nc < 64; i = i->ifa_next)
            if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
                (i->ifa_flags & IFF_UP) && !(i->ifa_flags & IFF_LOOPBACK))
                cand[nc++] = *(struct sockaddr_in *)i->ifa_addr;
        freeifaddrs(ifa);
    }
    for (int i = 0; i < nc; i++) {
        struct sockaddr_in a = cand[i];
        char s[INET_ADDRSTRLEN];
        a.sin_port = 0;
        inet_ntop(AF_INET, &a.sin_addr, s, sizeof(s));
        if (i > 0 && cand[0].sin_addr.s_addr == a.sin_addr.s_addr)
            continue;
        struct rdma_cm_id *id;
        if (rdma_create_id(ctx->ech, &id, NULL, RDMA_PS_TCP) != 0)
            return rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: rdma_create_id: %s",
                                    strerror(errno));
        const char *why = NULL;
        if (rdma_bind_addr(id, (struct sockaddr *)&a) != 0 || !id->verbs)
            why = "no RDMA device";
        else if (!ib_device_allowed(ibv_get_device_name(id->verbs->device)))
            why = "device excluded by RCOLL_IB_HCA";
        else {
            struct ibv_port_attr pa;
            if (ibv_query_port(id->verbs, id->port_num, &pa) != 0 ||
                pa.state != IBV_PORT_ACTIVE)
                why = "port not active";
        }
        if (why) {
            toff += (size_t)snprintf(tried + toff, sizeof(tried) - RCOLL_MIN(toff, sizeof(tried)),
                                     "%s%s: %s", toff ? "; " : "", s, why);
            if (toff >= sizeof(tried))
                toff = sizeof(tried) - 1;
            rdma_destroy_id(id);
            continue;
        }
        ctx->listen_id = id;
        ctx->verbs = id->verbs;
        ctx->port = id->port_num;
        ctx->addr = a;
        snprintf(ctx->devname, sizeof(ctx->devname), "%s",
                 ibv_get_device_name(id->verbs->device));
        snprintf(ctx->addr_str, sizeof(ctx->addr_str), "%s", s);
        return RCOLL_OK;
    }
    return rcoll__set_error(RCOLL_ERR_NO_DEVICE,
                            "ib: rank %d found no IPv4 address on a usable "
                            "RDMA device (%s); check RCOLL_IB_HCA, or exclude "
                            "the transport with RCOLL_TRANSPORTS=^ib",
                            ctx->p.rank, tried[0] ? tried : "no addresses");
}


static void ib_cm_event(rcoll_ev_handler_t *h, uint32_t events)
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
        if (!q || id == ctx->listen_id)
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
        a.send_cq = a.recv_cq = ctx->cq;
        a.qp_type = IBV_QPT_RC;
        a.cap.max_send_wr = (uint32_t)ctx->sq_depth;
        a.cap.max_recv_wr = (uint32_t)q->nrecv;
        a.cap.max_send_sge = 2;
        a.cap.max_recv_sge = 1;
        a.cap.max_inline_data = inl[attempt];
        int rc;
        if (id) {
            rc = rdma_create_qp(id, ctx->pd, &a);
            if (rc == 0)
                q->qp = id->qp;
        } else {
            q->qp = ibv_create_qp(ctx->pd, &a);
            rc = q->qp ? 0 : -1;
        }
        if (rc == 0)
            break;
        if (attempt == 5)
            return rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: creating a queue "
                                    "pair to rank %d on %s: %s", q->ep->peer,
                                    ctx->devname, strerror(errno));
    }
    if (ctx->max_inline == 0 || a.cap.max_inline_data < ctx->max_inline)
        ctx->max_inline = a.cap.max_inline_data;
    if (!ctx->imm_ok && a.cap.max_inline_data < sizeof(uint32_t))
        return rcoll__set_error(RCOLL_ERR_NO_DEVICE, "ib: %s has neither "
                                "immediate data nor inline sends: not "
                                "supported", ctx->devname);
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
    d->imm = (uint32_t)ctx->imm_ok;
    d->addr = (uint64_t)(uintptr_t)q->rx;
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
    q->imm = ctx->imm_ok && d->imm;
    return RCOLL_OK;
}

static const char *peer_str(struct rcoll_tl_ctx *ctx, int peer, char *b,
                            size_t l)
{
    const rcoll_boot_peer_t *pi = &ctx->p.bs->peers[peer];
    snprintf(b, l, "rank %d (%s pid %d)", peer, pi->hostname, pi->pid);
    return b;
}

/* An active QP's connection attempt: a new cm_id, then address and route
 * resolution (the events continue it in ib_connect_cm). */
static rcoll_status_t ib_cm_start(struct rcoll_tl_ctx *ctx, ib_qp_t *q,
                                  const struct sockaddr_in *addrs)
{
    char ps[128];
    if (rdma_create_id(ctx->ech, &q->id, q, RDMA_PS_TCP) != 0 ||
        rdma_resolve_addr(q->id, (struct sockaddr *)&ctx->addr,
                          (struct sockaddr *)&addrs[q->ep->peer], 5000) != 0)
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: resolving the "
                                "address of %s: %s",
                                peer_str(ctx, q->ep->peer, ps, sizeof(ps)),
                                strerror(errno));
    return RCOLL_OK;
}

/* ib_connect_cm's steps: what its events do. */

/* ROUTE_RESOLVED (active side): the QP, its receives, and the connection
 * request with our ring. *redo: a port collision (below); try again. */
static rcoll_status_t ib_cm_route_resolved(struct rcoll_tl_ctx *ctx,
                                           ib_qp_t *q, struct rdma_cm_id *id,
                                           ib_qp_t **redo)
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
                   peer_str(ctx, q->ep->peer, ps, sizeof(ps)),
                   strerror(errno));
        *redo = q;
        return RCOLL_OK;
    }
    return rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: rdma_connect to %s: %s",
                            peer_str(ctx, q->ep->peer, ps, sizeof(ps)),
                            strerror(errno));
}

/* CONNECT_REQUEST (passive side): a lower rank's QP, accepted with our
 * ring. One not from this job, or a duplicate, is rejected and its id
 * destroyed: then *gone is set (the event is acked here). */
static rcoll_status_t ib_cm_connect_request(struct rcoll_tl_ctx *ctx,
                                            struct rdma_cm_event *ev,
                                            int *gone)
{
    char ps[128];
    struct rdma_cm_id *id = ev->id;
    int r = ctx->p.rank;
    ib_conn_data_t d;
    ib_qp_t *nq = NULL;
    if (conn_data_check(ctx, ev->param.conn.private_data,
                        ev->param.conn.private_data_len, &d) == 0 &&
        d.to == r && d.from >= 0 && d.from < r && ctx->eps[d.from] &&
        d.idx < ctx->nqps)
        nq = &ctx->eps[d.from]->qps[d.idx];
    if (!nq || nq->id) {
        rcoll_warn("ib: rank %d rejected a connection request: %s", r,
                   nq ? "duplicate" : "not from this job");
        rdma_reject(id, NULL, 0);
        rdma_ack_cm_event(ev);
        rdma_destroy_id(id);
        *gone = 1;
        return RCOLL_OK;
    }
    nq->id = id;
    id->context = nq;
    rcoll_status_t st = ib_conn_data_apply(ctx, nq, &d);
    if (st == RCOLL_OK)
        st = ib_qp_create(ctx, nq, id);
    if (st == RCOLL_OK)
        st = ib_qp_post_recvs(nq);
    if (st != RCOLL_OK)
        return st;
    ib_conn_data_fill(ctx, nq, &d);
    d.imm = (uint32_t)nq->imm; /* the decision, for the other end */
    conn_data_seal(ctx, &d);
    struct rdma_conn_param cp = {
        .private_data = &d, .private_data_len = sizeof(d),
        .responder_resources = 1, .initiator_depth = 1,
        .retry_count = 7, .rnr_retry_count = 7};
    if (rdma_accept(id, &cp) != 0)
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: rdma_accept from %s: "
                                "%s", peer_str(ctx, d.from, ps, sizeof(ps)),
                                strerror(errno));
    return RCOLL_OK;
}

/* ESTABLISHED on the active side: the peer's ring from its reply, and our
 * greeting, the first FPDU (see ib_connect_cm). */
static rcoll_status_t ib_cm_established(struct rcoll_tl_ctx *ctx, ib_qp_t *q,
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
                                peer_str(ctx, q->ep->peer, ps, sizeof(ps)),
                                ev->param.conn.private_data_len);
    rcoll_status_t st = ib_conn_data_apply(ctx, q, &d);
    if (st != RCOLL_OK)
        return st;
    if (ib_post_note(q, IMM(IMM_CREDIT, 0, 0)) != 0)
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: greeting %s on a new "
                                "connection: %s",
                                peer_str(ctx, q->ep->peer, ps, sizeof(ps)),
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
                                peer_str(ctx, silent, ps, sizeof(ps)));
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
                                    peer_str(ctx, q->ep->peer, ps, sizeof(ps)),
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
                                  peer_str(ctx, q->ep->peer, ps, sizeof(ps)),
                                  strerror(errno));
        return st;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
        return ib_cm_route_resolved(ctx, q, id, redo);
    case RDMA_CM_EVENT_CONNECT_REQUEST:
        return ib_cm_connect_request(ctx, ev, gone);
    case RDMA_CM_EVENT_ESTABLISHED:
        if (q->active && (st = ib_cm_established(ctx, q, ev)) != RCOLL_OK)
            return st;
        q->up = 1;
        (*up)++;
        return RCOLL_OK;
    default:
        return rcoll__set_error(RCOLL_ERR_REMOTE, "ib: connecting rank %d and "
                                "%s: %s (status %d)", ctx->p.rank,
                                q ? peer_str(ctx, q->ep->peer, ps, sizeof(ps))
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
static rcoll_status_t ib_connect_cm(struct rcoll_tl_ctx *ctx,
                                    const struct sockaddr_in *addrs)
{
    int expected = ctx->nq, up = 0, ready = 0;
    double deadline = rcoll_time_sec() + ctx->p.timeout;
    rcoll_status_t st;
    for (int g = 0; g < ctx->nq; g++) {
        ib_qp_t *q = ctx->qps[g];
        if (q->ep->peer < ctx->p.rank)
            continue;
        q->active = 1;
        if ((st = ib_cm_start(ctx, q, addrs)) != RCOLL_OK)
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
            ib_cq_forget(redo);
            rdma_destroy_qp(redo->id);
            rdma_destroy_id(redo->id);
            redo->id = NULL;
            redo->qp = NULL;
            redo->cm_tries++;
            if ((st = ib_cm_start(ctx, redo, addrs)) != RCOLL_OK)
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

static int ib_pick_gid(struct rcoll_tl_ctx *ctx, struct ibv_port_attr *pa,
                       union ibv_gid *gid)
{
    const char *gi = rcoll_config.ib_gid_index;
    if (gi && gi[0] && strcmp(gi, "auto") != 0) {
        char *end;
        long v = strtol(gi, &end, 0);
        if (*end || v < 0 || v > 65535 ||
            ibv_query_gid(ctx->verbs, ctx->port, (int)v, gid) != 0)
            return -1;
        return (int)v;
    }
    if (pa->link_layer != IBV_LINK_LAYER_ETHERNET) {
        ibv_query_gid(ctx->verbs, ctx->port, 0, gid);
        return 0;
    }
    int best = -1, best_score = 0;
    for (int i = 0; i < pa->gid_tbl_len && i < 256; i++) {
        struct ibv_gid_entry e;
        if (ibv_query_gid_ex(ctx->verbs, ctx->port, (uint32_t)i, &e, 0) != 0)
            continue;
        const uint8_t *g = e.gid.raw;
        static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        int is_v4 = !memcmp(g, v4, 12);
        int link_local = g[0] == 0xfe && (g[1] & 0xc0) == 0x80;
        int zero = 1;
        for (int k = 0; k < 16; k++)
            zero &= g[k] == 0;
        if (zero || link_local)
            continue;
        int score = (e.gid_type == IBV_GID_TYPE_ROCE_V2 ? 4 : 1) +
                    (is_v4 ? 2 : 0) +
                    (is_v4 && !memcmp(g + 12, &ctx->addr.sin_addr, 4) ? 8 : 0);
        if (score > best_score) {
            best_score = score;
            best = i;
            *gid = e.gid;
        }
    }
    return best;
}

/* ib_connect_oob's steps. */

/* This rank's block header: the port's GID (its index in *gidx), LID,
 * link layer and MTU. */
static rcoll_status_t ib_oob_local(struct rcoll_tl_ctx *ctx,
                                   struct ibv_port_attr *pa, int *gidx,
                                   ib_oob_hdr_t *me)
{
    union ibv_gid gid;
    if (ibv_query_port(ctx->verbs, ctx->port, pa) != 0)
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: ibv_query_port: %s",
                                strerror(errno));
    memset(&gid, 0, sizeof(gid));
    *gidx = ib_pick_gid(ctx, pa, &gid);
    if (*gidx < 0)
        return rcoll__set_error(RCOLL_ERR_NO_DEVICE, "ib: no usable GID on %s "
                                "port %d (set RCOLL_IB_GID_INDEX)",
                                ctx->devname, ctx->port);
    char gs[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, gid.raw, gs, sizeof(gs));
    rcoll_info(RCOLL_SUBSYS_NET, "ib: oob connect on %s port %d, GID index "
               "%d (%s), LID %u", ctx->devname, ctx->port, *gidx, gs, pa->lid);
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
    struct ibv_qp_attr at = {.qp_state = IBV_QPS_INIT, .pkey_index = 0,
                             .port_num = ctx->port,
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
    e->imm = (uint32_t)ctx->imm_ok;
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
    at.ah_attr.port_num = ctx->port;
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
                                peer_str(ctx, peer, ps, sizeof(ps)),
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
                                peer_str(ctx, peer, ps, sizeof(ps)),
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

static void ib_ctx_destroy(rcoll_tl_ctx_t *ctx, int abort, const char *reason);

/* ib_ctx_create's steps, in order; each sets the error it returns. */

/* The settings: connection mode, slot stride, ring and send queue sizes. */
static rcoll_status_t ib_ctx_params(struct rcoll_tl_ctx *ctx,
                                    const rcoll_tl_params_t *p)
{
    const char *mode = rcoll_config.ib_connect ? rcoll_config.ib_connect : "cm";
    ctx->p = *p;
    pthread_mutex_init(&ctx->reg_lock, NULL);
    ctx->nqps = rcoll_config.ib_qps_per_peer;
    if (!strcmp(mode, "oob"))
        ctx->oob = 1;
    else if (strcmp(mode, "cm") != 0 && mode[0])
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT, "RCOLL_IB_CONNECT="
                                "%s: expected cm or oob", mode);
    ctx->stride = (IB_HDR + p->chunk_size + 63) & ~(size_t)63;
    ctx->ring_bytes = (size_t)p->nslots * ctx->stride + IB_CTRL;
    /* data (2 WRs each without immediates) + notes (credits, goodbye) */
    ctx->sq_depth = 3 * p->nslots + 8;
    ctx->eps = calloc((size_t)p->nranks, sizeof(*ctx->eps));
    if (!ctx->eps)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "ib: no memory");
    return RCOLL_OK;
}

/* The device: the address and device rdma_cm picks, its protection
 * domain, completion channel and registration cache. */
static rcoll_status_t ib_dev_open(struct rcoll_tl_ctx *ctx)
{
    ctx->ech = rdma_create_event_channel();
    if (!ctx->ech)
        return rcoll__set_error(RCOLL_ERR_NO_DEVICE, "ib: rdma_create_event_"
                                "channel: %s (is rdma_ucm loaded?)",
                                strerror(errno));
    rcoll_status_t st = ib_pick_address(ctx);
    if (st != RCOLL_OK)
        return st;
    ctx->imm_ok = ib_dev_imm(ctx->verbs);
    ib_sigpipe_guard(ctx);
    if (!(ctx->pd = ibv_alloc_pd(ctx->verbs)) ||
        !(ctx->cch = ibv_create_comp_channel(ctx->verbs)))
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: protection domain or "
                                "completion channel on %s: %s", ctx->devname,
                                strerror(errno));
    static const rcoll_rcache_ops_t rc_ops = {.reg = ib_rc_reg,
                                              .dereg = ib_rc_dereg};
    if (!(ctx->rcache = rcoll_rcache_create(&rc_ops, ctx,
                                            rcoll_config.rcache_max)))
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "ib: no memory");
    return RCOLL_OK;
}

/* The completion queue, for nqp queue pairs of nrecv receives each. It
 * holds an entry per work request not yet polled: every receive posted,
 * and up to sq_depth sends per queue pair. A device whose max_cqe is
 * smaller gets its max_cqe, and posting waits for room (ib_cq_room): the
 * receives must fit, and one message. */
static rcoll_status_t ib_cq_setup(struct rcoll_tl_ctx *ctx, int nqp, int nrecv)
{
    long want = (long)nqp * (ctx->sq_depth + nrecv) + 16;
    long recvs = (long)nqp * nrecv;
    long cqe = want;
    struct ibv_device_attr da;
    if (ibv_query_device(ctx->verbs, &da) == 0 && cqe > da.max_cqe)
        cqe = da.max_cqe;
    if (rcoll_fault("ib_cq_small")) /* (tests) */
        cqe = RCOLL_MIN(cqe, recvs + 8);
    if (cqe < recvs + 3)
        return rcoll__set_error(RCOLL_ERR_NO_DEVICE, "ib: %s's completion "
                                "queues hold at most %ld entries; %d queue "
                                "pairs with %d receives each need %ld: lower "
                                "RCOLL_NSLOTS or RCOLL_IB_QPS_PER_PEER",
                                ctx->devname, cqe, nqp, nrecv, recvs + 3);
    if (cqe < want)
        rcoll_info(RCOLL_SUBSYS_NET, "ib: rank %d: %s's completion queue "
                   "holds %ld entries, not the %ld that %d queue pairs could "
                   "post: sends wait for room", ctx->p.rank, ctx->devname, cqe,
                   want, nqp);
    ctx->cqe = (int)cqe;
    if (!(ctx->cq = ibv_create_cq(ctx->verbs, ctx->cqe, NULL, ctx->cch, 0)))
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: completion queue of %d "
                                "entries on %s: %s", ctx->cqe, ctx->devname,
                                strerror(errno));
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
            rcoll_slots_init(&q->sl, ctx->p.nslots);
            ctx->qps[ctx->nq++] = q;
            rcoll_status_t st = ib_qp_alloc(ctx, q);
            if (st != RCOLL_OK)
                return st;
        }
    }
    return RCOLL_OK;
}

/* rdma_cm mode: listens for the higher ranks' connections. siw listens on
 * a kernel TCP socket at the port rdma_cm chose in its own port space: on
 * a collision, another id, another port. */
static rcoll_status_t ib_cm_listen(struct rcoll_tl_ctx *ctx, int backlog)
{
    int lrc;
    for (int t = 0; (lrc = rdma_listen(ctx->listen_id, backlog)) != 0 &&
                    errno == EADDRINUSE && t < IB_CM_TRIES; t++) {
        struct rdma_cm_id *id;
        rcoll_info(RCOLL_SUBSYS_NET, "ib: rank %d: rdma_listen on %s: %s; "
                   "again with another port", ctx->p.rank, ctx->addr_str,
                   strerror(errno));
        if (rdma_create_id(ctx->ech, &id, NULL, RDMA_PS_TCP) != 0)
            break;
        if (rdma_bind_addr(id, (struct sockaddr *)&ctx->addr) != 0) {
            rdma_destroy_id(id);
            break;
        }
        rdma_destroy_id(ctx->listen_id);
        ctx->listen_id = id;
    }
    if (lrc != 0)
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: rdma_listen on %s: %s",
                                ctx->addr_str, strerror(errno));
    return RCOLL_OK;
}

/* Every queue pair connected: through rdma_cm (listen, addresses over the
 * bootstrap, connect) or out of band. */
static rcoll_status_t ib_connect_all(struct rcoll_tl_ctx *ctx)
{
    if (ctx->oob)
        return ib_connect_oob(ctx);
    struct sockaddr_in *addrs = calloc((size_t)ctx->p.nranks, sizeof(*addrs));
    if (!addrs)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "ib: no memory");
    rcoll_status_t st = ib_cm_listen(ctx, RCOLL_MAX(16, ctx->nq));
    if (st == RCOLL_OK) {
        addrs[ctx->p.rank] = ctx->addr;
        addrs[ctx->p.rank].sin_port = rdma_get_src_port(ctx->listen_id);
        st = rcoll_bootstrap_allgather(ctx->p.bs, addrs, sizeof(*addrs));
    }
    if (st == RCOLL_OK)
        st = ib_connect_cm(ctx, addrs);
    free(addrs);
    return st;
}

/* Into the engine's epoll set (completions, connection events), the
 * device's asynchronous events, and the completion queue armed. */
static rcoll_status_t ib_ctx_arm(struct rcoll_tl_ctx *ctx)
{
    int fl = fcntl(ctx->cch->fd, F_GETFL);
    fcntl(ctx->cch->fd, F_SETFL, fl | O_NONBLOCK);
    fl = fcntl(ctx->ech->fd, F_GETFL);
    fcntl(ctx->ech->fd, F_SETFL, fl | O_NONBLOCK);
    ctx->cch_h.cb = ib_cq_event;
    ctx->ech_h.cb = ib_cm_event;
    struct epoll_event e1 = {.events = EPOLLIN, .data.ptr = &ctx->cch_h};
    struct epoll_event e2 = {.events = EPOLLIN, .data.ptr = &ctx->ech_h};
    if (epoll_ctl(ctx->p.epfd, EPOLL_CTL_ADD, ctx->cch->fd, &e1) != 0 ||
        epoll_ctl(ctx->p.epfd, EPOLL_CTL_ADD, ctx->ech->fd, &e2) != 0)
        return rcoll__set_error(RCOLL_ERR_SYSTEM, "ib: epoll_ctl: %s",
                                strerror(errno));
    rcoll_status_t st = ib_async_attach(ctx);
    if (st != RCOLL_OK)
        return st;
    ibv_req_notify_cq(ctx->cq, 0);
    ctx->cq_armed = 1;
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
        free(ctx);
        return st;
    }
    const uint8_t *use = p->pairs + (size_t)p->rank * (size_t)p->nranks;
    int npeers = 0, nrecv = 2 * p->nslots + 8;
    for (int i = 0; i < p->nranks; i++)
        npeers += i != p->rank && use[i];
    if ((st = ib_dev_open(ctx)) != RCOLL_OK)
        goto err;
    ctx->qps = calloc((size_t)(npeers * ctx->nqps) + 1, sizeof(*ctx->qps));
    if (!ctx->qps) {
        st = rcoll__set_error(RCOLL_ERR_NO_MEMORY, "ib: no memory");
        goto err;
    }
    if ((st = ib_cq_setup(ctx, npeers * ctx->nqps, nrecv)) != RCOLL_OK ||
        (st = ib_eps_create(ctx, use, nrecv)) != RCOLL_OK ||
        (st = ib_connect_all(ctx)) != RCOLL_OK)
        goto err;
    struct ibv_port_attr pa;
    ibv_query_port(ctx->verbs, ctx->port, &pa);
    rcoll_info(RCOLL_SUBSYS_NET, "ib: rank %d on %s port %d (%s, %s), %d "
               "queue pairs per peer, %s, inline up to %u bytes, %s connect",
               p->rank, ctx->devname, ctx->port,
               link_layer_str(pa.link_layer, ctx->verbs), ctx->addr_str,
               ctx->nqps,
               ctx->nq && ctx->qps[0]->imm ? "WRITE_WITH_IMM"
                                           : "WRITE + SEND signals",
               ctx->max_inline, ctx->oob ? "oob" : "rdma_cm");
    if ((st = ib_ctx_arm(ctx)) != RCOLL_OK)
        goto err;
    for (int i = 0; i < p->nranks; i++)
        eps[i] = (rcoll_tl_ep_t *)ctx->eps[i];
    *ctx_p = ctx;
    return RCOLL_OK;
err:
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
        snprintf(s, IB_CTRL, "%s", reason);
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
        if (q->sq_free >= 2 && ib_cq_room(ctx, 2) &&
            ibv_post_send(q->qp, &wr, &bad) == 0) {
            q->sq_free--;
            ib_cq_posted(q, 1);
        }
    }
    while ((q->sq_free < 1 || !ib_cq_room(ctx, 1)) &&
           rcoll_time_sec() < deadline && !q->ended)
        ib_poll(ctx);
    ib_post_note(q, IMM(IMM_CTRL, 0, abort ? CTRL_ABORT : CTRL_BYE));
}

/* Waits (until deadline) for every QP's sends to complete: then they are
 * in the peer's memory. A clean close also waits until the peers have
 * taken every message we sent them: every slot credited back (or its
 * goodbye, or the connection gone). A send completion only says that the
 * data left this process (siw: into its kernel TCP socket). Tearing the
 * connection down before the peer has it can lose our last messages
 * while they are still being retransmitted (a TCP connection closed with
 * unread data is reset), and the peer, still waiting for our last chunk,
 * fails with "closed without goodbye" (check-rdma's 25%-loss connection
 * test, about 1 job in 20). A peer hands credits back once its engine
 * idles, within a second of taking the data; the wait is bounded by
 * min(RCOLL_TIMEOUT, 30 s). */
static void ib_drain(struct rcoll_tl_ctx *ctx, int abort, double deadline)
{
    for (int g = 0; g < ctx->nq; g++) {
        ib_qp_t *q = ctx->qps[g];
        while (q->up && !q->ended && q->sq_free < ctx->sq_depth &&
               rcoll_time_sec() < deadline)
            if (ib_poll(ctx) == 0)
                usleep(100);
    }
    double drain = rcoll_time_sec() + RCOLL_MIN(30.0, ctx->p.timeout);
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
    if (ctx->cch && ctx->p.epfd >= 0)
        epoll_ctl(ctx->p.epfd, EPOLL_CTL_DEL, ctx->cch->fd, NULL);
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
    if (q->id) {
        if (q->up)
            rdma_disconnect(q->id);
        if (q->qp)
            rdma_destroy_qp(q->id);
        /* events still queued for the id must be acked first */
        struct rdma_cm_event *ev;
        while (rdma_get_cm_event(ctx->ech, &ev) == 0)
            rdma_ack_cm_event(ev);
        rdma_destroy_id(q->id);
    } else if (q->qp) {
        ibv_destroy_qp(q->qp);
    }
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
        rcoll_rcache_put(ctx->rcache, q->tx_rent[k]);
    free(q->tx_rent);
    free(q->rx_flag);
}

/* The registrations (the user's, then the cache's), the completion queue,
 * protection domain and channels, and the context's memory. */
static void ib_ctx_free(struct rcoll_tl_ctx *ctx)
{
    for (int i = 0; ctx->eps && i < ctx->p.nranks; i++)
        if (ctx->eps[i]) {
            for (int k = 0; k < ctx->eps[i]->nplace; k++)
                rcoll_rcache_put(ctx->rcache, /* not unposted */
                                 ctx->eps[i]->place[k].rent);
            free(ctx->eps[i]->qps);
            free(ctx->eps[i]);
        }
    /* the core deregisters first; any left would keep the PD busy */
    while (ctx->nregs > 0)
        ib_mem_dereg(ctx, ctx->regs[ctx->nregs - 1]);
    if (ctx->rcache) {
        rcoll_rcache_stats_t rs;
        rcoll_rcache_stats(ctx->rcache, &rs);
        if (rs.hits + rs.misses)
            rcoll_info(RCOLL_SUBSYS_NET, "ib: rank %d: registration cache: "
                       "%lu hits, %lu misses, %lu invalidated by the memory "
                       "monitor, %lu evicted, %zu bytes pinned at most%s",
                       ctx->p.rank, rs.hits, rs.misses, rs.invalidations,
                       rs.evictions, rs.pinned_peak,
                       rs.monitored ? "" : " (no monitor: nothing kept)");
        rcoll_rcache_destroy(ctx->rcache);
    }
    if (ctx->cq) /* its events were acked as they came */
        ibv_destroy_cq(ctx->cq);
    if (ctx->cch)
        ibv_destroy_comp_channel(ctx->cch);
    if (ctx->pd)
        ibv_dealloc_pd(ctx->pd);
    if (ctx->listen_id)
        rdma_destroy_id(ctx->listen_id);
    if (ctx->ech)
        rdma_destroy_event_channel(ctx->ech);
    free(ctx->regs);
    pthread_mutex_destroy(&ctx->reg_lock);
    free(ctx->qps);
    free(ctx->eps);
    free(ctx);
}

static void ib_ctx_destroy(rcoll_tl_ctx_t *ctx, int abort, const char *reason)
{
    double deadline = rcoll_time_sec() + RCOLL_MIN(2.0, ctx->p.timeout);
    for (int g = 0; g < ctx->nq; g++) {
        ib_qp_t *q = ctx->qps[g];
        if (!q->up || q->ended || !q->qp)
            continue;
        if (!ctx->oob && !q->active && !q->heard)
            continue; /* iWARP: the initiator has not spoken yet */
        ib_qp_goodbye(q, abort, reason, deadline);
    }
    ctx->closing = 1;
    if (ctx->n_sent)
        rcoll_info(RCOLL_SUBSYS_NET, "ib: rank %d sent %llu messages, %llu "
                   "zero-copy from registered memory, %llu written in place "
                   "into the receiver's memory", ctx->p.rank,
                   (unsigned long long)ctx->n_sent,
                   (unsigned long long)ctx->n_zcopy,
                   (unsigned long long)ctx->n_placed);
    ib_drain(ctx, abort, deadline);
    ib_ctx_unhook(ctx);
    for (int g = 0; g < ctx->nq; g++)
        ib_qp_free(ctx, ctx->qps[g]);
    ib_ctx_free(ctx);
}

/* rcoll-info -t: every device, its ports, the IPv4 addresses rdma_cm maps
 * to it, and the GID the oob mode would pick. */
static void ib_describe(FILE *f)
{
    int n = 0;
    char why[320];
    if (!ib_libs_loaded(why, sizeof(why))) {
        fprintf(f, "         %s\n", why);
        return;
    }
    struct ibv_device **list = ibv_get_device_list(&n);
    struct rdma_event_channel *ech = rdma_create_event_channel();
    struct ifaddrs *ifa = NULL;
    if (getifaddrs(&ifa) != 0)
        ifa = NULL;
    for (int i = 0; list && i < n; i++) {
        const char *name = ibv_get_device_name(list[i]);
        struct ibv_context *v = ibv_open_device(list[i]);
        struct ibv_device_attr da;
        if (!v || ibv_query_device(v, &da) != 0) {
            fprintf(f, "         %s: cannot open: %s\n", name, strerror(errno));
            if (v)
                ibv_close_device(v);
            continue;
        }
        fprintf(f, "         %s%s: %s, %d port(s), immediate data: %s\n", name,
                ib_device_allowed(name) ? "" : " (excluded by RCOLL_IB_HCA)",
                v->device->transport_type == IBV_TRANSPORT_IWARP ? "iWARP"
                                                                  : "IB/RoCE",
                da.phys_port_cnt, ib_dev_imm(v) ? "yes" : "no (WRITE + SEND)");
        for (uint8_t port = 1; port <= da.phys_port_cnt; port++) {
            struct ibv_port_attr pa;
            if (ibv_query_port(v, port, &pa) != 0)
                continue;
            fprintf(f, "           port %u: %s, %s, MTU %d", port,
                    ibv_port_state_str(pa.state),
                    link_layer_str(pa.link_layer, v), 128 << pa.active_mtu);
            struct rcoll_tl_ctx tmp;
            memset(&tmp, 0, sizeof(tmp));
            tmp.verbs = v;
            tmp.port = port;
            union ibv_gid gid;
            if (v->device->transport_type != IBV_TRANSPORT_IWARP) {
                int gi = ib_pick_gid(&tmp, &pa, &gid);
                char gs[INET6_ADDRSTRLEN] = "-";
                if (gi >= 0)
                    inet_ntop(AF_INET6, gid.raw, gs, sizeof(gs));
                fprintf(f, ", oob GID index %d (%s)", gi, gs);
            }
            fprintf(f, "\n");
        }
        ibv_close_device(v);
        /* the addresses rdma_cm binds to this device */
        fprintf(f, "           IPv4 (rdma_cm):");
        int any = 0;
        for (struct ifaddrs *a = ifa; ech && a; a = a->ifa_next) {
            if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET ||
                !(a->ifa_flags & IFF_UP))
                continue;
            struct rdma_cm_id *id;
            struct sockaddr_in sin = *(struct sockaddr_in *)a->ifa_addr;
            sin.sin_port = 0;
            if (rdma_create_id(ech, &id, NULL, RDMA_PS_TCP) != 0)
                break;
            if (rdma_bind_addr(id, (struct sockaddr *)&sin) == 0 && id->verbs &&
                !strcmp(ibv_get_device_name(id->verbs->device), name)) {
                char s[INET_ADDRSTRLEN];
                inet_ntop(AF_INET, &sin.sin_addr, s, sizeof(s));
                fprintf(f, " %s (%s)", s, a->ifa_name);
                any = 1;
            }
            rdma_destroy_id(id);
        }
        fprintf(f, "%s\n", any ? "" : " none");
    }
    if (ifa)
        freeifaddrs(ifa);
    if (ech)
        rdma_destroy_event_channel(ech);
    if (list)
        ibv_free_device_list(list);
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
    int n = RCOLL_MIN(ctx->nqps, 64), peers = 0;
    for (int i = 0; ctx->eps && i < ctx->p.nranks; i++) {
        ib_ep_t *ep = ctx->eps[i];
        peers += ep != NULL;
        for (int k = 0; ep && k < n; k++)
            rcoll_lanes_sum(&sum[k], &ep->qps[k].st);
    }
    fprintf(f, "rcoll:     %d lanes per peer (QPs on %s port %u), %d peers; "
            "%llu sends, %llu zero-copy, %llu written in place\n", ctx->nqps,
            ctx->devname, ctx->port, peers,
            (unsigned long long)__atomic_load_n(&ctx->n_sent, __ATOMIC_RELAXED),
            (unsigned long long)__atomic_load_n(&ctx->n_zcopy,
                                                __ATOMIC_RELAXED),
            (unsigned long long)__atomic_load_n(&ctx->n_placed,
                                                __ATOMIC_RELAXED));
    rcoll_lanes_print(f, "QP k of every peer", n, sum);
    if (ctx->rcache) {
        rcoll_rcache_stats_t rs;
        rcoll_rcache_stats(ctx->rcache, &rs);
        fprintf(f, "rcoll:     registration cache: %lu hits, %lu misses, "
                "%lu invalidated (memory freed or unmapped), %lu evicted, "
                "%lu not kept; %d entries, %zu bytes pinned now, %zu at "
                "most, bound %zu%s\n", rs.hits, rs.misses, rs.invalidations,
                rs.evictions, rs.uncached, rs.entries, rs.pinned,
                rs.pinned_peak, rs.max_pinned,
                rs.monitored ? "" : " (no memory monitor: nothing kept)");
    }
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
    .progress = ib_progress,
    .idle = ib_idle,
    .ctx_destroy = ib_ctx_destroy,
    .mem_reg = ib_mem_reg,
    .mem_dereg = ib_mem_dereg,
    .describe = ib_describe,
    .peer_bytes = ib_peer_bytes,
};
