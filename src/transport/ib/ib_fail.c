/* The verbs transport's failures (ib.h): a peer failed with its cause,
 * a queue pair that ended (error, flush, disconnect) told apart from a
 * port gone down, and the devices' asynchronous events, shared by every
 * communicator on a device. */
#include "transport/ib/ib.h"

/* ---- failures ---- */

void ib_ep_fail(ib_ep_t *ep, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    if (ep->failed)
        return;
    ep->failed = 1;
    for (int k = 0; k < ep->ctx->nqps; k++)
        ib_probe_close(&ep->qps[k]);
    memcpy(what, "ib: ", 4);
    va_start(ap, fmt);
    vsnprintf(what + 4, sizeof(what) - 4, fmt, ap);
    va_end(ap);
    rcoll_tl_peer_failed(&ep->ctx->p, ep->peer, ep->fail_msg,
                         sizeof(ep->fail_msg), ep->aborted, ep->abort_reason,
                         what);
}

rcoll_status_t ib_ep_error(ib_ep_t *ep)
{
    ib_ep_fail(ep, "connection ended");
    return rcoll__set_error(RCOLL_ERR_REMOTE, "%s", ep->fail_msg);
}

/* ---- asynchronous events ---- */

/* A device's asynchronous events (a port gone down, a CQ overrun, a queue
 * pair in error) come through its context's async fd. rdma_cm opens each
 * device once per process, so every communicator on it shares that fd:
 * whichever engine finds events there reads them into the device's log
 * (under ib_async_lock), and every context takes what is new for it in
 * its own turn (ib_async_take: an atomic load per turn when nothing
 * happened). */
#define IB_ASYNC_LOG 64
#define IB_ASYNC_DEVS 16
typedef struct {
    enum ibv_event_type type;
    int port;
    const void *obj; /* the QP or CQ it names (compared, never used) */
} ib_async_ev_t;
typedef struct ib_async_dev {
    struct ibv_context *verbs;
    int users;
    unsigned gen; /* events logged */
    ib_async_ev_t log[IB_ASYNC_LOG];
} ib_async_dev_t;
static ib_async_dev_t ib_adevs[IB_ASYNC_DEVS];
static pthread_mutex_t ib_async_lock = PTHREAD_MUTEX_INITIALIZER;

