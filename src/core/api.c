/* The public collective calls: argument checks, then a request posted to
 * the communicator's queue. Blocking calls post and wait.
 *
 * GPU buffers (device memory, told apart by the CUDA driver when one is
 * present): a blocking call waits for the work queued on its stream,
 * stages the device data through host memory, runs the host collective and
 * copies the result back before it returns, so later work on the stream
 * (and on any stream) sees it. Mixing host and device buffers in one call
 * is an argument error; the non-blocking forms do not take device buffers
 * in this release (RCOLL_ERR_NOT_SUPPORTED). */
#include "core.h"
#include "cuda/rcuda.h"
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *fn;
    coll_kind_t kind;
    const void *sendbuf;
    void *recvbuf;
    size_t count;
    rcoll_datatype_t dt;
    rcoll_op_t op;
    int root;          /* root, peer, or -1 */
    int has_op;
    rcoll_stream_t stream; /* device buffers: the call's stream */
    int host_known;        /* run() found host buffers already */
    int tag;               /* send/recv */
    int held;              /* the entry point holds a reference to comm
                              (rcoll__comm_get): it is live, no lookup */
    int checked;           /* check() passed already (run_held) */
    /* all-to-all-v: counts and displacements in elements, by rank */
    const size_t *scounts, *sdispls, *rcounts, *rdispls;
} call_t;

/* The bytes a call reads from sendbuf and writes to recvbuf on this rank. */
static void call_bytes(const call_t *a, int r, int n, size_t *sb, size_t *rb)
{
    size_t b = a->count * rcoll_datatype_size(a->dt);
    *sb = *rb = b;
    switch (a->kind) {
    case COLL_ALLGATHER:      *rb = b * (size_t)n; break;
    case COLL_REDUCE_SCATTER: *sb = b * (size_t)n; break;
    case COLL_BROADCAST:      if (r != a->root) *sb = 0; break;
    case COLL_REDUCE:         if (r != a->root) *rb = 0; break;
    case COLL_SEND:           *rb = 0; break;
    case COLL_RECV:           *sb = 0; break;
    case COLL_BARRIER:        *sb = *rb = 0; break;
    case COLL_ALLTOALL:       *sb = *rb = b * (size_t)n; break;
    case COLL_ALLTOALLV:
        *sb = *rb = 0;
        for (int p = 0; p < n && a->scounts; p++) {
            size_t ds = rcoll_datatype_size(a->dt);
            if (a->scounts[p] && (a->sdispls[p] + a->scounts[p]) * ds > *sb)
                *sb = (a->sdispls[p] + a->scounts[p]) * ds;
            if (a->rcounts[p] && (a->rdispls[p] + a->rcounts[p]) * ds > *rb)
                *rb = (a->rdispls[p] + a->rcounts[p]) * ds;
        }
        break;
    case COLL_GATHER:         *rb = r == a->root ? b * (size_t)n : 0; break;
    case COLL_SCATTER:        *sb = r == a->root ? b * (size_t)n : 0; break;
    default: break;
    }
}

/* 1 if the call has device buffers, 0 if host, an error if mixed. */
static rcoll_status_t mem_kind(const call_t *a, rcoll_comm_t comm, int *dev)
{
    size_t sbytes, rbytes;
    call_bytes(a, comm->rank, comm->nranks, &sbytes, &rbytes);
    rcoll_mem_t s = sbytes && a->sendbuf ? rcoll_cuda_mem_type(a->sendbuf)
                                         : (rcoll_mem_t)-1;
    rcoll_mem_t r = rbytes && a->recvbuf ? rcoll_cuda_mem_type(a->recvbuf)
                                         : (rcoll_mem_t)-1;
    *dev = s == RCOLL_MEM_DEVICE || r == RCOLL_MEM_DEVICE;
    if ((int)s >= 0 && (int)r >= 0 && s != r)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "%s: rank %d: sendbuf is %s memory and recvbuf "
                                "is %s memory: both must be host or both GPU",
                                a->fn, comm->rank,
                                s == RCOLL_MEM_DEVICE ? "GPU" : "host",
                                r == RCOLL_MEM_DEVICE ? "GPU" : "host");
    return RCOLL_OK;
}

/* All-to-all-v's arrays: present, the local block's two counts equal,
 * every block inside size_t, buffers present where bytes move. */
