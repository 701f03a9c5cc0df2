/* Binomial-tree broadcast (small messages: log2(n) latency steps).
 * With v = (rank - root) mod n, v receives from v - 2^k where 2^k is the
 * lowest set bit of v, then sends to v + 2^j for every 2^j below it, the
 * farthest child first. Chunked, so a child forwards chunk c once it has it. */
#include "coll/tune.h"
#include <string.h>

rcoll_status_t coll_broadcast_tree(coll_sched_t *s, const coll_env_t *e)
{
    int n = e->nranks, r = e->rank, root = s->root;
    int v = (r - root + n) % n;
    size_t bytes = s->count * rcoll_datatype_size(s->dt);
    int mask = 1, recv_step = -1;
    coll_step_t t;
    rcoll_status_t st;

    if (v == 0)
        coll_copy_in(s);
    while (mask < n) {
        if (v & mask) {
            coll_sched_step_init(&t);
            t.recv_peer = ((v - mask) + root) % n;
            t.recv_dst = s->recvbuf;
            t.recv_bytes = bytes;
            t.recv_mode = RECV_COPY;
            if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
                return st;
            recv_step = s->nsteps - 1;
            break;
        }
        mask <<= 1;
    }
    for (mask >>= 1; mask > 0; mask >>= 1) {
        if (v + mask < n) {
            coll_sched_step_init(&t);
            t.send_peer = (v + mask + root) % n;
            t.send_buf = s->recvbuf;
            t.send_bytes = bytes;
            t.send_dep = recv_step;
            if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
                return st;
        }
    }
    return RCOLL_OK;
}

/* The root feeds its ceil(log2 n) children the whole message in turn */
double coll_broadcast_tree_cost(const coll_tune_model_t *m, const coll_env_t *e, double *c)
{
    (void)e;
    *c = coll_tune_best_chunk(m, m->S, m->L);
    return m->L * (coll_tune_nch(m, m->S, *c) * m->a + m->S / m->b);
}
