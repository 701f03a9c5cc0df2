/* Pipelined chain reduce toward the root: position p = (rank - root) mod n;
 * the last position sends its data to p - 1, every middle position adds its
 * own and forwards chunk by chunk, the root adds its own into recvbuf (AVG
 * divides there). Non-roots never touch recvbuf: partial sums go through a
 * scratch buffer. */
#include "coll/tune.h"
#include <stdlib.h>
#include <string.h>

rcoll_status_t coll_reduce_chain(coll_sched_t *s, const coll_env_t *e)
{
    int n = e->nranks, r = coll_ring_pos(e, e->rank);
    int pos = (r - coll_ring_pos(e, s->root) + n) % n; /* along the ring order */
    size_t bytes = s->count * rcoll_datatype_size(s->dt);
    coll_step_t t;
    rcoll_status_t st;

    if (n == 1) {
        coll_copy_in(s);
        return RCOLL_OK;
    }
    if (pos == n - 1) {
        coll_sched_step_init(&t);
        t.send_peer = coll_ring_rank(e, r - 1);
        t.send_buf = s->sendbuf;
        t.send_bytes = bytes;
        return coll_sched_add(s, &t);
    }
    coll_sched_step_init(&t);
    t.recv_peer = coll_ring_rank(e, r + 1);
    t.recv_local = s->sendbuf;
    t.recv_bytes = bytes;
    if (pos == 0) {
        t.recv_dst = s->recvbuf;
        t.recv_mode = s->op == RCOLL_AVG ? RECV_REDUCE_AVG : RECV_REDUCE;
        return coll_sched_add(s, &t);
    }
    if (bytes && !(s->scratch = malloc(bytes)))
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY,
                                "reduce: no memory for %zu scratch bytes",
                                bytes);
    t.recv_dst = s->scratch;
    t.recv_mode = RECV_REDUCE;
    if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
        return st;
    coll_sched_step_init(&t);
    t.send_peer = coll_ring_rank(e, r - 1);
    t.send_buf = s->scratch;
    t.send_bytes = bytes;
    t.send_dep = 0;
    return coll_sched_add(s, &t);
}

/* A reducing pipeline of depth n - 1 with the sqrt law's chunk */
double coll_reduce_chain_cost(const coll_tune_model_t *m, const coll_env_t *e, double *c)
{
    (void)e;
    coll_tune_model_t x = coll_tune_at(m, m->loc->ringq);
    *c = coll_tune_best_chunk(&x, m->S, m->n - 1);
    return coll_tune_pipe(&x, m->S, *c, m->n - 1, 1);
}