static rcoll_status_t check_v(const call_t *a, rcoll_comm_t comm)
{
    int r = comm->rank, n = comm->nranks;
    size_t dts = rcoll_datatype_size(a->dt), sbytes = 0, rbytes = 0;
    if (!a->scounts || !a->sdispls || !a->rcounts || !a->rdispls)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "%s: rank %d: %s is NULL", a->fn, r,
                                !a->scounts   ? "sendcounts"
                                : !a->sdispls ? "sdispls"
                                : !a->rcounts ? "recvcounts"
                                              : "rdispls");
    for (int p = 0; p < n; p++) {
        size_t lim = (SIZE_MAX >> 1) / dts;
        if (a->scounts[p] > lim || a->sdispls[p] > lim - a->scounts[p] ||
            a->rcounts[p] > lim || a->rdispls[p] > lim - a->rcounts[p])
            return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                    "%s: rank %d: the block for rank %d "
                                    "overflows the buffer size", a->fn, r,
                                    p);
        sbytes += a->scounts[p];
        rbytes += a->rcounts[p];
    }
    if (a->scounts[r] != a->rcounts[r])
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "%s: rank %d: sendcounts[%d] = %zu but "
                                "recvcounts[%d] = %zu (its own block)",
                                a->fn, r, r, a->scounts[r], r,
                                a->rcounts[r]);
    if (sbytes && !a->sendbuf)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "%s: rank %d: sendbuf is NULL with %zu "
                                "elements to send", a->fn, r, sbytes);
    if (rbytes && !a->recvbuf)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "%s: rank %d: recvbuf is NULL with %zu "
                                "elements to receive", a->fn, r, rbytes);
    return RCOLL_OK;
}

static rcoll_status_t check(const call_t *a, rcoll_comm_t comm)
{
    if (!comm)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT, "%s: comm is NULL",
                                a->fn);
    if (!a->held && !rcoll__comm_live(comm))
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT, "%s: comm %p is "
                                "not a live communicator (destroyed or "
                                "aborted already?)", a->fn, (void *)comm);
    int r = comm->rank, n = comm->nranks;
    size_t dts = rcoll_datatype_size(a->dt);
    if (dts == 0)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "%s: rank %d: unknown datatype %d", a->fn, r,
                                (int)a->dt);
    if (a->has_op && (unsigned)a->op >= RCOLL_OP_COUNT)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "%s: rank %d: unknown reduction op %d", a->fn,
                                r, (int)a->op);
    /* the largest buffer the call touches must fit in size_t */
    size_t mult = (a->kind == COLL_ALLGATHER ||
                   a->kind == COLL_REDUCE_SCATTER ||
                   a->kind == COLL_ALLTOALL || a->kind == COLL_GATHER ||
                   a->kind == COLL_SCATTER)
                      ? (size_t)n : 1;
    if (a->kind == COLL_ALLTOALLV) {
        rcoll_status_t st = check_v(a, comm);
        if (st != RCOLL_OK)
            return st;
    }
    size_t total; /* (no division: two of them cost ~20 ns per call) */
    if (__builtin_mul_overflow(a->count, dts, &total) ||
        __builtin_mul_overflow(total, mult, &total) || total > (SIZE_MAX >> 1))
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "%s: rank %d: count %zu of %s overflows the "
                                "buffer size", a->fn, r, a->count,
                                rcoll_datatype_name(a->dt));
    if (a->kind == COLL_BROADCAST || a->kind == COLL_REDUCE ||
        a->kind == COLL_GATHER || a->kind == COLL_SCATTER) {
        if (a->root < 0 || a->root >= n)
            return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                    "%s: rank %d: root %d out of range [0, %d)",
                                    a->fn, r, a->root, n);
    }
    if (a->kind == COLL_SEND || a->kind == COLL_RECV) {
        if (a->tag < 0)
            return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                    "%s: rank %d: tag %d is negative (tags "
                                    "are >= 0)", a->fn, r, a->tag);
        if (a->root < 0 || a->root >= n || a->root == r)
            return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                    "%s: rank %d: peer %d invalid (range [0, "
                                    "%d), not self)", a->fn, r, a->root, n);
    }
    if (a->count > 0) {
        int need_send = 1, need_recv = 1;
        switch (a->kind) {
        case COLL_BROADCAST: need_send = r == a->root; break;
        case COLL_REDUCE:    need_recv = r == a->root; break;
        case COLL_SEND:      need_recv = 0; break;
        case COLL_RECV:      need_send = 0; break;
        case COLL_GATHER:    need_recv = r == a->root; break;
        case COLL_SCATTER:   need_send = r == a->root; break;
        case COLL_ALLTOALLV: need_send = need_recv = 0; break; /* check_v */
        default: break;
        }
        if (need_send && !a->sendbuf)
            return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                    "%s: rank %d: %s is NULL with count %zu",
                                    a->fn, r,
                                    a->kind == COLL_SEND ? "buf" : "sendbuf",
                                    a->count);
        if (need_recv && !a->recvbuf)
            return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                    "%s: rank %d: %s is NULL with count %zu",
                                    a->fn, r,
                                    a->kind == COLL_RECV ? "buf" : "recvbuf",
                                    a->count);
    }
    return RCOLL_OK;
}

