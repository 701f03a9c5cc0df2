/* Binomial-tree reduce toward the root (small and medium messages:
 * ceil(log2 n) steps instead of the chain's n - 1). Position v = (rank -
 * root) mod n; v receives from v + 2^k for each 2^k below its lowest set
 * bit, reducing into an accumulator (the root's recvbuf, scratch
 * elsewhere), then sends the accumulator to v - lowbit(v), chunk by chunk
 * as the last receive completes. The accumulator is only sent after its
 * last write, so no receive overwrites a pending send. */
#include "coll/tune.h"
#include <stdlib.h>
#include <string.h>

rcoll_status_t coll_binomial_reduce_recvs(coll_sched_t *s, int v, int n,
                                          int root, const char *local,
                                          char *acc, size_t bytes, int *last)
{
    int lowbit, nchild = coll_binomial(v, n, &lowbit), c = 0;
    rcoll_status_t st;
    *last = -1;
    for (int m = 1; m < lowbit && m < n; m <<= 1) {
        if (v + m >= n)
            continue;
        coll_step_t t;
        coll_sched_step_init(&t);
        t.recv_peer = (root + v + m) % n;
        t.recv_dst = acc;
        t.recv_local = local;
        t.recv_bytes = bytes;
        t.recv_mode = (++c == nchild && v == 0 && s->op == RCOLL_AVG)
                          ? RECV_REDUCE_AVG
                          : RECV_REDUCE;
        if ((st = coll_sched_add(s, &t)) != RCOLL_OK)
            return st;
        local = acc;
        *last = s->nsteps - 1;
    }
    return RCOLL_OK;
}

rcoll_status_t coll_reduce_tree(coll_sched_t *s, const coll_env_t *e)
{
    int n = e->nranks, r = e->rank, root = s->root;
    int v = (r - root + n) % n;
    size_t bytes = s->count * rcoll_datatype_size(s->dt);
    coll_step_t t;
    rcoll_status_t st;

    if (n == 1) {
        coll_copy_in(s);
        return RCOLL_OK;
    }
    int lowbit, nchild = coll_binomial(v, n, &lowbit);
    char *acc = v == 0 ? s->recvbuf : NULL;
    if (v != 0 && nchild > 0) {
        if (bytes && !(s->scratch = malloc(bytes)))
            return rcoll__set_error(RCOLL_ERR_NO_MEMORY, "reduce: no memory "
                                    "for %zu scratch bytes", bytes);
        acc = s->scratch;
    }
    int last;
    st = coll_binomial_reduce_recvs(s, v, n, root, s->sendbuf, acc, bytes,
                                    &last);
    if (st != RCOLL_OK)
        return st;
    if (v == 0)
        return RCOLL_OK;
    coll_sched_step_init(&t);
    t.send_peer = (root + v - lowbit + n) % n;
    t.send_buf = nchild ? acc : s->sendbuf;
    t.send_bytes = bytes;
    t.send_dep = last; /* chunk c once our last receive reduced chunk c */
    return coll_sched_add(s, &t);
}

/* ceil(log2 n) reducing steps of the whole buffer */
double coll_reduce_tree_cost(const coll_tune_model_t *m, const coll_env_t *e, double *c)
{
    (void)e;
    *c = coll_tune_best_chunk(m, m->S, m->L);
    return m->L * coll_tune_step(m, m->S, *c, 1);
}
