/* Ring all-gather along the ring order: at step s the rank at position p
 * forwards the block of the rank at position (p - s) mod n to position
 * p + 1 and receives the block of position (p - s - 1) mod n from p - 1,
 * pipelined by chunks. Blocks land at their owner's rank in recvbuf. */
#include "coll/tune.h"
#include <string.h>

rcoll_status_t coll_allgather_ring(coll_sched_t *s, const coll_env_t *e)
{
    int n = e->nranks, r = e->rank, p = coll_ring_pos(e, r);
    size_t bytes = s->count * rcoll_datatype_size(s->dt);
    /* block to block (a channel's part of each block: coll_sched_t.stride) */
    size_t blk = (s->stride ? s->stride : s->count) * rcoll_datatype_size(s->dt);
    char *out = s->recvbuf;
    rcoll_status_t st;

    if (bytes && s->sendbuf != out + (size_t)r * blk)
        s->md->copy(out + (size_t)r * blk, s->sendbuf, bytes);
    for (int step = 0; step < n - 1; step++) {
        coll_step_t t;
        int sb = coll_ring_rank(e, p - step), rb = coll_ring_rank(e, p - step - 1);
        coll_sched_step_init(&t);
        t.send_peer = coll_ring_rank(e, p + 1);
        t.send_buf = out + (size_t)sb * blk;
        t.send_bytes = bytes;
        t.send_dep = step - 1;
        t.recv_peer = coll_ring_rank(e, p - 1);
        t.recv_dst = out + (size_t)rb * blk;
        t.recv_bytes = bytes;
        t.recv_mode = RECV_COPY;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
    }
    return RCOLL_OK;
}

/* n - 1 steps of a block */
double coll_allgather_ring_cost(const coll_tune_model_t *m, const coll_env_t *e, double *c)
{
    (void)e;
    coll_tune_model_t x = coll_tune_at(m, m->loc->ringq);
    return (m->n - 1) * coll_tune_step(&x, m->S, *c, 0);
}
