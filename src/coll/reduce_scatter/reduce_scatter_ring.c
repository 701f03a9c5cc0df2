/* Ring reduce-scatter along the ring order: at step s the rank at position
 * p sends the block of position (p - s - 1) mod n and receives that of
 * (p - s - 2) mod n, adding its own contribution, so after n - 1 steps it
 * holds the full reduction of its own block. Partial sums travel
 * through a scratch buffer of one block per step (the user's recvbuf holds
 * only block r); the last step reduces straight into recvbuf. */
#include "coll/tune.h"
#include <stdlib.h>
#include <string.h>

rcoll_status_t coll_reduce_scatter_ring(coll_sched_t *s, const coll_env_t *e)
{
    int n = e->nranks, p = coll_ring_pos(e, e->rank);
    size_t dts = rcoll_datatype_size(s->dt);
    size_t bytes = s->count * dts; /* per block */
    size_t blk = (s->stride ? s->stride : s->count) * dts; /* block to block */
    const char *in = s->sendbuf;
    rcoll_status_t st;

    if (n == 1) {
        if (bytes && in != s->recvbuf)
            s->md->copy(s->recvbuf, in, bytes);
        return RCOLL_OK;
    }
    if (bytes && n > 2) {
        s->scratch = malloc(bytes * (size_t)(n - 2));
        if (!s->scratch)
            return rcoll__set_error(RCOLL_ERR_NO_MEMORY,
                                    "reduce_scatter: no memory for %zu "
                                    "scratch bytes", bytes * (size_t)(n - 2));
    }
    for (int step = 0; step < n - 1; step++) {
        coll_step_t t;
        int sb = coll_ring_rank(e, p - step - 1), rb = coll_ring_rank(e, p - step - 2);
        coll_sched_step_init(&t);
        t.send_peer = coll_ring_rank(e, p + 1);
        t.send_buf = step == 0 ? in + (size_t)sb * blk
                               : s->scratch + (size_t)(step - 1) * bytes;
        t.send_bytes = bytes;
        t.send_dep = step - 1;
        t.recv_peer = coll_ring_rank(e, p - 1);
        t.recv_local = in + (size_t)rb * blk;
        t.recv_bytes = bytes;
        if (step == n - 2) {
            t.recv_dst = s->recvbuf;
            t.recv_mode = s->op == RCOLL_AVG ? RECV_REDUCE_AVG : RECV_REDUCE;
        } else {
            t.recv_dst = s->scratch + (size_t)step * bytes;
            t.recv_mode = RECV_REDUCE;
        }
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
    }
    return RCOLL_OK;
}

/* n - 1 streaming reducing steps of a block */
double coll_reduce_scatter_ring_cost(const coll_tune_model_t *m, const coll_env_t *e, double *c)
{
    (void)e;
    coll_tune_model_t x = coll_tune_at(m, m->loc->ringq);
    return (m->n - 1) * coll_tune_step_ovl(&x, m->S, *c, 1);
}