/* ---- groups (rcoll_group_start / rcoll_group_end): per thread ---- */

static __thread int group_depth_tls;
static __thread struct rcoll_request *group_head, *group_tail;
/* groups open in any thread: while 0, no call looks at the thread-local
 * depth (a __tls_get_addr per call in a shared library) */
static int groups_open;
#define group_depth                                                        \
    (__atomic_load_n(&groups_open, __ATOMIC_RELAXED) ? group_depth_tls : 0)

RCOLL_API rcoll_status_t rcoll_group_start(void)
{
    rcoll__clear_error();
    if (group_depth_tls++ == 0)
        __atomic_add_fetch(&groups_open, 1, __ATOMIC_RELAXED);
    return RCOLL_OK;
}

RCOLL_API rcoll_status_t rcoll_group_end(void)
{
    rcoll__clear_error();
    if (group_depth_tls == 0)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "rcoll_group_end: no rcoll_group_start "
                                "open in this thread");
    if (--group_depth_tls > 0)
        return RCOLL_OK;
    __atomic_sub_fetch(&groups_open, 1, __ATOMIC_RELAXED);
    struct rcoll_request *list = group_head;
    group_head = group_tail = NULL;
    rcoll_status_t first = RCOLL_OK;
    char msg[1024] = "";
    /* launch everything in call order, then wait for the blocking calls */
    for (struct rcoll_request *r = list; r; r = r->group_next) {
        struct rcoll_comm *c = r->comm;
        r->grouped = 0;
        r->comm = NULL;
        /* (the progress thread is woken even for blocking calls: the
         * group may span communicators, and we wait on one at a time) */
        rcoll_status_t st = rcoll__comm_post(c, r, 0);
        rcoll__comm_release(c); /* the request holds its own now */
        if (st != RCOLL_OK) {
            /* never posted (r->comm stays NULL): its rcoll_wait, or ours
             * below, reports the error and frees it */
            r->status = st;
            snprintf(r->errmsg, sizeof(r->errmsg), "%s", rcoll_last_error());
            r->done = 1;
            if (first == RCOLL_OK) {
                first = st;
                snprintf(msg, sizeof(msg), "%s", r->errmsg);
            }
        }
    }
    for (struct rcoll_request *r = list, *nx; r; r = nx) {
        nx = r->group_next;
        if (!r->group_wait)
            continue;
        rcoll_status_t st = rcoll_wait(r);
        if (st != RCOLL_OK && first == RCOLL_OK) {
            first = st;
            snprintf(msg, sizeof(msg), "%s", rcoll_last_error());
        }
    }
    if (first != RCOLL_OK)
        return rcoll__set_error(first, "rcoll_group_end: %s", msg);
    return RCOLL_OK;
}

/* Every rank passes these the same count (MPI's rule too), so with count
 * 0 no rank has anything to move or to wait for: the call returns at once
 * (rcoll__comm_noop). Not so for all-to-allv (a rank may send nothing and
 * still receive), the barrier, or point-to-point (an empty message is
 * still a message to match). */
static int moves_nothing(const call_t *a)
{
    if (a->count != 0)
        return 0;
    switch (a->kind) {
    case COLL_ALLREDUCE: case COLL_ALLGATHER: case COLL_BROADCAST:
    case COLL_REDUCE_SCATTER: case COLL_REDUCE: case COLL_ALLTOALL:
    case COLL_GATHER: case COLL_SCATTER:
        return 1;
    default:
        return 0;
    }
}

