/* Requests: posting an operation to the communicator's queue, and
 * rcoll_test / rcoll_wait (and their _status forms). */
#include "core.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rcoll__req_put(struct rcoll_request *r)
{
    if (__atomic_sub_fetch(&r->refs, 1, __ATOMIC_ACQ_REL) == 0)
        free(r);
}

rcoll_status_t rcoll__comm_post(struct rcoll_comm *c, struct rcoll_request *r,
                                int will_wait)
{
    const char *what = coll_kind_name(r->sched.kind);
    pthread_mutex_lock(&c->lock);
    if (c->closed) {
        pthread_mutex_unlock(&c->lock);
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "rcoll_%s: the communicator was destroyed",
                                what);
    }
    if (c->error != RCOLL_OK) {
        rcoll_status_t st = c->error;
        rcoll__set_error(st, "rcoll_%s: %s", what, c->errmsg);
        pthread_mutex_unlock(&c->lock);
        return st;
    }
    r->comm = c;
    if (r->sched.kind == COLL_SEND)
        r->sched.seq = c->p2p_tx[r->sched.root]++;
    else if (r->sched.kind != COLL_RECV)
        r->sched.seq = __atomic_add_fetch(&c->coll_seq, 1,
                                          __ATOMIC_RELAXED);
    r->sched.waiting_peer = -1;
    r->refs = 1;
    __atomic_add_fetch(&c->refs, 1, __ATOMIC_ACQ_REL);
    r->next = NULL;
    r->prev = c->qtail;
    if (c->qtail)
        c->qtail->next = r;
    else
        __atomic_store_n(&c->qhead, r, __ATOMIC_RELEASE);
    c->qtail = r;
    pthread_mutex_unlock(&c->lock);
    /* a caller about to wait drives the engine itself */
    if (!will_wait)
        rcoll__comm_wake(c);
    return RCOLL_OK;
}

/* No message, no sequence number, no lock when all is well: Open MPI's
 * MPI_Allreduce, MPI_Bcast and MPI_Allgather return at once for count 0,
 * and so does NCCL; ranks that disagree on the count (0 here, more
 * elsewhere) are caught by the next operation or the deadline instead. */
rcoll_status_t rcoll__comm_noop(struct rcoll_comm *c, coll_kind_t kind)
{
    if (!__atomic_load_n(&c->closed, __ATOMIC_ACQUIRE) &&
        __atomic_load_n(&c->error, __ATOMIC_ACQUIRE) == RCOLL_OK)
        return RCOLL_OK;
    const char *what = coll_kind_name(kind);
    rcoll_status_t st;
    pthread_mutex_lock(&c->lock);
    if (c->closed)
        st = rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                              "rcoll_%s: the communicator was destroyed",
                              what);
    else
        st = rcoll__set_error(c->error, "rcoll_%s: %s", what, c->errmsg);
    pthread_mutex_unlock(&c->lock);
    return st;
}

/* A request of a group not ended yet, or one whose group could not post
 * it (comm NULL): what rcoll_test and rcoll_wait say of it. */
static rcoll_status_t req_unposted(rcoll_request_t req, const char *fn)
{
    if (req->grouped)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "%s: the request was posted inside "
                                "rcoll_group_start/end and the group has "
                                "not ended (it launches then)", fn);
    if (req->status != RCOLL_OK)
        rcoll__set_error_str(req->errmsg);
    return req->status;
}

/* What a finished request did, into the caller's struct as far as its
 * size says (rcoll_req_status_t). */
static void req_status_fill(const struct rcoll_request *r, rcoll_status_t st,
                            rcoll_req_status_t *out)
{
    if (!out || out->size <= sizeof(out->size))
        return;
    rcoll_req_status_t v = {sizeof(v), st, r->sched.count, -1, -1};
    if (r->sched.kind == COLL_RECV) {
        v.source = r->sched.root;
        v.tag = r->sched.tag;
    }
    size_t n = RCOLL_MIN(out->size, sizeof(v)) - sizeof(v.size);
    memcpy((char *)out + sizeof(v.size), (const char *)&v + sizeof(v.size),
           n);
}

