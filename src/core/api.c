/* The public collective calls: argument checks, then a request posted to
 * the communicator's queue. Blocking calls post and wait. */
#include "core.h"
#include <stdint.h>
#include <stdlib.h>

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
    rcoll_stream_t stream; /* host buffers in this release: not used */
} call_t;

static rcoll_status_t check(const call_t *a, rcoll_comm_t comm)
{
    if (!comm)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT, "%s: comm is NULL",
                                a->fn);
    if (!rcoll__comm_live(comm))
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
    size_t mult = (a->kind == COLL_ALLGATHER || a->kind == COLL_REDUCE_SCATTER)
                      ? (size_t)n : 1;
    if (a->count > SIZE_MAX / dts / mult || a->count * dts * mult > (SIZE_MAX >> 1))
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "%s: rank %d: count %zu of %s overflows the "
                                "buffer size", a->fn, r, a->count,
                                rcoll_datatype_name(a->dt));
    if (a->kind == COLL_BROADCAST || a->kind == COLL_REDUCE) {
        if (a->root < 0 || a->root >= n)
            return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                    "%s: rank %d: root %d out of range [0, %d)",
                                    a->fn, r, a->root, n);
    }
    if (a->kind == COLL_SEND || a->kind == COLL_RECV) {
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

static rcoll_status_t post_req(const call_t *a, rcoll_comm_t comm,
                               rcoll_request_t *req, int will_wait)
{
    rcoll_status_t st;
    rcoll__clear_error();
    if (!req)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT, "%s: req is NULL",
                                a->fn);
    if ((st = check(a, comm)) != RCOLL_OK)
        return st;
    struct rcoll_request *r = calloc(1, sizeof(*r));
    if (!r)
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "%s: no memory", a->fn);
    r->sched.kind = a->kind;
    r->sched.sendbuf = a->sendbuf;
    r->sched.recvbuf = a->recvbuf;
    r->sched.count = a->count;
    r->sched.dt = a->dt;
    r->sched.op = a->has_op ? a->op : RCOLL_SUM;
    r->sched.root = a->root;
    if ((st = rcoll__comm_post(comm, r, will_wait)) != RCOLL_OK)
        return st;
    *req = r;
    return RCOLL_OK;
}

static rcoll_status_t post(const call_t *a, rcoll_comm_t comm,
                           rcoll_request_t *req)
{
    return post_req(a, comm, req, 0);
}

static rcoll_status_t run(const call_t *a, rcoll_comm_t comm)
{
    rcoll_request_t req;
    rcoll_status_t st = post_req(a, comm, &req, 1);
    if (st != RCOLL_OK)
        return st;
    return rcoll_wait(req);
}

#define CALL(_fn, _kind, _sb, _rb, _cnt, _dt, _op, _root, _hasop)            \
    call_t a = {_fn, _kind, _sb, _rb, _cnt, _dt, _op, _root, _hasop, stream}

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

RCOLL_API rcoll_status_t rcoll_isend(const void *buf, size_t count,
        rcoll_datatype_t dt, int peer, rcoll_comm_t comm,
        rcoll_stream_t stream, rcoll_request_t *req)
{
    CALL("rcoll_send", COLL_SEND, buf, NULL, count, dt, RCOLL_SUM, peer, 0);
    return post(&a, comm, req);
}

RCOLL_API rcoll_status_t rcoll_send(const void *buf, size_t count,
        rcoll_datatype_t dt, int peer, rcoll_comm_t comm,
        rcoll_stream_t stream)
{
    CALL("rcoll_send", COLL_SEND, buf, NULL, count, dt, RCOLL_SUM, peer, 0);
    return run(&a, comm);
}

RCOLL_API rcoll_status_t rcoll_irecv(void *buf, size_t count,
        rcoll_datatype_t dt, int peer, rcoll_comm_t comm,
        rcoll_stream_t stream, rcoll_request_t *req)
{
    CALL("rcoll_recv", COLL_RECV, NULL, buf, count, dt, RCOLL_SUM, peer, 0);
    return post(&a, comm, req);
}

RCOLL_API rcoll_status_t rcoll_recv(void *buf, size_t count,
        rcoll_datatype_t dt, int peer, rcoll_comm_t comm,
        rcoll_stream_t stream)
{
    CALL("rcoll_recv", COLL_RECV, NULL, buf, count, dt, RCOLL_SUM, peer, 0);
    return run(&a, comm);
}