static rcoll_status_t post_req(const call_t *a, rcoll_comm_t comm,
                               rcoll_request_t *req, int will_wait)
{
    rcoll_status_t st;
    rcoll__clear_error();
    if (!req)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT, "%s: req is NULL",
                                a->fn);
    if (!a->checked && (st = check(a, comm)) != RCOLL_OK)
        return st;
    if (moves_nothing(a)) {
        /* a request already complete: rcoll_test says done, rcoll_wait
         * frees it (comm NULL: never posted, as in req_unposted) */
        if ((st = rcoll__comm_noop(comm, a->kind)) != RCOLL_OK)
            return st;
        struct rcoll_request *r = malloc(sizeof(*r));
        if (!r)
            return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "%s: no memory",
                                    a->fn);
        memset(r, 0, offsetof(struct rcoll_request, errmsg));
        r->errmsg[0] = '\0';
        r->sched.kind = a->kind;
        r->status = RCOLL_OK;
        r->done = 1;
        *req = r;
        return RCOLL_OK;
    }
    int dev = 0;
    if (!a->host_known && (st = mem_kind(a, comm, &dev)) != RCOLL_OK)
        return st;
    if (dev)
        return rcoll__set_error(RCOLL_ERR_NOT_SUPPORTED,
                                "%s: rank %d: GPU buffers are taken by the "
                                "blocking call only in this release (the "
                                "non-blocking form needs host buffers)",
                                a->fn, comm->rank);
    /* zeroed up to the error message, which is only read once written
     * (a kilobyte's memset less per call: the small path counts) */
    struct rcoll_request *r = malloc(sizeof(*r));
    if (!r)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "%s: no memory", a->fn);
    memset(r, 0, offsetof(struct rcoll_request, errmsg));
    r->errmsg[0] = '\0';
    r->sched.kind = a->kind;
    r->sched.sendbuf = a->sendbuf;
    r->sched.recvbuf = a->recvbuf;
    r->sched.count = a->count;
    r->sched.dt = a->dt;
    r->sched.op = a->has_op ? a->op : RCOLL_SUM;
    r->sched.root = a->root;
    r->sched.tag = a->tag;
    if (a->kind == COLL_ALLTOALLV) {
        /* the caller may reuse its arrays once the call returns */
        size_t n = (size_t)comm->nranks;
        if (!(r->sched.v = malloc(4 * n * sizeof(size_t)))) {
            free(r);
            return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "%s: no memory",
                                    a->fn);
        }
        memcpy(r->sched.v, a->scounts, n * sizeof(size_t));
        memcpy(r->sched.v + n, a->sdispls, n * sizeof(size_t));
        memcpy(r->sched.v + 2 * n, a->rcounts, n * sizeof(size_t));
        memcpy(r->sched.v + 3 * n, a->rdispls, n * sizeof(size_t));
    }
    if (group_depth > 0) {
        /* only posted by rcoll_group_end, in call order */
        r->comm = comm;
        rcoll__comm_ref(comm); /* until rcoll_group_end posts it */
        r->grouped = 1;
        r->group_wait = will_wait;
        r->refs = 1;
        if (group_tail)
            group_tail->group_next = r;
        else
            group_head = r;
        group_tail = r;
        *req = r;
        return RCOLL_OK;
    }
    if ((st = rcoll__comm_post(comm, r, will_wait)) != RCOLL_OK) {
        coll_sched_free(&r->sched);
        free(r);
        return st;
    }
    *req = r;
    return RCOLL_OK;
}

/* The API's entry points hold a reference to the communicator for the
 * whole call (rcoll__comm_get), so an rcoll_comm_abort from another
 * thread cannot free it under them; a handle that is not live goes on
 * without one and check() reports it. */
static rcoll_status_t post(const call_t *a, rcoll_comm_t comm,
                           rcoll_request_t *req)
{
    if (!rcoll__comm_get(comm))
        return post_req(a, comm, req, 0);
    call_t h = *a;
    h.held = 1;
    rcoll_status_t st = post_req(&h, comm, req, 0);
    rcoll__comm_release(comm);
    return st;
}

static rcoll_status_t run_host(const call_t *a, rcoll_comm_t comm);

/* A blocking call with GPU buffers, staged through host memory: wait for
 * the stream, copy in, run on host buffers, copy out. When sendbuf lies
 * inside recvbuf (in place) the staging keeps that layout. */
