/* Pipelined chain broadcast: root -> root+1 -> ... -> root-1. Each rank
 * forwards chunk c as soon as it has received it, so for large messages
 * the time approaches one message transfer plus n-1 chunk latencies. */
#include "coll/tune.h"
#include <string.h>

rcoll_status_t coll_broadcast_chain(coll_sched_t *s, const coll_env_t *e)
{
    int n = e->nranks, r = coll_ring_pos(e, e->rank);
    int pos = (r - coll_ring_pos(e, s->root) + n) % n; /* along the ring order */
    size_t bytes = s->count * rcoll_datatype_size(s->dt);
    coll_step_t t;
    rcoll_status_t st;

    if (pos == 0) {
        coll_copy_in(s);
        if (n == 1)
            return RCOLL_OK;
        coll_sched_step_init(&t);
        t.send_peer = coll_ring_rank(e, r + 1);
        t.send_buf = s->recvbuf;
        t.send_bytes = bytes;
        return coll_sched_add(s, &t);
    }
    coll_sched_step_init(&t);
    t.recv_peer = coll_ring_rank(e, r - 1);
    t.recv_dst = s->recvbuf;
    t.recv_bytes = bytes;
    t.recv_mode = RECV_COPY;
    if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
        return st;
    if (pos == n - 1)
        return RCOLL_OK;
    coll_sched_step_init(&t);
    t.send_peer = coll_ring_rank(e, r + 1);
    t.send_buf = s->recvbuf;
    t.send_bytes = bytes;
    t.send_dep = 0;
    return coll_sched_add(s, &t);
}

/* A pipeline of depth n - 1 with the sqrt law's chunk */
double coll_broadcast_chain_cost(const coll_tune_model_t *m, const coll_env_t *e, double *c)
{
    (void)e;
    coll_tune_model_t x = coll_tune_at(m, m->loc->ringq);
    *c = coll_tune_best_chunk(&x, m->S, m->n - 1);
    return coll_tune_pipe(&x, m->S, *c, m->n - 1, 0);
}
