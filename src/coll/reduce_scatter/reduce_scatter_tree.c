/* Reduce-scatter as a binomial-tree reduce of the whole vector to rank 0
 * followed by rank 0 sending block i to rank i: ceil(log2 n) + 1 steps, for
 * small blocks where the ring's n - 1 steps cost more than the bytes. */
#include "coll/tune.h"
#include <stdlib.h>
#include <string.h>

static void rs_tree_finish(coll_sched_t *s, const coll_env_t *e)
{
    size_t bytes = s->count * rcoll_datatype_size(s->dt);
    (void)e;
    if (bytes) /* rank 0's own block, out of the accumulator */
        s->md->copy(s->recvbuf, s->scratch, bytes);
}

rcoll_status_t coll_reduce_scatter_tree(coll_sched_t *s, const coll_env_t *e)
{
    int n = e->nranks, v = e->rank;
    size_t bytes = s->count * rcoll_datatype_size(s->dt); /* per block */
    size_t total = bytes * (size_t)n;
    coll_step_t t;
    rcoll_status_t st;

    if (n == 1) {
        if (bytes && s->sendbuf != s->recvbuf)
            s->md->copy(s->recvbuf, s->sendbuf, bytes);
        return RCOLL_OK;
    }
    int lowbit, nchild = coll_binomial(v, n, &lowbit);
    if (nchild && total && !(s->scratch = malloc(total)))
        return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "reduce_scatter: no "
                                "memory for %zu scratch bytes", total);
    int last;
    st = coll_binomial_reduce_recvs(s, v, n, 0, s->sendbuf, s->scratch,
                                    total, &last);
    if (st != RCOLL_OK)
        return st;
    if (v != 0) {
        coll_sched_step_init(&t);
        t.send_peer = v - lowbit;
        t.send_buf = nchild ? s->scratch : s->sendbuf;
        t.send_bytes = total;
        t.send_dep = last;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
        /* our block of the result */
        coll_sched_step_init(&t);
        t.recv_peer = 0;
        t.recv_dst = s->recvbuf;
        t.recv_bytes = bytes;
        t.recv_mode = RECV_COPY;
        return coll_sched_add(s, &t);
    }
    for (int i = 1; i < n; i++) {
        coll_sched_step_init(&t);
        t.send_peer = i;
        t.send_buf = s->scratch + (size_t)i * bytes;
        t.send_bytes = bytes;
        t.send_dep = last;
        t.send_dep_all = 1;
        t.send_copy = 1;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
    }
    s->finish = rs_tree_finish;
    return RCOLL_OK;
}

/* Everything reduced to rank 0 up a binomial tree, then scattered */
double coll_reduce_scatter_tree_cost(const coll_tune_model_t *m, const coll_env_t *e, double *c)
{
    (void)e;
    return m->L * coll_tune_step(m, m->S * m->n, *c, 1) +
           (m->n - 1) * coll_tune_step(m, m->S, *c, 0);
}