static rcoll_status_t run_device(const call_t *a, rcoll_comm_t comm)
{
    size_t sbytes, rbytes;
    call_bytes(a, comm->rank, comm->nranks, &sbytes, &rbytes);
    const char *s = a->sendbuf;
    char *r = a->recvbuf;
    int inside = sbytes && rbytes && s >= r && s + sbytes <= r + rbytes;
    char *hr = rbytes ? malloc(rbytes) : NULL;
    char *hs = sbytes && !inside ? malloc(sbytes) : NULL;
    rcoll_status_t st = RCOLL_OK;
    if ((rbytes && !hr) || (sbytes && !inside && !hs)) {
        st = rcoll__set_error(RCOLL_ERR_NO_MEMORY, "%s: rank %d: no memory "
                              "for %zu bytes of host staging", a->fn,
                              comm->rank, sbytes + rbytes);
        goto out;
    }
    if ((st = rcoll_cuda_stream_sync(a->stream, sbytes ? (const void *)s
                                                        : (const void *)r)) !=
        RCOLL_OK)
        goto out;
    if (inside)
        st = rcoll_cuda_d2h(hr, r, rbytes);
    else if (sbytes)
        st = rcoll_cuda_d2h(hs, s, sbytes);
    /* the whole staging goes back to the device: where the call leaves
     * recvbuf alone (a receive's tail past a shorter message, the gaps
     * between all-to-all-v blocks) it must hold the device's bytes */
    if (st == RCOLL_OK && !inside && rbytes &&
        (a->kind == COLL_RECV || a->kind == COLL_ALLTOALLV))
        st = rcoll_cuda_d2h(hr, r, rbytes);
    if (st != RCOLL_OK)
        goto out;
    call_t h = *a;
    h.host_known = 1;
    h.sendbuf = inside ? hr + (s - r) : hs;
    h.recvbuf = hr;
    if ((st = run_host(&h, comm)) != RCOLL_OK)
        goto out;
    st = rcoll_cuda_h2d(r, hr, rbytes);
out:
    if (st != RCOLL_OK && a->kind != COLL_BARRIER) {
        char msg[1024];
        snprintf(msg, sizeof(msg), "%s", rcoll_last_error());
        if (!strstr(msg, a->fn))
            rcoll__set_error(st, "%s (GPU buffers, staged through host "
                             "memory): rank %d: %s", a->fn, comm->rank, msg);
    }
    free(hr);
    free(hs);
    return st;
}

static rcoll_status_t run_held(const call_t *a, rcoll_comm_t comm);

static rcoll_status_t run(const call_t *a, rcoll_comm_t comm)
{
    if (!rcoll__comm_get(comm))
        return run_host(a, comm); /* check() says what is wrong */
    call_t h = *a;
    h.held = 1;
    rcoll_status_t st = run_held(&h, comm);
    rcoll__comm_release(comm);
    return st;
}

static rcoll_status_t run_held(const call_t *a, rcoll_comm_t comm)
{
    rcoll_status_t st;
    int dev = 0;
    rcoll__clear_error();
    if (check(a, comm) == RCOLL_OK) {
        if (moves_nothing(a))
            return rcoll__comm_noop(comm, a->kind);
        if ((st = mem_kind(a, comm, &dev)) != RCOLL_OK)
            return st;
        if (dev && group_depth > 0)
            return rcoll__set_error(RCOLL_ERR_NOT_SUPPORTED,
                                    "%s: rank %d: GPU buffers inside "
                                    "rcoll_group_start/end are not supported "
                                    "in this release", a->fn, comm->rank);
        if (dev)
            return run_device(a, comm);
        call_t h = *a;
        h.host_known = 1;
        h.checked = 1;
        return run_host(&h, comm);
    }
    return run_host(a, comm);
}