RCOLL_API rcoll_status_t rcoll_test(rcoll_request_t req, int *done)
{
    return rcoll_test_status(req, done, NULL);
}

RCOLL_API rcoll_status_t rcoll_test_status(rcoll_request_t req, int *done,
                                           rcoll_req_status_t *status)
{
    if (!req || !done)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "rcoll_test: NULL argument");
    if (req->grouped || !req->comm) {
        *done = !req->grouped;
        rcoll_status_t st = req_unposted(req, "rcoll_test");
        if (*done)
            req_status_fill(req, st, status);
        return st;
    }
    struct rcoll_comm *c = req->comm;
    rcoll_status_t st = RCOLL_OK;
    /* one non-blocking turn of the engine if nobody else drives it */
    if (!__atomic_load_n(&req->done, __ATOMIC_ACQUIRE) &&
        pthread_mutex_trylock(&c->engine) == 0) {
        double spin_until = 1; /* already past: never block */
        rcoll__engine_turn(c, &spin_until, 0, 0);
        pthread_mutex_unlock(&c->engine);
    }
    pthread_mutex_lock(&c->lock);
    *done = req->done;
    if (req->done) {
        st = req->status;
        if (st != RCOLL_OK)
            rcoll__set_error_str(req->errmsg);
        req_status_fill(req, st, status);
    }
    pthread_mutex_unlock(&c->lock);
    return st;
}

RCOLL_API rcoll_status_t rcoll_wait(rcoll_request_t req)
{
    return rcoll_wait_status(req, NULL);
}

RCOLL_API rcoll_status_t rcoll_wait_status(rcoll_request_t req,
                                           rcoll_req_status_t *status)
{
    if (!req)
        return rcoll__set_error(RCOLL_ERR_INVALID_ARGUMENT,
                                "rcoll_wait: request is NULL");
    if (req->grouped || !req->comm) {
        rcoll_status_t st = req_unposted(req, "rcoll_wait");
        if (!req->grouped) {
            req_status_fill(req, st, status);
            coll_sched_free(&req->sched);
            free(req);
        }
        return st;
    }
    struct rcoll_comm *c = req->comm;
    rcoll_status_t st;
    double spin_until = 0;

    if (!__atomic_load_n(&req->done, __ATOMIC_ACQUIRE)) {
        /* take the engine over from the progress thread */
        pthread_mutex_lock(&c->lock);
        /* atomic: the progress thread reads it without the lock (its half
         * of the handshake below; TSan saw the plain increment race) */
        __atomic_add_fetch(&c->waiters, 1, __ATOMIC_SEQ_CST);
        pthread_mutex_unlock(&c->lock);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        if (__atomic_load_n(&c->in_epoll, __ATOMIC_SEQ_CST))
            rcoll__comm_kick(c);
        pthread_mutex_lock(&c->engine);
        while (!__atomic_load_n(&req->done, __ATOMIC_ACQUIRE))
            rcoll__engine_turn(c, &spin_until, 100, 100);
        pthread_mutex_unlock(&c->engine);
        pthread_mutex_lock(&c->lock);
        __atomic_sub_fetch(&c->waiters, 1, __ATOMIC_SEQ_CST);
        /* requests left for the thread to drive: wake it now */
        if (c->waiters == 0 && (c->qhead || c->stop))
            pthread_cond_signal(&c->idle_cond);
        pthread_mutex_unlock(&c->lock);
    }
    pthread_mutex_lock(&c->lock);
    st = req->status;
    if (st != RCOLL_OK)
        rcoll__set_error_str(req->errmsg);
    req_status_fill(req, st, status);
    pthread_mutex_unlock(&c->lock);
    rcoll__req_put(req);
    rcoll__comm_release(c);
    return st;
}