/* Reads the events waiting on the device's fd into its log. */
static void ib_async_read(ib_async_dev_t *d)
{
    pthread_mutex_lock(&ib_async_lock);
    struct pollfd pf = {.fd = d->verbs->async_fd, .events = POLLIN};
    struct ibv_async_event ev;
    /* (the fd stays blocking: other users of the shared context may rely
     * on it; poll says an event is there before it is read) */
    while (poll(&pf, 1, 0) > 0 && (pf.revents & POLLIN) &&
           ibv_get_async_event(d->verbs, &ev) == 0) {
        ib_async_ev_t *e = &d->log[d->gen % IB_ASYNC_LOG];
        e->type = ev.event_type;
        e->port = 0;
        e->obj = NULL;
        switch (ev.event_type) {
        case IBV_EVENT_PORT_ERR:
        case IBV_EVENT_PORT_ACTIVE:
        case IBV_EVENT_LID_CHANGE:
        case IBV_EVENT_PKEY_CHANGE:
        case IBV_EVENT_GID_CHANGE:
        case IBV_EVENT_SM_CHANGE:
        case IBV_EVENT_CLIENT_REREGISTER:
            e->port = ev.element.port_num;
            break;
        case IBV_EVENT_CQ_ERR:
            e->obj = ev.element.cq;
            break;
        case IBV_EVENT_QP_FATAL:
        case IBV_EVENT_QP_REQ_ERR:
        case IBV_EVENT_QP_ACCESS_ERR:
        case IBV_EVENT_PATH_MIG_ERR:
        case IBV_EVENT_COMM_EST:
        case IBV_EVENT_SQ_DRAINED:
        case IBV_EVENT_PATH_MIG:
        case IBV_EVENT_QP_LAST_WQE_REACHED:
            e->obj = ev.element.qp;
            break;
        default:
            break;
        }
        ibv_ack_async_event(&ev);
        __atomic_store_n(&d->gen, d->gen + 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&ib_async_lock);
}

static void ib_fail_all(struct rcoll_tl_ctx *ctx, const char *what)
{
    for (int i = 0; i < ctx->p.nranks; i++)
        if (ctx->eps[i])
            ib_ep_fail(ctx->eps[i], "%s", what);
}

/* Device d is lost (its port down, the device failed): every queue pair
 * on it. A peer that can fail over (ib_fo.c) goes on over its others; a
 * peer without a queue pair on d is not concerned; the others fail. */
static void ib_dev_lost(struct rcoll_tl_ctx *ctx, const ib_dev_t *d,
                        const char *what)
{
    if (ctx->ndev == 1) {
        ib_fail_all(ctx, what);
        return;
    }
    for (int i = 0; i < ctx->p.nranks; i++) {
        ib_ep_t *ep = ctx->eps[i];
        for (int k = 0; ep && k < ctx->nqps && !ep->failed; k++) {
            ib_qp_t *q = &ep->qps[k];
            if (q->dev != d || q->down || (ctx->lazy && !q->up && !q->id))
                continue; /* (lazy, never connected: its first attempt
                             finds out, if the device is still gone) */
            if (q->bye || ctx->closing)
                q->ended = 1;
            else if (ib_fo_down(q, what) != 0)
                ib_ep_fail(ep, "%s", what);
        }
    }
}

/* One event, as it concerns this context: a port of ours down, our CQ
 * overrun or the device lost fail every peer at once (not at the
 * deadline); a queue pair of ours in error fails its peer. */
static void ib_async_handle(struct rcoll_tl_ctx *ctx, const ib_dev_t *d,
                            const ib_async_ev_t *e)
{
    char what[256];
    const char *name = ibv_event_type_str(e->type);
    switch (e->type) {
    case IBV_EVENT_PORT_ERR:
        if (e->port != d->port)
            return;
        snprintf(what, sizeof(what),
                 "this rank's device %s port %d went down "
                 "(asynchronous event %s)",
                 d->devname, e->port, name);
        ib_dev_lost(ctx, d, what);
        return;
    case IBV_EVENT_DEVICE_FATAL:
        snprintf(what, sizeof(what),
                 "device %s failed (asynchronous event "
                 "%s)",
                 d->devname, name);
        ib_dev_lost(ctx, d, what);
        return;
    case IBV_EVENT_CQ_ERR:
        if (e->obj != d->cq)
            return;
        snprintf(what, sizeof(what),
                 "device %s port %d: the completion "
                 "queue overran (asynchronous event %s)",
                 d->devname, d->port, name);
        ib_fail_all(ctx, what);
        return;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_PATH_MIG_ERR:
        /* ended by ib_progress once what arrived before is polled: a
         * peer that aborts (its reason is a message) and closes may
         * raise this event before we have polled its last messages */
        for (int i = 0; i < ctx->nq; i++) {
            ib_qp_t *q = ctx->qps[i];
            /* (lazy: an attempt not up yet is its cm event's business) */
            if (q->qp && (const void *)q->qp == e->obj && !q->ended &&
                (q->up || !ctx->lazy)) {
                snprintf(q->fatal, sizeof(q->fatal),
                         "device %s port %d: "
                         "queue pair %d failed (asynchronous event %s)",
                         q->dev->devname, q->dev->port, q->idx, name);
                ctx->nfatal++;
            }
        }
        return;
    default:
        rcoll_info(RCOLL_SUBSYS_NET,
                   "ib: rank %d: %s: asynchronous event %s"
                   " (port %d)",
                   ctx->p.rank, d->devname, name, e->port);
        return;
    }
}

/* Takes device t's events this context has not seen. */
static void ib_async_take_dev(struct rcoll_tl_ctx *ctx, ib_dev_t *t)
{
    ib_async_dev_t *d = t->adev;
    ib_async_ev_t evs[IB_ASYNC_LOG];
    if (!d || __atomic_load_n(&d->gen, __ATOMIC_ACQUIRE) == t->async_seen)
        return;
    pthread_mutex_lock(&ib_async_lock);
    unsigned n = d->gen - t->async_seen, lost = 0;
    if (n > IB_ASYNC_LOG) {
        lost = n - IB_ASYNC_LOG;
        n = IB_ASYNC_LOG;
    }
    for (unsigned k = 0; k < n; k++)
        evs[k] = d->log[(d->gen - n + k) % IB_ASYNC_LOG];
    t->async_seen = d->gen;
    pthread_mutex_unlock(&ib_async_lock);
    if (lost)
        rcoll_warn("ib: rank %d: %u asynchronous events of %s were missed",
                   ctx->p.rank, lost, t->devname);
    for (unsigned k = 0; k < n; k++)
        ib_async_handle(ctx, t, &evs[k]);
}

/* Takes every device's events this context has not seen. */
void ib_async_take(struct rcoll_tl_ctx *ctx)
{
    for (int i = 0; i < ctx->ndev; i++)
        ib_async_take_dev(ctx, &ctx->devs[i]);
}

static void ib_async_event(rcoll_ev_handler_t *h, uint32_t events)
{
    ib_dev_t *dev = (ib_dev_t *)((char *)h - offsetof(ib_dev_t, async_h));
    struct rcoll_tl_ctx *ctx = dev->ctx;
    (void)events;
    ib_async_read(dev->adev);
    ib_async_take(ctx);
}

/* Joins the device's log and puts its fd in the engine's epoll set. */
static rcoll_status_t ib_async_attach_dev(struct rcoll_tl_ctx *ctx,
                                         ib_dev_t *t)
{
    ib_async_dev_t *d = NULL;
    pthread_mutex_lock(&ib_async_lock);
    for (int i = 0; i < IB_ASYNC_DEVS && !d; i++)
        if (ib_adevs[i].users && ib_adevs[i].verbs == t->verbs)
            d = &ib_adevs[i];
    for (int i = 0; i < IB_ASYNC_DEVS && !d; i++)
        if (!ib_adevs[i].users) {
            d = &ib_adevs[i];
            d->verbs = t->verbs;
            d->gen = 0;
        }
    if (d) {
        d->users++;
        t->adev = d;
        t->async_seen = d->gen;
    }
    pthread_mutex_unlock(&ib_async_lock);
    if (!d)
        return rcoll__set_error(RCOLL_ERR_NO_DEVICE, "ib: more than %d RDMA "
                                "devices in use in this process",
                                IB_ASYNC_DEVS);
    t->async_h.cb = ib_async_event;
    struct epoll_event e = {.events = EPOLLIN, .data.ptr = &t->async_h};
    if (epoll_ctl(ctx->p.epfd, EPOLL_CTL_ADD, t->verbs->async_fd, &e) !=
        0)
        return rcoll__set_error(RCOLL_ERR_SYSTEM,
                                "ib: epoll_ctl of %s's "
                                "event fd: %s",
                                t->devname, strerror(errno));
    return RCOLL_OK;
}

static void ib_async_detach_dev(struct rcoll_tl_ctx *ctx, ib_dev_t *t)
{
    if (!t->adev)
        return;
    epoll_ctl(ctx->p.epfd, EPOLL_CTL_DEL, t->verbs->async_fd, NULL);
    pthread_mutex_lock(&ib_async_lock);
    if (--t->adev->users == 0)
        t->adev->verbs = NULL;
    pthread_mutex_unlock(&ib_async_lock);
    t->adev = NULL;
}

rcoll_status_t ib_async_attach(struct rcoll_tl_ctx *ctx)
{
    rcoll_status_t st = RCOLL_OK;
    for (int i = 0; i < ctx->ndev && st == RCOLL_OK; i++)
        st = ib_async_attach_dev(ctx, &ctx->devs[i]);
    return st;
}

void ib_async_detach(struct rcoll_tl_ctx *ctx)
{
    for (int i = 0; i < ctx->ndev; i++)
        ib_async_detach_dev(ctx, &ctx->devs[i]);
}

/* ib_send's steps. A message is one RDMA WRITE of header and payload into
 * the peer's slot, signalled by its immediate (or a SEND after it), and
 * for a receive the peer posted in place, a WRITE of the payload into the
 * peer's buffer before them. */

void ib_qp_ended(ib_qp_t *q, const char *why)
{
    ib_ep_t *ep = q->ep;
    struct rcoll_tl_ctx *ctx = ep->ctx;
    if (q->down)
        return; /* failed over already */
    q->ended = 1;
    if (q->bye || ctx->closing)
        return; /* after a goodbye: the peer closed, as it should */
    if (ep->aborted) {
        ib_ep_fail(ep, "aborted");
        return;
    }
    /* A port that went down flushes the queue pairs, and their error
     * completions may come before its event: the device says why first
     * (ib_async_handle), else the port's state does. */
    if (q->dev->adev) {
        ib_async_read(q->dev->adev);
        ib_async_take(ctx);
    }
    if (q->down || ep->failed)
        return; /* the event failed it over, or failed the peer */
    struct ibv_port_attr pa;
    char port[192];
    if (ibv_query_port(q->dev->verbs, q->dev->port, &pa) == 0 &&
        pa.state != IBV_PORT_ACTIVE) {
        snprintf(port, sizeof(port),
                 "this rank's device %s port %d went down (port state %s)",
                 q->dev->devname, q->dev->port, ibv_port_state_str(pa.state));
        why = port;
    }
    if (ep->fo && ib_fo_down(q, why) == 0)
        return;
    ib_ep_fail(ep, "%s", why);
}