static rcoll_status_t run_host(const call_t *a, rcoll_comm_t comm)
{
    rcoll_request_t req;
    rcoll_status_t st;
    if (a->host_known && comm->env.area && group_depth == 0) {
        /* a small collective of ranks that share this host: in this
         * thread through the shared area when nothing else is in flight */
        /* only what the area's code and a dump read is set: zeroing the
         * whole schedule (its inline steps) costs more than the call */
        coll_sched_t s;
        s.kind = a->kind;
        s.sendbuf = a->sendbuf;
        s.recvbuf = a->recvbuf;
        s.count = a->count;
        s.dt = a->dt;
        s.op = a->has_op ? a->op : RCOLL_SUM;
        s.root = a->root;
        s.tag = a->tag;
        s.seq = 0;
        s.nsteps = s.s_step = s.r_step = s.s_chunk = s.r_chunk = 0;
        s.waiting_peer = -1;
        s.waiting_for = NULL;
        s.area = 0;
        s.nchan = 0;
        if ((st = rcoll__comm_run_inline(comm, &s)) != RCOLL_INPROGRESS)
            return st;
    }
    st = post_req(a, comm, &req, 1);
    if (st != RCOLL_OK)
        return st;
    if (group_depth > 0)
        return RCOLL_OK; /* rcoll_group_end runs it and waits */
    return rcoll_wait(req);
}

#define CALL(_fn, _kind, _sb, _rb, _cnt, _dt, _op, _root, _hasop)            \
    call_t a = {.fn = _fn, .kind = _kind, .sendbuf = _sb, .recvbuf = _rb,   \
                .count = _cnt, .dt = _dt, .op = _op, .root = _root,        \
                .has_op = _hasop, .stream = stream}

RCOLL_API rcoll_status_t rcoll_iallreduce(const void *sendbuf, void *recvbuf,
        size_t count, rcoll_datatype_t dt, rcoll_op_t op, rcoll_comm_t comm,
        rcoll_stream_t stream, rcoll_request_t *req)
{
    CALL("rcoll_allreduce", COLL_ALLREDUCE, sendbuf, recvbuf, count, dt, op,
         -1, 1);
    return post(&a, comm, req);
}

RCOLL_API rcoll_status_t rcoll_allreduce(const void *sendbuf, void *recvbuf,
        size_t count, rcoll_datatype_t dt, rcoll_op_t op, rcoll_comm_t comm,
        rcoll_stream_t stream)
{
    CALL("rcoll_allreduce", COLL_ALLREDUCE, sendbuf, recvbuf, count, dt, op,
         -1, 1);
    return run(&a, comm);
}

RCOLL_API rcoll_status_t rcoll_iallgather(const void *sendbuf, void *recvbuf,
        size_t sendcount, rcoll_datatype_t dt, rcoll_comm_t comm,
        rcoll_stream_t stream, rcoll_request_t *req)
{
    CALL("rcoll_allgather", COLL_ALLGATHER, sendbuf, recvbuf, sendcount, dt,
         RCOLL_SUM, -1, 0);
    return post(&a, comm, req);
}

RCOLL_API rcoll_status_t rcoll_allgather(const void *sendbuf, void *recvbuf,
        size_t sendcount, rcoll_datatype_t dt, rcoll_comm_t comm,
        rcoll_stream_t stream)
{
    CALL("rcoll_allgather", COLL_ALLGATHER, sendbuf, recvbuf, sendcount, dt,
         RCOLL_SUM, -1, 0);
    return run(&a, comm);
}

RCOLL_API rcoll_status_t rcoll_ibroadcast(const void *sendbuf, void *recvbuf,
        size_t count, rcoll_datatype_t dt, int root, rcoll_comm_t comm,
        rcoll_stream_t stream, rcoll_request_t *req)
{
    CALL("rcoll_broadcast", COLL_BROADCAST, sendbuf, recvbuf, count, dt,
         RCOLL_SUM, root, 0);
    return post(&a, comm, req);
}

RCOLL_API rcoll_status_t rcoll_broadcast(const void *sendbuf, void *recvbuf,
        size_t count, rcoll_datatype_t dt, int root, rcoll_comm_t comm,
        rcoll_stream_t stream)
{
    CALL("rcoll_broadcast", COLL_BROADCAST, sendbuf, recvbuf, count, dt,
         RCOLL_SUM, root, 0);
    return run(&a, comm);
}

RCOLL_API rcoll_status_t rcoll_ireduce_scatter(const void *sendbuf,
        void *recvbuf, size_t recvcount, rcoll_datatype_t dt, rcoll_op_t op,
        rcoll_comm_t comm, rcoll_stream_t stream, rcoll_request_t *req)
{
    CALL("rcoll_reduce_scatter", COLL_REDUCE_SCATTER, sendbuf, recvbuf,
         recvcount, dt, op, -1, 1);
    return post(&a, comm, req);
}

RCOLL_API rcoll_status_t rcoll_reduce_scatter(const void *sendbuf,
        void *recvbuf, size_t recvcount, rcoll_datatype_t dt, rcoll_op_t op,
        rcoll_comm_t comm, rcoll_stream_t stream)
{
    CALL("rcoll_reduce_scatter", COLL_REDUCE_SCATTER, sendbuf, recvbuf,
         recvcount, dt, op, -1, 1);
    return run(&a, comm);
}

RCOLL_API rcoll_status_t rcoll_ireduce(const void *sendbuf, void *recvbuf,
        size_t count, rcoll_datatype_t dt, rcoll_op_t op, int root,
        rcoll_comm_t comm, rcoll_stream_t stream, rcoll_request_t *req)
{
    CALL("rcoll_reduce", COLL_REDUCE, sendbuf, recvbuf, count, dt, op, root,
         1);
    return post(&a, comm, req);
}

RCOLL_API rcoll_status_t rcoll_reduce(const void *sendbuf, void *recvbuf,
        size_t count, rcoll_datatype_t dt, rcoll_op_t op, int root,
        rcoll_comm_t comm, rcoll_stream_t stream)
{
    CALL("rcoll_reduce", COLL_REDUCE, sendbuf, recvbuf, count, dt, op, root,
         1);
    return run(&a, comm);
}

RCOLL_API rcoll_status_t rcoll_ibarrier(rcoll_comm_t comm,
                                        rcoll_request_t *req)
{
    rcoll_stream_t stream = NULL;
    CALL("rcoll_barrier", COLL_BARRIER, NULL, NULL, 0, RCOLL_INT8, RCOLL_SUM,
         -1, 0);
    return post(&a, comm, req);
}

RCOLL_API rcoll_status_t rcoll_barrier(rcoll_comm_t comm)
{
    rcoll_stream_t stream = NULL;
    CALL("rcoll_barrier", COLL_BARRIER, NULL, NULL, 0, RCOLL_INT8, RCOLL_SUM,
         -1, 0);
    return run(&a, comm);
}

#define P2P(_fn, _kind, _sb, _rb, _peer, _tag)                              \
    CALL(_fn, _kind, _sb, _rb, count, dt, RCOLL_SUM, _peer, 0);              \
    a.tag = _tag

RCOLL_API rcoll_status_t rcoll_isend_tag(const void *buf, size_t count,
        rcoll_datatype_t dt, int peer, int tag, rcoll_comm_t comm,
        rcoll_stream_t stream, rcoll_request_t *req)
{
    P2P("rcoll_send", COLL_SEND, buf, NULL, peer, tag);
    return post(&a, comm, req);
}

RCOLL_API rcoll_status_t rcoll_send_tag(const void *buf, size_t count,
        rcoll_datatype_t dt, int peer, int tag, rcoll_comm_t comm,
        rcoll_stream_t stream)
{
    P2P("rcoll_send", COLL_SEND, buf, NULL, peer, tag);
    return run(&a, comm);
}

RCOLL_API rcoll_status_t rcoll_irecv_tag(void *buf, size_t count,
        rcoll_datatype_t dt, int peer, int tag, rcoll_comm_t comm,
        rcoll_stream_t stream, rcoll_request_t *req)
{
    P2P("rcoll_recv", COLL_RECV, NULL, buf, peer, tag);
    return post(&a, comm, req);
}

RCOLL_API rcoll_status_t rcoll_recv_tag(void *buf, size_t count,
        rcoll_datatype_t dt, int peer, int tag, rcoll_comm_t comm,
        rcoll_stream_t stream)
{
    P2P("rcoll_recv", COLL_RECV, NULL, buf, peer, tag);
    return run(&a, comm);
}

RCOLL_API rcoll_status_t rcoll_isend(const void *buf, size_t count,
        rcoll_datatype_t dt, int peer, rcoll_comm_t comm,
        rcoll_stream_t stream, rcoll_request_t *req)
{
    return rcoll_isend_tag(buf, count, dt, peer, 0, comm, stream, req);
}

RCOLL_API rcoll_status_t rcoll_send(const void *buf, size_t count,
        rcoll_datatype_t dt, int peer, rcoll_comm_t comm,
        rcoll_stream_t stream)
{
    return rcoll_send_tag(buf, count, dt, peer, 0, comm, stream);
}

RCOLL_API rcoll_status_t rcoll_irecv(void *buf, size_t count,
        rcoll_datatype_t dt, int peer, rcoll_comm_t comm,
        rcoll_stream_t stream, rcoll_request_t *req)
{
    return rcoll_irecv_tag(buf, count, dt, peer, 0, comm, stream, req);
}

RCOLL_API rcoll_status_t rcoll_recv(void *buf, size_t count,
        rcoll_datatype_t dt, int peer, rcoll_comm_t comm,
        rcoll_stream_t stream)
{
    return rcoll_recv_tag(buf, count, dt, peer, 0, comm, stream);
}

RCOLL_API rcoll_status_t rcoll_ialltoall(const void *sendbuf, void *recvbuf,
        size_t count, rcoll_datatype_t dt, rcoll_comm_t comm,
        rcoll_stream_t stream, rcoll_request_t *req)
{
    CALL("rcoll_alltoall", COLL_ALLTOALL, sendbuf, recvbuf, count, dt,
         RCOLL_SUM, -1, 0);
    return post(&a, comm, req);
}

RCOLL_API rcoll_status_t rcoll_alltoall(const void *sendbuf, void *recvbuf,
        size_t count, rcoll_datatype_t dt, rcoll_comm_t comm,
        rcoll_stream_t stream)
{
    CALL("rcoll_alltoall", COLL_ALLTOALL, sendbuf, recvbuf, count, dt,
         RCOLL_SUM, -1, 0);
    return run(&a, comm);
}

#define ALLTOALLV()                                                         \
    CALL("rcoll_alltoallv", COLL_ALLTOALLV, sendbuf, recvbuf, 0, dt,       \
         RCOLL_SUM, -1, 0);                                                 \
    a.scounts = sendcounts;                                                 \
    a.sdispls = sdispls;                                                    \
    a.rcounts = recvcounts;                                                 \
    a.rdispls = rdispls

RCOLL_API rcoll_status_t rcoll_ialltoallv(const void *sendbuf,
        const size_t *sendcounts, const size_t *sdispls, void *recvbuf,
        const size_t *recvcounts, const size_t *rdispls, rcoll_datatype_t dt,
        rcoll_comm_t comm, rcoll_stream_t stream, rcoll_request_t *req)
{
    ALLTOALLV();
    return post(&a, comm, req);
}

RCOLL_API rcoll_status_t rcoll_alltoallv(const void *sendbuf,
        const size_t *sendcounts, const size_t *sdispls, void *recvbuf,
        const size_t *recvcounts, const size_t *rdispls, rcoll_datatype_t dt,
        rcoll_comm_t comm, rcoll_stream_t stream)
{
    ALLTOALLV();
    return run(&a, comm);
}

RCOLL_API rcoll_status_t rcoll_igather(const void *sendbuf, void *recvbuf,
        size_t sendcount, rcoll_datatype_t dt, int root, rcoll_comm_t comm,
        rcoll_stream_t stream, rcoll_request_t *req)
{
    CALL("rcoll_gather", COLL_GATHER, sendbuf, recvbuf, sendcount, dt,
         RCOLL_SUM, root, 0);
    return post(&a, comm, req);
}

RCOLL_API rcoll_status_t rcoll_gather(const void *sendbuf, void *recvbuf,
        size_t sendcount, rcoll_datatype_t dt, int root, rcoll_comm_t comm,
        rcoll_stream_t stream)
{
    CALL("rcoll_gather", COLL_GATHER, sendbuf, recvbuf, sendcount, dt,
         RCOLL_SUM, root, 0);
    return run(&a, comm);
}

RCOLL_API rcoll_status_t rcoll_iscatter(const void *sendbuf, void *recvbuf,
        size_t recvcount, rcoll_datatype_t dt, int root, rcoll_comm_t comm,
        rcoll_stream_t stream, rcoll_request_t *req)
{
    CALL("rcoll_scatter", COLL_SCATTER, sendbuf, recvbuf, recvcount, dt,
         RCOLL_SUM, root, 0);
    return post(&a, comm, req);
}

RCOLL_API rcoll_status_t rcoll_scatter(const void *sendbuf, void *recvbuf,
        size_t recvcount, rcoll_datatype_t dt, int root, rcoll_comm_t comm,
        rcoll_stream_t stream)
{
    CALL("rcoll_scatter", COLL_SCATTER, sendbuf, recvbuf, recvcount, dt,
         RCOLL_SUM, root, 0);
    return run(&a, comm);
}
